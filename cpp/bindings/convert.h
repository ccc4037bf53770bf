// numpy <-> trajview conversions shared by the bindings.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "trajview/batch.h"
#include "trajview/spec.h"

namespace trajview::bindings {

namespace py = pybind11;

/// The DType of a numpy dtype, if it is one of ours in native byte order.
std::optional<DType> to_dtype(const py::dtype& dt);

/// numpy's dtype for a DType.
py::dtype to_numpy(DType d);

/// A numpy array's shape as int64 (numpy's npy_intp is 64-bit here).
std::span<const std::int64_t> shape_of(const py::array& a);

/// The interned str object of `s` (Python's own for an identifier-like literal): a dict lookup by a key that is the
/// very object stored compares no characters. The bindings' fixed keys (column and view names) are interned.
py::str interned(const std::string& s);
/// `s` interned (an exact str; a subclass is returned as it is).
py::str interned_str(const py::str& s);

/// A batch column as a numpy array whose base (a `_Buffer`) owns the memory.
py::array wrap(const BatchColumn& col);

/// Columns from Python tuples (name, dtype name, shape, is observation[, pad row bytes or None]).
std::vector<ColumnSpec> parse_columns(const py::list& columns);

/// Views from Python tuples (name, column, shifts, adds axis, padding
/// [, batch_repeat_value, for compute actions, for training]).
std::vector<ViewSpec> parse_views(const py::list& views);

}  // namespace trajview::bindings
