#include "trajview/row_store.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace trajview {

ChunkPool::ChunkPool(std::size_t chunk_bytes, std::size_t max_free)
    : chunk_bytes_(chunk_bytes == 0 ? 1 : chunk_bytes), max_free_(max_free) {}

std::unique_ptr<std::byte[]> ChunkPool::acquire() {
  if (!free_.empty()) {
    auto chunk = std::move(free_.back());
    free_.pop_back();
    return chunk;
  }
  auto chunk = std::unique_ptr<std::byte[]>(new std::byte[chunk_bytes_]);
  ++allocated_;
  return chunk;
}

void ChunkPool::release(std::unique_ptr<std::byte[]> chunk) {
  if (!chunk) return;
  if (free_.size() < max_free_) {
    free_.push_back(std::move(chunk));
  } else {
    --allocated_;  // the unique_ptr frees it
  }
}

void ChunkPool::set_max_free(std::size_t max_free) {
  max_free_ = max_free;
  while (free_.size() > max_free_) {
    free_.pop_back();
    --allocated_;
  }
}

std::byte* RowStore::append(ChunkPool& pool) {
  const std::int64_t k = end_ - base_;
  if (k == static_cast<std::int64_t>(chunks_.size()) * chunk_rows_) chunks_.push_back(pool.acquire());
  ++end_;
  return chunks_[static_cast<std::size_t>(k / chunk_rows_)].get() +
         static_cast<std::size_t>(k % chunk_rows_) * row_bytes_;
}

void RowStore::keep_from(std::int64_t r, ChunkPool& pool) {
  r = std::clamp(r, first_, end_);
  if (r == first_) return;
  const std::int64_t n = end_ - r;
  if (n == 0) {
    clear(pool);
    base_ = first_ = end_ = r;
    return;
  }
  // Move the n kept rows to the front of fresh chunks, then free the old ones.
  std::vector<std::unique_ptr<std::byte[]>> fresh;
  const std::int64_t need = (n + chunk_rows_ - 1) / chunk_rows_;
  fresh.reserve(static_cast<std::size_t>(need));
  for (std::int64_t i = 0; i < need; ++i) fresh.push_back(pool.acquire());
  std::int64_t done = 0;
  while (done < n) {
    const std::int64_t src_row = r + done;
    const std::int64_t run = std::min(contiguous_from(src_row), chunk_rows_ - done % chunk_rows_);
    std::memcpy(fresh[static_cast<std::size_t>(done / chunk_rows_)].get() +
                    static_cast<std::size_t>(done % chunk_rows_) * row_bytes_,
                row(src_row), static_cast<std::size_t>(run) * row_bytes_);
    done += run;
  }
  for (auto& c : chunks_) pool.release(std::move(c));
  chunks_ = std::move(fresh);
  base_ = first_ = r;
}

void RowStore::clear(ChunkPool& pool) {
  for (auto& c : chunks_) pool.release(std::move(c));
  chunks_.clear();
  base_ = first_ = end_;
}

}  // namespace trajview
