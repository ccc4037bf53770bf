#include "convert.h"

#include <pybind11/stl.h>

#include <string>

#include "trajview/buffer.h"

namespace trajview::bindings {

static_assert(sizeof(py::ssize_t) == sizeof(std::int64_t), "trajview needs a 64-bit platform");

std::optional<DType> to_dtype(const py::dtype& dt) {
  const char kind = dt.kind();
  const auto size = dt.itemsize();
  const char order = dt.byteorder();
  if (order != '=' && order != '|') {
    const bool little = py::module_::import("sys").attr("byteorder").cast<std::string>() == "little";
    if ((order == '<') != little) return std::nullopt;
  }
  switch (kind) {
    case 'b':
      return size == 1 ? std::optional<DType>(DType::Bool) : std::nullopt;
    case 'u':
      switch (size) {
        case 1: return DType::UInt8;
        case 2: return DType::UInt16;
        case 4: return DType::UInt32;
        case 8: return DType::UInt64;
        default: return std::nullopt;
      }
    case 'i':
      switch (size) {
        case 1: return DType::Int8;
        case 2: return DType::Int16;
        case 4: return DType::Int32;
        case 8: return DType::Int64;
        default: return std::nullopt;
      }
    case 'f':
      switch (size) {
        case 2: return DType::Float16;
        case 4: return DType::Float32;
        case 8: return DType::Float64;
        default: return std::nullopt;
      }
    default:
      return std::nullopt;
  }
}

py::dtype to_numpy(DType d) { return py::dtype(std::string(dtype_name(d))); }

std::span<const std::int64_t> shape_of(const py::array& a) {
  return {reinterpret_cast<const std::int64_t*>(a.shape()), static_cast<std::size_t>(a.ndim())};
}

py::str interned(const std::string& s) {
  PyObject* p = PyUnicode_FromStringAndSize(s.data(), static_cast<Py_ssize_t>(s.size()));
  if (p == nullptr) throw py::error_already_set();
  PyUnicode_InternInPlace(&p);  // (replaces p by the interned object, if there is one, and releases the new one)
  return py::reinterpret_steal<py::str>(p);
}

py::str interned_str(const py::str& s) {
  PyObject* p = s.ptr();
  Py_INCREF(p);
  if (PyUnicode_CheckExact(p)) PyUnicode_InternInPlace(&p);
  return py::reinterpret_steal<py::str>(p);
}

py::array wrap(const BatchColumn& col) {
  std::vector<py::ssize_t> shape(col.shape.begin(), col.shape.end());
  py::object owner = py::cast(col.buffer);
  return py::array(to_numpy(col.dtype), shape, {}, col.buffer->data(), owner);
}

namespace {

// Readers of the spec tuples: a wrong type is a TypeError, a wrong value a
// ValueError, each naming what was read (never pybind11's cast_error, which
// Python sees as RuntimeError).

std::string type_name(py::handle h) { return py::str(py::type::of(h).attr("__name__")); }

/// `item` (a tuple or list) as a tuple of `lo` to `hi` entries.
py::tuple entry(py::handle item, const std::string& what, std::size_t lo, std::size_t hi) {
  if (!PyTuple_Check(item.ptr()) && !PyList_Check(item.ptr()))
    throw py::type_error(what + " must be a tuple, got " + type_name(item));
  py::tuple t(py::reinterpret_borrow<py::object>(item));
  if (t.size() < lo || t.size() > hi)
    throw py::value_error(what + " must have " + std::to_string(lo) + (lo == hi ? "" : " to " + std::to_string(hi)) +
                          " entries, got " + std::to_string(t.size()));
  return t;
}

std::string as_str(py::handle h, const std::string& what) {
  if (!PyUnicode_Check(h.ptr())) throw py::type_error(what + " must be a str, got " + type_name(h));
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(h.ptr(), &size);
  if (data == nullptr) throw py::error_already_set();  // UnicodeEncodeError, a ValueError
  return {data, static_cast<std::size_t>(size)};
}

constexpr const char* kInt64Range = "[-2**63, 2**63 - 1] (int64)";

/// An int; one beyond int64 is a ValueError saying it must be within `range`.
std::int64_t as_int(py::handle h, const std::string& what, const std::string& range = kInt64Range) {
  py::object i = py::reinterpret_steal<py::object>(PyNumber_Index(h.ptr()));
  if (!i) {
    PyErr_Clear();
    throw py::type_error(what + " must be an int, got " + type_name(h));
  }
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
  if (overflow != 0)
    throw py::value_error(what + " must be in " + range + ", got " + std::string(py::str(i)));
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  return static_cast<std::int64_t>(v);
}

/// A sequence of at most `max_len` ints (`limit` names that bound in the message).
std::vector<std::int64_t> as_ints(py::handle h, const std::string& what, std::size_t max_len, const char* limit,
                                  const std::string& range = kInt64Range) {
  if (!PySequence_Check(h.ptr()) || PyUnicode_Check(h.ptr()) || PyBytes_Check(h.ptr()))
    throw py::type_error(what + " must be a list of ints, got " + type_name(h));
  const Py_ssize_t n = PySequence_Size(h.ptr());
  if (n < 0) throw py::error_already_set();
  if (static_cast<std::size_t>(n) > max_len)
    throw py::value_error(what + " must have at most " + std::to_string(max_len) + " entries (" + limit + "), got " +
                          std::to_string(n));
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    py::object item = py::reinterpret_steal<py::object>(PySequence_GetItem(h.ptr(), i));
    if (!item) throw py::error_already_set();
    out.push_back(as_int(item, what + "[" + std::to_string(i) + "]", range));
  }
  return out;
}

bool as_bool(py::handle h) {
  const int b = PyObject_IsTrue(h.ptr());
  if (b < 0) throw py::error_already_set();
  return b != 0;
}

}  // namespace

