// TrajectoryStore: which views a store serves, and every kind of bad construction
// argument or bad call, which must throw naming the problem and change nothing.
#include "trajview/store.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "store_helpers.h"
#include "test_util.h"

namespace trajview {
namespace {

using testing::Array;
using testing::F32;
using testing::I64;
using testing::basic_columns;
using testing::basic_views;
using testing::begin;
using testing::col;
using testing::infer;
using testing::ins;
using testing::make_array;
using testing::obs_col;
using testing::opts;
using testing::repeated;
using testing::reset;
using testing::row_bytes_of;
using testing::same_batch;
using testing::step;
using testing::throws_invalid_argument;
using testing::throws_length_error;
using testing::training_only;
using testing::values;
using testing::view;
using testing::view_names;

// ------------------------------------------------------------ construction

TEST(StoreConstruction, BasicSetsOfViews) {
  TrajectoryStore s(2, basic_columns(), basic_views());
  EXPECT_EQ(s.num_slots(), 2);
  EXPECT_EQ(s.columns().size(), 3u);
  EXPECT_EQ(s.column_index("obs"), 0);
  EXPECT_EQ(s.column_index("rewards"), 2);
  EXPECT_EQ(s.column_index("nope"), -1);
  EXPECT_EQ(s.obs_columns(), std::vector<std::size_t>{0});
  // new_obs (obs at +1), actions (at 0) and rewards (at 0) are not known
  // before the step's action.
  EXPECT_EQ(view_names(s, s.inference_views()), (std::vector<std::string>{"obs", "prev_actions"}));
  EXPECT_EQ(view_names(s, s.training_views()),
            (std::vector<std::string>{"obs", "new_obs", "actions", "prev_actions", "rewards"}));
}

TEST(StoreConstruction, ViewFlags) {
  std::vector<ViewSpec> views{view("obs", "obs", 0), training_only(view("prev_actions", "actions", -1)),
                              view("prev_rewards", "rewards", -1)};
  views[2].for_training = false;
  TrajectoryStore s(1, basic_columns(), views);
  EXPECT_EQ(view_names(s, s.inference_views()), (std::vector<std::string>{"obs", "prev_rewards"}));
  EXPECT_EQ(view_names(s, s.training_views()), (std::vector<std::string>{"obs", "prev_actions"}));
}

TEST(StoreConstruction, ViewRowBytes) {
  std::vector<ColumnSpec> cols{obs_col("obs", {3}), col("actions", DType::Int64)};
  std::vector<ViewSpec> views{view("obs", "obs", 0), view("stack", "obs", I64{-3, -2, -1, 0}),
                              view("prev_actions", "actions", -1)};
  TrajectoryStore s(1, cols, views);
  EXPECT_EQ(s.view_row_bytes(0), 12u);      // 3 float32
  EXPECT_EQ(s.view_row_bytes(1), 4u * 12u);  // 4 frames of 3 float32
  EXPECT_EQ(s.view_row_bytes(2), 8u);
}

TEST(StoreConstruction, UnknownColumnNamesViewAndColumn) {
  auto views = basic_views();
  views.push_back(view("state_in_0", "state_out_0", -1));
  EXPECT_TRUE(throws_invalid_argument([&] { TrajectoryStore s(1, basic_columns(), views); },
                                      {"'state_in_0'", "'state_out_0'", "obs", "actions", "rewards"}));
}

TEST(StoreConstruction, DuplicateColumnName) {
  auto cols = basic_columns();
  cols.push_back(col("actions", DType::Int32));
  EXPECT_TRUE(throws_invalid_argument([&] { TrajectoryStore s(1, cols, basic_views()); }, {"'actions'", "twice"}));
}

TEST(StoreConstruction, DuplicateViewName) {
  auto views = basic_views();
  views.push_back(view("prev_actions", "actions", -2));
  EXPECT_TRUE(
      throws_invalid_argument([&] { TrajectoryStore s(1, basic_columns(), views); }, {"'prev_actions'", "twice"}));
}

TEST(StoreConstruction, BoundaryNamesAreReserved) {
  for (const char* name : {"eps_id", "env_id", "t", "is_init", "seq_lens"}) {
    auto cols = basic_columns();
    cols.push_back(col(name, DType::Int64));
    EXPECT_TRUE(throws_invalid_argument([&] { TrajectoryStore s(1, cols, basic_views()); },
                                        {"'" + std::string(name) + "'", "boundary"}))
        << name;
    auto views = basic_views();
    views.push_back(view(name, "actions", 0));
    EXPECT_TRUE(throws_invalid_argument([&] { TrajectoryStore s(1, basic_columns(), views); },
                                        {"'" + std::string(name) + "'", "boundary"}))
        << name;
  }
}

TEST(StoreConstruction, BadPadRowSize) {
  for (std::size_t bad : {std::size_t{4}, std::size_t{12}}) {
    auto cols = basic_columns();
    ColumnSpec so = col("state_out_0", DType::Float32, {2});
    so.pad_row.assign(bad, std::byte{0});
    cols.push_back(so);
    EXPECT_TRUE(throws_invalid_argument([&] { TrajectoryStore s(1, cols, basic_views()); },
                                        {"'state_out_0'", "8 bytes", "got " + std::to_string(bad)}))
        << bad;
  }
  auto cols = basic_columns();
  ColumnSpec so = col("state_out_0", DType::Float32, {2});
  so.pad_row = row_bytes_of(F32{1.0f, 2.0f});
  cols.push_back(so);
  EXPECT_NO_THROW(TrajectoryStore(1, cols, basic_views()));
}

TEST(StoreConstruction, ResetPaddingOnStepColumnForInference) {
  auto views = basic_views();
  views.push_back(reset(view("prev_rewards", "rewards", -1)));
  EXPECT_TRUE(throws_invalid_argument([&] { TrajectoryStore s(1, basic_columns(), views); },
                                      {"'prev_rewards'", "'rewards'", "reset"}));
  // Fine when the view is not used for compute actions.
  views.back().for_inference = false;
  TrajectoryStore ok(1, basic_columns(), views);
  EXPECT_EQ(view_names(ok, ok.inference_views()), (std::vector<std::string>{"obs", "prev_actions"}));
  // Fine on an observation column (row 0 exists from begin_episodes).
  auto obs_views = basic_views();
  obs_views.push_back(reset(view("stack", "obs", I64{-2, -1, 0})));
  EXPECT_NO_THROW(TrajectoryStore(1, basic_columns(), obs_views));
  // Fine when the view reads the step's own row (it is never in the input dict).
  auto future = basic_views();
  future.push_back(reset(view("around", "actions", I64{-1, 0})));
  TrajectoryStore f(1, basic_columns(), future);
  EXPECT_EQ(view_names(f, f.inference_views()), (std::vector<std::string>{"obs", "prev_actions"}));
}

TEST(StoreConstruction, MismatchedBatchRepeat) {
  std::vector<ColumnSpec> cols{obs_col(), col("state_out_0", DType::Float32), col("state_out_1", DType::Float32)};
  std::vector<ViewSpec> views{view("obs", "obs", 0), repeated(view("state_in_0", "state_out_0", -1), 4),
                              repeated(view("state_in_1", "state_out_1", -1), 8)};
  EXPECT_TRUE(throws_invalid_argument([&] { TrajectoryStore s(1, cols, views); }, {"'state_in_1'", "8", "4"}));
  views[2].batch_repeat = 4;
  EXPECT_NO_THROW(TrajectoryStore(1, cols, views));
  // A view that is not in training batches does not count.
  views[2].batch_repeat = 8;
  views[2].for_training = false;
  EXPECT_NO_THROW(TrajectoryStore(1, cols, views));
}

TEST(StoreConstruction, OtherBadSettings) {
  EXPECT_TRUE(throws_invalid_argument([] { TrajectoryStore s(0, basic_columns(), basic_views()); },
                                      {"num_envs", "got 0"}));
  EXPECT_TRUE(throws_invalid_argument([] { TrajectoryStore s(1, basic_columns(), basic_views(), opts(0)); },
                                      {"chunk_rows", "got 0"}));
  EXPECT_TRUE(throws_invalid_argument([] { TrajectoryStore s(1, {}, {}); }, {"column"}));
  auto no_name = basic_columns();
  no_name.push_back(col("", DType::Int64));
  EXPECT_TRUE(throws_invalid_argument([&] { TrajectoryStore s(1, no_name, {}); }, {"name"}));
  auto neg = basic_columns();
  neg.push_back(col("x", DType::Float32, {2, -1}));
  EXPECT_TRUE(throws_invalid_argument([&] { TrajectoryStore s(1, neg, {}); }, {"'x'", "(2, -1)"}));
  auto empty_shift = basic_views();
  empty_shift.push_back(view("none", "obs", I64{}));
  EXPECT_TRUE(throws_invalid_argument([&] { TrajectoryStore s(1, basic_columns(), empty_shift); }, {"'none'"}));
  auto two_ints = basic_views();
  two_ints.push_back(view("two", "obs", I64{0, 1}));
  two_ints.back().adds_axis = false;
  EXPECT_TRUE(throws_invalid_argument([&] { TrajectoryStore s(1, basic_columns(), two_ints); }, {"'two'"}));
  auto zero_repeat = basic_views();
  zero_repeat.push_back(repeated(view("r", "obs", 0), 0));
  EXPECT_TRUE(
      throws_invalid_argument([&] { TrajectoryStore s(1, basic_columns(), zero_repeat); }, {"'r'", "got 0"}));
}

// ------------------------------------------------------------------ limits

constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kI64Min = std::numeric_limits<std::int64_t>::min();

/// basic_views() plus `extra`.
std::vector<ViewSpec> with_view(ViewSpec extra) {
  auto views = basic_views();
  views.push_back(std::move(extra));
  return views;
}

TEST(StoreLimits, ShiftOffsetsWithinKMaxShift) {
  // At the bound: fine (training only, so nothing has to be known at t=0).
  EXPECT_NO_THROW(TrajectoryStore(1, basic_columns(), with_view(view("far", "obs", -kMaxShift)), opts(2)));
  EXPECT_NO_THROW(TrajectoryStore(1, basic_columns(), with_view(view("far", "obs", kMaxShift)), opts(2)));
  EXPECT_NO_THROW(
      TrajectoryStore(1, basic_columns(), with_view(view("far", "obs", I64{-kMaxShift, 0, kMaxShift})), opts(2)));
  // Beyond it, int64 extremes included: std::invalid_argument naming the
  // view, the bound and the value, before any size is computed from it.
  for (std::int64_t bad : {-kMaxShift - 1, kMaxShift + 1, std::int64_t{-1} << 62, kI64Max, kI64Min}) {
    EXPECT_TRUE(throws_invalid_argument(
        [&] { TrajectoryStore s(1, basic_columns(), with_view(view("far", "obs", bad))); },
        {"view 'far'", "[-1000000, 1000000]", std::to_string(bad)}))
        << bad;
    EXPECT_TRUE(throws_invalid_argument(
        [&] { TrajectoryStore s(1, basic_columns(), with_view(training_only(view("far", "actions", I64{0, bad})))); },
        {"view 'far'", "kMaxShift", std::to_string(bad)}))
        << bad;
  }
}

TEST(StoreLimits, OffsetsPerView) {
  I64 many(kMaxViewShifts, 0);
  EXPECT_NO_THROW(TrajectoryStore(1, basic_columns(), with_view(training_only(view("many", "obs", many))), opts(2)));
  many.push_back(0);
  EXPECT_TRUE(throws_invalid_argument(
      [&] { TrajectoryStore s(1, basic_columns(), with_view(view("many", "obs", many))); },
      {"view 'many'", "100000", "100001"}));
  auto two = view("two", "obs", I64{0, 1});
  two.adds_axis = false;
  EXPECT_TRUE(throws_invalid_argument([&] { TrajectoryStore s(1, basic_columns(), with_view(two)); },
                                      {"view 'two'", "exactly one offset", "got 2"}));
}

TEST(StoreLimits, BatchRepeatWithinKMaxBatchRepeat) {
  EXPECT_NO_THROW(TrajectoryStore(1, basic_columns(), with_view(repeated(view("r", "obs", 0), kMaxBatchRepeat))));
  for (std::int64_t bad : {std::int64_t{0}, std::int64_t{-1}, kMaxBatchRepeat + 1, kI64Max, kI64Min}) {
    EXPECT_TRUE(throws_invalid_argument(
        [&] { TrajectoryStore s(1, basic_columns(), with_view(repeated(view("r", "obs", 0), bad))); },
        {"view 'r'", "batch_repeat_value", "1000000", std::to_string(bad)}))
        << bad;
  }
}

TEST(StoreLimits, NumEnvsAndChunkRows) {
  EXPECT_TRUE(throws_invalid_argument([] { TrajectoryStore s(kMaxSlots + 1, basic_columns(), basic_views()); },
                                      {"num_envs", "<= 1048576", "1048577"}));
  EXPECT_TRUE(throws_invalid_argument([] { TrajectoryStore s(kI64Max, basic_columns(), basic_views()); },
                                      {"num_envs", "9223372036854775807"}));
  EXPECT_TRUE(throws_invalid_argument([] { TrajectoryStore s(kI64Min, basic_columns(), basic_views()); },
                                      {"num_envs", ">= 1"}));
  EXPECT_TRUE(throws_invalid_argument(
      [] { TrajectoryStore s(1, basic_columns(), basic_views(), opts(kMaxChunkRows + 1)); },
      {"chunk_rows", "<= 16777216", "16777217"}));
  EXPECT_TRUE(throws_invalid_argument([] { TrajectoryStore s(1, basic_columns(), basic_views(), opts(kI64Max)); },
                                      {"chunk_rows", "9223372036854775807"}));
}

TEST(StoreLimits, AbsurdColumnShapes) {
  // Rows of exactly kMaxRowBytes pass the column check ...
  std::vector<ColumnSpec> at_limit{col("x", DType::Float32, {std::int64_t{1} << 28})};
  EXPECT_NO_THROW(check_column(at_limit, 0));
  // ... one element more does not; neither does a product of dims that would
  // overflow, with or without a zero dim, nor too many dims.
  const std::vector<I64> bad{{(std::int64_t{1} << 28) + 1},
                             {std::int64_t{1} << 40, std::int64_t{1} << 40},
                             {kI64Max, kI64Max, kI64Max},
                             {0, kI64Max},
                             {std::int64_t{1} << 16, std::int64_t{1} << 16}};
  for (const auto& shape : bad) {
    auto cols = basic_columns();
    cols.push_back(col("x", DType::Float32, shape));
    EXPECT_TRUE(throws_invalid_argument([&] { TrajectoryStore s(1, cols, {}); },
                                        {"column 'x'", "1073741824 bytes per row", shape_str(shape)}))
        << shape_str(shape);
  }
  auto cols = basic_columns();
  cols.push_back(col("x", DType::Float32, I64(kMaxDims + 1, 1)));
  EXPECT_TRUE(throws_invalid_argument([&] { TrajectoryStore s(1, cols, {}); }, {"column 'x'", "64 dims", "65"}));
  cols.back().shape = I64(kMaxDims, 1);
  EXPECT_NO_THROW(TrajectoryStore(1, cols, {}));
  cols.back().shape = {kI64Min};
  EXPECT_TRUE(throws_invalid_argument([&] { TrajectoryStore s(1, cols, {}); }, {"column 'x'", "dims >= 0"}));
}

TEST(StoreLimits, StorageBlocksAndViewRowsMustFitOneAllocation) {
  // chunk_rows + lookback rows x num_envs x row bytes: overflowing size_t ...
  std::vector<ColumnSpec> cols{col("big", DType::Float32, {std::int64_t{1} << 19}), obs_col()};  // 2 MiB rows
  std::vector<ViewSpec> views{view("obs", "obs", 0), training_only(view("big", "big", -kMaxShift))};
  EXPECT_TRUE(throws_length_error([&] { TrajectoryStore s(kMaxSlots, cols, views, opts(kMaxChunkRows)); },
                                  {"column 'big'", "storage block", "overflows"}));
  // ... or merely beyond kMaxAllocBytes.
  EXPECT_TRUE(throws_length_error([&] { TrajectoryStore s(1024, cols, views, opts(4096)); },
                                  {"column 'big'", "storage block", "limit of 1099511627776 bytes"}));
  // One row of a view: offsets x row bytes (16 MiB rows x 100000 offsets > 1 TiB).
  std::vector<ColumnSpec> wide{obs_col(), col("wide", DType::Float32, {std::int64_t{1} << 22})};
  std::vector<ViewSpec> ahead{view("obs", "obs", 0), training_only(view("ahead", "wide", I64(kMaxViewShifts, 0)))};
  EXPECT_TRUE(throws_length_error([&] { TrajectoryStore s(1, wide, ahead); },
                                  {"view 'ahead'", "one row", "limit of 1099511627776 bytes"}));
}

TEST(StoreLimits, OffsetsAtTheBoundReadPaddingAndZeros) {
  std::vector<ViewSpec> views{view("obs", "obs", 0), training_only(view("far_back", "obs", -kMaxShift)),
                              training_only(reset(view("far_back_reset", "obs", -kMaxShift))),
                              training_only(view("far_ahead", "actions", kMaxShift)),
                              view("frames", "obs", I64{-kMaxShift, 0})};
  TrajectoryStore s(1, basic_columns(), views, opts(4));
  begin(s, {0}, {1});
  step(s, {0}, {2}, {20});
  step(s, {0}, {3}, {30});
  auto in = infer(s);
  EXPECT_EQ(in.get<float>("frames"), (F32{0, 3}));
  s.end_episodes(I64{0});
  auto b = s.build_batch(false);
  ASSERT_EQ(b.count, 2);
  EXPECT_EQ(values<float>(b, "far_back"), (F32{0, 0}));
  EXPECT_EQ(values<float>(b, "far_back_reset"), (F32{1, 1}));
  EXPECT_EQ(values<std::int64_t>(b, "far_ahead"), (I64{0, 0}));
  EXPECT_EQ(values<float>(b, "frames"), (F32{0, 1, 0, 2}));
}

TEST(StoreLimits, EpisodeIdsStopBeforeTheInt64End) {
  TrajectoryStore s(2, basic_columns(), basic_views(), opts(2, kI64Max - 2));
  EXPECT_EQ(begin(s, {0, 1}, {1, 2}), (I64{kI64Max - 2, kI64Max - 1}));
  s.end_episodes(I64{0});
  EXPECT_TRUE(throws_length_error([&] { begin(s, {0}, {3}); }, {"begin_episodes", "episode ids", "overflows"}));
  EXPECT_EQ(s.slot_eps_ids(), (I64{-1, kI64Max - 1}));  // nothing changed
  TrajectoryStore low(1, basic_columns(), basic_views(), opts(2, kI64Min));
  EXPECT_EQ(begin(low, {0}, {1}), (I64{kI64Min}));
}

// ------------------------------------------------------------- bad input

// Feeds a 3-slot store (slot 2 never begun); with `bad`, every kind of bad
// call is made in between, each of which must throw and change nothing.
Batch run_script(bool bad) {
  auto views = basic_views();
  views.push_back(view("stack", "obs", I64{-2, -1, 0}));
  TrajectoryStore s(3, basic_columns(), views, opts(2));

  struct Snapshot {
    std::int64_t steps, complete;
    std::size_t nbytes;
    I64 eps, lengths;
    std::vector<std::vector<std::byte>> inference;
    bool operator==(const Snapshot&) const = default;
  };
  auto snap = [&] {
    I64 active;
    const I64 ids = s.slot_eps_ids();
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] >= 0) active.push_back(static_cast<std::int64_t>(i));
    }
    return Snapshot{s.num_steps(), s.num_complete_steps(), s.nbytes(), s.slot_eps_ids(), s.slot_lengths(),
                    infer(s, active).out};
  };

  auto bad_calls = [&] {
    if (!bad) return;
    const Snapshot before = snap();
    const Array obs2 = make_array(F32{1, 2});
    const Array act2 = make_array(I64{1, 2});
    const Array rew2 = make_array(F32{1, 2});
    auto add = [&](const I64& slots, const std::vector<Array>& a) { s.add_step(slots, ins(a)); };
    // Wrong dtype (the last column, so the earlier ones would already be written).
    EXPECT_TRUE(throws_invalid_argument([&] { add({0, 1}, {obs2, act2, make_array(std::vector<double>{1, 2})}); },
                                        {"'rewards'", "float32", "float64"}));
    EXPECT_TRUE(throws_invalid_argument([&] { add({0, 1}, {obs2, make_array(F32{1, 2}), rew2}); },
                                        {"'actions'", "int64", "float32"}));
    // Wrong shape: a trailing axis, and the wrong number of rows.
    EXPECT_TRUE(throws_invalid_argument([&] { add({0, 1}, {obs2, act2, make_array<float>({2, 1}, {1, 2})}); },
                                        {"'rewards'", "(2,)", "(2, 1)"}));
    EXPECT_TRUE(throws_invalid_argument([&] { add({0, 1}, {make_array(F32{1, 2, 3}), act2, rew2}); },
                                        {"'obs'", "(2,)", "(3,)"}));
    EXPECT_TRUE(throws_invalid_argument([&] { add({}, {obs2, act2, rew2}); }, {"env 2", "no episode"}));
    // A missing column.
    EXPECT_TRUE(throws_invalid_argument([&] { add({0, 1}, {obs2, act2}); }, {"3 columns", "got 2"}));
    // Slots: out of range, repeated, idle.
    EXPECT_TRUE(throws_invalid_argument([&] { add({0, 5}, {obs2, act2, rew2}); }, {"env_ids", "got 5"}));
    EXPECT_TRUE(throws_invalid_argument([&] { add({0, -1}, {obs2, act2, rew2}); }, {"env_ids", "got -1"}));
    EXPECT_TRUE(throws_invalid_argument([&] { add({1, 1}, {obs2, act2, rew2}); }, {"distinct", "1 twice"}));
    EXPECT_TRUE(throws_invalid_argument([&] { add({0, 2}, {obs2, act2, rew2}); }, {"env 2", "no episode"}));
    // No data.
    Array null_rew = rew2;
    null_rew.bytes.clear();
    EXPECT_TRUE(throws_invalid_argument([&] { add({0, 1}, {obs2, act2, null_rew}); }, {"'rewards'", "no data"}));
    // begin_episodes: busy slot, bad obs, wrong number of obs arrays.
    EXPECT_TRUE(throws_invalid_argument([&] { begin(s, {2, 0}, {1, 2}); }, {"env 0", "in progress"}));
    EXPECT_TRUE(throws_invalid_argument([&] { begin(s, {2, 2}, {1, 2}); }, {"distinct", "2 twice"}));
    EXPECT_TRUE(throws_invalid_argument(
        [&] {
          const Array o = make_array(I64{1});
          const ArrayIn in = o.in();
          s.begin_episodes(I64{2}, std::span<const ArrayIn>(&in, 1));
        },
        {"'obs'", "float32", "int64"}));
    EXPECT_TRUE(throws_invalid_argument(
        [&] {
          const std::vector<Array> two{make_array(F32{1}), make_array(F32{1})};
          s.begin_episodes(I64{2}, ins(two));
        },
        {"1 observation", "got 2"}));
    // end_episodes on an idle slot, with a valid one first.
    EXPECT_TRUE(throws_invalid_argument([&] { s.end_episodes(I64{0, 2}); }, {"env 2", "no episode"}));
    EXPECT_TRUE(before == snap()) << "a call that threw changed the store";
  };

  begin(s, {0, 1}, {1, 2});
  bad_calls();
  step(s, {0, 1}, {11, 12}, {1, 2}, {0.5f, 0.25f});
  bad_calls();
  step(s, {1, 0}, {22, 21}, {4, 3}, {1.5f, 1.25f});
  bad_calls();
  step(s, {1}, {32}, {6}, {2.5f});
  bad_calls();
  s.end_episodes(I64{0});
  if (bad) {
    const Snapshot before = snap();
    EXPECT_TRUE(throws_invalid_argument([&] { s.end_episodes(I64{1, 0}); }, {"env 0", "no episode"}));
    EXPECT_TRUE(throws_invalid_argument([&] { step(s, {1, 0}, {1, 2}, {1, 2}); }, {"env 0", "no episode"}));
    EXPECT_TRUE(throws_invalid_argument([&] { step(s, {}, {1, 2, 3}, {1, 2, 3}); }, {"env 0", "no episode"}));
    EXPECT_TRUE(before == snap()) << "a call that threw changed the store";
  }
  return s.build_batch(false);
}

TEST(StoreBadInput, ThrowsNamingTheProblemAndChangesNothing) {
  const Batch good = run_script(false);
  const Batch checked = run_script(true);
  EXPECT_TRUE(same_batch(good, checked));
  // And the good run is what it should be.
  ASSERT_EQ(good.count, 5);
  EXPECT_EQ(values<std::int64_t>(good, "eps_id"), (I64{0, 0, 1, 1, 1}));
  EXPECT_EQ(values<float>(good, "obs"), (F32{1, 11, 2, 12, 22}));
  EXPECT_EQ(values<float>(good, "new_obs"), (F32{11, 21, 12, 22, 32}));
  EXPECT_EQ(values<std::int64_t>(good, "actions"), (I64{1, 3, 2, 4, 6}));
  EXPECT_EQ(values<float>(good, "rewards"), (F32{0.5f, 1.25f, 0.25f, 1.5f, 2.5f}));
  EXPECT_EQ(values<float>(good, "stack"), (F32{0, 0, 1, 0, 1, 11, 0, 0, 2, 0, 2, 12, 2, 12, 22}));
}

}  // namespace
}  // namespace trajview
