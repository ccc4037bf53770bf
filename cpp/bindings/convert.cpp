#include "convert.h"

#include <pybind11/stl.h>

#include <cstring>
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

py::array wrap(const BatchColumn& col) {
  std::vector<py::ssize_t> shape(col.shape.begin(), col.shape.end());
  py::object owner = py::cast(col.buffer);
  return py::array(to_numpy(col.dtype), shape, {}, col.buffer->data(), owner);
}

std::vector<ColumnSpec> parse_columns(const py::list& columns) {
  std::vector<ColumnSpec> out;
  for (const auto& item : columns) {
    auto t = item.cast<py::tuple>();
    ColumnSpec spec;
    spec.name = t[0].cast<std::string>();
    spec.dtype = dtype_from_name(t[1].cast<std::string>());
    spec.shape = t[2].cast<std::vector<std::int64_t>>();
    spec.kind = t[3].cast<bool>() ? ColumnKind::Observation : ColumnKind::Step;
    if (t.size() > 4 && !t[4].is_none()) {
      std::string raw = t[4].cast<py::bytes>();
      spec.pad_row.resize(raw.size());
      std::memcpy(spec.pad_row.data(), raw.data(), raw.size());
    }
    out.push_back(std::move(spec));
  }
  return out;
}

std::vector<ViewSpec> parse_views(const py::list& views) {
  std::vector<ViewSpec> out;
  for (const auto& item : views) {
    auto t = item.cast<py::tuple>();
    ViewSpec v;
    v.name = t[0].cast<std::string>();
    v.column = t[1].cast<std::string>();
    v.shifts = t[2].cast<std::vector<std::int64_t>>();
    v.adds_axis = t[3].cast<bool>();
    const auto pad = t[4].cast<std::string>();
    if (pad == "zero") v.padding = Padding::Zero;
    else if (pad == "reset") v.padding = Padding::Reset;
    else throw py::value_error("view '" + v.name + "': padding must be 'zero' or 'reset', got '" + pad + "'");
    if (t.size() > 5) {
      v.batch_repeat = t[5].cast<std::int64_t>();
      v.for_inference = t[6].cast<bool>();
      v.for_training = t[7].cast<bool>();
    }
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace trajview::bindings
