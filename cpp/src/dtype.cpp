#include "trajview/dtype.h"

#include <array>
#include <stdexcept>

namespace trajview {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::size_t size;
};

constexpr std::array<DTypeInfo, 12> kInfo{{
    {DType::Bool, "bool", 1},
    {DType::UInt8, "uint8", 1},
    {DType::UInt16, "uint16", 2},
    {DType::UInt32, "uint32", 4},
    {DType::UInt64, "uint64", 8},
    {DType::Int8, "int8", 1},
    {DType::Int16, "int16", 2},
    {DType::Int32, "int32", 4},
    {DType::Int64, "int64", 8},
    {DType::Float16, "float16", 2},
    {DType::Float32, "float32", 4},
    {DType::Float64, "float64", 8},
}};

}  // namespace

std::size_t itemsize(DType dtype) noexcept { return kInfo[static_cast<std::size_t>(dtype)].size; }

std::string_view dtype_name(DType dtype) noexcept { return kInfo[static_cast<std::size_t>(dtype)].name; }

DType dtype_from_name(std::string_view name) {
  for (const auto& info : kInfo) {
    if (info.name == name) return info.dtype;
  }
  throw std::invalid_argument("unsupported dtype '" + std::string(name) +
                              "': expected one of bool, uint8, uint16, uint32, uint64, int8, int16, int32, "
                              "int64, float16, float32, float64");
}

std::string shape_str(std::span<const std::int64_t> shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

}  // namespace trajview
