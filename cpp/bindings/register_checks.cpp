// trajview._core._OutputCheck: the common case of PolicyColumns.check_outputs (python/trajview/rollout/plan.py)
// in one call. A policy's outputs (actions, state_outs, extra fetches) are accepted here only when every one is
// exactly what is expected: an ndarray (not a subclass) of the very dtype object expected, [n, *shape], a list of
// state_outs and a dict of extra fetches of the expected lengths and keys, integer actions inside scalar bounds,
// no NaN in a NaN-checked float column. Then the call returns the step's columns as a dict (the arrays as they
// are); for anything else it returns None, and Python's checks run: they accept what is acceptable (e.g. a
// list of actions) and name what is wrong. This accelerates the checks; it decides nothing they would not.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "convert.h"
#include "fastcall.h"
#include "scratch.h"
#include "scan.h"

#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace trajview::bindings {

namespace {

// One expected column: its key in the returned dict, the dtype object, the per-row shape, and whether it is
// scanned for NaN.
struct Column {
  py::str key;
  py::object dtype;
  std::vector<py::ssize_t> shape;
  bool nan = false;
};

class OutputCheck {
 public:
  OutputCheck(py::object ndarray_type, py::tuple action, std::optional<std::pair<std::int64_t, std::int64_t>> bounds,
              const py::list& states, const py::list& extras)
      : ndarray_(std::move(ndarray_type)), action_(column(action)), bounds_(bounds) {
    for (const py::handle h : states) states_.push_back(column(py::reinterpret_borrow<py::tuple>(h)));
    for (const py::handle h : extras) extras_.push_back(column(py::reinterpret_borrow<py::tuple>(h)));
  }

  // The step's columns ({"actions": ..., "state_out_i": ..., extra fetches}) if the outputs are exactly as
  // expected for `n` rows, else None (see the file's comment). With `into` (a dict), they are set in it, and it is
  // returned; nothing is set where the result is None.
  py::object check(const py::handle& actions, const py::handle& state_outs, const py::handle& extra, py::ssize_t n,
                   const py::object& into) const {
    if (n < 0 || !PyList_CheckExact(state_outs.ptr()) || !PyDict_CheckExact(extra.ptr())) return py::none();
    if (!into.is_none() && !PyDict_CheckExact(into.ptr())) throw py::type_error("_OutputCheck: into must be a dict");
    if (static_cast<std::size_t>(PyList_GET_SIZE(state_outs.ptr())) != states_.size() ||
        static_cast<std::size_t>(PyDict_GET_SIZE(extra.ptr())) != extras_.size()) {
      return py::none();
    }
    if (!matches(actions, action_, n)) return py::none();
    if (bounds_ && n > 0 && outside(actions)) return py::none();
    // (borrowed: the list and the dict hold them while nothing here runs Python code)
    Scratch scratch;
    std::pmr::vector<PyObject*> values(scratch.get());
    values.reserve(states_.size() + extras_.size());
    for (std::size_t i = 0; i < states_.size(); ++i) {
      PyObject* v = PyList_GET_ITEM(state_outs.ptr(), static_cast<py::ssize_t>(i));
      if (!matches(v, states_[i], n)) return py::none();
      values.push_back(v);
    }
    for (const Column& c : extras_) {
      PyObject* v = PyDict_GetItemWithError(extra.ptr(), c.key.ptr());
      if (v == nullptr) {
        if (PyErr_Occurred()) throw py::error_already_set();
        return py::none();
      }
      if (!matches(v, c, n)) return py::none();
      values.push_back(v);
    }
    // Every value is held by a reference of its own before the first write (a write may drop the last reference
    // `into` held to an old value, and with it run a destructor).
    std::pmr::vector<py::object> held(scratch.get());
    held.reserve(values.size() + 1);
    held.push_back(py::reinterpret_borrow<py::object>(actions));
    for (PyObject* v : values) held.push_back(py::reinterpret_borrow<py::object>(v));
    py::dict data = into.is_none() ? py::dict() : py::reinterpret_borrow<py::dict>(into);
    data[action_.key] = held[0];
    for (std::size_t i = 0; i < states_.size(); ++i) data[states_[i].key] = held[i + 1];
    for (std::size_t i = 0; i < extras_.size(); ++i) data[extras_[i].key] = held[states_.size() + i + 1];
    return data;
  }

