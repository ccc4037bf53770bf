// Bindings of TrajectoryStore as trajview._core._TrajectoryStore (the compiled class keeps the C++ name, private).
//
// Policies kept here: one mutex (mu_) serializes the calls that read or change
// episodes; build_batch always releases the GIL, add_step and input_dict only
// when they copy kReleaseGilBytes or more; an input of another dtype is cast
// when numpy.can_cast(..., "safe") allows it, else ValueError. Batch arrays
// are based on _Buffer (register_buffer.cpp).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "trajview/store.h"
#include "convert.h"
#include "fastcall.h"
#include "scratch.h"

namespace py = pybind11;

namespace trajview::bindings {
namespace {

// Copies above this many bytes release the GIL.
constexpr std::size_t kReleaseGilBytes = 1 << 16;

using Arrays = std::pmr::vector<py::array>;   // references held while the call reads the arrays
using Inputs = std::pmr::vector<ArrayIn>;
using RowPtrs = std::pmr::vector<std::byte*>;

class PyStore {
 public:
  PyStore(std::int64_t num_slots, const py::list& columns, const py::list& views, std::int64_t chunk_rows,
          std::int64_t eps_id_start, const std::vector<std::string>& inference_boundary, bool emit_env_id,
          std::size_t lazy_min_row_bytes, std::int64_t slots_per_env)
      : store_(num_slots, parse_columns(columns), parse_views(views),
               StoreOptions{chunk_rows, eps_id_start, emit_env_id, lazy_min_row_bytes, slots_per_env}),
        slots_per_env_(slots_per_env) {
    for (const auto& b : inference_boundary) {
      if (b == "t") infer_t_ = true;
      else if (b == "eps_id") infer_eps_ = true;
      else if (b == "env_id") infer_env_ = true;
      else throw py::value_error("inference boundary column must be t, eps_id or env_id, got '" + b + "'");
    }
    py::module_ np = py::module_::import("numpy");
    can_cast_ = np.attr("can_cast");
    for (const auto& c : store_.columns()) {
      col_names_.push_back(interned(c.name));
      col_dtypes_.push_back(to_numpy(c.dtype));
    }
    for (std::size_t v : store_.inference_views()) {
      const auto& view = store_.views()[v];
      const auto& col = store_.columns()[static_cast<std::size_t>(store_.column_index(view.column))];
      inf_names_.push_back(interned(view.name));
      inf_dtypes_.push_back(to_numpy(col.dtype));
      std::vector<py::ssize_t> shape{0};
      if (view.adds_axis) shape.push_back(static_cast<py::ssize_t>(view.shifts.size()));
      shape.insert(shape.end(), col.shape.begin(), col.shape.end());
      inf_shapes_.push_back(std::move(shape));
    }
    if (infer_t_) boundary_keys_.push_back(interned("t"));
    if (infer_eps_) boundary_keys_.push_back(interned("eps_id"));
    if (infer_env_) boundary_keys_.push_back(interned("env_id"));
  }

