// trajview._core.step_envs and reset_envs: the common case of GymEnvList's step and reset loops
// (python/trajview/envs/gym_list.py), one env.step / env.reset per env, without a Python frame per env.
//
// reset_envs takes a result that is exactly a pair (an observation as below, a dict); the rest as step_envs.
//
// Only what is exactly the common case is taken here: a result that is a 5-tuple whose observation is an ndarray
// of exactly the column's dtype object and shape, C-contiguous; a reward that is a Python float (not NaN); flags
// that are True or False. Anything else stops the loop at that row and is handed back with the row, so the
// Python loop, which holds every rule (checks, casts, error messages), finishes it and calls back for the rest.
// An env.step that raises stops the loop the same way, its exception handed back (not raised), so the caller
// raises it in its own frame (and knows which env raised: moved_on, isolate_failures).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>

namespace py = pybind11;

namespace trajview::bindings {

namespace {

// A 1-d, C-contiguous ndarray of at least n items of `itemsize` bytes; its data.
char* vector_data(const py::handle& a, const char* name, std::size_t itemsize, py::ssize_t n) {
  auto& api = py::detail::npy_api::get();
  if (!api.PyArray_Check_(a.ptr())) throw py::type_error(std::string("step_envs: ") + name + " must be an ndarray");
  auto* p = py::detail::array_proxy(a.ptr());
  const bool contiguous = (p->flags & py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_) != 0;
  if (p->nd != 1 || p->dimensions[0] < n || !contiguous || py::reinterpret_borrow<py::array>(a).itemsize() !=
                                                                   static_cast<py::ssize_t>(itemsize)) {
    throw py::value_error(std::string("step_envs: ") + name + " must be a contiguous 1-d array of at least " +
                          std::to_string(n) + " items of " + std::to_string(itemsize) + " bytes");
  }
  return p->data;
}

py::object fetch_exception() {
  PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (tb != nullptr && value != nullptr) PyException_SetTraceback(value, tb);
  Py_XDECREF(type);
  Py_XDECREF(tb);
  return py::reinterpret_steal<py::object>(value);
}

// out's rows: a C-contiguous ndarray of `dtype` with at least `m` rows; the bytes of one row.
std::size_t row_bytes_of(const py::handle& out, const py::handle& dtype, py::ssize_t m, const char* where) {
  auto& api = py::detail::npy_api::get();
  if (!api.PyArray_Check_(out.ptr())) throw py::type_error(std::string(where) + ": out must be an ndarray");
  auto* o = py::detail::array_proxy(out.ptr());
  if (o->nd < 1 || o->dimensions[0] < m || (o->flags & py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_) == 0 ||
      o->descr != dtype.ptr()) {
    throw py::value_error(std::string(where) +
                          ": out must be C-contiguous rows of the given dtype, at least one per env");
  }
  std::size_t bytes = static_cast<std::size_t>(py::reinterpret_borrow<py::array>(out).itemsize());
  for (int d = 1; d < o->nd; ++d) bytes *= static_cast<std::size_t>(o->dimensions[d]);
  return bytes;
}

// Whether `obs` is an ndarray of exactly out's dtype object and row shape, C-contiguous: the common case, copied as
// it is into row `j` (then true).
bool copy_row(PyObject* obs, const py::handle& out, py::ssize_t j, std::size_t row_bytes) {
  auto& api = py::detail::npy_api::get();
  if (reinterpret_cast<PyObject*>(Py_TYPE(obs)) != reinterpret_cast<PyObject*>(api.PyArray_Type_)) return false;
  auto* o = py::detail::array_proxy(out.ptr());
  auto* a = py::detail::array_proxy(obs);
  const int row_nd = o->nd - 1;
  bool same = a->descr == o->descr && a->nd == row_nd && (a->flags & py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_) != 0;
  for (int d = 0; same && d < row_nd; ++d) same = a->dimensions[d] == o->dimensions[d + 1];
  if (!same) return false;
  std::memmove(o->data + static_cast<std::size_t>(j) * row_bytes, a->data, row_bytes);
  return true;
}

// The env id of row `j`: ids[j] (a sequence of ints), checked against the envs' count.
py::ssize_t env_id(const py::object& ids, py::ssize_t j, py::ssize_t num_envs, const char* where) {
  const py::ssize_t i = py::cast<py::ssize_t>(ids[py::int_(j)]);
  if (i < 0 || i >= num_envs) throw py::index_error(std::string(where) + ": env id out of range");
  return i;
}

}  // namespace

void register_envs(py::module_& mod) {
  mod.def(
      "reset_envs",
      [](const py::list& envs, const py::object& ids, py::ssize_t start, const py::handle& out,
         const py::handle& dtype, const py::list& infos, const py::object& seed) -> py::tuple {
        const py::ssize_t num_envs = PyList_GET_SIZE(envs.ptr());
        const py::ssize_t m = PyObject_Length(ids.ptr());
        if (m < 0) throw py::error_already_set();
        if (start < 0 || start > m) throw py::value_error("reset_envs: start out of range");
        const std::size_t row_bytes = row_bytes_of(out, dtype, m, "reset_envs");
        if (PyList_GET_SIZE(infos.ptr()) != start) throw py::value_error("reset_envs: infos must hold one per row before start");
        const py::tuple no_args;
        const py::str reset_name("reset");
        for (py::ssize_t j = start; j < m; ++j) {
          const py::ssize_t i = env_id(ids, j, num_envs, "reset_envs");
          py::dict kwargs;  // reset(seed=None), or seed + i: as the Python loop passes it
          kwargs["seed"] = seed.is_none() ? py::object(py::none()) : py::object(seed + py::int_(i));
          py::object method = py::reinterpret_steal<py::object>(
              PyObject_GetAttr(PyList_GET_ITEM(envs.ptr(), i), reset_name.ptr()));
          if (!method) return py::make_tuple(j, py::none(), fetch_exception());
          PyObject* r = PyObject_Call(method.ptr(), no_args.ptr(), kwargs.ptr());
          if (r == nullptr) return py::make_tuple(j, py::none(), fetch_exception());
          py::object result = py::reinterpret_steal<py::object>(r);
          // The common case: exactly a pair (observation, dict); anything else goes back to the Python loop.
          if (!PyTuple_CheckExact(r) || PyTuple_GET_SIZE(r) != 2 || !PyDict_Check(PyTuple_GET_ITEM(r, 1)) ||
              !copy_row(PyTuple_GET_ITEM(r, 0), out, j, row_bytes)) {
            return py::make_tuple(j, result, py::none());
          }
          if (PyList_Append(infos.ptr(), PyTuple_GET_ITEM(r, 1)) != 0) throw py::error_already_set();
        }
        return py::make_tuple(m, py::none(), py::none());
      },
      py::arg("envs"), py::arg("ids"), py::arg("start"), py::arg("out"), py::arg("dtype"), py::arg("infos"),
      py::arg("seed"),
      "GymEnvList's reset loop, the common case only: resets envs[ids[j]] (seed=None, or seed + ids[j]) for j from "
      "start, writing row j of out and appending the info to infos, until a row's result is not the common case "
      "or its reset raised. Returns (j, result, exception): j == len(ids) when every row was written, else row "
      "j's reset result (not written) or its exception (not raised).");

  mod.def(
      "step_envs",
      [](const py::list& envs, const py::object& ids, const py::object& acts, py::ssize_t start, const py::handle& out,
         const py::handle& dtype, const py::handle& rew, const py::handle& term, const py::handle& trunc,
         const py::object& infos) -> py::tuple {
        const py::ssize_t num_envs = PyList_GET_SIZE(envs.ptr());
        const py::ssize_t m = ids.is_none() ? num_envs : PyObject_Length(ids.ptr());
        if (m < 0) throw py::error_already_set();
        if (start < 0 || start > m) throw py::value_error("step_envs: start out of range");
        const std::size_t row_bytes = row_bytes_of(out, dtype, m, "step_envs");
        auto* rew_data = reinterpret_cast<double*>(vector_data(rew, "rew", sizeof(double), m));
        char* term_data = vector_data(term, "term", 1, m);
        char* trunc_data = vector_data(trunc, "trunc", 1, m);
        PyObject* info_list = infos.is_none() ? nullptr : infos.ptr();
        if (info_list != nullptr && !PyList_Check(info_list)) throw py::type_error("step_envs: infos must be a list");
        const py::str step_name("step");
        bool any_done = false;

        for (py::ssize_t j = start; j < m; ++j) {
          const py::ssize_t i = ids.is_none() ? j : env_id(ids, j, num_envs, "step_envs");
          py::object act = py::reinterpret_steal<py::object>(PySequence_GetItem(acts.ptr(), j));
          if (!act) return py::make_tuple(j, py::none(), fetch_exception(), any_done);  // as acts[j] in Python
          PyObject* r = PyObject_CallMethodObjArgs(PyList_GET_ITEM(envs.ptr(), i), step_name.ptr(), act.ptr(), nullptr);
          if (r == nullptr) return py::make_tuple(j, py::none(), fetch_exception(), any_done);
          py::object result = py::reinterpret_steal<py::object>(r);
          // The common case, else the row goes back to the Python loop as it is.
          if (!PyTuple_CheckExact(r) || PyTuple_GET_SIZE(r) != 5) return py::make_tuple(j, result, py::none(), any_done);
          PyObject* obs = PyTuple_GET_ITEM(r, 0);
          PyObject* reward = PyTuple_GET_ITEM(r, 1);
          PyObject* te = PyTuple_GET_ITEM(r, 2);
          PyObject* tr = PyTuple_GET_ITEM(r, 3);
          if (!PyFloat_CheckExact(reward) || std::isnan(PyFloat_AS_DOUBLE(reward)) || (te != Py_True && te != Py_False) ||
              (tr != Py_True && tr != Py_False) || !copy_row(obs, out, j, row_bytes)) {
            return py::make_tuple(j, result, py::none(), any_done);
          }
          if (info_list != nullptr && PyList_Append(info_list, PyTuple_GET_ITEM(r, 4)) != 0) throw py::error_already_set();
          rew_data[j] = PyFloat_AS_DOUBLE(reward);
          term_data[j] = te == Py_True ? 1 : 0;
          trunc_data[j] = tr == Py_True ? 1 : 0;
          any_done = any_done || te == Py_True || tr == Py_True;
        }
        return py::make_tuple(m, py::none(), py::none(), any_done);
      },
      py::arg("envs"), py::arg("ids"), py::arg("acts"), py::arg("start"), py::arg("out"), py::arg("dtype"),
      py::arg("rew"), py::arg("term"), py::arg("trunc"), py::arg("infos"),
      "GymEnvList's step loop, the common case only: steps envs[ids[j]] with acts[j] for j from start, writing "
      "row j of out/rew/term/trunc (and appending the info to infos, unless None), until a row's result is not "
      "the common case or its step raised. Returns (j, result, exception, any_done): j == len(ids) when every "
      "row was written, else row j's step result (not written) or its exception (not raised).");
}

}  // namespace trajview::bindings