std::vector<ColumnSpec> parse_columns(const py::list& columns) {
  std::vector<ColumnSpec> out;
  for (std::size_t i = 0; i < columns.size(); ++i) {
    const std::string at = "columns[" + std::to_string(i) + "]";
    auto t = entry(columns[i], at, 4, 5);
    ColumnSpec spec;
    spec.name = as_str(t[0], at + " name");
    const std::string who = "column '" + spec.name + "'";
    spec.dtype = dtype_from_name(as_str(t[1], who + ": dtype"));
    spec.shape = as_ints(t[2], who + ": shape", kMaxDims, "kMaxDims");
    spec.kind = as_bool(t[3]) ? ColumnKind::Observation : ColumnKind::Step;
    if (t.size() > 4 && !t[4].is_none()) {
      if (!PyBytes_Check(t[4].ptr()))
        throw py::type_error(who + ": pad row must be bytes or None, got " + type_name(t[4]));
      const std::string raw = t[4].cast<py::bytes>();
      const auto* p = reinterpret_cast<const std::byte*>(raw.data());
      spec.pad_row.assign(p, p + raw.size());  // (no memcpy: b"" would pass it a null pointer)
    }
    out.push_back(std::move(spec));
  }
  return out;
}

std::vector<ViewSpec> parse_views(const py::list& views) {
  std::vector<ViewSpec> out;
  for (std::size_t i = 0; i < views.size(); ++i) {
    const std::string at = "views[" + std::to_string(i) + "]";
    auto t = entry(views[i], at, 5, 8);
    if (t.size() != 5 && t.size() != 8)
      throw py::value_error(at + " must have 5 or 8 entries, got " + std::to_string(t.size()));
    ViewSpec v;
    v.name = as_str(t[0], at + " name");
    const std::string who = "view '" + v.name + "'";
    v.column = as_str(t[1], who + ": column");
    // Offsets beyond int64 are out of range like any beyond kMaxShift (ValueError;
    // check_view_shifts checks the others when the store is built).
    v.shifts = as_ints(t[2], who + ": shift", kMaxViewShifts, "kMaxViewShifts",
                       "[-" + std::to_string(kMaxShift) + ", " + std::to_string(kMaxShift) + "] (kMaxShift)");
    v.adds_axis = as_bool(t[3]);
    const auto pad = as_str(t[4], who + ": padding");
    if (pad == "zero") v.padding = Padding::Zero;
    else if (pad == "reset") v.padding = Padding::Reset;
    else throw py::value_error(who + ": padding must be 'zero' or 'reset', got '" + pad + "'");
    if (t.size() > 5) {
      v.batch_repeat = as_int(t[5], who + ": batch_repeat_value");
      v.for_inference = as_bool(t[6]);
      v.for_training = as_bool(t[7]);
    }
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace trajview::bindings
