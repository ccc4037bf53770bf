// trajview._core: the compiled half of trajview. Python owns the public API;
// the classes here keep private names.
#include <pybind11/pybind11.h>

namespace py = pybind11;

namespace trajview::bindings {
void register_buffer(py::module_& m);
void register_store(py::module_& m);
void register_replay(py::module_& m);
void register_envs(py::module_& m);
void register_checks(py::module_& m);
void register_act(py::module_& m);
}

#ifndef TRAJVIEW_VERSION
#define TRAJVIEW_VERSION "dev"
#endif

PYBIND11_MODULE(_core, m) {
  m.doc() = "trajview's C++ core: columnar trajectory storage and views";
  m.attr("__version__") = TRAJVIEW_VERSION;
  trajview::bindings::register_buffer(m);
  trajview::bindings::register_store(m);
  trajview::bindings::register_replay(m);
  trajview::bindings::register_envs(m);
  trajview::bindings::register_checks(m);
  trajview::bindings::register_act(m);
}