  // `out`: None, or an input dict's arrays (as input_dict's, every slot's) gathered into once the episodes began; it
  // and every other slot's episode in progress are checked before the store changes.
  py::list begin_episodes(const py::object& env_ids, const py::dict& obs, const py::object& out) {
    Slots slots = parse_slots(env_ids, "begin_episodes", /*allow_none=*/false);
    Scratch scratch;
    Arrays keep(scratch.get());
    Inputs in(scratch.get());
    const Slots every;
    std::size_t out_bytes = 0;
    Arrays held(scratch.get());  // the arrays stay alive while the GIL is released, whatever happens to `out`
    RowPtrs ptrs(scratch.get());
    if (!out.is_none()) out_rows(out, every, "begin_episodes", out_bytes, held, ptrs);
    const auto& obs_cols = store_.obs_columns();
    for (const auto& item : obs) {
      const std::string key = py::str(item.first);
      const std::int64_t c = store_.column_index(key);
      if (c < 0 || store_.columns()[static_cast<std::size_t>(c)].kind != ColumnKind::Observation)
        throw py::value_error("begin_episodes: '" + key + "' is not an observation column; expected " + obs_list());
    }
    for (std::size_t k = 0; k < obs_cols.size(); ++k) {
      PyObject* h = PyDict_GetItem(obs.ptr(), col_names_[obs_cols[k]].ptr());
      if (h == nullptr)
        throw py::value_error("begin_episodes: missing observation column '" + store_.columns()[obs_cols[k]].name +
                              "'; expected " + obs_list());
      in.push_back(convert(obs_cols[k], py::handle(h), keep));
    }
    std::vector<std::int64_t> eps;
    if (out.is_none()) {
      std::lock_guard<std::mutex> lock(mu_);
      eps = store_.begin_episodes(slots.ids, in);
    } else {
      // Under the lock the gather takes (one call: nothing between the check, the episodes and the gather).
      const std::function<void()> begin = [&] {
        check_others_active(slots.ids, "begin_episodes (out: the input dict of every slot)");
        eps = store_.begin_episodes(slots.ids, in);
      };
      gather_into(every, ptrs, out_bytes, &begin);
    }
    return py::cast(eps);
  }

  // `end`: None, or the slots whose episodes end with this step (end_episodes in the same call, checked before
  // anything is stored).
  void add_step(const py::object& data, const py::object& env_ids, const py::object& end) {
    Slots slots = parse_slots(env_ids, "add_step", /*allow_none=*/true);
    Slots ends;
    if (!end.is_none()) ends = parse_slots(end, "add_step end", /*allow_none=*/false);
    Scratch scratch;
    Arrays keep(scratch.get());
    Inputs in(scratch.get());
    std::size_t bytes = 0;
    collect_step(data, keep, in, bytes);
    if (ends.ids.empty()) {
      if (slots.given && slots.ids.empty()) return check_empty(in);
      return run_add(slots, in, bytes);
    }
    if (slots.given && slots.ids.empty()) check_empty(in);
    // One locked call: the ends checked, the step stored, the episodes ended (nothing between them).
    auto run = [&] {
      std::lock_guard<std::mutex> lock(mu_);
      store_.check_active(ends.ids, "add_step end");
      if (!(slots.given && slots.ids.empty())) store_.add_step(slots.ids, in);
      store_.end_episodes(ends.ids);
    };
    if (bytes >= kReleaseGilBytes) {
      py::gil_scoped_release release;
      run();
    } else {
      run();
    }
  }

  py::dict input_dict(const py::object& env_ids, const py::object& out) {
    Slots slots = parse_slots(env_ids, "input_dict", /*allow_none=*/true);
    if (out.is_none()) return gather(slots);
    std::size_t bytes = 0;
    Scratch scratch;
    Arrays held(scratch.get());  // the arrays stay alive while the GIL is released, whatever happens to `out`
    RowPtrs ptrs(scratch.get());
    out_rows(out, slots, "input_dict", bytes, held, ptrs);
    gather_into(slots, ptrs, bytes);
    return py::reinterpret_borrow<py::dict>(out);
  }

  py::dict step(const py::object& data, const py::object& env_ids, const py::object& out) {
    Slots slots = parse_slots(env_ids, "step", /*allow_none=*/true);
    Scratch scratch;
    RowPtrs ptrs(scratch.get());
    std::size_t out_bytes = 0;
    Arrays held(scratch.get());  // the arrays stay alive while the GIL is released, whatever happens to `out`
    if (!out.is_none()) out_rows(out, slots, "step", out_bytes, held, ptrs);  // checked before anything is stored
    Arrays keep(scratch.get());
    Inputs in(scratch.get());
    std::size_t bytes = 0;
    collect_step(data, keep, in, bytes);
    if (slots.given && slots.ids.empty()) check_empty(in);
    else run_add(slots, in, bytes);
    if (out.is_none()) return gather(slots);
    gather_into(slots, ptrs, out_bytes);
    return py::reinterpret_borrow<py::dict>(out);
  }

