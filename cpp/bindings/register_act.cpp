// trajview._core._ActCounts, _core._HotAct and _core._ActOne: PolicyRunner's common call (python/trajview/rollout/
// runner.py, its short way) in C++. Acting outside a worker costs the store's step, the policy's call and the checks
// of its outputs; what ran between them in Python (a few dozen bytecodes, slower right after the model's call, whose
// code and data evict the interpreter's: issue 26) runs here. `_HotAct` strings together the functions it is given,
// in the order and with the semantics of `PolicyRunner._act_hot`; `_ActOne` holds runner.py's rules of when that call
// applies (`_act_one` for one episode, `_fused` for `_act_hot`), reading the runner's attributes at each call, and
// hands everything else back to Python (the general way, `_act_hot`, the runner's error and check handling).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "convert.h"
#include "fastcall.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace trajview::bindings {

namespace {

py::object steal_or_throw(PyObject* p) {
  if (p == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(p);
}

// The runner's calls counted: `timestep` (rows acted on so far: the policy's ``timestep``) and, every `chunk`
// calls, `free()` (the store's steps dropped: `Collector.discard_steps`).
class ActCounts {
 public:
  ActCounts(std::int64_t chunk, py::object free) : chunk_(chunk), free_(std::move(free)) {
    if (chunk < 1) throw py::value_error("_ActCounts: chunk must be positive, got " + std::to_string(chunk));
  }

  // A call of `n` rows done (PolicyRunner._counted).
  void count(std::int64_t n) {
    std::int64_t next = 0;
    if (n < 0 || __builtin_add_overflow(timestep_, n, &next))
      throw py::value_error("_ActCounts: the timestep cannot count " + std::to_string(n) + " more rows");
    timestep_ = next;
    if (++calls_ >= chunk_) {
      calls_ = 0;
      free_();
    }
  }

  std::int64_t timestep() const { return timestep_; }
  std::int64_t calls() const { return calls_; }

 private:
  std::int64_t chunk_;
  py::object free_;
  std::int64_t timestep_ = 0;
  std::int64_t calls_ = 0;
};

// What a call returns (PolicyRunner._single_outputs / _many_outputs for flat actions).
enum Mode : int { kRow = 0, kRowFetch = 1, kRows = 2, kRowsFetch = 3 };

class HotAct {
 public:
  // step(data, ids, out): the store's step (`Collector.step_into`); check(actions, state_outs, extra, n, data): the
  // output checks' common case (`_core._OutputCheck`), which sets the outputs in `data`; `zeros`: the rewards
  // stored when none are given; `state_keys` / `extra_keys`: the outputs returned with `full_fetch`; `unchecked`:
  // what a call returns when the check declines (the outputs are then in `take_unchecked()`). Nothing held here
  // refers to the policy or the runner (the policy's function comes with each call): no reference cycle through
  // this object, which Python's collector cannot see into.
  HotAct(py::object step, py::object check, py::dict data, py::object ids, py::dict out, py::ssize_t n,
         py::object zeros, py::object counts, const py::list& state_keys, const py::list& extra_keys,
         py::object unchecked)
      : step_(std::move(step)),
        check_(std::move(check)),
        data_(std::move(data)),
        ids_(std::move(ids)),
        out_(std::move(out)),
        n_(n),
        n_obj_(py::int_(n)),
        zeros_(std::move(zeros)),
        counts_obj_(std::move(counts)),
        counts_(counts_obj_.cast<ActCounts*>()),
        unchecked_(std::move(unchecked)) {
    if (n < 1) throw py::value_error("_HotAct: n must be positive, got " + std::to_string(n));
    for (const py::handle k : state_keys) state_keys_.push_back(interned_str(py::reinterpret_borrow<py::str>(k)));
    for (const py::handle k : extra_keys) extra_keys_.push_back(interned_str(py::reinterpret_borrow<py::str>(k)));
  }

  // One call of the runner's short way: `obs` and `rewards` (None: `zeros`) stored with the outputs `data` holds
  // (the previous call's), the input arrays refilled (`step`), then `run(explore, timestep)` (the policy's function
  // on them), its outputs checked into `data`, the call counted, and what `mode` asks returned. Raises what those
  // raise; `stage()` then says where: the store refused the step (0: nothing changed), the policy or the check raised
  // (1), or what came after the outputs were checked and stored (2: the count's free, the return).
  py::object call(PyObject* obs, PyObject* rewards, PyObject* explore, PyObject* run, int mode) {
    stage_ = 0;
    if (mode < kRow || mode > kRowsFetch) throw py::value_error("_HotAct: mode must be 0 to 3");
    if (PyDict_SetItem(data_.ptr(), obs_key_.ptr(), obs) < 0) throw py::error_already_set();
    if (PyDict_SetItem(data_.ptr(), rewards_key_.ptr(), rewards == Py_None ? zeros_.ptr() : rewards) < 0)
      throw py::error_already_set();
    PyObject* step_args[3] = {data_.ptr(), ids_.ptr(), out_.ptr()};
    steal_or_throw(PyObject_Vectorcall(step_.ptr(), step_args, 3, nullptr));
    stage_ = 1;
    const py::int_ timestep(counts_->timestep());
    PyObject* run_args[2] = {explore, timestep.ptr()};
    const py::object outputs = steal_or_throw(PyObject_Vectorcall(run, run_args, 2, nullptr));
    const auto [actions, state_outs, extra] = unpack3(outputs);
    PyObject* check_args[5] = {actions.ptr(), state_outs.ptr(), extra.ptr(), n_obj_.ptr(), data_.ptr()};
    const py::object checked = steal_or_throw(PyObject_Vectorcall(check_.ptr(), check_args, 5, nullptr));
    if (checked.is_none()) {
      unchecked_outputs_ = py::make_tuple(actions, state_outs, extra);
      return unchecked_;
    }
    stage_ = 2;
    counts_->count(n_);
    return returned(mode);
  }

  int stage() const { return stage_; }
  // What a call returns where the check declined the outputs.
  const py::object& unchecked() const { return unchecked_; }

  // The outputs of the last call whose check declined, (actions, state_outs, extra); forgotten here.
  py::object take_unchecked() { return std::exchange(unchecked_outputs_, py::none()); }

 private:
  // `a, s, e = outputs`, with Python's errors for anything that does not unpack into three.
  static std::tuple<py::object, py::object, py::object> unpack3(const py::object& outputs) {
    PyObject* o = outputs.ptr();
    if ((PyTuple_CheckExact(o) && PyTuple_GET_SIZE(o) == 3)) {
      return {py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(o, 0)),
              py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(o, 1)),
              py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(o, 2))};
    }
    const std::string type = Py_TYPE(o)->tp_name;
    const py::object seq = steal_or_throw(PySequence_Fast(o, ("cannot unpack non-iterable " + type + " object").c_str()));
    const Py_ssize_t size = PySequence_Fast_GET_SIZE(seq.ptr());
    if (size < 3) throw py::value_error("not enough values to unpack (expected 3, got " + std::to_string(size) + ")");
    if (size > 3) throw py::value_error("too many values to unpack (expected 3)");
    PyObject** items = PySequence_Fast_ITEMS(seq.ptr());
    return {py::reinterpret_borrow<py::object>(items[0]), py::reinterpret_borrow<py::object>(items[1]),
            py::reinterpret_borrow<py::object>(items[2])};
  }

  py::object column(const py::str& key) const {
    PyObject* v = PyDict_GetItemWithError(data_.ptr(), key.ptr());
    if (v == nullptr) {
      if (!PyErr_Occurred()) throw py::key_error(key);
      throw py::error_already_set();
    }
    return py::reinterpret_borrow<py::object>(v);
  }

  // Row 0 of a checked column: a numpy scalar, or a copy of the row (`runner._row`).
  static py::object row0(const py::object& col) {
    py::object r = steal_or_throw(PySequence_GetItem(col.ptr(), 0));
    if (py::isinstance<py::array>(r)) return r.attr("copy")();
    return r;
  }

  // A copy of a checked column (`np.array(col, copy=True)`: the layout kept).
  static py::object copied(const py::object& col) { return col.attr("copy")("K"); }

  py::object returned(int mode) const {
    const bool rows = mode == kRows || mode == kRowsFetch;
    auto one = [&](const py::str& key) { return rows ? copied(column(key)) : row0(column(key)); };
    py::object action = one(action_key_);
    if (mode == kRow || mode == kRows) return action;
    py::list states;
    for (const py::str& k : state_keys_) states.append(one(k));
    py::dict extra;
    for (const py::str& k : extra_keys_) extra[k] = one(k);
    return py::make_tuple(action, states, extra);
  }

  py::object step_;
  py::object check_;
  py::dict data_;
  py::object ids_;
  py::dict out_;
  py::ssize_t n_;
  py::object n_obj_;
  py::object zeros_;
  py::object counts_obj_;  // keeps `counts_` alive
  ActCounts* counts_;
  py::object unchecked_;
  std::vector<py::str> state_keys_;
  std::vector<py::str> extra_keys_;
  py::str obs_key_ = interned("obs");
  py::str rewards_key_ = interned("rewards");
  py::str action_key_ = interned("actions");
  py::object unchecked_outputs_ = py::none();
  int stage_ = 0;
};


