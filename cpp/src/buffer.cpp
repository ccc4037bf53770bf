#include "trajview/buffer.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <new>

namespace trajview {
namespace {

std::atomic<long> g_live{0};
constexpr std::size_t kSmallAlign = 64;
constexpr std::size_t kHugePage = std::size_t{2} << 20;

}  // namespace

void AlignedFree::operator()(std::byte* p) const noexcept { std::free(p); }

AlignedBytes allocate_aligned(std::size_t nbytes) {
  const std::size_t align = nbytes >= 4 * kHugePage ? kHugePage : kSmallAlign;
  const std::size_t rounded = nbytes == 0 ? align : (nbytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (p == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  if (align == kHugePage) ::madvise(p, rounded, MADV_HUGEPAGE);
#endif
  return AlignedBytes(static_cast<std::byte*>(p));
}

Buffer::Buffer(std::size_t nbytes) : data_(allocate_aligned(nbytes)), size_(nbytes) {
  g_live.fetch_add(1, std::memory_order_relaxed);
}

Buffer::~Buffer() { g_live.fetch_sub(1, std::memory_order_relaxed); }

long Buffer::live_count() noexcept { return g_live.load(std::memory_order_relaxed); }

}  // namespace trajview
