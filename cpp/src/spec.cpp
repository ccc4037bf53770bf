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
  if (col.shape.size() > kMaxDims)
    throw std::invalid_argument("column '" + col.name + "': shape must have at most " + std::to_string(kMaxDims) +
                                " dims, got " + std::to_string(col.shape.size()));
  for (auto dim : col.shape) {
    if (dim < 0)
      throw std::invalid_argument("column '" + col.name + "': shape must have dims >= 0, got " + shape_str(col.shape));
  }
  // Rows of at most kMaxRowBytes, a zero dim counted as 1 (so that no dim is
  // absurd either). Every factor is <= kMaxRowBytes before it is multiplied
  // in, so the product stays below kMaxRowBytes^2 < 2^64.
  std::size_t bytes = itemsize(col.dtype);
  for (auto dim : col.shape) {
    const auto d = static_cast<std::size_t>(std::max<std::int64_t>(dim, 1));
    if (d > kMaxRowBytes || bytes * d > kMaxRowBytes)
      throw std::invalid_argument("column '" + col.name + "': rows of shape " + shape_str(col.shape) + " and dtype " +
                                  std::string(dtype_name(col.dtype)) + " exceed the limit of " +
                                  std::to_string(kMaxRowBytes) + " bytes per row (kMaxRowBytes)");
    bytes *= d;
  }
}

void check_view_shifts(const ViewSpec& view) {
  const std::string who = "view '" + view.name + "'";
  if (view.shifts.empty()) throw std::invalid_argument(who + ": shift must not be empty");
  if (view.shifts.size() > kMaxViewShifts)
    throw std::invalid_argument(who + ": a shift has at most " + std::to_string(kMaxViewShifts) +
                                " offsets (kMaxViewShifts), got " + std::to_string(view.shifts.size()));
  if (!view.adds_axis && view.shifts.size() != 1)
    throw std::invalid_argument(who + ": an int shift has exactly one offset, got " +
                                std::to_string(view.shifts.size()));
  for (auto s : view.shifts) {
    if (s < -kMaxShift || s > kMaxShift)
      throw std::invalid_argument(who + ": shift offsets must be in [-" + std::to_string(kMaxShift) + ", " +
                                  std::to_string(kMaxShift) + "] (kMaxShift), got " + std::to_string(s));
  }
}

void check_batch_repeat(const ViewSpec& view) {
  if (view.batch_repeat < 1 || view.batch_repeat > kMaxBatchRepeat)
    throw std::invalid_argument("view '" + view.name + "': batch_repeat_value must be >= 1 and <= " +
                                std::to_string(kMaxBatchRepeat) + " (kMaxBatchRepeat), got " +
                                std::to_string(view.batch_repeat));
}

void check_array(const ColumnSpec& col, const ArrayIn& in, std::int64_t n, const char* what) {
  if (in.dtype != col.dtype)
    throw std::invalid_argument(std::string(what) + " '" + col.name + "': expected dtype " +
                                std::string(dtype_name(col.dtype)) + ", got " + std::string(dtype_name(in.dtype)));
  // (Compared in place: this runs for every column of every step; the expected shape is built for the message only.)
  if (in.shape.size() == col.shape.size() + 1 && in.shape[0] == n &&
      std::equal(col.shape.begin(), col.shape.end(), in.shape.begin() + 1))
    return;
  std::vector<std::int64_t> want{n};
  want.insert(want.end(), col.shape.begin(), col.shape.end());
  throw std::invalid_argument(std::string(what) + " '" + col.name + "': expected shape " + shape_str(want) +
                              ", got " + shape_str(in.shape));
}

}  // namespace trajview
