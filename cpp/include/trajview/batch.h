// What a store hands out: the columns of a built batch, the segments that say
// which episode's steps each run of rows holds, and the layout of lazy columns.
//
// Invariant: every buffer here is fresh and owned through shared_ptr by
// whoever holds it (numpy arrays, via _Buffer); nothing in a batch points into
// a store, so a batch outlives the store that built it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trajview/buffer.h"
#include "trajview/dtype.h"

namespace trajview {

/// One episode's contiguous steps in a batch.
struct Segment {
  std::int64_t eps_id = 0;
  std::int64_t env_id = 0;
  std::int64_t t_start = 0;
  std::int64_t length = 0;
  std::int64_t row_offset = 0;
  std::int64_t seq_offset = 0;
  std::int64_t num_seqs = 0;
  bool finished = false;
};

/// A column of a built batch. The buffer is fresh and owned by whoever holds it.
///
/// A *lazy* column (base >= 0) is not copied out: its buffer holds int64 row
/// indices (shape index_shape: [rows] or [rows, len(shifts)]) into
/// Batch::bases[base], and its value is base_rows[index] (shape `shape`).
struct BatchColumn {
  std::string name;
  DType dtype = DType::Float32;
  std::vector<std::int64_t> shape;  ///< full shape, leading axis = rows or sequences
  bool per_sequence = false;
  std::shared_ptr<Buffer> buffer;
  std::int64_t base = -1;                 ///< index into Batch::bases, or -1 (the values are in buffer)
  std::vector<std::int64_t> index_shape{};  ///< lazy columns: the shape of the int64 index in buffer
};

/// A postprocessing / training batch in the flat layout.
struct Batch {
  std::int64_t count = 0;     ///< timestep rows
  std::int64_t num_seqs = 0;  ///< sequences (0 if no view repeats)
  std::vector<BatchColumn> columns;
  std::vector<Segment> segments;
  /// Row arrays of the lazy columns, one per stored column they read, named
  /// after it: [kLazyPadRow] = the column's pad row, [kLazyZeroRow] = zeros,
  /// then each segment's rows that its views read, once.
  std::vector<BatchColumn> bases;
};

/// Rows 0 and 1 of every lazy base.
inline constexpr std::int64_t kLazyPadRow = 0;
inline constexpr std::int64_t kLazyZeroRow = 1;

}  // namespace trajview
