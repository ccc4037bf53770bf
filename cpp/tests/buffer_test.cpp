// Buffer and its process-wide cache of large blocks: a freed block of 8 MiB or
// more goes to the next Buffer it exceeds by at most 1/8, the best fit first;
// a request beyond kMaxAllocBytes throws.
#include "trajview/buffer.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>

#include "test_util.h"

namespace trajview {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

TEST(BufferCache, ReusesAFreedLargeBlockWithinAnEighth) {
  std::byte* p = nullptr;
  {
    Buffer a(52 * kMiB);
    p = a.data();
    std::memset(p, 1, a.size());
  }
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % (2 * kMiB), 0u);
  {
    // 20 MiB: the 52 MiB block is far more than 1/8 larger.
    Buffer small(20 * kMiB);
    EXPECT_NE(small.data(), p);
  }
  {
    // 53 MiB: larger than the block.
    Buffer larger(53 * kMiB);
    EXPECT_NE(larger.data(), p);
  }
  {
    // 46 MiB + 1 rounds up to 48 MiB (2 MiB pages), and 52 <= 48 * 9/8 = 54
    // (though 52 > 9/8 of the unrounded request).
    Buffer b(46 * kMiB + 1);
    EXPECT_EQ(b.data(), p);
    EXPECT_EQ(b.size(), 46 * kMiB + 1);
    std::memset(b.data(), 2, b.size());
  }
  {
    // The block went back with its full 52 MiB, not the 46 MiB asked for.
    Buffer c(52 * kMiB);
    EXPECT_EQ(c.data(), p);
    std::memset(c.data(), 3, c.size());
  }
}

TEST(BufferCache, TakesTheBestFit) {
  std::byte* p70 = nullptr;
  std::byte* p66 = nullptr;
  {
    auto a = std::make_unique<Buffer>(70 * kMiB);
    auto b = std::make_unique<Buffer>(66 * kMiB);
    p70 = a->data();
    p66 = b->data();
    a.reset();  // the larger block is cached first: a first fit would take it
    b.reset();
  }
  {
    // 64 MiB: both blocks are within 1/8 (72 MiB); the smaller one fits best.
    Buffer c(64 * kMiB);
    EXPECT_EQ(c.data(), p66);
    Buffer d(64 * kMiB);
    EXPECT_EQ(d.data(), p70);
    Buffer e(64 * kMiB);  // nothing left in range
    EXPECT_NE(e.data(), p66);
    EXPECT_NE(e.data(), p70);
  }
  {
    // Small buffers never go through the cache.
    Buffer f(4 * kMiB);
    EXPECT_NE(f.data(), p66);
    EXPECT_NE(f.data(), p70);
  }
}

// A request above kMaxAllocBytes (or one whose rounding up would wrap) throws
// std::length_error before the allocator is asked, and counts no live Buffer.
TEST(BufferLimits, OversizedRequestsThrowLengthError) {
  const long live = Buffer::live_count();
  const std::size_t too_big[] = {kMaxAllocBytes + 1, std::numeric_limits<std::size_t>::max(),
                                 std::numeric_limits<std::size_t>::max() - 64};
  for (std::size_t n : too_big) {
    EXPECT_TRUE(testing::throws_length_error([&] { Buffer b(n); }, {"buffer", "limit of 1099511627776 bytes"})) << n;
    EXPECT_TRUE(testing::throws_length_error([&] { (void)allocate_aligned(n); }, {"allocation", "needs"})) << n;
  }
  EXPECT_EQ(Buffer::live_count(), live);
  Buffer zero(0);  // zero bytes is fine
  EXPECT_NE(zero.data(), nullptr);
  EXPECT_EQ(zero.size(), 0u);
}

}  // namespace
}  // namespace trajview
