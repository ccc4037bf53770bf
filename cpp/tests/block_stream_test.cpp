#include "trajview/block_stream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "trajview/buffer.h"

namespace trajview {
namespace {

constexpr std::size_t kRowBytes = sizeof(std::int64_t);

// Chunks in use = allocated - idle.
std::size_t in_use(const ChunkPool& pool) { return pool.allocated_chunks() - pool.idle_chunks(); }

// The value written for (position, slot).
std::int64_t value_for(std::int64_t p, std::int64_t slot) { return 1000 * p + slot; }

void write(BlockStream& bs, std::int64_t p, std::int64_t num_slots) {
  std::byte* dst = bs.position_for_write(p);
  for (std::int64_t s = 0; s < num_slots; ++s) {
    const std::int64_t v = value_for(p, s);
    std::memcpy(dst + static_cast<std::size_t>(s) * kRowBytes, &v, sizeof v);
  }
}

void write_range(BlockStream& bs, std::int64_t p0, std::int64_t p1, std::int64_t num_slots) {
  for (std::int64_t p = p0; p < p1; ++p) write(bs, p, num_slots);
}

std::int64_t read(const BlockStream& bs, std::int64_t p, std::int64_t slot) {
  std::int64_t v = 0;
  std::memcpy(&v, bs.at(p, slot), sizeof v);
  return v;
}

// ---------------------------------------------------------------- ChunkPool

TEST(ChunkPool, AcquireAllocatesWhenEmpty) {
  ChunkPool pool(64, 4);
  EXPECT_EQ(pool.chunk_bytes(), 64u);
  EXPECT_EQ(pool.allocated_chunks(), 0u);
  EXPECT_EQ(pool.idle_chunks(), 0u);
  auto a = pool.acquire();
  auto b = pool.acquire();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a.get(), b.get());
  EXPECT_EQ(pool.allocated_chunks(), 2u);
  EXPECT_EQ(pool.idle_chunks(), 0u);
  // The whole chunk is writable (ASan checks the bounds) and aligned.
  std::memset(a.get(), 0xab, pool.chunk_bytes());
  std::memset(b.get(), 0xcd, pool.chunk_bytes());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.get()) % 64, 0u);
  pool.release(std::move(a));
  pool.release(std::move(b));
}

TEST(ChunkPool, ReleaseKeepsChunkIdleAndAcquireRecyclesIt) {
  ChunkPool pool(32, 4);
  auto a = pool.acquire();
  std::byte* const addr = a.get();
  pool.release(std::move(a));
  EXPECT_EQ(pool.allocated_chunks(), 1u);
  EXPECT_EQ(pool.idle_chunks(), 1u);
  auto again = pool.acquire();
  EXPECT_EQ(again.get(), addr);
  EXPECT_EQ(pool.allocated_chunks(), 1u);
  EXPECT_EQ(pool.idle_chunks(), 0u);
  pool.release(std::move(again));
}

TEST(ChunkPool, MaxFreeBoundsIdleChunks) {
  ChunkPool pool(16, 2);
  std::vector<AlignedBytes> held;
  for (int i = 0; i < 5; ++i) held.push_back(pool.acquire());
  EXPECT_EQ(pool.allocated_chunks(), 5u);
  for (auto& c : held) pool.release(std::move(c));
  // Two kept idle, three freed.
  EXPECT_EQ(pool.idle_chunks(), 2u);
  EXPECT_EQ(pool.allocated_chunks(), 2u);
  // Acquiring uses the idle ones first.
  auto x = pool.acquire();
  auto y = pool.acquire();
  EXPECT_EQ(pool.allocated_chunks(), 2u);
  auto z = pool.acquire();
  EXPECT_EQ(pool.allocated_chunks(), 3u);
  pool.release(std::move(x));
  pool.release(std::move(y));
  pool.release(std::move(z));
  EXPECT_EQ(pool.allocated_chunks(), 2u);
}

TEST(ChunkPool, MaxFreeZeroFreesEverything) {
  ChunkPool pool(16, 0);
  auto a = pool.acquire();
  EXPECT_EQ(pool.allocated_chunks(), 1u);
  pool.release(std::move(a));
  EXPECT_EQ(pool.idle_chunks(), 0u);
  EXPECT_EQ(pool.allocated_chunks(), 0u);
}