// `_act_one` (python/trajview/rollout/runner.py, where its rule is described) in C++: `PolicyRunner`'s most
// common call, one episode one step on, made by `compute_single_action` once per env step. In Python its checks and
// calls were a few dozen bytecodes (issue 26: about a quarter of what the runner adds to the model's time, after the
// store's step). Nothing is held here that refers to a runner: the runner comes with each call, and what the call
// reads of it and of its `_Hot` (the short way's state) are their attributes, read at each call as Python would.
class ActOne {
 public:
  // `miss`: what a call that is not this common case returns (nothing changed: the general way takes it);
  // `float32` / `float64`: numpy's scalar types (a reward of either is a real number, as Python's float is).
  ActOne(py::object miss, py::object float32, py::object float64)
      : miss_(std::move(miss)), f32_(std::move(float32)), f64_(std::move(float64)) {}

  // (runner, obs, episode, reward, explore, full_fetch): see runner.py's `_act_one`.
  py::object call(PyObject* runner, PyObject* obs, PyObject* episode, PyObject* reward, PyObject* explore,
                  PyObject* full_fetch) const {
    const py::object hot = attr(runner, hot_);
    if (hot.is_none()) return miss_;
    if (attr(hot, keys_).ptr() != attr(runner, last_keys_).ptr()) return miss_;
    const Py_ssize_t n = PyLong_AsSsize_t(attr(hot, n_).ptr());
    if (n == -1 && PyErr_Occurred()) throw py::error_already_set();
    if (n != 1) return miss_;
    // An observation array of the space's dtype object and shape.
    if (reinterpret_cast<PyObject*>(Py_TYPE(obs)) != array_type_) return miss_;
    const auto* a = py::detail::array_proxy(obs);
    if (a->descr != attr(runner, obs_dtype_).ptr()) return miss_;
    const py::object shape = attr(runner, obs_shape_);
    if (!PyTuple_CheckExact(shape.ptr()) || PyTuple_GET_SIZE(shape.ptr()) != a->nd) return miss_;
    for (int d = 0; d < a->nd; ++d) {
      const Py_ssize_t want = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape.ptr(), d));
      if (want == -1 && PyErr_Occurred()) throw py::error_already_set();
      if (want != a->dimensions[d]) return miss_;
    }
    if (explore != Py_None && !PyBool_Check(explore)) return miss_;
    if (!same_key(episode, attr(hot, key_).ptr())) return miss_;
    const int fetch = PyObject_IsTrue(full_fetch);
    if (fetch < 0) throw py::error_already_set();
    const py::int_ mode(fetch ? 1 : 0);  // (_ROW_FETCH / _ROW)
    PyTypeObject* rt = Py_TYPE(reward);
    const bool f32 = rt == reinterpret_cast<PyTypeObject*>(f32_.ptr());
    if (rt == &PyFloat_Type || rt == reinterpret_cast<PyTypeObject*>(f64_.ptr()) || f32) {
      const double value = PyFloat_AsDouble(reward);  // (np.float64 is a float; np.float32 converts exactly)
      if (value == -1.0 && PyErr_Occurred()) throw py::error_already_set();
      if (value != value) return miss_;  // (NaN: the general way's error)
      const py::object r = attr(hot, f32 ? r32_ : r64_);
      auto* ra = py::detail::array_proxy(r.ptr());
      if (f32) *reinterpret_cast<float*>(ra->data) = static_cast<float>(value);
      else *reinterpret_cast<double*>(ra->data) = value;
      const py::object batch = steal_or_throw(PyObject_GetItem(obs, Py_None));  // obs[None]
      py::object out = fused(runner, hot, batch.ptr(), r.ptr(), (f32 ? f32_ : f64_).ptr(), explore, mode.ptr());
      if (out.ptr() != miss_.ptr()) return out;
      return method(runner, act_hot_, {hot.ptr(), batch.ptr(), r.ptr(), explore, mode.ptr()});
    }
    if (reward == Py_None) {
      const int reads = PyObject_IsTrue(attr(attr(runner, columns_), reward_input_keys_).ptr());
      if (reads < 0) throw py::error_already_set();
      if (reads == 0) {
        const py::object batch = steal_or_throw(PyObject_GetItem(obs, Py_None));
        return method(runner, act_hot_, {hot.ptr(), batch.ptr(), Py_None, explore, mode.ptr()});
      }
    }
    return miss_;
  }

  // `PolicyRunner._act_hot`'s C++ call (`_HotAct`), where it applies: `hot` has one (`hot.act`), `t` (the rewards'
  // dtype type, or None) is the last call's by this way (`hot.reward_type`), and the lane is usable (`_Lane.usable`).
  // Errors go through `runner._fused_failed` (the stage rule), a declined check through `runner._unchecked`. Else
  // `miss` (nothing changed): `_act_hot` takes the call.
  py::object fused(PyObject* runner, const py::object& hot, PyObject* obs, PyObject* rewards, PyObject* t,
                   PyObject* explore, PyObject* mode) const {
    const py::object act_obj = attr(hot, act_);
    if (act_obj.is_none() || attr(hot, reward_type_).ptr() != t || !usable(runner, hot)) return miss_;
    HotAct& act = act_obj.cast<HotAct&>();
    const long m = PyLong_AsLong(mode);
    if (m == -1 && PyErr_Occurred()) throw py::error_already_set();
    const py::object explore_now =
        explore == Py_None ? attr(runner, explore_) : py::reinterpret_borrow<py::object>(explore);
    const py::object run = attr(hot, run_);
    py::object out;
    try {
      out = act.call(obs, rewards, explore_now.ptr(), run.ptr(), static_cast<int>(m));
    } catch (...) {
      py::error_already_set error = as_python_error();
      method(runner, fused_failed_, {hot.ptr(), error.value().ptr()});  // (the runner's rule, by the stage)
      throw error;
    }
    if (out.ptr() == act.unchecked().ptr()) return method(runner, unchecked_, {hot.ptr(), mode});
    return out;
  }

 private:
  static py::object attr(const py::handle& o, const py::str& name) {
    return steal_or_throw(PyObject_GetAttr(o.ptr(), name.ptr()));
  }
  static py::object attr(PyObject* o, const py::str& name) { return steal_or_throw(PyObject_GetAttr(o, name.ptr())); }

  // `self.name(*args)` (no bound method made).
  static py::object method(PyObject* self, const py::str& name, std::initializer_list<PyObject*> args) {
    constexpr std::size_t kMax = 6;  // (self and the most arguments passed here: `_act_hot`'s five)
    if (args.size() + 1 > kMax) throw std::logic_error("_ActOne: too many arguments");
    std::array<PyObject*, kMax> all{self};
    std::copy(args.begin(), args.end(), all.begin() + 1);
    return steal_or_throw(PyObject_VectorcallMethod(name.ptr(), all.data(),
                                                    (args.size() + 1) | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr));
  }

  // `runner._hot.lane.usable(runner.policy, runner._hot.cast)`: the lane's own rule.
  bool usable(PyObject* runner, const py::object& hot) const {
    const py::object lane = attr(hot, lane_);
    const py::object policy = attr(runner, policy_);
    const py::object cast = attr(hot, cast_);
    const py::object ok = method(lane.ptr(), usable_, {policy.ptr(), cast.ptr()});
    const int truth = PyObject_IsTrue(ok.ptr());
    if (truth < 0) throw py::error_already_set();
    return truth == 1;
  }

  // Whether `key` is the episode's key `known`: the same object, or an int / str of the same type and value (the
  // general way compares any other).
  static bool same_key(PyObject* key, PyObject* known) {
    if (key == known) return true;
    PyTypeObject* t = Py_TYPE(key);
    if ((t != &PyLong_Type && t != &PyUnicode_Type) || Py_TYPE(known) != t) return false;
    const int eq = PyObject_RichCompareBool(key, known, Py_EQ);
    if (eq < 0) throw py::error_already_set();
    return eq == 1;
  }

  // The exception being handled, as the Python exception a Python caller would catch (pybind11's translation of a
  // C++ one).
  static py::error_already_set as_python_error() {
    try {
      throw;
    } catch (py::error_already_set& e) {
      return std::move(e);
    } catch (...) {
      py::detail::try_translate_exceptions();
      return py::error_already_set();
    }
  }

  py::object miss_, f32_, f64_;
  PyObject* array_type_ = reinterpret_cast<PyObject*>(py::detail::npy_api::get().PyArray_Type_);
  py::str hot_ = interned("_hot"), keys_ = interned("keys"), last_keys_ = interned("_last_keys"),
          act_ = interned("act"), n_ = interned("n"), obs_dtype_ = interned("_obs_dtype"),
          obs_shape_ = interned("_obs_shape"), key_ = interned("key"), r32_ = interned("r32"), r64_ = interned("r64"),
          reward_type_ = interned("reward_type"), explore_ = interned("explore"), run_ = interned("run"),
          lane_ = interned("lane"), policy_ = interned("policy"), cast_ = interned("cast"),
          columns_ = interned("_columns"), reward_input_keys_ = interned("reward_input_keys"),
          fused_failed_ = interned("_fused_failed"), unchecked_ = interned("_unchecked"),
          act_hot_ = interned("_act_hot"), usable_ = interned("usable");
};

