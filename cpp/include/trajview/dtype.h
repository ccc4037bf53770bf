// Element types of stored columns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace trajview {

/// The element type of a column. Names follow numpy ("float32", "uint8", ...).
enum class DType : std::uint8_t {
  Bool,
  UInt8,
  UInt16,
  UInt32,
  UInt64,
  Int8,
  Int16,
  Int32,
  Int64,
  Float16,
  Float32,
  Float64,
};

/// Bytes of one element.
std::size_t itemsize(DType dtype) noexcept;

/// numpy's name for the type, e.g. "float32".
std::string_view dtype_name(DType dtype) noexcept;

/// Parses a numpy name; throws std::invalid_argument naming the bad value.
DType dtype_from_name(std::string_view name);

/// A shape as Python prints it, for error messages: "(2, 3)", "(4,)", "()".
std::string shape_str(std::span<const std::int64_t> shape);

}  // namespace trajview
