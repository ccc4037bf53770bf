// Owned, aligned memory handed out to Python as the base of numpy arrays.
#pragma once

#include <cstddef>
#include <memory>

namespace trajview {

/// The largest block either store allocates at once (1 TiB): a bigger request
/// (a column's ring, a storage block, a batch column) throws std::length_error
/// naming what it was for instead of asking the allocator.
inline constexpr std::size_t kMaxAllocBytes = std::size_t{1} << 40;

/// Frees memory from allocate_aligned.
struct AlignedFree {
  void operator()(std::byte* p) const noexcept;
};

/// Aligned memory, uninitialised. Blocks of 8 MiB or more are aligned to 2 MiB
/// and asked to use transparent huge pages: first-touch page faults then cost
/// one fault per 2 MiB instead of per 4 KiB. Throws std::length_error above
/// kMaxAllocBytes, std::bad_alloc when the allocator fails.
using AlignedBytes = std::unique_ptr<std::byte[], AlignedFree>;
AlignedBytes allocate_aligned(std::size_t nbytes);

/// A block of aligned memory that one or more numpy arrays view.
///
/// Invariant: the block never moves or shrinks while the Buffer lives; batch
/// arrays hold a shared_ptr to it, so they stay valid after the store that
/// filled them is gone. Large blocks (8 MiB or more) go, when freed, to a
/// process-wide cache (at most 1 GiB) that the next Buffer of about the same
/// size (the block is at most 1/8 larger) takes them from: no page faults for
/// the batches of a training loop, whose sizes vary a little.
class Buffer {
 public:
  /// Allocates `nbytes` bytes (uninitialised), see allocate_aligned (and its
  /// limit, kMaxAllocBytes).
  explicit Buffer(std::size_t nbytes);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&&) = delete;
  Buffer& operator=(Buffer&&) = delete;

  std::byte* data() noexcept { return data_.get(); }
  const std::byte* data() const noexcept { return data_.get(); }
  std::size_t size() const noexcept { return size_; }

  /// Number of Buffers alive in the process (for leak tests).
  static long live_count() noexcept;

 private:
  AlignedBytes data_;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;  ///< bytes of data_ (>= size_), for the cache
};

}  // namespace trajview