TEST(ChunkPool, ReleaseNullIsNoOp) {
  ChunkPool pool(16, 4);
  pool.release(AlignedBytes{});
  EXPECT_EQ(pool.idle_chunks(), 0u);
  EXPECT_EQ(pool.allocated_chunks(), 0u);
}

TEST(ChunkPool, ZeroByteChunksStillAllocate) {
  ChunkPool pool(0, 1);
  EXPECT_GE(pool.chunk_bytes(), 1u);
  auto a = pool.acquire();
  EXPECT_NE(a, nullptr);
  pool.release(std::move(a));
}

TEST(AlignedBytes, SmallAndLargeAllocations) {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{100}, std::size_t{9} << 20}) {
    AlignedBytes p = allocate_aligned(n);
    ASSERT_NE(p, nullptr) << n;
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p.get()) % 64, 0u) << n;
    if (n) {
      std::memset(p.get(), 1, n);  // ASan: the whole range is ours
      EXPECT_EQ(p[n - 1], std::byte{1});
    }
  }
}

// -------------------------------------------------------------- BlockStream

TEST(BlockStream, EmptyStream) {
  ChunkPool pool(3 * 2 * kRowBytes, 8);
  BlockStream bs(kRowBytes, 2, 3, pool);
  EXPECT_EQ(bs.row_bytes(), kRowBytes);
  EXPECT_EQ(bs.stride(), 2 * kRowBytes);
  EXPECT_EQ(bs.base(), 0);
  EXPECT_EQ(bs.limit(), 0);
  EXPECT_EQ(bs.num_blocks(), 0u);
  EXPECT_FALSE(bs.holds(0));
  EXPECT_EQ(pool.allocated_chunks(), 0u);
}

TEST(BlockStream, WriteAllocatesBlocksUpToPosition) {
  ChunkPool pool(3 * 2 * kRowBytes, 8);
  BlockStream bs(kRowBytes, 2, 3, pool);
  write(bs, 0, 2);
  EXPECT_EQ(bs.num_blocks(), 1u);
  EXPECT_EQ(bs.limit(), 3);
  EXPECT_TRUE(bs.holds(0));
  EXPECT_TRUE(bs.holds(2));
  EXPECT_FALSE(bs.holds(3));
  write_range(bs, 1, 3, 2);
  EXPECT_EQ(bs.num_blocks(), 1u);
  write(bs, 3, 2);
  EXPECT_EQ(bs.num_blocks(), 2u);
  // A jump allocates every block up to the position.
  write(bs, 10, 2);
  EXPECT_EQ(bs.num_blocks(), 4u);  // [0,3) [3,6) [6,9) [9,12)
  EXPECT_EQ(bs.limit(), 12);
  EXPECT_EQ(pool.allocated_chunks(), 4u);
  EXPECT_TRUE(bs.holds(11));
  EXPECT_FALSE(bs.holds(12));
  EXPECT_FALSE(bs.holds(-1));
}

TEST(BlockStream, FirstWriteSetsBase) {
  ChunkPool pool(4 * kRowBytes, 8);
  BlockStream bs(kRowBytes, 1, 4, pool);
  write(bs, 5, 1);
  EXPECT_EQ(bs.base(), 5);
  EXPECT_EQ(bs.limit(), 9);
  EXPECT_FALSE(bs.holds(4));
  EXPECT_EQ(read(bs, 5, 0), value_for(5, 0));
}

TEST(BlockStream, TimeMajorLayout) {
  ChunkPool pool(4 * 3 * kRowBytes, 8);
  BlockStream bs(kRowBytes, 3, 4, pool);
  write_range(bs, 0, 10, 3);
  for (std::int64_t p = 0; p < 10; ++p) {
    for (std::int64_t s = 0; s < 3; ++s) {
      EXPECT_EQ(read(bs, p, s), value_for(p, s)) << p << "," << s;
      EXPECT_EQ(bs.at(p, s), bs.position(p) + static_cast<std::size_t>(s) * kRowBytes);
    }
  }
  // Positions of one block are contiguous, one stride apart.
  EXPECT_EQ(bs.position(1), bs.position(0) + bs.stride());
  EXPECT_EQ(bs.position(3), bs.position(0) + 3 * bs.stride());
  EXPECT_EQ(bs.position(7), bs.position(4) + 3 * bs.stride());
}

