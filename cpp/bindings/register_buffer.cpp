// Bindings of Buffer as trajview._core._Buffer, the numpy base object of every
// array that both stores hand out (see convert.h wrap()), and _live_buffers
// for leak tests. A _Buffer holds a shared_ptr<Buffer>: the memory lives as
// long as any array that views it.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#ifdef __linux__
#include <fcntl.h>
#endif
#if defined(__x86_64__) || defined(__i386__) || defined(_M_X64)
#include <xmmintrin.h>
#define TRAJVIEW_MXCSR 1
#endif
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "trajview/buffer.h"
#include "trajview/crc32.h"
#include "trajview/returns.h"
#include "scan.h"

namespace py = pybind11;

namespace trajview::bindings {

namespace {

#ifdef TRAJVIEW_MXCSR
// MXCSR's flush-to-zero (bit 15) and denormals-are-zero (bit 6): what torch.set_flush_denormal(True) sets.
constexpr unsigned kFlushDenormals = 0x8040U;
#endif

// Sets (or clears) the calling thread's flush-denormals bits; returns the bits as they were, for
// restore_flush_denormals. On a CPU without them: nothing, and -1.
long long set_flush_denormals(bool on) {
#ifdef TRAJVIEW_MXCSR
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(on ? (csr | kFlushDenormals) : (csr & ~kFlushDenormals));
  return static_cast<long long>(csr & kFlushDenormals);
#else
  (void)on;
  return -1;
#endif
}

void restore_flush_denormals(long long previous) {
#ifdef TRAJVIEW_MXCSR
  if (previous < 0) return;
  const unsigned bits = static_cast<unsigned>(previous) & kFlushDenormals;
  _mm_setcsr((_mm_getcsr() & ~kFlushDenormals) | bits);
#else
  (void)previous;
#endif
}

// Whether any of `arrays` (a list) holds a NaN, in one call: True / False where every one is a C-contiguous
// float32 or float64 ndarray; None where one is not (the caller checks them its own way). The GIL is released for large
// scans (the arrays are held meanwhile).
py::object any_nan(const py::list& arrays) {
  struct Scan {
    const void* data;
    std::size_t n;
    bool f64;
  };
  std::vector<py::array> held;
  std::vector<Scan> scans;
  std::size_t total = 0;
  held.reserve(arrays.size());
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    const py::handle h = arrays[i];  // (the list holds it while the checks below run: they call no Python code)
    bool f64 = false;
    if (!py::isinstance<py::array_t<float, py::array::c_style>>(h)) {
      if (!py::isinstance<py::array_t<double, py::array::c_style>>(h)) return py::none();
      f64 = true;
    }
    auto a = py::reinterpret_borrow<py::array>(h);
    const auto n = static_cast<std::size_t>(a.size());
    scans.push_back({a.data(), n, f64});
    total += n;
    held.push_back(std::move(a));
  }
  auto scan = [&scans] {
    bool any = false;
    for (const Scan& s : scans) any |= s.f64 ? holds_nan<double>(s.data, s.n) : holds_nan<float>(s.data, s.n);
    return any;
  };
  bool any;
  if (total >= (std::size_t{1} << 16)) {
    py::gil_scoped_release nogil;
    any = scan();
  } else {
    any = scan();
  }
  return py::bool_(any);
}

// Whether any value of `array` lies outside [lo, hi]: True / False where it is a C-contiguous int64 or int32
// ndarray; None for any other array (the caller checks it its own way).
py::object any_outside(const py::handle& array, std::int64_t lo, std::int64_t hi) {
  bool i64 = true;
  if (!py::isinstance<py::array_t<std::int64_t, py::array::c_style>>(array)) {
    if (!py::isinstance<py::array_t<std::int32_t, py::array::c_style>>(array)) return py::none();
    i64 = false;
  }
  const auto a = py::reinterpret_borrow<py::array>(array);
  const auto n = static_cast<std::size_t>(a.size());
  return py::bool_(i64 ? holds_outside<std::int64_t>(a.data(), n, lo, hi)
                       : holds_outside<std::int32_t>(a.data(), n, lo, hi));
}

// trajview::discounted_sums on float64 rows and int64 segment lengths (1-D; other arrays are converted only where
// numpy's safe casting allows, e.g. float32 rows, and refused otherwise), into a new float64 array.
py::array_t<double> discounted_sums_of(const py::array_t<double, py::array::c_style>& x,
                                       const py::array_t<std::int64_t, py::array::c_style>& lengths, double factor) {
  if (x.ndim() != 1 || lengths.ndim() != 1)
    throw std::invalid_argument("discounted_sums: expected 1-D x and lengths, got " + std::to_string(x.ndim()) +
                                "-D and " + std::to_string(lengths.ndim()) + "-D");
  const auto n = static_cast<std::size_t>(x.size());
  py::array_t<double> out(static_cast<py::ssize_t>(n));
  const std::span<const double> xs(x.data(), n);
  const std::span<const std::int64_t> ls(lengths.data(), static_cast<std::size_t>(lengths.size()));
  const std::span<double> os(out.mutable_data(), n);
  if (n >= 4096) {
    py::gil_scoped_release nogil;
    discounted_sums(xs, ls, factor, os);
  } else {
    discounted_sums(xs, ls, factor, os);
  }
  return out;
}

}  // namespace

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
  m.def("any_nan", &any_nan, py::arg("arrays"),
        "Whether any array of the list holds a NaN, in one call: True / False where each is a C-contiguous float32 or "
        "float64 ndarray, None where one is not (check those another way). The GIL is released for large scans.");
  m.def("any_outside", &any_outside, py::arg("array"), py::arg("lo"), py::arg("hi"),
        "Whether any value of the array lies outside [lo, hi], in one pass: True / False where it is a C-contiguous "
        "int64 or int32 ndarray, None for any other array (check it another way).");
  m.def("set_flush_denormals", &set_flush_denormals, py::arg("on"),
        "Sets (True) or clears the calling thread's flush-to-zero and denormals-are-zero modes (x86's MXCSR bits, "
        "what torch.set_flush_denormal sets); returns the bits as they were, for restore_flush_denormals (-1 on a "
        "CPU without them, where it does nothing).");
  m.def("restore_flush_denormals", &restore_flush_denormals, py::arg("previous"),
        "Puts back the flush-denormals bits set_flush_denormals returned.");
  m.def("discounted_sums", &discounted_sums_of, py::arg("x"), py::arg("lengths"), py::arg("factor"),
        "out[t] = x[t] + factor * out[t + 1] within each segment of consecutive rows (``lengths``: their row counts, "
        "in order, summing to len(x)), x[t] at a segment's last row: float64 in, float64 out (a new array). "
        "ValueError where the lengths do not cover x's rows.");
  m.def("crc32_accelerated", &crc32_accelerated,
        "Whether crc32 folds with carry-less multiplies on this CPU (else a byte table, slower than zlib's).");
}

}  // namespace trajview::bindings
