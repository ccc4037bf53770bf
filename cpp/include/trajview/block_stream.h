// Time-major block storage of one column for all env slots.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "trajview/buffer.h"

namespace trajview {

/// Recycles fixed-size blocks of one column, so that a store in steady state
/// allocates nothing. Keeps at most `max_free` idle blocks.
class ChunkPool {
 public:
  ChunkPool(std::size_t chunk_bytes, std::size_t max_free);

  AlignedBytes acquire();
  void release(AlignedBytes chunk);

  std::size_t chunk_bytes() const noexcept { return chunk_bytes_; }
  /// Blocks allocated and not yet freed (in use plus idle in the pool).
  std::size_t allocated_chunks() const noexcept { return allocated_; }
  std::size_t idle_chunks() const noexcept { return free_.size(); }

 private:
  std::size_t chunk_bytes_;
  std::size_t max_free_;
  std::size_t allocated_ = 0;
  std::vector<AlignedBytes> free_;
};

/// One column's rows for `num_slots` env slots, time-major: position p holds
/// one row per slot, contiguous, so a step of all slots is one copy.
///
/// Positions count up forever; blocks of `block_rows` positions are chained
/// as needed and never move while held. Positions before base() were
/// released. Each slot writes its own positions (see TrajectoryStore).
class BlockStream {
 public:
  BlockStream(std::size_t row_bytes, std::int64_t num_slots, std::int64_t block_rows, ChunkPool& pool) noexcept
      : row_bytes_(row_bytes),
        stride_(row_bytes * static_cast<std::size_t>(num_slots)),
        block_rows_(block_rows),
        pool_(&pool) {}
  ~BlockStream();
  BlockStream(const BlockStream&) = delete;
  BlockStream& operator=(const BlockStream&) = delete;
  BlockStream(BlockStream&& other) noexcept;
  BlockStream& operator=(BlockStream&&) = delete;

  std::size_t row_bytes() const noexcept { return row_bytes_; }
  /// Bytes of one position (all slots).
  std::size_t stride() const noexcept { return stride_; }
  /// First position held.
  std::int64_t base() const noexcept { return base_; }
  /// One past the last position with memory.
  std::int64_t limit() const noexcept { return base_ + static_cast<std::int64_t>(blocks_.size()) * block_rows_; }
  bool holds(std::int64_t p) const noexcept { return p >= base_ && p < limit(); }

  /// Start of position p's rows (all slots); allocates blocks up to p.
  /// p must be >= base().
  std::byte* position_for_write(std::int64_t p);

  /// Start of position p's rows; p must be held.
  const std::byte* position(std::int64_t p) const noexcept {
    const std::int64_t k = p - base_;
    return blocks_[static_cast<std::size_t>(k / block_rows_)].get() +
           static_cast<std::size_t>(k % block_rows_) * stride_;
  }
  /// One past the last position of p's block: positions [p, block_end(p)) lie `stride()` bytes apart from
  /// position(p) on. p must be held.
  std::int64_t block_end(std::int64_t p) const noexcept { return p + (block_rows_ - (p - base_) % block_rows_); }
  const std::byte* at(std::int64_t p, std::int64_t slot) const noexcept {
    return position(p) + static_cast<std::size_t>(slot) * row_bytes_;
  }

  /// Frees every block whose positions are all before p.
  void release_before(std::int64_t p);

  /// Keeps exactly positions [p, end): moves them to the front of the first
  /// block, in place, and frees the blocks no longer needed (positions keep
  /// their numbers).
  void compact(std::int64_t p, std::int64_t end);

  std::size_t num_blocks() const noexcept { return blocks_.size(); }

 private:
  std::size_t row_bytes_;
  std::size_t stride_;
  std::int64_t block_rows_;
  ChunkPool* pool_;
  std::int64_t base_ = 0;
  std::deque<AlignedBytes> blocks_;
};

}  // namespace trajview