  void end_episodes(const py::object& env_ids) {
    Slots slots = parse_slots(env_ids, "end_episodes", /*allow_none=*/true);
    if (slots.given && slots.ids.empty()) return;
    std::lock_guard<std::mutex> lock(mu_);
    store_.end_episodes(slots.ids);
  }

  py::tuple build_batch(bool complete_only, const py::object& hold) {
    std::vector<std::int64_t> held;
    if (!hold.is_none()) held = parse_slots(hold, "build_batch hold", false).ids;
    Batch batch;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu_);
      batch = store_.build_batch(complete_only, held);
    }
    py::dict cols;
    py::list seq_keys;
    std::vector<py::array> bases;
    for (const auto& b : batch.bases) bases.push_back(wrap(b));
    for (const auto& col : batch.columns) {
      if (col.base >= 0) {
        // A lazy column: (its base rows, int64 row indices).
        BatchColumn index{col.name, DType::Int64, col.index_shape, false, col.buffer};
        cols[py::str(col.name)] = py::make_tuple(bases[static_cast<std::size_t>(col.base)], wrap(index));
        continue;
      }
      cols[py::str(col.name)] = wrap(col);
      if (col.per_sequence) seq_keys.append(py::str(col.name));
    }
    py::list segs;
    for (const auto& s : batch.segments) {
      py::dict d;
      d["eps_id"] = s.eps_id;
      d["env_id"] = s.env_id;
      d["t_start"] = s.t_start;
      d["length"] = s.length;
      d["row_offset"] = s.row_offset;
      d["seq_offset"] = s.seq_offset;
      d["num_seqs"] = s.num_seqs;
      d["finished"] = s.finished;
      segs.append(d);
    }
    return py::make_tuple(cols, segs, seq_keys, batch.count, batch.num_seqs);
  }