TEST(BlockStream, BlockEndBoundsTheContiguousRun) {
  // Blocks of 4 positions from base 5: [5,9) [9,13) [13,17); after release_before(9), [9,13) [13,17).
  ChunkPool pool(4 * 2 * kRowBytes, 8);
  BlockStream bs(kRowBytes, 2, 4, pool);
  write_range(bs, 5, 17, 2);
  for (std::int64_t p = 5; p < 17; ++p) {
    const std::int64_t end = bs.block_end(p);
    EXPECT_EQ(end, 5 + ((p - 5) / 4 + 1) * 4) << p;
    for (std::int64_t q = p; q < end; ++q)
      EXPECT_EQ(bs.position(q), bs.position(p) + static_cast<std::size_t>(q - p) * bs.stride()) << p << "," << q;
  }
  bs.release_before(9);
  EXPECT_EQ(bs.base(), 9);
  EXPECT_EQ(bs.block_end(9), 13);
  EXPECT_EQ(bs.block_end(12), 13);
  EXPECT_EQ(bs.block_end(13), 17);
  EXPECT_EQ(bs.block_end(16), 17);
}

TEST(BlockStream, SlotsWriteTheirOwnRows) {
  // Slot 1 runs ahead of slot 0; each writes only its own row.
  ChunkPool pool(2 * 2 * kRowBytes, 8);
  BlockStream bs(kRowBytes, 2, 2, pool);
  auto put = [&](std::int64_t p, std::int64_t slot, std::int64_t v) {
    std::memcpy(bs.position_for_write(p) + static_cast<std::size_t>(slot) * kRowBytes, &v, sizeof v);
  };
  put(0, 0, 10);
  put(0, 1, 20);
  put(1, 1, 21);
  put(2, 1, 22);
  put(1, 0, 11);
  put(3, 1, 23);
  put(2, 0, 12);
  EXPECT_EQ(read(bs, 0, 0), 10);
  EXPECT_EQ(read(bs, 1, 0), 11);
  EXPECT_EQ(read(bs, 2, 0), 12);
  EXPECT_EQ(read(bs, 0, 1), 20);
  EXPECT_EQ(read(bs, 1, 1), 21);
  EXPECT_EQ(read(bs, 2, 1), 22);
  EXPECT_EQ(read(bs, 3, 1), 23);
}

TEST(BlockStream, PositionsNeverMoveWhileWriting) {
  ChunkPool pool(4 * kRowBytes, 8);
  BlockStream bs(kRowBytes, 1, 4, pool);
  write_range(bs, 0, 3, 1);
  std::vector<const std::byte*> where;
  for (std::int64_t p = 0; p < 3; ++p) where.push_back(bs.position(p));
  write_range(bs, 3, 200, 1);  // many more blocks chained
  for (std::int64_t p = 0; p < 3; ++p) {
    EXPECT_EQ(bs.position(p), where[static_cast<std::size_t>(p)]) << p;
    EXPECT_EQ(read(bs, p, 0), value_for(p, 0));
  }
  for (std::int64_t p = 0; p < 200; ++p) EXPECT_EQ(read(bs, p, 0), value_for(p, 0)) << p;
}

TEST(BlockStream, ReleaseBeforeFreesWholeBlocksOnly) {
  ChunkPool pool(3 * 2 * kRowBytes, 8);
  BlockStream bs(kRowBytes, 2, 3, pool);
  write_range(bs, 0, 10, 2);  // blocks [0,3) [3,6) [6,9) [9,12)
  const std::byte* p3 = bs.position(3);
  bs.release_before(5);  // only [0,3) is entirely before 5
  EXPECT_EQ(bs.base(), 3);
  EXPECT_EQ(bs.num_blocks(), 3u);
  EXPECT_EQ(bs.position(3), p3);  // nothing moved
  EXPECT_EQ(pool.idle_chunks(), 1u);
  EXPECT_EQ(in_use(pool), 3u);
  for (std::int64_t p = 3; p < 10; ++p) EXPECT_EQ(read(bs, p, 1), value_for(p, 1)) << p;
  bs.release_before(6);
  EXPECT_EQ(bs.base(), 6);
  EXPECT_EQ(bs.num_blocks(), 2u);
  bs.release_before(2);  // before base: nothing
  EXPECT_EQ(bs.base(), 6);
  EXPECT_EQ(bs.num_blocks(), 2u);
  for (std::int64_t p = 6; p < 10; ++p) EXPECT_EQ(read(bs, p, 0), value_for(p, 0)) << p;
}

