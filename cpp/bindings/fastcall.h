// A bound method of a pybind11 object made as a plain CPython function (METH_FASTCALL), for the calls trajview makes
// once per env step on one row: pybind11's dispatcher (argument loaders, overloads, keyword arguments) costs more
// than such a call's own work, above all right after the model's call, whose code and data evict its own (issue 26:
// about 1.8 us for a call doing nothing, against 0.3 us for a Python function). The function takes positional
// arguments only, keeps its object alive, and raises what the pybind11 method would (pybind11's own translation of
// C++ exceptions, `detail::try_translate_exceptions`: pybind11 3.0 or newer, pyproject.toml's build requirement).
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>

namespace trajview::bindings {

namespace py = pybind11;

namespace fastcall_detail {

inline constexpr const char* kCapsule = "trajview._core.fastcall";

template <class T>
struct Bound {
  py::object owner;  // keeps `self` alive as long as the function
  T* self;
};

template <class T, py::object (*Fn)(T&, PyObject* const*, Py_ssize_t)>
PyObject* trampoline(PyObject* capsule, PyObject* const* args, Py_ssize_t nargs) {
  auto* bound = static_cast<Bound<T>*>(PyCapsule_GetPointer(capsule, kCapsule));
  if (bound == nullptr) return nullptr;
  try {
    return Fn(*bound->self, args, nargs).release().ptr();
  } catch (py::error_already_set& e) {
    e.restore();
    return nullptr;
#ifdef __GLIBCXX__
  } catch (abi::__forced_unwind&) {
    throw;
#endif
  } catch (...) {
    py::detail::try_translate_exceptions();
    return nullptr;
  }
}

}  // namespace fastcall_detail

// `Fn(self, args, nargs)` as a Python function named `Name` (a string literal's array, for the PyMethodDef's static
// storage), bound to `owner` (a pybind11 instance of T).
template <class T, py::object (*Fn)(T&, PyObject* const*, Py_ssize_t), const char* Name>
py::object fast_method(const py::object& owner) {
  static PyMethodDef def{Name,
                         reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
                             &fastcall_detail::trampoline<T, Fn>)),
                         METH_FASTCALL, nullptr};
  auto bound = std::make_unique<fastcall_detail::Bound<T>>(fastcall_detail::Bound<T>{owner, owner.cast<T*>()});
  py::capsule capsule(bound.get(), fastcall_detail::kCapsule, [](PyObject* c) {
    delete static_cast<fastcall_detail::Bound<T>*>(PyCapsule_GetPointer(c, fastcall_detail::kCapsule));
  });
  bound.release();  // (the capsule owns it now)
  PyObject* fn = PyCFunction_New(&def, capsule.ptr());
  if (fn == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(fn);
}

// The positional arguments' count, else a TypeError naming the call.
inline void expect_args(Py_ssize_t nargs, Py_ssize_t lo, Py_ssize_t hi, const char* what) {
  if (nargs < lo || nargs > hi)
    throw py::type_error(std::string(what) + ": expected " + std::to_string(lo) +
                         (lo == hi ? "" : " to " + std::to_string(hi)) + " positional arguments, got " +
                         std::to_string(nargs));
}

}  // namespace trajview::bindings