  void discard_steps() {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mu_);
    store_.discard_steps();
  }

  std::int64_t num_steps() {
    std::lock_guard<std::mutex> lock(mu_);
    return store_.num_steps();
  }
  std::int64_t num_complete_steps() {
    std::lock_guard<std::mutex> lock(mu_);
    return store_.num_complete_steps();
  }
  std::size_t nbytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return store_.nbytes();
  }
  /// A numpy view of where the next add_step of all slots writes `column`, or
  /// None (see TrajectoryStore::next_rows). Private to trajview: the view does
  /// not keep the memory alive and is valid only until the store changes.
  py::object next_rows(const std::string& column) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::int64_t c = store_.column_index(column);
    if (c < 0) throw py::value_error("next_rows: unknown column '" + column + "'");
    std::byte* p = store_.next_rows(static_cast<std::size_t>(c));
    if (p == nullptr) return py::none();
    const auto& spec = store_.columns()[static_cast<std::size_t>(c)];
    std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(store_.num_slots())};
    shape.insert(shape.end(), spec.shape.begin(), spec.shape.end());
    py::capsule no_owner(p, [](void*) {});
    return py::array(col_dtypes_[static_cast<std::size_t>(c)], shape, {}, p, no_owner);
  }
  std::size_t held_nbytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return store_.held_nbytes();
  }
  py::array_t<std::int64_t> eps_ids() {
    std::lock_guard<std::mutex> lock(mu_);
    return py::array_t<std::int64_t>(py::cast(store_.slot_eps_ids()));
  }
  py::array_t<std::int64_t> lengths() {
    std::lock_guard<std::mutex> lock(mu_);
    return py::array_t<std::int64_t>(py::cast(store_.slot_lengths()));
  }
  py::list inference_keys() const {
    py::list out;
    for (const auto& k : inf_names_) out.append(k);
    return out;
  }
  py::list training_keys() const {
    py::list out;
    for (std::size_t v : store_.training_views()) out.append(py::str(store_.views()[v].name));
    return out;
  }

 private:
  struct Slots {
    bool given = false;
    std::vector<std::int64_t> ids;
  };

  // Every slot not in `begun` has an episode in progress (checked before begin_episodes gathers every slot's input;
  // the caller holds mu_).
  void check_others_active(std::span<const std::int64_t> begun, const char* what) const {
    std::vector<bool> in_begun(static_cast<std::size_t>(store_.num_slots()), false);
    for (auto s : begun)
      if (s >= 0 && s < store_.num_slots()) in_begun[static_cast<std::size_t>(s)] = true;
    std::vector<std::int64_t> others;
    for (std::int64_t s = 0; s < store_.num_slots(); ++s)
      if (!in_begun[static_cast<std::size_t>(s)]) others.push_back(s);
    if (others.empty()) return;  // (an empty list would mean every slot to check_active)
    store_.check_active(others, what);
  }

  std::string obs_list() const {
    std::string s;
    for (std::size_t c : store_.obs_columns()) s += (s.empty() ? "" : ", ") + store_.columns()[c].name;
    return "[" + s + "]";
  }

  Slots parse_slots(const py::object& env_ids, const char* what, bool allow_none) const {
    Slots out;
    if (env_ids.is_none()) {
      if (!allow_none) throw py::value_error(std::string(what) + ": env_ids is required");
      return out;
    }
    out.given = true;
    py::array arr = py::array::ensure(env_ids);
    if (!arr) throw py::type_error(std::string(what) + ": env_ids must be a 1-D array of ints");
    if (arr.ndim() != 1 || (arr.size() > 0 && arr.dtype().kind() != 'i' && arr.dtype().kind() != 'u'))
      throw py::type_error(std::string(what) + ": env_ids must be a 1-D array of ints, got dtype " +
                           std::string(py::str(arr.dtype())) + " with " + std::to_string(arr.ndim()) + " dims");
    auto ids = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>::ensure(arr);
    out.ids.assign(ids.data(), ids.data() + ids.size());
    return out;
  }

  // numpy counts int64 -> float64 as a safe cast, but float64 holds integers exactly only up to 2**53:
  // a larger value would be rounded without a word.
  static void check_exact_in_float64(const std::string& name, py::array& arr) {
    const char kind = arr.dtype().kind();
    if ((kind != 'i' && kind != 'u') || arr.itemsize() != 8) return;
    arr = py::array::ensure(arr, py::array::c_style);
    constexpr std::uint64_t kExact = std::uint64_t{1} << 53;
    const auto n = static_cast<std::size_t>(arr.size());
    for (std::size_t k = 0; k < n; ++k) {
      std::uint64_t magnitude = 0;
      std::string text;
      if (kind == 'i') {
        const std::int64_t v = static_cast<const std::int64_t*>(arr.data())[k];
        magnitude = v < 0 ? std::uint64_t{0} - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
        text = std::to_string(v);
      } else {
        magnitude = static_cast<const std::uint64_t*>(arr.data())[k];
        text = std::to_string(magnitude);
      }
      if (magnitude > kExact)
        throw py::value_error("column '" + name + "': the " + std::string(py::str(arr.dtype())) + " value " + text +
                              " has no exact float64 (the column's dtype); integers above 2**53 would be rounded");
    }
  }

  ArrayIn convert(std::size_t c, py::handle h, Arrays& keep) {
    const auto& col = store_.columns()[c];
    // The common case read off the array itself (numpy's conversion is the larger part of a small step's cost):
    // an ndarray of the column's own dtype object, C-contiguous.
    if (reinterpret_cast<PyObject*>(Py_TYPE(h.ptr())) == array_type_) {
      const auto* a = py::detail::array_proxy(h.ptr());
      if (a->descr == col_dtypes_[c].ptr() && (a->flags & py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_) != 0) {
        keep.push_back(py::reinterpret_borrow<py::array>(h));
        return ArrayIn{a->data, col.dtype,
                       {reinterpret_cast<const std::int64_t*>(a->dimensions), static_cast<std::size_t>(a->nd)}};
      }
    }
    py::array arr = py::array::ensure(h);
    if (!arr) {
      PyErr_Clear();
      throw py::type_error("column '" + col.name + "': expected an array of dtype " +
                           std::string(dtype_name(col.dtype)) + ", got " +
                           std::string(py::str(py::type::of(h).attr("__name__"))));
    }
    std::optional<DType> dt = to_dtype(arr.dtype());
    if (!dt || *dt != col.dtype) {
      const py::dtype& want = col_dtypes_[c];
      if (!can_cast_(arr.dtype(), want, "safe").cast<bool>())
        throw py::value_error("column '" + col.name + "': expected dtype " + std::string(dtype_name(col.dtype)) +
                              ", got " + std::string(py::str(arr.dtype())) + " (casting would lose data)");
      if (col.dtype == DType::Float64) check_exact_in_float64(col.name, arr);
      arr = arr.attr("astype")(want);
      dt = col.dtype;
    }
    if (!(arr.flags() & py::array::c_style)) arr = py::array::ensure(arr, py::array::c_style);
    keep.push_back(arr);
    return ArrayIn{arr.data(), *dt, shape_of(keep.back())};
  }

  void collect_step(const py::object& obj, Arrays& keep, Inputs& in, std::size_t& bytes) {
    const py::dict data = PyDict_Check(obj.ptr()) ? py::reinterpret_borrow<py::dict>(obj) : py::dict(obj);
    const std::size_t ncols = col_names_.size();
    keep.reserve(ncols);
    in.reserve(ncols);
    for (std::size_t c = 0; c < ncols; ++c) {
      PyObject* h = PyDict_GetItem(data.ptr(), col_names_[c].ptr());
      if (h == nullptr) {
        std::string names;
        for (const auto& col : store_.columns()) names += (names.empty() ? "" : ", ") + col.name;
        throw py::value_error("add_step: missing column '" + store_.columns()[c].name + "'; expected every column: [" +
                              names + "]");
      }
      in.push_back(convert(c, py::handle(h), keep));
      bytes += static_cast<std::size_t>(keep.back().nbytes());
    }
    if (static_cast<std::size_t>(PyDict_Size(data.ptr())) != ncols) {
      for (const auto& item : data) {
        const std::string key = py::str(item.first);
        if (store_.column_index(key) < 0) {
          std::string names;
          for (const auto& col : store_.columns()) names += (names.empty() ? "" : ", ") + col.name;
          throw py::value_error("add_step: unknown column '" + key + "'; expected one of [" + names + "]");
        }
      }
    }
  }

  void check_empty(std::span<const ArrayIn> in) const {
    for (std::size_t c = 0; c < in.size(); ++c) {
      if (in[c].shape.empty() || in[c].shape[0] != 0)
        throw py::value_error("column '" + store_.columns()[c].name + "': env_ids is empty, so expected 0 rows, got " +
                              (in[c].shape.empty() ? std::string("a scalar") : std::to_string(in[c].shape[0])));
    }
  }

  void run_add(const Slots& slots, std::span<const ArrayIn> in, std::size_t bytes) {
    if (bytes >= kReleaseGilBytes) {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu_);
      store_.add_step(slots.ids, in);
    } else {
      std::lock_guard<std::mutex> lock(mu_);
      store_.add_step(slots.ids, in);
    }
  }

  py::ssize_t rows_of(const Slots& slots) const {
    return static_cast<py::ssize_t>(slots.given ? slots.ids.size() : static_cast<std::size_t>(store_.num_slots()));
  }

  py::dict gather(const Slots& slots) {
    const py::ssize_t n = rows_of(slots);
    py::dict out;
    std::vector<std::byte*> ptrs;
    ptrs.reserve(inf_names_.size() + 3);
    std::size_t bytes = 0;
    for (std::size_t k = 0; k < inf_names_.size(); ++k) {
      auto shape = inf_shapes_[k];
      shape[0] = n;
      py::array a(inf_dtypes_[k], shape);
      ptrs.push_back(static_cast<std::byte*>(a.mutable_data()));
      bytes += static_cast<std::size_t>(a.nbytes());
      out[inf_names_[k]] = std::move(a);
    }
    for (const auto& key : boundary_keys_) {
      py::array_t<std::int64_t> a(n);
      ptrs.push_back(reinterpret_cast<std::byte*>(a.mutable_data()));
      out[key] = std::move(a);
    }
    gather_into(slots, ptrs, bytes);
    return out;
  }

  // The rows of `out` (a dict of exactly the input dict's columns, each a writeable C-contiguous array of its
  // dtype and shape for these slots: e.g. an earlier input dict of as many rows), in gather_into's order, into
  // `ptrs`; anything else is a ValueError naming the column, expected and got.
  // `bytes`: the views' bytes in all (whether the copy releases the GIL); `held`: a reference to each array.
  void out_rows(const py::object& out, const Slots& slots, const char* where, std::size_t& bytes, Arrays& held,
                RowPtrs& ptrs) {
    if (!PyDict_Check(out.ptr()))
      throw py::type_error(std::string(where) + ": out must be a dict of arrays (an earlier input dict), got " +
                           std::string(py::str(py::type::handle_of(out).attr("__name__"))));
    const py::ssize_t n = rows_of(slots);
    const auto& keys = boundary_keys_;
    const auto expected = inf_names_.size() + keys.size();
    ptrs.reserve(expected);
    held.reserve(expected);
    auto check = [&](const py::str& name, const py::dtype& dtype, const std::vector<py::ssize_t>& want) {
      // (Messages are made only for an error: this runs at every call of a caller that reuses arrays.)
      auto shape = [&] {
        std::vector<py::ssize_t> s = want;
        s[0] = n;
        return s;
      };
      auto column = [&] { return std::string(where) + ": out column '" + std::string(name) + "'"; };
      auto expected_kind = [&] {
        return std::string(py::str(dtype)) + " of shape " + std::string(py::str(py::cast(shape())));
      };
      PyObject* found = PyDict_GetItem(out.ptr(), name.ptr());
      if (found == nullptr)
        throw py::value_error(std::string(where) + ": out has no column '" + std::string(name) + "' (expected " +
                              expected_kind() + ")");
      // The common case read off the array itself: an ndarray of the dtype object, the shape, writeable, C-contiguous
      // and aligned (each of these is checked again below, for the error, when any is not).
      if (reinterpret_cast<PyObject*>(Py_TYPE(found)) == array_type_) {
        auto* a = py::detail::array_proxy(found);
        constexpr int kFlags = py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_ | py::detail::npy_api::NPY_ARRAY_ALIGNED_ |
                               py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
        bool same = a->descr == dtype.ptr() && (a->flags & kFlags) == kFlags &&
                    static_cast<std::size_t>(a->nd) == want.size() && a->dimensions[0] == n;
        for (std::size_t d = 1; same && d < want.size(); ++d) same = a->dimensions[d] == want[d];
        if (same) {
          held.push_back(py::reinterpret_borrow<py::array>(found));
          ptrs.push_back(reinterpret_cast<std::byte*>(a->data));
          return static_cast<std::size_t>(held.back().nbytes());
        }
      }
      const auto h = py::reinterpret_borrow<py::object>(found);  // held at once: nothing ran since the lookup
      if (!py::isinstance<py::array>(h))
        throw py::type_error(column() + " must be a numpy array (" + expected_kind() + "), got " +
                             std::string(py::str(py::type::handle_of(h).attr("__name__"))));
      auto a = py::reinterpret_borrow<py::array>(h);
      const std::vector<py::ssize_t> got(a.shape(), a.shape() + a.ndim());
      if (!a.dtype().is(dtype) && !a.dtype().equal(dtype))
        throw py::value_error(column() + " must have dtype " + std::string(py::str(dtype)) + ", got " +
                              std::string(py::str(a.dtype())));
      if (got != shape())
        throw py::value_error(column() + " must have shape " + std::string(py::str(py::cast(shape()))) + ", got " +
                              std::string(py::str(py::cast(got))));
      std::string bad;
      if (!a.writeable()) bad = "writeable, got a read-only array";
      else if ((a.flags() & py::array::c_style) == 0)
        bad = "C-contiguous, got strides " + std::string(py::str(a.attr("strides")));
      else if ((a.flags() & py::detail::npy_api::NPY_ARRAY_ALIGNED_) == 0) bad = "aligned, got an unaligned array";
      if (!bad.empty()) throw py::value_error(column() + " must be " + bad);
      ptrs.push_back(static_cast<std::byte*>(a.mutable_data()));
      held.push_back(a);
      return static_cast<std::size_t>(a.nbytes());
    };
    for (std::size_t k = 0; k < inf_names_.size(); ++k) bytes += check(inf_names_[k], inf_dtypes_[k], inf_shapes_[k]);
    const py::dtype i64 = py::dtype::of<std::int64_t>();
    for (const auto& key : keys) check(key, i64, {0});
    if (static_cast<std::size_t>(PyDict_Size(out.ptr())) != expected) {  // every column is there: some others too
      // The keys held (a list of them) while they are compared, and only str keys compared (no __eq__ of a key
      // runs: one that changed the dict could free the others mid-scan).
      auto all_keys = py::reinterpret_steal<py::list>(PyDict_Keys(out.ptr()));
      if (!all_keys) throw py::error_already_set();
      std::string others;
      for (const auto& key : all_keys) {
        const bool str = PyUnicode_CheckExact(key.ptr()) != 0;
        auto is_key = [&](const py::str& k) { return PyUnicode_Compare(k.ptr(), key.ptr()) == 0; };
        if (str && (std::any_of(inf_names_.begin(), inf_names_.end(), is_key) ||
                    std::any_of(keys.begin(), keys.end(), is_key)))
          continue;
        if (!others.empty()) others += ", ";
        others += str ? std::string(py::repr(key)) : "a key of type " + std::string(py::str(
                                                         py::type::handle_of(key).attr("__name__")));
      }
      throw py::value_error(std::string(where) + ": out must hold exactly the input dict's columns; not one: " +
                            others);
    }
  }

  // Writes the input dict of `slots` into `ptrs` (the views in inf_names_ order, then boundary_keys_'s). `first`:
  // run before, under the same lock (and without the GIL where the gather releases it: C++ state only).
  void gather_into(const Slots& slots, std::span<std::byte* const> ptrs, std::size_t bytes,
                   const std::function<void()>* first = nullptr) {
    const py::ssize_t n = rows_of(slots);
    if (n == 0) {
      if (first != nullptr) {
        std::lock_guard<std::mutex> lock(mu_);
        (*first)();
      }
      return;
    }
    const std::size_t nviews = inf_names_.size();
    std::size_t next = nviews;
    auto* tp = infer_t_ ? reinterpret_cast<std::int64_t*>(ptrs[next++]) : nullptr;
    auto* ep = infer_eps_ ? reinterpret_cast<std::int64_t*>(ptrs[next++]) : nullptr;
    auto* envp = infer_env_ ? reinterpret_cast<std::int64_t*>(ptrs[next++]) : nullptr;
    const std::span<std::byte* const> views = ptrs.first(nviews);
    auto run = [&] {
      std::lock_guard<std::mutex> lock(mu_);
      if (first != nullptr) (*first)();
      store_.check_active(slots.ids, "input_dict");
      store_.gather_inference(slots.ids, views, tp, ep);
    };
    if (bytes >= kReleaseGilBytes) {
      py::gil_scoped_release release;
      run();
    } else {
      run();
    }
    if (envp != nullptr)
      for (py::ssize_t i = 0; i < n; ++i)
        envp[i] = (slots.given ? slots.ids[static_cast<std::size_t>(i)] : i) / slots_per_env_;
  }

  TrajectoryStore store_;
  std::mutex mu_;
  py::object can_cast_;
  PyObject* array_type_ = reinterpret_cast<PyObject*>(py::detail::npy_api::get().PyArray_Type_);  // numpy's ndarray
  std::vector<py::str> col_names_;
  std::vector<py::dtype> col_dtypes_;
  std::vector<py::str> inf_names_;
  std::vector<py::dtype> inf_dtypes_;
  std::vector<std::vector<py::ssize_t>> inf_shapes_;
  // The boundary columns an input dict holds besides the views (t, eps_id, env_id), in gather_into's order.
  std::vector<py::str> boundary_keys_;
  bool infer_t_ = false;
  bool infer_eps_ = false;
  bool infer_env_ = false;
  std::int64_t slots_per_env_ = 1;  // env_id = slot / slots_per_env_ (StoreOptions)
};

