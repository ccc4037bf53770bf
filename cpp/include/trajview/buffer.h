// Owned, aligned memory handed out to Python as the base of numpy arrays.
#pragma once

#include <cstddef>
#include <memory>

namespace trajview {

/// A block of aligned memory that one or more numpy arrays view.
///
/// Invariant: the block never moves or shrinks while the Buffer lives; batch
/// arrays hold a shared_ptr to it, so they stay valid after the store that
/// filled them is gone.
class Buffer {
 public:
  /// Allocates `nbytes` bytes (uninitialised). Large blocks ask the kernel for
  /// transparent huge pages, which makes first-touch page faults rarer.
  explicit Buffer(std::size_t nbytes);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&&) = delete;
  Buffer& operator=(Buffer&&) = delete;

  std::byte* data() noexcept { return data_; }
  const std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }

  /// Number of Buffers alive in the process (for leak tests).
  static long live_count() noexcept;

 private:
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace trajview
