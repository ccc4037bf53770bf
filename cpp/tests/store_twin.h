// Twin: two TrajectoryStores driven identically, one with lazy columns and one
// eager, and the columns / views / rows the lazy suite feeds them
// (store_lazy_test.cpp). Every batch of the lazy store must materialize to the
// eager one's values byte for byte and pass check_lazy_layout.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "store_helpers.h"
#include "test_util.h"
#include "trajview/store.h"

namespace trajview::testing {

/// A uint8 [4, 4] observation (16 bytes a row), a float32 [3] state whose pad
/// row is an initial state (12 bytes), int64 actions (8) and float32 rewards (4).
inline std::vector<ColumnSpec> lazy_columns() {
  ColumnSpec state = col("state", DType::Float32, {3});
  state.pad_row = bytes_of<float>({0.5f, -1.0f, 2.0f});
  return {col("obs", DType::UInt8, {4, 4}, ColumnKind::Observation), state, col("actions", DType::Int64),
          col("rewards", DType::Float32)};
}

/// Int shifts (0, +1 = new_obs, -1, +2), a range ("-3:0"), lists with gaps and
/// past the last row, zero and reset padding, and the state's pad row.
inline std::vector<ViewSpec> lazy_views() {
  return {view("obs", "obs", 0),
          view("new_obs", "obs", 1),
          view("prev_obs", "obs", -1),
          view("stack", "obs", I64{-3, -2, -1, 0}),
          reset(view("stack_reset", "obs", I64{-3, -2, -1, 0})),
          view("gaps", "obs", I64{-5, -2, 0, 2}),
          view("future_obs", "obs", I64{1, 2, 3}),
          view("state_in", "state", -1),
          view("state_out", "state", 0),
          training_only(reset(view("state_hist", "state", I64{-2, -1}))),
          view("actions", "actions", 0),
          view("prev_actions", "actions", -1),
          view("next2_actions", "actions", 2),
          training_only(reset(view("prev_actions_reset", "actions", -1))),
          view("rewards", "rewards", 0),
          view("reward_hist", "rewards", I64{-1, 0})};
}

/// A row of column `col` for value counter v: non-zero bytes that differ
/// between nearby counters (bool columns: v % 2).
inline std::vector<std::byte> counter_row(const ColumnSpec& col, std::int64_t v) {
  std::vector<std::byte> out(col.row_bytes());
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::int64_t x = col.dtype == DType::Bool ? v % 2 : (v * 31 + static_cast<std::int64_t>(i) * 7) % 251 + 1;
    out[i] = static_cast<std::byte>(x);
  }
  return out;
}

/// Two stores driven identically, one with lazy columns (lazy_min_row_bytes =
/// threshold) and one eager; every batch of the lazy one must materialize to
/// the eager one's values, byte for byte.
class Twin {
 public:
  Twin(std::int64_t slots, std::int64_t chunk_rows, std::size_t threshold,
       const std::vector<ColumnSpec>& columns = lazy_columns(), const std::vector<ViewSpec>& views = lazy_views())
      : threshold_(threshold),
        lazy_(slots, columns, views, lazy_opts(chunk_rows, threshold)),
        eager_(slots, columns, views, lazy_opts(chunk_rows, 0)) {}

  void begin(const I64& slots) {
    std::vector<Array> a;
    for (std::size_t c : lazy_.obs_columns()) a.push_back(rows(c, slots.size()));
    const I64 x = lazy_.begin_episodes(slots, ins(a));
    EXPECT_EQ(x, eager_.begin_episodes(slots, ins(a)));
  }

  /// `n` steps of `slots` (empty: all).
  void step(const I64& slots, int n = 1) {
    for (int i = 0; i < n; ++i) {
      std::vector<Array> a;
      for (std::size_t c = 0; c < lazy_.columns().size(); ++c) a.push_back(rows(c, lazy_.num_rows(slots)));
      lazy_.add_step(slots, ins(a));
      eager_.add_step(slots, ins(a));
    }
  }

  void end(const I64& slots) {
    lazy_.end_episodes(slots);
    eager_.end_episodes(slots);
  }

  /// Builds a batch from both stores, checks that they hold the same values
  /// and the lazy one's layout, and returns the lazy one.
  Batch batch(bool complete_only = false, const I64& hold = {}) {
    Batch lz = lazy_.build_batch(complete_only, hold);
    const Batch eg = eager_.build_batch(complete_only, hold);
    EXPECT_TRUE(eg.bases.empty());
    for (const auto& c : eg.columns) EXPECT_LT(c.base, 0) << c.name;
    EXPECT_TRUE(testing::same_values(lz, eg)) << "batch " << batches_;
    EXPECT_NO_FATAL_FAILURE(check_lazy_layout(lazy_, lz, threshold_)) << "batch " << batches_;
    EXPECT_EQ(lazy_.num_steps(), eager_.num_steps());
    for (const auto& c : lz.columns) lazy_columns_ += c.base >= 0 ? 1 : 0;
    ++batches_;
    return lz;
  }

  const TrajectoryStore& store() const { return lazy_; }
  /// Lazy columns seen in all batches so far.
  int lazy_columns_seen() const { return lazy_columns_; }

 private:
  Array rows(std::size_t c, std::size_t n) {
    const ColumnSpec& col = lazy_.columns()[c];
    Array a;
    a.dtype = col.dtype;
    a.shape = {static_cast<std::int64_t>(n)};
    a.shape.insert(a.shape.end(), col.shape.begin(), col.shape.end());
    for (std::size_t i = 0; i < n; ++i) {
      const auto r = counter_row(col, ++counter_);
      a.bytes.insert(a.bytes.end(), r.begin(), r.end());
    }
    return a;
  }

  std::size_t threshold_;
  TrajectoryStore lazy_;
  TrajectoryStore eager_;
  std::int64_t counter_ = 0;
  int batches_ = 0;
  int lazy_columns_ = 0;
};

}  // namespace trajview::testing