// `PyStore::step(data, env_ids, out)` as a plain function (fastcall.h): the runner's per-call step.
py::object step_fast(PyStore& store, PyObject* const* args, Py_ssize_t nargs) {
  expect_args(nargs, 3, 3, "step");
  return store.step(py::reinterpret_borrow<py::object>(args[0]), py::reinterpret_borrow<py::object>(args[1]),
                    py::reinterpret_borrow<py::object>(args[2]));
}
constexpr char kStepName[] = "step";

}  // namespace

void register_store(py::module_& m) {
  py::class_<PyStore>(m, "_TrajectoryStore", "The C++ trajectory store; use trajview.Collector.")
      .def(py::init<std::int64_t, const py::list&, const py::list&, std::int64_t, std::int64_t,
                    const std::vector<std::string>&, bool, std::size_t, std::int64_t>(),
           py::arg("num_slots"), py::arg("columns"), py::arg("views"), py::arg("chunk_rows"), py::arg("eps_id_start"),
           py::arg("inference_boundary"), py::arg("emit_env_id"), py::arg("lazy_min_row_bytes") = 0,
           py::arg("slots_per_env") = 1)
      .def("begin_episodes", &PyStore::begin_episodes, py::arg("env_ids"), py::arg("obs"), py::arg("out") = py::none())
      .def("add_step", &PyStore::add_step, py::arg("data"), py::arg("env_ids") = py::none(),
           py::arg("end") = py::none())
      .def("input_dict", &PyStore::input_dict, py::arg("env_ids") = py::none(), py::arg("out") = py::none())
      .def("step", &PyStore::step, py::arg("data"), py::arg("env_ids") = py::none(), py::arg("out") = py::none())
      .def("_fast_step", [](const py::object& self) { return fast_method<PyStore, &step_fast, kStepName>(self); },
           "step(data, env_ids, out) as a plain function of the three (positional): for a caller stepping every call")
      .def("end_episodes", &PyStore::end_episodes, py::arg("env_ids"))
      .def("build_batch", &PyStore::build_batch, py::arg("complete_only"), py::arg("hold") = py::none())
      .def("discard_steps", &PyStore::discard_steps)
      .def("num_steps", &PyStore::num_steps)
      .def("num_complete_steps", &PyStore::num_complete_steps)
      .def("nbytes", &PyStore::nbytes)
      .def("held_nbytes", &PyStore::held_nbytes)
      .def("_next_rows", &PyStore::next_rows, py::arg("column"))
      .def("eps_ids", &PyStore::eps_ids)
      .def("episode_lengths", &PyStore::lengths)
      .def("inference_keys", &PyStore::inference_keys)
      .def("training_keys", &PyStore::training_keys);
}

}  // namespace trajview::bindings
