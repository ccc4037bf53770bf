#include "trajview/buffer.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

#include "trajview/checked.h"

namespace trajview {
namespace {

std::atomic<long> g_live{0};
constexpr std::size_t kSmallAlign = 64;
constexpr std::size_t kHugePage = std::size_t{2} << 20;
// Buffers of at least this size are recycled through the cache below.
constexpr std::size_t kCacheMin = 4 * kHugePage;
// At most this many bytes of freed buffers are kept for reuse.
constexpr std::size_t kCacheMaxBytes = std::size_t{1} << 30;

std::size_t rounded_size(std::size_t nbytes, std::size_t align) {
  return nbytes == 0 ? align : (nbytes + align - 1) / align * align;
}

/// Freed large batch buffers, kept for the next batch of the same size: fresh
/// memory costs a page fault per page (and, with huge pages, sometimes a
/// compaction stall), and an RL loop builds batches of the same sizes again
/// and again.
class BufferCache {
 public:
  /// The smallest cached block of `bytes` to `bytes` * 9/8 bytes, or null;
  /// `capacity` gets its size.
  AlignedBytes take(std::size_t bytes, std::size_t& capacity) {
    std::lock_guard<std::mutex> lock(mu_);
    auto best = blocks_.end();
    for (auto it = blocks_.begin(); it != blocks_.end(); ++it) {
      if (it->bytes >= bytes && it->bytes <= bytes + bytes / 8 && (best == blocks_.end() || it->bytes < best->bytes))
        best = it;
    }
    if (best == blocks_.end()) return nullptr;
    AlignedBytes out = std::move(best->data);
    capacity = best->bytes;
    total_ -= best->bytes;
    blocks_.erase(best);
    return out;
  }

  /// Keeps the block (dropping the oldest ones beyond the byte limit).
  void give(AlignedBytes data, std::size_t bytes) {
    if (bytes > kCacheMaxBytes) return;
    std::lock_guard<std::mutex> lock(mu_);
    while (!blocks_.empty() && total_ + bytes > kCacheMaxBytes) {
      total_ -= blocks_.front().bytes;
      blocks_.erase(blocks_.begin());
    }
    total_ += bytes;
    blocks_.push_back({std::move(data), bytes});
  }

 private:
  struct Block {
    AlignedBytes data;
    std::size_t bytes;
  };
  std::mutex mu_;
  std::vector<Block> blocks_;
  std::size_t total_ = 0;
};

BufferCache& cache() {
  static BufferCache* c = new BufferCache();  // never destroyed: buffers may outlive static destructors
  return *c;
}

}  // namespace

void AlignedFree::operator()(std::byte* p) const noexcept { std::free(p); }

AlignedBytes allocate_aligned(std::size_t nbytes) {
  check_bytes(nbytes, kMaxAllocBytes, "allocation");  // also keeps rounded_size from wrapping
  const std::size_t align = nbytes >= 4 * kHugePage ? kHugePage : kSmallAlign;
  const std::size_t rounded = rounded_size(nbytes, align);
  void* p = std::aligned_alloc(align, rounded);
  if (p == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  if (align == kHugePage) ::madvise(p, rounded, MADV_HUGEPAGE);
#endif
  return AlignedBytes(static_cast<std::byte*>(p));
}

Buffer::Buffer(std::size_t nbytes) : size_(check_bytes(nbytes, kMaxAllocBytes, "buffer")) {
  if (nbytes >= kCacheMin) data_ = cache().take(rounded_size(nbytes, kHugePage), capacity_);
  if (!data_) {
    data_ = allocate_aligned(nbytes);
    capacity_ = nbytes >= kCacheMin ? rounded_size(nbytes, kHugePage) : nbytes;
  }
  g_live.fetch_add(1, std::memory_order_relaxed);
}

Buffer::~Buffer() {
  if (size_ >= kCacheMin) cache().give(std::move(data_), capacity_);
  g_live.fetch_sub(1, std::memory_order_relaxed);
}

long Buffer::live_count() noexcept { return g_live.load(std::memory_order_relaxed); }

}  // namespace trajview
