// Bindings of ReplayStore as trajview._core._Replay.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "trajview/buffer.h"
#include "trajview/replay.h"
#include "convert.h"

namespace py = pybind11;

namespace trajview::bindings {
namespace {

/// Python objects a C++ object keeps alive; dropped with the GIL held.
struct HeldRefs {
  py::object refs;
  HeldRefs() = default;
  HeldRefs(const HeldRefs&) = delete;
  HeldRefs& operator=(const HeldRefs&) = delete;
  ~HeldRefs() {
    py::gil_scoped_acquire gil;
    refs = py::object();
  }
};

using I64Array = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>;

class PyReplay {
 public:
  PyReplay(std::int64_t capacity, const py::list& columns, const py::object& rings)
      : store_(make_store(capacity, columns, rings)) {}

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

  /// One sample as a sampler's request says (its mode picks in C++ without the GIL, or gathers its picks).
  py::tuple sample(const SliceRequest& req, const py::list& views) {
    auto vs = parse_views(views);
    ReplayBatch b;
    {
      py::gil_scoped_release release;
      b = store_.sample(req, vs);
    }
    return to_python(b);
  }

  void enable_priorities(double alpha, double eps) { store_.enable_priorities(alpha, eps); }

  std::int64_t update_priority(const py::array& rows, const py::array& priorities) {
    I64Array r = I64Array::ensure(rows);
    auto p = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(priorities);
    if (!r || !p || r.ndim() != 1 || p.ndim() != 1)
      throw py::value_error("update_priority: index and priority must be 1-D arrays");
    std::span<const std::int64_t> rs(r.data(), static_cast<std::size_t>(r.shape(0)));
    std::span<const double> ps(p.data(), static_cast<std::size_t>(p.shape(0)));
    py::gil_scoped_release release;
    return store_.update_priority(rs, ps);
  }

  py::array_t<double> priority_leaves(const py::array& rows) const {
    I64Array r = I64Array::ensure(rows);
    if (!r || r.ndim() != 1) throw py::value_error("priorities: index must be a 1-D int array");
    std::vector<double> v;
    {
      py::gil_scoped_release release;
      v = store_.priority_leaves(std::span<const std::int64_t>(r.data(), static_cast<std::size_t>(r.shape(0))));
    }
    return vec_to_array(v);
  }

  double max_priority() const { return store_.max_priority(); }
  std::int64_t skipped_priority_updates() const { return store_.skipped_priority_updates(); }
  bool prioritized() const { return store_.prioritized(); }

  py::array_t<std::int64_t> step_rows() const { return vec_to_array(store_.step_rows()); }

  py::array_t<std::int64_t> locate(const py::array& rows) const {
    I64Array r = I64Array::ensure(rows);
    if (!r || r.ndim() != 1) throw py::value_error("locate: rows must be a 1-D int array");
    auto picks = store_.locate(std::span<const std::int64_t>(r.data(), static_cast<std::size_t>(r.shape(0))));
    return picks_to_array(picks);
  }

  py::array_t<std::int64_t> trajectory_lengths() const {
    auto v = store_.trajectory_lengths();
    py::array_t<std::int64_t> out({static_cast<py::ssize_t>(v.size()), py::ssize_t{2}});
    auto o = out.mutable_unchecked<2>();
    for (std::size_t i = 0; i < v.size(); ++i) {
      o(static_cast<py::ssize_t>(i), 0) = v[i].first;
      o(static_cast<py::ssize_t>(i), 1) = v[i].second;
    }
    return out;
  }

