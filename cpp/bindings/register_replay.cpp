// Bindings of ReplayStore as trajview._core._Replay.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "trajview/buffer.h"
#include "trajview/replay.h"
#include "convert.h"

namespace py = pybind11;

namespace trajview::bindings {
namespace {

using I64Array = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>;

class PyReplay {
 public:
  PyReplay(std::int64_t capacity, const py::list& columns) : store_(capacity, parse_columns(columns)) {}

  /// data: every column, [n, *shape], exact dtype. next_obs: {obs column: [n, *shape]} (may be empty).
  void add(const py::dict& data, const py::dict& next_obs, const py::array& keys, const py::object& t,
           const py::array& done) {
    const auto& cols = store_.columns();
    std::vector<py::array> keep;
    std::vector<ArrayIn> in, nx;
    keep.reserve(2 * cols.size() + 3);
    auto convert = [&](const ColumnSpec& col, py::handle h, const char* what) {
      py::array arr = py::array::ensure(h, py::array::c_style);
      if (!arr) throw py::type_error(std::string(what) + " '" + col.name + "': expected a numpy array");
      const auto dt = to_dtype(arr.dtype());
      if (!dt || *dt != col.dtype)
        throw py::value_error(std::string(what) + " '" + col.name + "': expected dtype " +
                              std::string(dtype_name(col.dtype)) + ", got " + std::string(py::str(arr.dtype())));
      keep.push_back(arr);
      return ArrayIn{arr.data(), *dt, shape_of(keep.back())};
    };
    std::int64_t n = -1;
    for (const auto& col : cols) {
      PyObject* h = PyDict_GetItemString(data.ptr(), col.name.c_str());
      if (h == nullptr) throw py::value_error("add: missing column '" + col.name + "'");
      in.push_back(convert(col, py::handle(h), "column"));
      if (n < 0) n = in.back().shape.empty() ? 0 : in.back().shape[0];
    }
    if (next_obs.size() > 0) {
      for (const auto& col : cols) {
        PyObject* h = PyDict_GetItemString(next_obs.ptr(), col.name.c_str());
        if (col.kind == ColumnKind::Observation) {
          if (h == nullptr) throw py::value_error("add: missing the next observations of column '" + col.name + "'");
          nx.push_back(convert(col, py::handle(h), "next observation of column"));
        } else {
          nx.push_back(ArrayIn{nullptr, col.dtype, {}});
        }
      }
    }
    I64Array k = I64Array::ensure(keys);
    auto d = py::array_t<std::uint8_t, py::array::c_style | py::array::forcecast>::ensure(done);
    if (!k || !d || k.ndim() != 1 || d.ndim() != 1 || k.shape(0) != n || d.shape(0) != n)
      throw py::value_error("add: keys and done must be 1-D arrays of " + std::to_string(n) + " rows");
    I64Array tt;
    if (!t.is_none()) {
      tt = I64Array::ensure(t);
      if (!tt || tt.ndim() != 1 || tt.shape(0) != n)
        throw py::value_error("add: t must be a 1-D array of " + std::to_string(n) + " rows");
    }
    const std::int64_t* tp = t.is_none() ? nullptr : tt.data();
    py::gil_scoped_release release;
    store_.add(n, in, nx, k.data(), tp, d.data());
  }

  py::tuple sample(std::int64_t num_slices, std::int64_t slice_len, bool strict, bool pad, std::uint64_t seed,
                   const py::list& views, const std::optional<std::string>& truncated,
                   const std::optional<std::string>& done) {
    SliceRequest req = request(slice_len, pad, truncated, done);
    req.num_slices = num_slices;
    req.strict_length = strict;
    req.seed = seed;
    auto vs = parse_views(views);
    ReplayBatch b;
    {
      py::gil_scoped_release release;
      b = store_.sample(req, vs);
    }
    return to_python(b);
  }

