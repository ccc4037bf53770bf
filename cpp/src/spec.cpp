// The column vocabulary's one copy of the checks both stores make.
#include "trajview/spec.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace trajview {

std::size_t ColumnSpec::row_elems() const noexcept {
  std::size_t n = 1;
  for (auto d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

std::int64_t find_column_index(std::span<const ColumnSpec> columns, const std::string& name) noexcept {
  for (std::size_t c = 0; c < columns.size(); ++c) {
    if (columns[c].name == name) return static_cast<std::int64_t>(c);
  }
  return -1;
}

void check_column(std::span<const ColumnSpec> columns, std::size_t c) {
  const auto& col = columns[c];
  if (col.name.empty()) throw std::invalid_argument("column names must not be empty");
  for (std::size_t d = 0; d < c; ++d) {
    if (columns[d].name == col.name) throw std::invalid_argument("column '" + col.name + "' is declared twice");
  }
  for (auto dim : col.shape) {
    if (dim < 0)
      throw std::invalid_argument("column '" + col.name + "': shape must have dims >= 0, got " + shape_str(col.shape));
  }
}

void check_array(const ColumnSpec& col, const ArrayIn& in, std::int64_t n, const char* what) {
  if (in.dtype != col.dtype)
    throw std::invalid_argument(std::string(what) + " '" + col.name + "': expected dtype " +
                                std::string(dtype_name(col.dtype)) + ", got " + std::string(dtype_name(in.dtype)));
  std::vector<std::int64_t> want{n};
  want.insert(want.end(), col.shape.begin(), col.shape.end());
  if (!std::equal(want.begin(), want.end(), in.shape.begin(), in.shape.end()))
    throw std::invalid_argument(std::string(what) + " '" + col.name + "': expected shape " + shape_str(want) +
                                ", got " + shape_str(in.shape));
}

}  // namespace trajview
