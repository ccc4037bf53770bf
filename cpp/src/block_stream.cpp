#include "trajview/block_stream.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

namespace trajview {

ChunkPool::ChunkPool(std::size_t chunk_bytes, std::size_t max_free)
    : chunk_bytes_(chunk_bytes == 0 ? 1 : chunk_bytes), max_free_(max_free) {}

AlignedBytes ChunkPool::acquire() {
  if (!free_.empty()) {
    auto chunk = std::move(free_.back());
    free_.pop_back();
    return chunk;
  }
  auto chunk = allocate_aligned(chunk_bytes_);
  ++allocated_;
  return chunk;
}

void ChunkPool::release(AlignedBytes chunk) {
  if (!chunk) return;
  if (free_.size() < max_free_) {
    free_.push_back(std::move(chunk));
  } else {
    --allocated_;  // the unique_ptr frees it
  }
}

BlockStream::~BlockStream() {
  for (auto& b : blocks_) pool_->release(std::move(b));
}

BlockStream::BlockStream(BlockStream&& other) noexcept
    : row_bytes_(other.row_bytes_),
      stride_(other.stride_),
      block_rows_(other.block_rows_),
      pool_(other.pool_),
      base_(other.base_),
      blocks_(std::move(other.blocks_)) {
  other.blocks_.clear();
}

std::byte* BlockStream::position_for_write(std::int64_t p) {
  if (blocks_.empty()) base_ = p;
  if (p < base_)
    throw std::logic_error("trajview: write to released stream position " + std::to_string(p) + " (first held " +
                           std::to_string(base_) + ")");
  while (p >= limit()) blocks_.push_back(pool_->acquire());
  return const_cast<std::byte*>(position(p));
}

void BlockStream::release_before(std::int64_t p) {
  while (!blocks_.empty() && base_ + block_rows_ <= p) {
    pool_->release(std::move(blocks_.front()));
    blocks_.pop_front();
    base_ += block_rows_;
  }
  if (blocks_.empty()) base_ = std::max(base_, p);
}

void BlockStream::compact(std::int64_t p, std::int64_t end) {
  p = std::max(p, base_);
  end = std::min(end, limit());
  if (p >= end) {
    for (auto& b : blocks_) pool_->release(std::move(b));
    blocks_.clear();
    base_ = std::max(base_, p);
    return;
  }
  const std::int64_t shift = p - base_;
  if (shift == 0) return;  // nothing before p to free
  // Shift the kept positions to the front, in place: position p + i moves to
  // index i. Copying in increasing i never overwrites a row not yet moved.
  const std::int64_t n = end - p;
  for (std::int64_t i = 0; i < n; ++i) {
    std::byte* dst = blocks_[static_cast<std::size_t>(i / block_rows_)].get() +
                     static_cast<std::size_t>(i % block_rows_) * stride_;
    std::memcpy(dst, position(p + i), stride_);
  }
  const auto keep = static_cast<std::size_t>((n + block_rows_ - 1) / block_rows_);
  while (blocks_.size() > keep) {
    pool_->release(std::move(blocks_.back()));
    blocks_.pop_back();
  }
  base_ = p;
}

}  // namespace trajview