  /// Trajectories as one int64 array per field (compact for persistence).
  py::dict meta() const {
    const ReplayMeta m = store_.meta();
    py::dict d;
    d["head"] = m.head;
    d["next_uid"] = m.next_uid;
    const auto nt = m.trajectories.size();
    std::vector<std::int64_t> tr_fields;  // uid, key, first_g, steps, last_t, open, starts_episode, npieces
    std::vector<std::int64_t> pieces;     // g0, n, step0, tail
    tr_fields.reserve(nt * 8);
    for (const auto& t : m.trajectories) {
      tr_fields.insert(tr_fields.end(), {t.uid, t.key, t.first_g, t.steps, t.last_t, t.open ? 1 : 0,
                                         t.starts_episode ? 1 : 0, static_cast<std::int64_t>(t.pieces.size())});
      for (const auto& p : t.pieces) pieces.insert(pieces.end(), {p.g0, p.n, p.step0, p.tail ? 1 : 0});
    }
    d["trajectories"] = vec_to_array(tr_fields).attr("reshape")(static_cast<py::ssize_t>(nt), 8);
    d["pieces"] = vec_to_array(pieces).attr("reshape")(static_cast<py::ssize_t>(pieces.size() / 4), 4);
    d["prioritized"] = m.prioritized;
    d["alpha"] = m.alpha;
    d["eps"] = m.eps;
    d["max_priority"] = m.max_priority;
    // Leaves exactly, as mantissa and exponent ((p + eps)^alpha may lie beyond a double's range).
    std::vector<double> lm;
    std::vector<std::int64_t> le;
    for (const auto& w : m.leaves) {
      lm.push_back(w.m);
      le.push_back(w.e);
    }
    d["leaf_mantissas"] = vec_to_array(lm);
    d["leaf_exponents"] = vec_to_array(le);
    return d;
  }

  /// The store checks every field (ReplayStore::restore); a missing entry or one of the wrong type is a
  /// ValueError here too (never a crash, whatever the dict holds).
  void restore(const py::dict& d) {
    try {
      restore_checked(d);
    } catch (const py::cast_error& e) {
      throw py::value_error(std::string("restore: an entry is not of the expected type: ") + e.what());
    } catch (const py::error_already_set& e) {
      if (!e.matches(PyExc_KeyError)) throw;
      throw py::value_error(std::string("restore: missing entry ") + e.what());
    }
  }

  void restore_checked(const py::dict& d) {
    ReplayMeta m;
    m.head = d["head"].cast<std::int64_t>();
    m.next_uid = d["next_uid"].cast<std::int64_t>();
    I64Array tr = I64Array::ensure(d["trajectories"]);
    I64Array pc = I64Array::ensure(d["pieces"]);
    if (!tr || !pc || tr.ndim() != 2 || tr.shape(1) != 8 || pc.ndim() != 2 || pc.shape(1) != 4)
      throw py::value_error("restore: trajectories must be (n, 8) and pieces (m, 4) int arrays");
    py::ssize_t p = 0;
    for (py::ssize_t i = 0; i < tr.shape(0); ++i) {
      ReplayTrajectory t;
      t.uid = tr.at(i, 0);
      t.key = tr.at(i, 1);
      t.first_g = tr.at(i, 2);
      t.steps = tr.at(i, 3);
      t.last_t = tr.at(i, 4);
      t.open = tr.at(i, 5) != 0;
      t.starts_episode = tr.at(i, 6) != 0;
      const std::int64_t np = tr.at(i, 7);
      if (np < 0 || np > pc.shape(0) - p) throw py::value_error("restore: pieces do not match trajectories");
      for (std::int64_t j = 0; j < np; ++j, ++p)
        t.pieces.push_back(ReplayPiece{pc.at(p, 0), pc.at(p, 1), pc.at(p, 2), pc.at(p, 3) != 0});
      m.trajectories.push_back(std::move(t));
    }
    if (p != pc.shape(0)) throw py::value_error("restore: pieces do not match trajectories");
    m.prioritized = d["prioritized"].cast<bool>();
    m.alpha = d["alpha"].cast<double>();
    m.eps = d["eps"].cast<double>();
    m.max_priority = d["max_priority"].cast<double>();
    if (!d.contains("leaf_mantissas") && d.contains("leaves")) {  // a state from before exact leaves: doubles
      auto lv = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(d["leaves"]);
      if (!lv || lv.ndim() != 1) throw py::value_error("restore: leaves must be a 1-D float array");
      for (py::ssize_t i = 0; i < lv.shape(0); ++i) {
        const double v = lv.at(i);
        if (!(v >= 0.0) || !std::isfinite(v)) throw py::value_error("restore: priority leaves must be finite and >= 0");
        int e = 0;
        const double mant = std::frexp(v, &e);
        m.leaves.push_back(SumTree::Weight{mant, static_cast<std::int32_t>(e)});
      }
      restore_released(std::move(m));
      return;
    }
    auto lm = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(d["leaf_mantissas"]);
    I64Array le = I64Array::ensure(d["leaf_exponents"]);
    if (!lm || !le || lm.ndim() != 1 || le.ndim() != 1 || lm.shape(0) != le.shape(0))
      throw py::value_error("restore: leaf_mantissas and leaf_exponents must be 1-D arrays of one length");
    for (py::ssize_t i = 0; i < lm.shape(0); ++i) {
      const std::int64_t e = le.at(i);
      if (e < std::numeric_limits<std::int32_t>::min() || e > std::numeric_limits<std::int32_t>::max())
        throw py::value_error("restore: leaf exponent " + std::to_string(e) + " out of range");
      m.leaves.push_back(SumTree::Weight{lm.at(i), static_cast<std::int32_t>(e)});
    }
    restore_released(std::move(m));
  }

