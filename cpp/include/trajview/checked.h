// Checked size arithmetic for both stores: every product or sum that sizes a
// buffer or addresses a row goes through these, so a bad size throws a clear
// error instead of wrapping.
//
// Errors: std::length_error (pybind11: ValueError) whose message starts with
// `what` (the column, view or setting being sized) and gives the operands.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace trajview {

/// a * b; throws std::length_error "<what>: a x b overflows" if it does not fit T.
template <std::integral T>
[[nodiscard]] T checked_mul(T a, T b, std::string_view what) {
  T r{};
  if (__builtin_mul_overflow(a, b, &r))
    throw std::length_error(std::string(what) + ": " + std::to_string(a) + " x " + std::to_string(b) + " overflows");
  return r;
}

/// a + b; throws std::length_error "<what>: a + b overflows" if it does not fit T.
template <std::integral T>
[[nodiscard]] T checked_add(T a, T b, std::string_view what) {
  T r{};
  if (__builtin_add_overflow(a, b, &r))
    throw std::length_error(std::string(what) + ": " + std::to_string(a) + " + " + std::to_string(b) + " overflows");
  return r;
}

/// A non-negative count as a size; throws std::length_error "<what>: got n" if n < 0.
[[nodiscard]] inline std::size_t to_size(std::int64_t n, std::string_view what) {
  if (n < 0) throw std::length_error(std::string(what) + ": expected a count >= 0, got " + std::to_string(n));
  return static_cast<std::size_t>(n);
}

/// `bytes` if it is at most `limit`; else throws std::length_error
/// "<what>: needs <bytes> bytes, more than the limit of <limit>".
inline std::size_t check_bytes(std::size_t bytes, std::size_t limit, std::string_view what) {
  if (bytes > limit)
    throw std::length_error(std::string(what) + ": needs " + std::to_string(bytes) +
                            " bytes, more than the limit of " + std::to_string(limit) + " bytes");
  return bytes;
}

}  // namespace trajview
