// Small helpers shared by the trajview GoogleTest suites.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trajview/batch.h"
#include "trajview/dtype.h"
#include "trajview/spec.h"

namespace trajview::testing {

template <class T>
constexpr DType dtype_of() noexcept;
template <>
constexpr DType dtype_of<bool>() noexcept { return DType::Bool; }
template <>
constexpr DType dtype_of<std::uint8_t>() noexcept { return DType::UInt8; }
template <>
constexpr DType dtype_of<std::int32_t>() noexcept { return DType::Int32; }
template <>
constexpr DType dtype_of<std::int64_t>() noexcept { return DType::Int64; }
template <>
constexpr DType dtype_of<float>() noexcept { return DType::Float32; }
template <>
constexpr DType dtype_of<double>() noexcept { return DType::Float64; }

/// Value lists as the tests write them.
using I64 = std::vector<std::int64_t>;
using F32 = std::vector<float>;
using B8 = std::vector<bool>;

/// An owned input array (C-contiguous), handed to the store as an ArrayIn.
struct Array {
  std::vector<std::byte> bytes;
  DType dtype = DType::Float32;
  std::vector<std::int64_t> shape;

  ArrayIn in() const { return ArrayIn{bytes.empty() ? nullptr : bytes.data(), dtype, shape}; }
};

/// `values` laid out with the given full shape (leading axis included).
template <class T>
Array make_array(std::vector<std::int64_t> shape, const std::vector<T>& values) {
  std::size_t n = 1;
  for (auto d : shape) n *= static_cast<std::size_t>(d);
  EXPECT_EQ(n, values.size()) << "test bug: shape does not match the number of values";
  Array a;
  a.dtype = dtype_of<T>();
  a.shape = std::move(shape);
  a.bytes.resize(values.size() * sizeof(T));
  for (std::size_t i = 0; i < values.size(); ++i) {
    const T v = values[i];
    std::memcpy(a.bytes.data() + i * sizeof(T), &v, sizeof(T));
  }
  return a;
}

/// A 1-D array (one scalar per row).
template <class T>
Array make_array(const std::vector<T>& values) {
  return make_array<T>({static_cast<std::int64_t>(values.size())}, values);
}

/// A column spec (step column unless `kind` says otherwise).
inline ColumnSpec col(std::string name, DType dtype, std::vector<std::int64_t> shape = {},
                      ColumnKind kind = ColumnKind::Step) {
  ColumnSpec c;
  c.name = std::move(name);
  c.dtype = dtype;
  c.shape = std::move(shape);
  c.kind = kind;
  return c;
}

inline std::vector<ArrayIn> ins(const std::vector<Array>& arrays) {
  std::vector<ArrayIn> out;
  out.reserve(arrays.size());
  for (const auto& a : arrays) out.push_back(a.in());
  return out;
}

/// Reads `n` values of type T from raw bytes.
template <class T>
std::vector<T> read_values(const std::byte* p, std::size_t n) {
  std::vector<T> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    out.push_back(v);
  }
  return out;
}

/// The raw bytes of `v` (one row of a column, e.g. a pad row).
template <class T>
std::vector<std::byte> row_bytes_of(const std::vector<T>& v) {
  std::vector<std::byte> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

template <class T>
std::vector<std::byte> bytes_of(std::initializer_list<T> v) {
  return row_bytes_of(std::vector<T>(v));
}

/// Succeeds when `f()` throws an E (exactly that type or one derived from it)
/// whose what() contains every one of `parts`.
template <class E, class F>
::testing::AssertionResult throws_with(F&& f, std::initializer_list<std::string_view> parts) {
  try {
    f();
  } catch (const E& e) {
    const std::string msg = e.what();
    for (auto p : parts) {
      if (msg.find(p) == std::string::npos)
        return ::testing::AssertionFailure() << "message \"" << msg << "\" lacks \"" << p << "\"";
    }
    return ::testing::AssertionSuccess() << "message \"" << msg << "\"";
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw another exception: " << e.what();
  } catch (...) {
    return ::testing::AssertionFailure() << "threw a non-std exception";
  }
  return ::testing::AssertionFailure() << "did not throw";
}

/// Succeeds when `f()` throws std::invalid_argument whose what() contains
/// every one of `parts`.
template <class F>
::testing::AssertionResult throws_invalid_argument(F&& f, std::initializer_list<std::string_view> parts) {
  return throws_with<std::invalid_argument>(std::forward<F>(f), parts);
}

/// Succeeds when `f()` throws std::length_error (a size that overflows or
/// exceeds a limit) whose what() contains every one of `parts`.
template <class F>
::testing::AssertionResult throws_length_error(F&& f, std::initializer_list<std::string_view> parts) {
  return throws_with<std::length_error>(std::forward<F>(f), parts);
}

/// Succeeds when two byte strings are equal; otherwise names the first
/// differing byte and its row (rows of `row_bytes`).
inline ::testing::AssertionResult same_bytes(const std::vector<std::byte>& got, const std::vector<std::byte>& want,
                                             std::size_t row_bytes) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "got " << got.size() << " bytes, want " << want.size();
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i])
      return ::testing::AssertionFailure() << "first difference at byte " << i << " (row "
                                           << (row_bytes ? i / row_bytes : 0) << "): got "
                                           << static_cast<int>(got[i]) << ", want " << static_cast<int>(want[i]);
  }
  return ::testing::AssertionSuccess();
}