  py::tuple gather(const py::array& picks, std::int64_t slice_len, bool pad, const py::list& views,
                   const std::optional<std::string>& truncated, const std::optional<std::string>& done) {
    SliceRequest req = request(slice_len, pad, truncated, done);
    I64Array p = I64Array::ensure(picks);
    if (!p || p.ndim() != 2 || p.shape(1) != 3)
      throw py::value_error("gather: picks must be an int array of shape (n, 3): uid, start, length");
    std::vector<SlicePick> ps;
    for (py::ssize_t i = 0; i < p.shape(0); ++i) ps.push_back(SlicePick{p.at(i, 0), p.at(i, 1), p.at(i, 2)});
    auto vs = parse_views(views);
    ReplayBatch b;
    {
      py::gil_scoped_release release;
      b = store_.gather(ps, req, vs);
    }
    return to_python(b);
  }

  py::list trajectories() const {
    py::list out;
    for (const auto& t : store_.trajectories()) {
      py::dict d;
      d["uid"] = t.uid;
      d["key"] = t.key;
      d["steps"] = t.steps;
      d["open"] = t.open;
      d["starts_episode"] = t.starts_episode;
      d["has_final_obs"] = t.tail_g() >= 0;
      py::list rows;
      for (const auto& pc : t.pieces) {
        for (std::int64_t i = 0; i < pc.n; ++i) rows.append(pc.g0 + i);
      }
      d["rows"] = rows;
      out.append(d);
    }
    return out;
  }

  std::int64_t num_steps() const { return store_.num_steps(); }
  std::int64_t rows_written() const { return store_.rows_written(); }
  std::int64_t num_trajectories() const { return store_.num_trajectories(); }
  std::size_t nbytes() const { return store_.nbytes(); }
  std::int64_t capacity() const { return store_.capacity(); }

 private:
  SliceRequest request(std::int64_t slice_len, bool pad, const std::optional<std::string>& truncated,
                       const std::optional<std::string>& done) const {
    SliceRequest req;
    req.slice_len = slice_len;
    req.pad_output = pad;
    if (truncated) req.truncated_column = store_.column_index(*truncated);
    if (done) req.done_column = store_.column_index(*done);
    return req;
  }

  static py::tuple to_python(const ReplayBatch& b) {
    py::dict cols;
    for (const auto& c : b.columns) cols[py::str(c.name)] = wrap(c);
    py::array_t<std::int64_t> index(static_cast<py::ssize_t>(b.index.size()));
    if (!b.index.empty()) std::memcpy(index.mutable_data(), b.index.data(), b.index.size() * sizeof(std::int64_t));
    py::array_t<std::int64_t> slices({static_cast<py::ssize_t>(b.slices.size()), py::ssize_t{3}});
    auto s = slices.mutable_unchecked<2>();
    for (std::size_t i = 0; i < b.slices.size(); ++i) {
      const auto ii = static_cast<py::ssize_t>(i);
      s(ii, 0) = b.slices[i].uid;
      s(ii, 1) = b.slices[i].start;
      s(ii, 2) = b.slices[i].length;
    }
    return py::make_tuple(cols, index, slices, b.count);
  }

  ReplayStore store_;
};

}  // namespace

void register_replay(py::module_& m) {
  py::class_<PyReplay>(m, "_Replay", "The C++ replay storage; use trajview.ReplayBuffer.")
      .def(py::init<std::int64_t, const py::list&>(), py::arg("capacity"), py::arg("columns"))
      .def("add", &PyReplay::add, py::arg("data"), py::arg("next_obs"), py::arg("keys"), py::arg("t"),
           py::arg("done"))
      .def("sample", &PyReplay::sample, py::arg("num_slices"), py::arg("slice_len"), py::arg("strict_length"),
           py::arg("pad_output"), py::arg("seed"), py::arg("views"), py::arg("truncated_key"), py::arg("done_key"))
      .def("gather", &PyReplay::gather, py::arg("picks"), py::arg("slice_len"), py::arg("pad_output"),
           py::arg("views"), py::arg("truncated_key"), py::arg("done_key"))
      .def("trajectories", &PyReplay::trajectories)
      .def("num_steps", &PyReplay::num_steps)
      .def("rows_written", &PyReplay::rows_written)
      .def("num_trajectories", &PyReplay::num_trajectories)
      .def("nbytes", &PyReplay::nbytes)
      .def("capacity", &PyReplay::capacity);
}

}  // namespace trajview::bindings