  // The checks and the rebuild touch no Python object and no ring row: a load reads the rows meanwhile.
  void restore_released(ReplayMeta m) {
    py::gil_scoped_release nogil;
    store_.restore(std::move(m));
  }

  /// Column c's ring as a writable uint8 array that keeps `self` alive (persistence).
  static py::array column_view(const py::object& self, std::size_t c) {
    auto& me = self.cast<PyReplay&>();
    if (c >= me.store_.columns().size()) throw py::index_error("column_view: no column " + std::to_string(c));
    const auto n = static_cast<py::ssize_t>(static_cast<std::size_t>(me.store_.capacity()) *
                                           me.store_.columns()[c].row_bytes());
    return py::array(py::dtype("uint8"), {n}, {py::ssize_t{1}}, me.store_.column_data(c), self);
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

  static py::array_t<std::int64_t> picks_to_array(const std::vector<SlicePick>& picks) {
    return picks_array(picks);
  }

  /// Picks from an int array of shape (n, 3): uid, start, length.
  static std::vector<SlicePick> parse_picks(const py::object& picks) {
    I64Array p = I64Array::ensure(picks);
    if (!p || p.ndim() != 2 || p.shape(1) != 3)
      throw py::value_error("picks must be an int array of shape (n, 3): uid, start, length");
    std::vector<SlicePick> ps;
    ps.reserve(static_cast<std::size_t>(p.shape(0)));
    for (py::ssize_t i = 0; i < p.shape(0); ++i) ps.push_back(SlicePick{p.at(i, 0), p.at(i, 1), p.at(i, 2)});
    return ps;
  }

 private:
  /// A store over its own memory, or over `rings` (one writable, C-contiguous uint8 array of capacity x row
  /// bytes per column, e.g. numpy memmaps), which it keeps alive.
  static ReplayStore make_store(std::int64_t capacity, const py::list& columns, const py::object& rings) {
    auto specs = parse_columns(columns);
    if (rings.is_none()) return ReplayStore(capacity, std::move(specs));
    py::list rl = rings.cast<py::list>();
    if (rl.size() != specs.size())
      throw py::value_error("rings: expected one array per column (" + std::to_string(specs.size()) + "), got " +
                            std::to_string(rl.size()));
    if (capacity < 1) throw py::value_error("capacity must be >= 1, got " + std::to_string(capacity));
    std::vector<std::byte*> ptrs;
    for (std::size_t c = 0; c < specs.size(); ++c) {
      py::array a = py::array::ensure(rl[c]);
      const std::size_t want = static_cast<std::size_t>(capacity) * specs[c].row_bytes();
      if (!a || !(a.flags() & py::array::c_style) || !a.writeable() || a.itemsize() != 1 ||
          static_cast<std::size_t>(a.nbytes()) != want)
        throw py::value_error("rings: column '" + specs[c].name + "' needs a writable C-contiguous uint8 array of " +
                              std::to_string(want) + " bytes");
      ptrs.push_back(static_cast<std::byte*>(a.mutable_data()));
    }
    // The arrays stay alive as long as the store: a Python reference, released with the GIL held.
    auto owner = std::make_shared<HeldRefs>();
    owner->refs = rl;
    return ReplayStore(capacity, std::move(specs), std::move(ptrs), std::move(owner));
  }

  template <class T>
  static py::array_t<T> vec_to_array(const std::vector<T>& v) {
    py::array_t<T> a(static_cast<py::ssize_t>(v.size()));
    if (!v.empty()) std::memcpy(a.mutable_data(), v.data(), v.size() * sizeof(T));
    return a;
  }

  static py::array_t<std::int64_t> picks_array(const std::vector<SlicePick>& picks) {
    py::array_t<std::int64_t> slices({static_cast<py::ssize_t>(picks.size()), py::ssize_t{3}});
    auto s = slices.mutable_unchecked<2>();
    for (std::size_t i = 0; i < picks.size(); ++i) {
      const auto ii = static_cast<py::ssize_t>(i);
      s(ii, 0) = picks[i].uid;
      s(ii, 1) = picks[i].start;
      s(ii, 2) = picks[i].length;
    }
    return slices;
  }

  static py::tuple to_python(const ReplayBatch& b) {
    py::dict cols;
    for (const auto& c : b.columns) cols[py::str(c.name)] = wrap(c);
    py::array_t<std::int64_t> index(static_cast<py::ssize_t>(b.index.size()));
    if (!b.index.empty()) std::memcpy(index.mutable_data(), b.index.data(), b.index.size() * sizeof(std::int64_t));
    return py::make_tuple(cols, index, picks_to_array(b.slices), b.count, vec_to_array(b.steps_left),
                          vec_to_array(b.weights));
  }

  ReplayStore store_;
};

}  // namespace

void register_replay(py::module_& m) {
  m.def(
      "trajectory_pieces",
      [](const py::array& keys, const py::array& done) {
        I64Array k = I64Array::ensure(keys);
        auto d = py::array_t<std::uint8_t, py::array::c_style | py::array::forcecast>::ensure(done);
        if (!k || !d || k.ndim() != 1 || d.ndim() != 1 || k.shape(0) != d.shape(0))
          throw py::value_error("trajectory_pieces: keys and done must be 1-D arrays of one length");
        std::vector<std::int64_t> starts;
        {
          py::gil_scoped_release release;
          starts = piece_starts(k.shape(0), k.data(), d.data());
        }
        py::array_t<std::int64_t> out(static_cast<py::ssize_t>(starts.size()));
        if (!starts.empty()) std::memcpy(out.mutable_data(), starts.data(), starts.size() * sizeof(std::int64_t));
        return out;
      },
      py::arg("keys"), py::arg("done"),
      "The first row of each trajectory piece: a new key, or the row after a done flag (the rule ReplayStore::add "
      "cuts by).");
  py::enum_<SampleMode>(m, "SampleMode", "How a replay sample picks its slices (the one definition, C++'s SampleMode).")
      .value("PER_TRAJECTORY", SampleMode::PerTrajectory, "a trajectory uniformly, then a start (SliceSampler)")
      .value("PER_STEP", SampleMode::PerStep, "a start step uniformly (RandomSampler)")
      .value("PRIORITIZED", SampleMode::Prioritized, "a start step in proportion to its priority")
      .value("GIVEN", SampleMode::Given, "the request's picks, as given");
  py::class_<SliceRequest>(m, "SliceRequest",
                           "What one replay sample takes: a sampler's answer to ReplayBuffer.sample (C++'s SliceRequest).")
      .def(py::init([](SampleMode mode, std::int64_t num_slices, std::int64_t slice_len, bool strict_length,
                       bool pad_output, std::uint64_t seed, double beta, const std::optional<std::string>& truncated_key,
                       const std::optional<std::string>& done_key, const py::object& picks) {
             SliceRequest r;
             r.mode = mode;
             r.num_slices = num_slices;
             r.slice_len = slice_len;
             r.strict_length = strict_length;
             r.pad_output = pad_output;
             r.seed = seed;
             r.beta = beta;
             r.truncated_key = truncated_key.value_or("");
             r.done_key = done_key.value_or("");
             if (!picks.is_none()) r.picks = PyReplay::parse_picks(picks);
             return r;
           }),
           py::arg("mode"), py::arg("num_slices"), py::arg("slice_len"), py::arg("strict_length") = false,
           py::arg("pad_output") = false, py::arg("seed") = 0, py::arg("beta") = 0.0, py::arg("truncated_key") = py::none(),
           py::arg("done_key") = py::none(), py::arg("picks") = py::none())
      .def_readonly("mode", &SliceRequest::mode)
      .def_readonly("num_slices", &SliceRequest::num_slices)
      .def_readonly("slice_len", &SliceRequest::slice_len)
      .def_readonly("strict_length", &SliceRequest::strict_length)
      .def_readonly("pad_output", &SliceRequest::pad_output)
      .def_readonly("seed", &SliceRequest::seed)
      .def_readonly("beta", &SliceRequest::beta)
      .def_property_readonly("truncated_key", [](const SliceRequest& r) -> std::optional<std::string> {
        return r.truncated_key.empty() ? std::nullopt : std::optional<std::string>(r.truncated_key);
      })
      .def_property_readonly("done_key", [](const SliceRequest& r) -> std::optional<std::string> {
        return r.done_key.empty() ? std::nullopt : std::optional<std::string>(r.done_key);
      })
      .def_property_readonly("picks", [](const SliceRequest& r) { return PyReplay::picks_to_array(r.picks); });
  py::class_<PyReplay>(m, "_Replay", "The C++ replay storage; use trajview.ReplayBuffer.")
      .def(py::init<std::int64_t, const py::list&, const py::object&>(), py::arg("capacity"), py::arg("columns"),
           py::arg("rings") = py::none())
      .def("add", &PyReplay::add, py::arg("data"), py::arg("next_obs"), py::arg("keys"), py::arg("t"),
           py::arg("done"))
      .def("sample", &PyReplay::sample, py::arg("request"), py::arg("views"))
      .def("enable_priorities", &PyReplay::enable_priorities, py::arg("alpha"), py::arg("eps"))
      .def("update_priority", &PyReplay::update_priority, py::arg("rows"), py::arg("priorities"))
      .def("priority_leaves", &PyReplay::priority_leaves, py::arg("rows"))
      .def("max_priority", &PyReplay::max_priority)
      .def("skipped_priority_updates", &PyReplay::skipped_priority_updates)
      .def("prioritized", &PyReplay::prioritized)
      .def("step_rows", &PyReplay::step_rows)
      .def("locate", &PyReplay::locate, py::arg("rows"))
      .def("trajectory_lengths", &PyReplay::trajectory_lengths)
      .def("meta", &PyReplay::meta)
      .def("restore", &PyReplay::restore, py::arg("meta"))
      .def("column_view", &PyReplay::column_view, py::arg("column"))
      .def("trajectories", &PyReplay::trajectories)
      .def("num_steps", &PyReplay::num_steps)
      .def("rows_written", &PyReplay::rows_written)
      .def("num_trajectories", &PyReplay::num_trajectories)
      .def("nbytes", &PyReplay::nbytes)
      .def("capacity", &PyReplay::capacity);
}

}  // namespace trajview::bindings