/// The batch column called `name`, or nullptr.
inline const BatchColumn* find_column(const Batch& b, std::string_view name) {
  for (const auto& c : b.columns) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

inline std::size_t num_elems(const std::vector<std::int64_t>& shape) {
  std::size_t n = 1;
  for (auto d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

/// Every value of batch column `name`, flattened; fails the test (and returns
/// {}) if it is missing or has another dtype.
template <class T>
std::vector<T> values(const Batch& b, std::string_view name) {
  const BatchColumn* c = find_column(b, name);
  if (c == nullptr) {
    ADD_FAILURE() << "batch has no column '" << name << "'";
    return {};
  }
  if (c->dtype != dtype_of<T>()) {
    ADD_FAILURE() << "column '" << name << "' has dtype " << dtype_name(c->dtype) << ", test reads "
                  << dtype_name(dtype_of<T>());
    return {};
  }
  return read_values<T>(c->buffer->data(), num_elems(c->shape));
}

/// Shape of batch column `name` ({} with a failure if missing).
inline std::vector<std::int64_t> shape_of(const Batch& b, std::string_view name) {
  const BatchColumn* c = find_column(b, name);
  if (c == nullptr) {
    ADD_FAILURE() << "batch has no column '" << name << "'";
    return {};
  }
  return c->shape;
}

/// Names of the batch's columns, in order.
inline std::vector<std::string> column_names(const Batch& b) {
  std::vector<std::string> out;
  for (const auto& c : b.columns) out.push_back(c.name);
  return out;
}

/// The values of column `c` of batch `b`, C order with shape c.shape: its
/// buffer's bytes, or for a lazy column (c.base >= 0) base_rows[index].
/// Fails the test (and returns {}) if a lazy column is malformed: a bad base,
/// an index shape that is not the leading axes of c.shape, a buffer of the
/// wrong size, or an index outside its base.
inline std::vector<std::byte> materialize(const Batch& b, const BatchColumn& c) {
  const std::size_t bytes = num_elems(c.shape) * itemsize(c.dtype);
  if (c.base < 0) {
    if (!c.index_shape.empty()) {
      ADD_FAILURE() << "eager column '" << c.name << "' has an index shape";
      return {};
    }
    if (c.buffer->size() < bytes) {
      ADD_FAILURE() << "column '" << c.name << "': buffer of " << c.buffer->size() << " bytes, want " << bytes;
      return {};
    }
    return std::vector<std::byte>(c.buffer->data(), c.buffer->data() + bytes);
  }
  if (static_cast<std::size_t>(c.base) >= b.bases.size()) {
    ADD_FAILURE() << "lazy column '" << c.name << "': base " << c.base << " of " << b.bases.size();
    return {};
  }
  const BatchColumn& base = b.bases[static_cast<std::size_t>(c.base)];
  if (base.dtype != c.dtype || base.base >= 0 || base.shape.empty() || c.per_sequence) {
    ADD_FAILURE() << "lazy column '" << c.name << "': base '" << base.name << "' has another dtype, is lazy itself, "
                  << "has no rows axis, or the column is per sequence";
    return {};
  }
  // shape == index_shape + the base's row shape.
  std::vector<std::int64_t> want_shape = c.index_shape;
  want_shape.insert(want_shape.end(), base.shape.begin() + 1, base.shape.end());
  if (c.index_shape.empty() || c.shape != want_shape) {
    ADD_FAILURE() << "lazy column '" << c.name << "': shape is not index_shape + the base's row shape";
    return {};
  }
  const std::size_t n = num_elems(c.index_shape);
  const auto rows = base.shape[0];
  const std::size_t rb = num_elems(std::vector<std::int64_t>(base.shape.begin() + 1, base.shape.end())) *
                         itemsize(base.dtype);
  if (c.buffer->size() != n * sizeof(std::int64_t) || base.buffer->size() != static_cast<std::size_t>(rows) * rb) {
    ADD_FAILURE() << "lazy column '" << c.name << "': index buffer of " << c.buffer->size() << " bytes for " << n
                  << " indices, or base buffer of " << base.buffer->size() << " bytes for " << rows << " rows";
    return {};
  }
  std::vector<std::byte> out;
  out.reserve(bytes);
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t r;
    std::memcpy(&r, c.buffer->data() + i * sizeof(r), sizeof(r));
    if (r < 0 || r >= rows) {
      ADD_FAILURE() << "lazy column '" << c.name << "': index " << i << " is " << r << ", base has " << rows
                    << " rows";
      return {};
    }
    const std::byte* src = base.buffer->data() + static_cast<std::size_t>(r) * rb;
    out.insert(out.end(), src, src + rb);
  }
  return out;
}

/// Succeeds when two batches have the same rows, segments, and columns of the
/// same names, dtypes, shapes and values (lazy or not: see materialize).
inline ::testing::AssertionResult same_values(const Batch& a, const Batch& b) {
  if (a.count != b.count) return ::testing::AssertionFailure() << "count " << a.count << " vs " << b.count;
  if (a.num_seqs != b.num_seqs)
    return ::testing::AssertionFailure() << "num_seqs " << a.num_seqs << " vs " << b.num_seqs;
  if (a.segments.size() != b.segments.size())
    return ::testing::AssertionFailure() << "segments " << a.segments.size() << " vs " << b.segments.size();
  for (std::size_t i = 0; i < a.segments.size(); ++i) {
    const Segment& x = a.segments[i];
    const Segment& y = b.segments[i];
    if (x.eps_id != y.eps_id || x.env_id != y.env_id || x.t_start != y.t_start || x.length != y.length ||
        x.row_offset != y.row_offset || x.seq_offset != y.seq_offset || x.num_seqs != y.num_seqs ||
        x.finished != y.finished)
      return ::testing::AssertionFailure() << "segment " << i << " differs";
  }
  if (a.columns.size() != b.columns.size())
    return ::testing::AssertionFailure() << "columns " << a.columns.size() << " vs " << b.columns.size();
  for (std::size_t i = 0; i < a.columns.size(); ++i) {
    const BatchColumn& x = a.columns[i];
    const BatchColumn& y = b.columns[i];
    if (x.name != y.name || x.dtype != y.dtype || x.shape != y.shape || x.per_sequence != y.per_sequence)
      return ::testing::AssertionFailure() << "column " << i << " ('" << x.name << "' / '" << y.name
                                           << "') differs in name, dtype or shape";
    const std::size_t elems = num_elems(x.shape);
    const std::size_t rb = x.shape.empty() || x.shape[0] == 0 ? 0 : elems / static_cast<std::size_t>(x.shape[0]);
    const auto r = same_bytes(materialize(a, x), materialize(b, y), rb * itemsize(x.dtype));
    if (!r) return ::testing::AssertionFailure() << "column '" << x.name << "': " << r.message();
  }
  return ::testing::AssertionSuccess();
}

/// Succeeds when two batches have the same rows, segments, column bytes and
/// layout (the same lazy columns, indices and bases).
inline ::testing::AssertionResult same_batch(const Batch& a, const Batch& b) {
  if (auto r = same_values(a, b); !r) return r;
  for (std::size_t i = 0; i < a.columns.size(); ++i) {
    const BatchColumn& x = a.columns[i];
    const BatchColumn& y = b.columns[i];
    if (x.base != y.base || x.index_shape != y.index_shape)
      return ::testing::AssertionFailure() << "column '" << x.name << "': base " << x.base << " vs " << y.base
                                           << " or another index shape";
    if (x.base >= 0 && std::memcmp(x.buffer->data(), y.buffer->data(), x.buffer->size()) != 0)
      return ::testing::AssertionFailure() << "lazy column '" << x.name << "' differs in its index";
  }
  if (a.bases.size() != b.bases.size())
    return ::testing::AssertionFailure() << "bases " << a.bases.size() << " vs " << b.bases.size();
  for (std::size_t i = 0; i < a.bases.size(); ++i) {
    const BatchColumn& x = a.bases[i];
    const BatchColumn& y = b.bases[i];
    if (x.name != y.name || x.dtype != y.dtype || x.shape != y.shape ||
        std::memcmp(x.buffer->data(), y.buffer->data(), num_elems(x.shape) * itemsize(x.dtype)) != 0)
      return ::testing::AssertionFailure() << "base " << i << " ('" << x.name << "') differs";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace trajview::testing
