// Helpers shared by the TrajectoryStore suites (store_*_test.cpp): column and
// view specs, store options, driving a store with scalar columns, reading its
// inference output, and checking a batch's lazy layout. Generic helpers
// (arrays, batch readers, assertions) are in test_util.h.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"
#include "trajview/store.h"

namespace trajview::testing {

inline ColumnSpec obs_col(std::string name = "obs", std::vector<std::int64_t> shape = {}) {
  return col(std::move(name), DType::Float32, std::move(shape), ColumnKind::Observation);
}

/// An int shift.
inline ViewSpec view(std::string name, std::string column, std::int64_t shift) {
  ViewSpec v;
  v.name = std::move(name);
  v.column = std::move(column);
  v.shifts = {shift};
  return v;
}

/// A list / range shift (adds an axis).
inline ViewSpec view(std::string name, std::string column, std::vector<std::int64_t> shifts) {
  ViewSpec v;
  v.name = std::move(name);
  v.column = std::move(column);
  v.shifts = std::move(shifts);
  v.adds_axis = true;
  return v;
}

inline ViewSpec reset(ViewSpec v) {
  v.padding = Padding::Reset;
  return v;
}

inline ViewSpec training_only(ViewSpec v) {
  v.for_inference = false;
  return v;
}

inline ViewSpec repeated(ViewSpec v, std::int64_t k) {
  v.batch_repeat = k;
  return v;
}

/// obs (float32 observation), actions (int64), rewards (float32), all scalars.
inline std::vector<ColumnSpec> basic_columns() {
  return {obs_col(), col("actions", DType::Int64), col("rewards", DType::Float32)};
}

/// obs, new_obs, actions, prev_actions, rewards.
inline std::vector<ViewSpec> basic_views() {
  return {view("obs", "obs", 0), view("new_obs", "obs", 1), view("actions", "actions", 0),
          view("prev_actions", "actions", -1), view("rewards", "rewards", 0)};
}

inline StoreOptions opts(std::int64_t chunk_rows, std::int64_t eps_id_start = 0) {
  StoreOptions o;
  o.chunk_rows = chunk_rows;
  o.eps_id_start = eps_id_start;
  return o;
}

/// Begins episodes in `slots` with one scalar float observation each (stores
/// with a single scalar observation column).
inline I64 begin(TrajectoryStore& s, const I64& slots, const F32& obs) {
  const Array a = make_array(obs);
  const ArrayIn in = a.in();
  return s.begin_episodes(slots, std::span<const ArrayIn>(&in, 1));
}

/// One step for a basic_columns() store.
inline void step(TrajectoryStore& s, const I64& slots, const F32& obs, const I64& act, const F32& rew) {
  const std::vector<Array> a{make_array(obs), make_array(act), make_array(rew)};
  s.add_step(slots, ins(a));
}

/// One step for a basic_columns() store, every reward 0.5.
inline void step(TrajectoryStore& s, const I64& slots, const F32& obs, const I64& act) {
  step(s, slots, obs, act, F32(obs.size(), 0.5f));
}

/// gather_inference's outputs.
struct Inference {
  std::vector<std::string> names;
  std::vector<std::vector<std::byte>> out;
  I64 t;
  I64 eps;

