// Chunked row storage for one column of one episode.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace trajview {

/// Recycles fixed-size chunks of one column, so that a store in steady state
/// allocates nothing. Keeps at most `max_free` idle chunks; the rest go back
/// to the allocator.
class ChunkPool {
 public:
  ChunkPool(std::size_t chunk_bytes, std::size_t max_free);

  std::unique_ptr<std::byte[]> acquire();
  void release(std::unique_ptr<std::byte[]> chunk);

  std::size_t chunk_bytes() const noexcept { return chunk_bytes_; }
  /// Chunks allocated and not yet freed (in use plus idle in the pool).
  std::size_t allocated_chunks() const noexcept { return allocated_; }
  std::size_t idle_chunks() const noexcept { return free_.size(); }
  void set_max_free(std::size_t max_free);

 private:
  std::size_t chunk_bytes_;
  std::size_t max_free_;
  std::size_t allocated_ = 0;
  std::vector<std::unique_ptr<std::byte[]>> free_;
};

/// The rows of one column of one episode, in chunks of `chunk_rows` rows.
///
/// Rows are numbered from the episode's start (row 0). Rows [first(), end())
/// are held; rows before first() were released (see keep_from). Appending never
/// moves a held row: a full chunk stays where it is and a new one is chained.
class RowStore {
 public:
  RowStore(std::size_t row_bytes, std::int64_t chunk_rows) noexcept
      : row_bytes_(row_bytes), chunk_rows_(chunk_rows) {}

  std::int64_t first() const noexcept { return first_; }
  std::int64_t end() const noexcept { return end_; }
  std::size_t row_bytes() const noexcept { return row_bytes_; }

  /// Returns where the next row goes and counts it as held.
  std::byte* append(ChunkPool& pool);

  /// Address of held row `r` (first() <= r < end()).
  const std::byte* row(std::int64_t r) const noexcept {
    const std::int64_t k = r - base_;
    return chunks_[static_cast<std::size_t>(k / chunk_rows_)].get() +
           static_cast<std::size_t>(k % chunk_rows_) * row_bytes_;
  }

  /// Rows held contiguously from `r` on (within its chunk, and before end()).
  std::int64_t contiguous_from(std::int64_t r) const noexcept {
    const std::int64_t in_chunk = chunk_rows_ - (r - base_) % chunk_rows_;
    return in_chunk < end_ - r ? in_chunk : end_ - r;
  }

  /// Keeps only rows [r, end()): the held rows move to fresh chunks from the
  /// pool (when that frees anything) and every old chunk goes back to it.
  void keep_from(std::int64_t r, ChunkPool& pool);

  /// Releases every chunk back to the pool.
  void clear(ChunkPool& pool);

  std::size_t num_chunks() const noexcept { return chunks_.size(); }

 private:
  std::size_t row_bytes_;
  std::int64_t chunk_rows_;
  std::int64_t base_ = 0;   // episode row of chunks_[0]'s first row
  std::int64_t first_ = 0;  // first held row
  std::int64_t end_ = 0;    // one past the last held row
  std::vector<std::unique_ptr<std::byte[]>> chunks_;
};

}  // namespace trajview
