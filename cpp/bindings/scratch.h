// A call's own short lists (the arrays it holds, their pointers) in a buffer on the stack: the calls made once per
// env step (the store's step, the output check) allocate nothing for them; longer lists spill to the heap.
#pragma once

#include <array>
#include <cstddef>
#include <memory_resource>

namespace trajview::bindings {

/// The memory of one call's `std::pmr` containers (made with `get()`); one per call, never shared, outliving them.
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  std::pmr::memory_resource* get() noexcept { return &resource_; }

 private:
  std::array<std::byte, 2048> buffer_;
  std::pmr::monotonic_buffer_resource resource_{buffer_.data(), buffer_.size()};
};

}  // namespace trajview::bindings