  template <class T>
  std::vector<T> get(const std::string& name) const {
    for (std::size_t k = 0; k < names.size(); ++k) {
      if (names[k] == name) return read_values<T>(out[k].data(), out[k].size() / sizeof(T));
    }
    ADD_FAILURE() << "no inference view '" << name << "'";
    return {};
  }
};

inline Inference infer(const TrajectoryStore& s, const I64& slots = {}) {
  s.check_active(slots, "infer");
  Inference r;
  const std::size_t n = s.num_rows(slots);
  std::vector<std::byte*> ptrs;
  for (std::size_t v : s.inference_views()) {
    r.names.push_back(s.views()[v].name);
    r.out.emplace_back(n * s.view_row_bytes(v) + 1);  // +1: never a null data()
  }
  for (auto& o : r.out) ptrs.push_back(o.data());
  r.t.resize(n);
  r.eps.resize(n);
  s.gather_inference(slots, ptrs, r.t.data(), r.eps.data());
  for (std::size_t k = 0; k < r.out.size(); ++k) r.out[k].pop_back();
  return r;
}

inline std::vector<std::string> view_names(const TrajectoryStore& s, const std::vector<std::size_t>& idx) {
  std::vector<std::string> out;
  for (auto i : idx) out.push_back(s.views()[i].name);
  return out;
}

inline StoreOptions lazy_opts(std::int64_t chunk_rows, std::size_t lazy_min_row_bytes) {
  StoreOptions o = opts(chunk_rows);
  o.lazy_min_row_bytes = lazy_min_row_bytes;
  return o;
}

/// Checks a batch's lazy layout against the store's settings: exactly the
/// training views (batch_repeat 1) of columns whose rows have at least
/// `threshold` bytes are lazy (none if it is 0), boundary columns never; one
/// base per stored column that lazy views read, named after it, its row
/// kLazyPadRow the column's pad row and kLazyZeroRow zeros; and a base holds
/// each episode row its views read once: no more rows per segment than the
/// span of those views' shifts.
inline void check_lazy_layout(const TrajectoryStore& s, const Batch& b, std::size_t threshold) {
  const std::size_t nc = s.columns().size();
  std::vector<bool> lazy_col(nc, false);
  I64 lo(nc, 0), hi(nc, 0);
  for (std::size_t v : s.training_views()) {
    const ViewSpec& view = s.views()[v];
    const auto c = static_cast<std::size_t>(s.column_index(view.column));
    const bool lazy = threshold > 0 && view.batch_repeat == 1 && s.columns()[c].row_bytes() >= threshold;
    const BatchColumn* bc = find_column(b, view.name);
    ASSERT_NE(bc, nullptr) << view.name;
    ASSERT_EQ(bc->base >= 0, lazy) << "view '" << view.name << "' (threshold " << threshold << ")";
    if (!lazy) {
      EXPECT_TRUE(bc->index_shape.empty()) << view.name;
      continue;
    }
    ASSERT_LT(static_cast<std::size_t>(bc->base), b.bases.size()) << view.name;
    EXPECT_EQ(b.bases[static_cast<std::size_t>(bc->base)].name, view.column) << view.name;
    EXPECT_FALSE(bc->per_sequence) << view.name;
    I64 index_shape{b.count};
    if (view.adds_axis) index_shape.push_back(static_cast<std::int64_t>(view.shifts.size()));
    EXPECT_EQ(bc->index_shape, index_shape) << view.name;
    EXPECT_EQ(bc->buffer->size(), testing::num_elems(index_shape) * sizeof(std::int64_t)) << view.name;
    const auto [mn, mx] = std::minmax_element(view.shifts.begin(), view.shifts.end());
    lo[c] = lazy_col[c] ? std::min(lo[c], *mn) : *mn;
    hi[c] = lazy_col[c] ? std::max(hi[c], *mx) : *mx;
    lazy_col[c] = true;
  }
  for (const char* name : {"eps_id", "env_id", "t", "is_init", "seq_lens"}) {
    if (const BatchColumn* bc = find_column(b, name)) {
      EXPECT_LT(bc->base, 0) << name;
      EXPECT_TRUE(bc->index_shape.empty()) << name;
    }
  }
  ASSERT_EQ(b.bases.size(), static_cast<std::size_t>(std::count(lazy_col.begin(), lazy_col.end(), true)));
  for (std::size_t i = 0; i < b.bases.size(); ++i) {
    const BatchColumn& base = b.bases[i];
    const std::int64_t ci = s.column_index(base.name);
    ASSERT_GE(ci, 0) << "base '" << base.name << "'";
    const auto c = static_cast<std::size_t>(ci);
    ASSERT_TRUE(lazy_col[c]) << "base '" << base.name << "' has no lazy view";
    for (std::size_t j = 0; j < i; ++j) EXPECT_NE(b.bases[j].name, base.name) << "two bases";
    const ColumnSpec& col = s.columns()[c];
    EXPECT_EQ(base.dtype, col.dtype) << base.name;
    EXPECT_LT(base.base, 0) << base.name;
    ASSERT_FALSE(base.shape.empty()) << base.name;
    EXPECT_EQ(I64(base.shape.begin() + 1, base.shape.end()), col.shape) << base.name;
    const std::int64_t rows = base.shape[0];
    ASSERT_GE(rows, 2) << base.name;
    const std::size_t rb = col.row_bytes();
    ASSERT_EQ(base.buffer->size(), static_cast<std::size_t>(rows) * rb) << base.name;
    const std::byte* d = base.buffer->data();
    const std::vector<std::byte> zeros(rb, std::byte{0});
    const std::vector<std::byte> pad = col.pad_row.empty() ? zeros : col.pad_row;
    const auto row = [&](std::int64_t r) {
      return std::vector<std::byte>(d + static_cast<std::size_t>(r) * rb, d + static_cast<std::size_t>(r + 1) * rb);
    };
    EXPECT_TRUE(testing::same_bytes(row(kLazyPadRow), pad, rb)) << base.name << ": the pad row";
    EXPECT_TRUE(testing::same_bytes(row(kLazyZeroRow), zeros, rb)) << base.name << ": the zero row";
    std::int64_t max_rows = 2;
    for (const Segment& g : b.segments) max_rows += g.length == 0 ? 0 : g.length + hi[c] - lo[c];
    EXPECT_LE(rows, max_rows) << base.name;
  }
}

}  // namespace trajview::testing