TEST(BlockStream, ReleaseBeforeEverything) {
  ChunkPool pool(3 * kRowBytes, 8);
  BlockStream bs(kRowBytes, 1, 3, pool);
  write_range(bs, 0, 6, 1);
  bs.release_before(6);
  EXPECT_EQ(bs.num_blocks(), 0u);
  EXPECT_EQ(bs.base(), 6);
  EXPECT_EQ(in_use(pool), 0u);
  write_range(bs, 6, 8, 1);
  EXPECT_EQ(bs.base(), 6);
  EXPECT_EQ(read(bs, 7, 0), value_for(7, 0));
  EXPECT_EQ(pool.allocated_chunks(), 2u);  // the idle block was reused
}

TEST(BlockStream, CompactKeepsExactlyTheRangeForEveryCut) {
  for (std::int64_t cut = 0; cut <= 10; ++cut) {
    ChunkPool pool(3 * 2 * kRowBytes, 64);
    BlockStream bs(kRowBytes, 2, 3, pool);
    write_range(bs, 0, 10, 2);
    bs.compact(cut, 10);
    if (cut < 10) {
      EXPECT_EQ(bs.base(), cut) << cut;
      for (std::int64_t p = cut; p < 10; ++p) {
        EXPECT_EQ(read(bs, p, 0), value_for(p, 0)) << "cut " << cut << " pos " << p;
        EXPECT_EQ(read(bs, p, 1), value_for(p, 1)) << "cut " << cut << " pos " << p;
      }
    }
    // Blocks in use: just enough for the kept positions.
    const auto kept = static_cast<std::size_t>(10 - cut);
    EXPECT_EQ(bs.num_blocks(), (kept + 2) / 3) << cut;
    EXPECT_EQ(in_use(pool), bs.num_blocks()) << cut;
    // Writing goes on after the kept range.
    write_range(bs, 10, 13, 2);
    for (std::int64_t p = std::max<std::int64_t>(cut, 0); p < 13; ++p)
      EXPECT_EQ(read(bs, p, 1), value_for(p, 1)) << "cut " << cut << " pos " << p;
  }
}

TEST(BlockStream, CompactStartsTheKeptRangeAtABlock) {
  ChunkPool pool(3 * kRowBytes, 64);
  BlockStream bs(kRowBytes, 1, 3, pool);
  write_range(bs, 0, 7, 1);  // blocks [0,3) [3,6) [6,9)
  bs.compact(5, 7);           // 2 positions: one block [5,8)
  EXPECT_EQ(bs.base(), 5);
  EXPECT_EQ(bs.limit(), 8);
  EXPECT_EQ(bs.num_blocks(), 1u);
  EXPECT_EQ(bs.position(6), bs.position(5) + bs.stride());
  EXPECT_EQ(in_use(pool), 1u);
  EXPECT_LE(pool.allocated_chunks(), 4u);  // at most one fresh block
  write_range(bs, 7, 9, 1);
  EXPECT_EQ(bs.num_blocks(), 2u);
  for (std::int64_t p = 5; p < 9; ++p) EXPECT_EQ(read(bs, p, 0), value_for(p, 0)) << p;
}

TEST(BlockStream, CompactAtBaseIsNoOp) {
  ChunkPool pool(3 * kRowBytes, 64);
  BlockStream bs(kRowBytes, 1, 3, pool);
  write_range(bs, 0, 7, 1);
  const std::byte* p0 = bs.position(0);
  bs.compact(0, 7);
  EXPECT_EQ(bs.position(0), p0);
  EXPECT_EQ(bs.num_blocks(), 3u);
  bs.compact(-4, 7);  // before base: same
  EXPECT_EQ(bs.position(0), p0);
  for (std::int64_t p = 0; p < 7; ++p) EXPECT_EQ(read(bs, p, 0), value_for(p, 0));
}

TEST(BlockStream, CompactEmptyRangeReleasesEverything) {
  ChunkPool pool(2 * kRowBytes, 64);
  BlockStream bs(kRowBytes, 1, 2, pool);
  write_range(bs, 0, 5, 1);  // 3 blocks
  bs.compact(5, 5);
  EXPECT_EQ(bs.num_blocks(), 0u);
  EXPECT_EQ(bs.base(), 5);
  EXPECT_EQ(in_use(pool), 0u);
  EXPECT_EQ(pool.idle_chunks(), 3u);
  write_range(bs, 5, 8, 1);
  EXPECT_EQ(bs.base(), 5);
  for (std::int64_t p = 5; p < 8; ++p) EXPECT_EQ(read(bs, p, 0), value_for(p, 0));
  EXPECT_EQ(pool.allocated_chunks(), 3u);
}

