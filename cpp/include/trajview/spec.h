// The column and view vocabulary that both stores (TrajectoryStore and
// ReplayStore) speak: what a stored column is, what a view of it reads, what a
// caller hands in, and the checks on them that both stores make the same way.
//
// Invariant: the checks here only read their arguments and throw
// std::invalid_argument naming the column or view, the bound and the value; a
// store calls them before it computes a size from a spec or writes anything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "trajview/dtype.h"

namespace trajview {

// ---- Limits of a spec (both stores reject specs beyond them at construction,
// or for replay views, when a sample names them). They keep every size a
// store computes from a spec far inside 64 bits, and reject what no use needs.

/// A view offset s reads row t + s: every offset is in [-kMaxShift, kMaxShift].
/// A view reaching further than a million steps back or ahead is not a use
/// case (a store keeps that many rows per env slot to serve it).
inline constexpr std::int64_t kMaxShift = 1'000'000;
/// Offsets of one view (a list / range shift): at most this many.
inline constexpr std::size_t kMaxViewShifts = 100'000;
/// batch_repeat_value (steps per sequence): in [1, kMaxBatchRepeat].
inline constexpr std::int64_t kMaxBatchRepeat = 1'000'000;
/// Dims of a column's per-step shape: at most numpy 2's maximum.
inline constexpr std::size_t kMaxDims = 64;
/// Bytes of one row of a column (product of its dims, each counted as at
/// least 1, times the itemsize): at most 1 GiB.
inline constexpr std::size_t kMaxRowBytes = std::size_t{1} << 30;

/// Observation columns hold T + 1 rows per episode of T steps (row 0 from
/// begin_episodes); step columns hold T rows (row t from the add_step of t).
enum class ColumnKind : std::uint8_t { Observation, Step };

/// What views read before an episode's first row.
enum class Padding : std::uint8_t {
  Zero,   ///< the column's pad row (zeros unless the column sets one)
  Reset,  ///< the episode's row 0
};

/// A stored column.
struct ColumnSpec {
  std::string name;
  DType dtype = DType::Float32;
  std::vector<std::int64_t> shape;  ///< per-step shape
  ColumnKind kind = ColumnKind::Step;
  /// Row read before the episode's start; empty means zeros. Must be
  /// row_bytes() long otherwise (e.g. a recurrent policy's initial state).
  std::vector<std::byte> pad_row;

  /// Elements / bytes of one row. Unchecked: valid once check_column passed
  /// (which bounds them by kMaxRowBytes).
  std::size_t row_elems() const noexcept;
  std::size_t row_bytes() const noexcept { return row_elems() * itemsize(dtype); }
};

/// A view of one column: value at t is column[t + s] for each s in shifts.
struct ViewSpec {
  std::string name;
  std::string column;
  std::vector<std::int64_t> shifts;  ///< non-empty
  bool adds_axis = false;            ///< list/range shift: [n, len(shifts), ...]
  Padding padding = Padding::Zero;
  std::int64_t batch_repeat = 1;     ///< k > 1: one row per sequence of k steps
  bool for_inference = true;
  bool for_training = true;
};

/// The view rule, for both stores (TrajectoryStore's gather and ReplayStore's
/// sample): which of a trajectory's rows a view reads at row r = t + shift,
/// when the column holds `avail` rows of it (its steps; an observation column
/// one more, the observation after the last step, where it is kept). Returns
/// r when 0 <= r < avail; before row 0, row 0 with Padding::Reset (when there
/// is one) or kViewPad (the column's pad row); past the last, kViewZeros.
inline constexpr std::int64_t kViewPad = -1;
inline constexpr std::int64_t kViewZeros = -2;
constexpr std::int64_t view_row(std::int64_t r, std::int64_t avail, Padding padding) noexcept {
  if (r < 0) return padding == Padding::Reset && avail > 0 ? 0 : kViewPad;
  return r < avail ? r : kViewZeros;
}

/// A read-only array handed in by the caller: C-contiguous, leading axis n.
struct ArrayIn {
  const void* data = nullptr;
  DType dtype = DType::Float32;
  std::span<const std::int64_t> shape;
};

/// Index of the column called `name` in `columns`, or -1.
std::int64_t find_column_index(std::span<const ColumnSpec> columns, const std::string& name) noexcept;

/// Checks columns[c] against itself and the columns before it: a non-empty
/// name, not declared before, at most kMaxDims dims, dims >= 0, and rows of
/// at most kMaxRowBytes (in that order).
void check_column(std::span<const ColumnSpec> columns, std::size_t c);

/// Checks a view's offsets: at least one, at most kMaxViewShifts, exactly one
/// unless adds_axis, each in [-kMaxShift, kMaxShift]. Messages name the view,
/// the bound and the value.
void check_view_shifts(const ViewSpec& view);

/// Checks batch_repeat is in [1, kMaxBatchRepeat] (the message names the view).
void check_batch_repeat(const ViewSpec& view);

/// Checks that `in` has column `col`'s dtype and shape [n, *col.shape].
/// Messages start with `what` and the quoted column name ("column 'obs': ...").
/// Whether null data is allowed is the caller's check.
void check_array(const ColumnSpec& col, const ArrayIn& in, std::int64_t n, const char* what);

}  // namespace trajview
