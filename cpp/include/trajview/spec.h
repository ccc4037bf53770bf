// The column and view vocabulary that both stores (TrajectoryStore and
// ReplayStore) speak: what a stored column is, what a view of it reads, what a
// caller hands in, and the checks on them that both stores make the same way.
//
// Invariant: the checks here only read their arguments and throw
// std::invalid_argument naming the column; a store calls them before it
// writes anything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "trajview/dtype.h"

namespace trajview {

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

/// A read-only array handed in by the caller: C-contiguous, leading axis n.
struct ArrayIn {
  const void* data = nullptr;
  DType dtype = DType::Float32;
  std::span<const std::int64_t> shape;
};

/// Index of the column called `name` in `columns`, or -1.
std::int64_t find_column_index(std::span<const ColumnSpec> columns, const std::string& name) noexcept;

/// Checks columns[c] against itself and the columns before it: a non-empty
/// name, not declared before, dims >= 0 (in that order).
void check_column(std::span<const ColumnSpec> columns, std::size_t c);

/// Checks that `in` has column `col`'s dtype and shape [n, *col.shape].
/// Messages start with `what` and the quoted column name ("column 'obs': ...").
/// Whether null data is allowed is the caller's check.
void check_array(const ColumnSpec& col, const ArrayIn& in, std::int64_t n, const char* what);

}  // namespace trajview
