// Bindings of Buffer as trajview._core._Buffer, the numpy base object of every
// array that both stores hand out (see convert.h wrap()), and _live_buffers
// for leak tests. A _Buffer holds a shared_ptr<Buffer>: the memory lives as
// long as any array that views it.
#include <pybind11/pybind11.h>

#include <cstdint>
#ifdef __linux__
#include <fcntl.h>
#endif
#include <memory>
#include <stdexcept>

#include "trajview/buffer.h"
#include "trajview/crc32.h"

namespace py = pybind11;

namespace trajview::bindings {

void register_buffer(py::module_& m) {
  py::class_<Buffer, std::shared_ptr<Buffer>>(m, "_Buffer",
                                              "C++-owned memory behind the arrays of a batch (their numpy base).")
      .def_property_readonly("address", [](const Buffer& b) { return reinterpret_cast<std::uintptr_t>(b.data()); })
      .def_property_readonly("nbytes", &Buffer::size);
  m.def("_live_buffers", &Buffer::live_count, "Number of C++ batch buffers alive (for leak tests).");
  m.def(
      "crc32",
      [](const py::buffer& data, std::uint32_t crc) {
        Py_buffer view;  // any contiguous buffer, read-only ones included (PyBUF_SIMPLE refuses the others)
        if (PyObject_GetBuffer(data.ptr(), &view, PyBUF_SIMPLE) != 0) throw py::error_already_set();
        std::uint32_t out;
        {
          py::gil_scoped_release nogil;
          out = crc32_update(crc, static_cast<const std::byte*>(view.buf), static_cast<std::size_t>(view.len));
        }
        PyBuffer_Release(&view);
        return out;
      },
      py::arg("data"), py::arg("crc") = 0,
      "zlib.crc32(data, crc) of a contiguous buffer, by carry-less multiply folding where the CPU has it (the "
      "GIL released).");
  m.def(
      "start_writeback",
      [](int fd, std::int64_t offset, std::int64_t nbytes) {
#ifdef __linux__
        if (offset < 0 || nbytes < 0) throw std::invalid_argument("start_writeback: offset and nbytes must be >= 0");
        int rc;
        {
          py::gil_scoped_release nogil;
          rc = ::sync_file_range(fd, offset, nbytes, SYNC_FILE_RANGE_WRITE);
        }
        return rc == 0;
#else
        (void)fd, (void)offset, (void)nbytes;
        return false;
#endif
      },
      py::arg("fd"), py::arg("offset"), py::arg("nbytes"),
      "Starts writing the file's dirty pages in [offset, offset + nbytes) to disk without waiting (Linux's "
      "sync_file_range(SYNC_FILE_RANGE_WRITE)): a later fsync has less left to wait for. A hint only: it makes "
      "nothing durable (fsync does). False where the system lacks it or refuses (the caller goes on).");
  m.def("crc32_accelerated", &crc32_accelerated,
        "Whether crc32 folds with carry-less multiplies on this CPU (else a byte table, slower than zlib's).");
}

}  // namespace trajview::bindings