TEST(BlockStream, CompactWithNoIdleLimitFreesMemory) {
  ChunkPool pool(2 * kRowBytes, 0);
  BlockStream bs(kRowBytes, 1, 2, pool);
  write_range(bs, 0, 9, 1);
  EXPECT_EQ(pool.allocated_chunks(), 5u);
  bs.compact(6, 9);  // positions 6, 7, 8: two blocks
  EXPECT_EQ(pool.allocated_chunks(), 2u);
  for (std::int64_t p = 6; p < 9; ++p) EXPECT_EQ(read(bs, p, 0), value_for(p, 0));
}

TEST(BlockStream, CompactTwice) {
  ChunkPool pool(4 * kRowBytes, 64);
  BlockStream bs(kRowBytes, 1, 4, pool);
  write_range(bs, 0, 6, 1);
  bs.compact(3, 6);
  write_range(bs, 6, 14, 1);
  bs.compact(11, 14);
  EXPECT_EQ(bs.base(), 11);
  EXPECT_EQ(bs.num_blocks(), 1u);
  EXPECT_EQ(in_use(pool), 1u);
  for (std::int64_t p = 11; p < 14; ++p) EXPECT_EQ(read(bs, p, 0), value_for(p, 0)) << p;
}

TEST(BlockStream, SteadyStateAllocatesNothing) {
  ChunkPool pool(4 * 2 * kRowBytes, 8);
  BlockStream bs(kRowBytes, 2, 4, pool);
  std::size_t allocated_after_first_round = 0;
  std::int64_t end = 0;
  for (int round = 0; round < 6; ++round) {
    write_range(bs, end, end + 10, 2);
    end += 10;
    bs.compact(end - 2, end);
    EXPECT_EQ(read(bs, end - 2, 1), value_for(end - 2, 1));
    EXPECT_EQ(read(bs, end - 1, 0), value_for(end - 1, 0));
    if (round == 0) allocated_after_first_round = pool.allocated_chunks();
    else EXPECT_EQ(pool.allocated_chunks(), allocated_after_first_round) << round;
  }
}

TEST(BlockStream, DestructorReturnsBlocksToPool) {
  ChunkPool pool(2 * kRowBytes, 64);
  {
    BlockStream bs(kRowBytes, 1, 2, pool);
    write_range(bs, 0, 7, 1);
    EXPECT_EQ(in_use(pool), 4u);
  }
  EXPECT_EQ(in_use(pool), 0u);
  EXPECT_EQ(pool.idle_chunks(), 4u);
}

TEST(BlockStream, MoveTransfersBlocks) {
  ChunkPool pool(2 * kRowBytes, 64);
  {
    BlockStream a(kRowBytes, 1, 2, pool);
    write_range(a, 0, 3, 1);
    BlockStream b(std::move(a));
    EXPECT_EQ(b.num_blocks(), 2u);
    EXPECT_EQ(b.base(), 0);
    for (std::int64_t p = 0; p < 3; ++p) EXPECT_EQ(read(b, p, 0), value_for(p, 0));
    EXPECT_EQ(in_use(pool), 2u);
  }
  // Both destroyed: each block went back exactly once.
  EXPECT_EQ(in_use(pool), 0u);
  EXPECT_EQ(pool.idle_chunks(), 2u);
}

TEST(BlockStream, WideRows) {
  constexpr std::size_t rb = 3 * sizeof(float);
  ChunkPool pool(2 * 2 * rb, 8);
  BlockStream bs(rb, 2, 2, pool);
  for (int p = 0; p < 5; ++p) {
    std::byte* dst = bs.position_for_write(p);
    for (int s = 0; s < 2; ++s) {
      const float v[3] = {static_cast<float>(p), static_cast<float>(s), -static_cast<float>(p + s)};
      std::memcpy(dst + static_cast<std::size_t>(s) * rb, v, rb);
    }
  }
  bs.compact(1, 5);
  for (std::int64_t p = 1; p < 5; ++p) {
    for (std::int64_t s = 0; s < 2; ++s) {
      float v[3];
      std::memcpy(v, bs.at(p, s), rb);
      EXPECT_EQ(v[0], static_cast<float>(p));
      EXPECT_EQ(v[1], static_cast<float>(s));
      EXPECT_EQ(v[2], -static_cast<float>(p + s));
    }
  }
}

}  // namespace
}  // namespace trajview
