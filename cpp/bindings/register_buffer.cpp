// Bindings of Buffer as trajview._core._Buffer, the numpy base object of every
// array that both stores hand out (see convert.h wrap()), and _live_buffers
// for leak tests. A _Buffer holds a shared_ptr<Buffer>: the memory lives as
// long as any array that views it.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>

#include "trajview/buffer.h"

namespace py = pybind11;

namespace trajview::bindings {

void register_buffer(py::module_& m) {
  py::class_<Buffer, std::shared_ptr<Buffer>>(m, "_Buffer",
                                              "C++-owned memory behind the arrays of a batch (their numpy base).")
      .def_property_readonly("address", [](const Buffer& b) { return reinterpret_cast<std::uintptr_t>(b.data()); })
      .def_property_readonly("nbytes", &Buffer::size);
  m.def("_live_buffers", &Buffer::live_count, "Number of C++ batch buffers alive (for leak tests).");
}

}  // namespace trajview::bindings