 private:
  static Column column(const py::tuple& t) {
    if (t.size() != 4) throw std::invalid_argument("_OutputCheck: a column is (key, dtype, shape, nan)");
    return Column{interned_str(t[0].cast<py::str>()), py::reinterpret_borrow<py::object>(t[1]),
                  t[2].cast<std::vector<py::ssize_t>>(), t[3].cast<bool>()};
  }

  // An ndarray (exactly) of the column's dtype object and shape [n, *shape], without NaN where it is scanned.
  bool matches(py::handle h, const Column& c, py::ssize_t n) const {
    if (!py::type::handle_of(h).is(ndarray_)) return false;
    const auto a = py::reinterpret_borrow<py::array>(h);
    if (!a.dtype().is(c.dtype)) return false;
    if (static_cast<std::size_t>(a.ndim()) != c.shape.size() + 1 || a.shape(0) != n) return false;
    for (std::size_t i = 0; i < c.shape.size(); ++i) {
      if (a.shape(static_cast<py::ssize_t>(i + 1)) != c.shape[i]) return false;
    }
    if (!c.nan) return true;
    const auto size = static_cast<std::size_t>(a.size());
    if (py::isinstance<py::array_t<float, py::array::c_style>>(h)) return !holds_nan<float>(a.data(), size);
    if (py::isinstance<py::array_t<double, py::array::c_style>>(h)) return !holds_nan<double>(a.data(), size);
    return false;  // (another float layout: Python scans it)
  }

  // Whether integer actions lie outside the scalar bounds; true (Python decides) for any other array.
  bool outside(const py::handle& h) const {
    const auto a = py::reinterpret_borrow<py::array>(h);
    const auto size = static_cast<std::size_t>(a.size());
    const auto [lo, hi] = *bounds_;
    if (py::isinstance<py::array_t<std::int64_t, py::array::c_style>>(h)) {
      return holds_outside<std::int64_t>(a.data(), size, lo, hi);
    }
    if (py::isinstance<py::array_t<std::int32_t, py::array::c_style>>(h)) {
      return holds_outside<std::int32_t>(a.data(), size, lo, hi);
    }
    return true;
  }

  py::object ndarray_;
  Column action_;
  std::optional<std::pair<std::int64_t, std::int64_t>> bounds_;
  std::vector<Column> states_;
  std::vector<Column> extras_;
};

// `OutputCheck::check(actions, state_outs, extra, n[, into])` as a plain function (fastcall.h): the check of every
// call's outputs.
py::object check_fast(OutputCheck& check, PyObject* const* args, Py_ssize_t nargs) {
  expect_args(nargs, 4, 5, "_OutputCheck");
  const Py_ssize_t n = PyLong_AsSsize_t(args[3]);
  if (n == -1 && PyErr_Occurred()) throw py::error_already_set();
  return check.check(args[0], args[1], args[2], n, nargs == 5 ? py::reinterpret_borrow<py::object>(args[4]) : py::none());
}
constexpr char kCheckName[] = "_OutputCheck";

}  // namespace

void register_checks(py::module_& m) {
  py::class_<OutputCheck>(m, "_OutputCheck",
                          "The common case of a policy's output checks in one call (PolicyColumns.check_outputs).")
      .def(py::init<py::object, py::tuple, std::optional<std::pair<std::int64_t, std::int64_t>>, const py::list&,
                    const py::list&>(),
           py::arg("ndarray"), py::arg("action"), py::arg("bounds"), py::arg("states"), py::arg("extras"),
           "ndarray: numpy.ndarray; action and each of states / extras: (key, dtype, per-row shape, NaN-checked); "
           "bounds: (low, high) of integer actions, or None.")
      .def("__call__", &OutputCheck::check, py::arg("actions"), py::arg("state_outs"), py::arg("extra"),
           py::arg("n"), py::arg("into") = py::none(),
           "The step's columns as a dict if the outputs are exactly as expected for n rows (ndarrays of the dtypes "
           "and shapes expected, no NaN where scanned, actions inside the bounds), else None (check them in Python). "
           "With into (a dict), the columns are set in it and it is returned (nothing is set where None is).")
      .def("_fast", [](const py::object& self) { return fast_method<OutputCheck, &check_fast, kCheckName>(self); },
           "__call__ as a plain function of positional arguments (actions, state_outs, extra, n[, into]): for a "
           "caller checking every call's outputs");
}

}  // namespace trajview::bindings