py::object act_one_fast(ActOne& one, PyObject* const* args, Py_ssize_t nargs) {
  expect_args(nargs, 6, 6, "_ActOne");
  return one.call(args[0], args[1], args[2], args[3], args[4], args[5]);
}
constexpr char kActOneName[] = "_act_one";

// `ActOne::fused(runner, hot, obs, rewards, t, explore, mode)` as a plain function (`PolicyRunner._act_hot`'s).
py::object fused_fast(ActOne& one, PyObject* const* args, Py_ssize_t nargs) {
  expect_args(nargs, 7, 7, "_ActOne.fused");
  return one.fused(args[0], py::reinterpret_borrow<py::object>(args[1]), args[2], args[3], args[4], args[5], args[6]);
}
constexpr char kFusedName[] = "_fused";

}  // namespace

void register_act(py::module_& m) {
  py::class_<ActCounts>(m, "_ActCounts", "PolicyRunner's calls counted: the timestep, and the store freed every chunk calls.")
      .def(py::init<std::int64_t, py::object>(), py::arg("chunk"), py::arg("free"))
      .def("count", &ActCounts::count, py::arg("n"), "A call of n rows done: the timestep on; free() every chunk calls.")
      .def_property_readonly("timestep", &ActCounts::timestep)
      .def_property_readonly("calls", &ActCounts::calls);
  py::class_<HotAct>(m, "_HotAct", "PolicyRunner's short way in one call (see the file's comment).")
      .def(py::init<py::object, py::object, py::dict, py::object, py::dict, py::ssize_t, py::object, py::object,
                    const py::list&, const py::list&, py::object>(),
           py::arg("step"), py::arg("check"), py::arg("data"), py::arg("ids"), py::arg("out"), py::arg("n"),
           py::arg("zeros"), py::arg("counts"), py::arg("state_keys"), py::arg("extra_keys"), py::arg("unchecked"))
      .def_property_readonly("stage", &HotAct::stage,
                             "After a call that raised: 0 if the store refused the step, 1 if the policy or the check "
                             "raised, 2 if what came after the outputs were stored did.")
      .def("take_unchecked", &HotAct::take_unchecked,
           "(actions, state_outs, extra) of the last call whose check declined (then forgotten here).");
  py::class_<ActOne>(m, "_ActOne", "runner.py's _act_one in C++ (see the file's comment).")
      .def(py::init<py::object, py::object, py::object>(), py::arg("miss"), py::arg("float32"), py::arg("float64"))
      .def("_fast", [](const py::object& self) { return fast_method<ActOne, &act_one_fast, kActOneName>(self); },
           "The call as a plain function of positional arguments (runner, obs, episode, reward, explore, full_fetch).")
      .def("_fused", [](const py::object& self) { return fast_method<ActOne, &fused_fast, kFusedName>(self); },
           "_act_hot's C++ call where it applies, else miss, as a plain function of positional arguments (runner, "
           "hot, obs, rewards, t, explore, mode).");
}

}  // namespace trajview::bindings
