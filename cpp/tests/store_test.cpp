#include "trajview/store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"
#include "trajview/buffer.h"

namespace trajview {
namespace {

using testing::Array;
using testing::col;
using testing::find_column;
using testing::ins;
using testing::make_array;
using testing::read_values;
using testing::same_batch;
using testing::shape_of;
using testing::throws_invalid_argument;
using testing::values;

using I64 = std::vector<std::int64_t>;
using F32 = std::vector<float>;
using B8 = std::vector<bool>;

// ------------------------------------------------------------------ helpers


ColumnSpec obs_col(std::string name = "obs", std::vector<std::int64_t> shape = {}) {
  return col(std::move(name), DType::Float32, std::move(shape), ColumnKind::Observation);
}

template <class T>
std::vector<std::byte> row_bytes_of(const std::vector<T>& v) {
  std::vector<std::byte> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

/// An int shift.
ViewSpec view(std::string name, std::string column, std::int64_t shift) {
  ViewSpec v;
  v.name = std::move(name);
  v.column = std::move(column);
  v.shifts = {shift};
  return v;
}

/// A list / range shift (adds an axis).
ViewSpec view(std::string name, std::string column, std::vector<std::int64_t> shifts) {
  ViewSpec v;
  v.name = std::move(name);
  v.column = std::move(column);
  v.shifts = std::move(shifts);
  v.adds_axis = true;
  return v;
}

ViewSpec reset(ViewSpec v) {
  v.padding = Padding::Reset;
  return v;
}

ViewSpec training_only(ViewSpec v) {
  v.for_inference = false;
  return v;
}

ViewSpec repeated(ViewSpec v, std::int64_t k) {
  v.batch_repeat = k;
  return v;
}

/// obs (float32 observation), actions (int64), rewards (float32), all scalars.
std::vector<ColumnSpec> basic_columns() {
  return {obs_col(), col("actions", DType::Int64), col("rewards", DType::Float32)};
}

/// obs, new_obs, actions, prev_actions, rewards.
std::vector<ViewSpec> basic_views() {
  return {view("obs", "obs", 0), view("new_obs", "obs", 1), view("actions", "actions", 0),
          view("prev_actions", "actions", -1), view("rewards", "rewards", 0)};
}

StoreOptions opts(std::int64_t chunk_rows, std::int64_t eps_id_start = 0) {
  StoreOptions o;
  o.chunk_rows = chunk_rows;
  o.eps_id_start = eps_id_start;
  return o;
}

/// Begins episodes in `slots` with one scalar float observation each (stores
/// with a single scalar observation column).
I64 begin(TrajectoryStore& s, const I64& slots, const F32& obs) {
  const Array a = make_array(obs);
  const ArrayIn in = a.in();
  return s.begin_episodes(slots, std::span<const ArrayIn>(&in, 1));
}

/// One step for a basic_columns() store.
void step(TrajectoryStore& s, const I64& slots, const F32& obs, const I64& act, const F32& rew) {
  const std::vector<Array> a{make_array(obs), make_array(act), make_array(rew)};
  s.add_step(slots, ins(a));
}

/// One step for a basic_columns() store, every reward 0.5.
void step(TrajectoryStore& s, const I64& slots, const F32& obs, const I64& act) {
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

Inference infer(const TrajectoryStore& s, const I64& slots = {}) {
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

std::vector<std::string> view_names(const TrajectoryStore& s, const std::vector<std::size_t>& idx) {
  std::vector<std::string> out;
  for (auto i : idx) out.push_back(s.views()[i].name);
  return out;
}

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

// ------------------------------------------------------------- lifecycle

TEST(StoreEpisodes, BeginAddEndTracksSlots) {
  TrajectoryStore s(3, basic_columns(), basic_views(), opts(256, 7));
  EXPECT_EQ(s.slot_eps_ids(), (I64{-1, -1, -1}));
  EXPECT_EQ(s.slot_lengths(), (I64{-1, -1, -1}));
  EXPECT_EQ(begin(s, {2, 0}, {1, 2}), (I64{7, 8}));
  EXPECT_EQ(s.slot_eps_ids(), (I64{8, -1, 7}));
  EXPECT_EQ(s.slot_lengths(), (I64{0, -1, 0}));
  step(s, {0, 2}, {3, 4}, {1, 2});
  step(s, {2}, {5}, {3});
  EXPECT_EQ(s.slot_lengths(), (I64{1, -1, 2}));
  s.end_episodes(I64{2});
  EXPECT_EQ(s.slot_eps_ids(), (I64{8, -1, -1}));
  EXPECT_EQ(s.slot_lengths(), (I64{1, -1, -1}));
  EXPECT_EQ(begin(s, {1, 2}, {6, 7}), (I64{9, 10}));
  EXPECT_EQ(s.slot_eps_ids(), (I64{8, 9, 10}));
  step(s, {}, {8, 9, 10}, {4, 5, 6});  // empty = every slot
  EXPECT_EQ(s.slot_lengths(), (I64{2, 1, 1}));
  s.end_episodes(I64{});  // empty = every slot
  EXPECT_EQ(s.slot_eps_ids(), (I64{-1, -1, -1}));
  EXPECT_EQ(s.num_steps(), 6);
  EXPECT_EQ(s.num_complete_steps(), 6);
}

TEST(StoreEpisodes, BeginOnBusySlotAndEndOnIdleSlotThrow) {
  TrajectoryStore s(2, basic_columns(), basic_views(), opts(256, 5));
  begin(s, {1}, {1});
  EXPECT_TRUE(throws_invalid_argument([&] { begin(s, {1}, {2}); }, {"env 1", "in progress", "eps_id 5"}));
  EXPECT_TRUE(throws_invalid_argument([&] { s.end_episodes(I64{0}); }, {"env 0", "no episode"}));
  EXPECT_TRUE(throws_invalid_argument([&] { s.end_episodes(I64{}); }, {"env 0", "no episode"}));
  EXPECT_EQ(s.slot_eps_ids(), (I64{-1, 5}));
}

TEST(StoreEpisodes, EndingAnEmptyEpisodeEmitsNothing) {
  TrajectoryStore s(1, basic_columns(), basic_views());
  begin(s, {0}, {1});
  s.end_episodes(I64{0});
  EXPECT_EQ(s.num_steps(), 0);
  const Batch b = s.build_batch(false);
  EXPECT_EQ(b.count, 0);
  EXPECT_TRUE(b.segments.empty());
}

// ------------------------------------------------------------- inference

TEST(StoreInference, IntShiftsWithZeroPadding) {
  TrajectoryStore s(2, basic_columns(), basic_views(), opts(256, 3));
  begin(s, {0, 1}, {1, 2});
  Inference r = infer(s);
  EXPECT_EQ(r.names, (std::vector<std::string>{"obs", "prev_actions"}));
  EXPECT_EQ(r.get<float>("obs"), (F32{1, 2}));
  EXPECT_EQ(r.get<std::int64_t>("prev_actions"), (I64{0, 0}));
  EXPECT_EQ(r.t, (I64{0, 0}));
  EXPECT_EQ(r.eps, (I64{3, 4}));

  step(s, {}, {11, 12}, {5, 6});
  r = infer(s);
  EXPECT_EQ(r.get<float>("obs"), (F32{11, 12}));
  EXPECT_EQ(r.get<std::int64_t>("prev_actions"), (I64{5, 6}));
  EXPECT_EQ(r.t, (I64{1, 1}));

  // Rows come in the order of the slots asked for.
  r = infer(s, {1, 0});
  EXPECT_EQ(r.get<float>("obs"), (F32{12, 11}));
  EXPECT_EQ(r.get<std::int64_t>("prev_actions"), (I64{6, 5}));
  EXPECT_EQ(r.eps, (I64{4, 3}));
  r = infer(s, {1});
  EXPECT_EQ(r.get<float>("obs"), (F32{12}));
  EXPECT_EQ(r.t, (I64{1}));
}

TEST(StoreSteps, NextRowsSavesTheCopyAndStoresTheSameValues) {
  // Two stores driven alike: one gets its obs written into next_rows, the other copies them in.
  TrajectoryStore staged(2, basic_columns(), basic_views(), opts(3));
  TrajectoryStore copied(2, basic_columns(), basic_views(), opts(3));
  const std::size_t obs = static_cast<std::size_t>(staged.column_index("obs"));
  EXPECT_EQ(staged.next_rows(obs), nullptr);  // no episode in progress
  begin(staged, {0, 1}, {1, 2});
  begin(copied, {0, 1}, {1, 2});
  for (int t = 0; t < 8; ++t) {
    std::byte* rows = staged.next_rows(obs);
    ASSERT_NE(rows, nullptr);
    const F32 o{10.0f * static_cast<float>(t + 1), 10.0f * static_cast<float>(t + 1) + 1};
    std::memcpy(rows, o.data(), sizeof(float) * o.size());
    const Array act = make_array(I64{t, -t});
    const Array rew = make_array(F32{0.5f, 0.5f});
    const I64 shape{2};
    const std::vector<ArrayIn> in{ArrayIn{rows, DType::Float32, shape}, act.in(), rew.in()};
    staged.add_step({}, in);
    step(copied, {}, o, I64{t, -t}, F32{0.5f, 0.5f});
    if (t % 3 == 2) {
      EXPECT_TRUE(same_batch(staged.build_batch(false), copied.build_batch(false)));
    }
  }
  EXPECT_TRUE(same_batch(staged.build_batch(false), copied.build_batch(false)));
  // Slots out of step or an idle slot: no shared next position.
  step(staged, {0}, {1}, {1});
  EXPECT_EQ(staged.next_rows(obs), nullptr);
  staged.end_episodes(I64{0});
  EXPECT_EQ(staged.next_rows(obs), nullptr);
  EXPECT_EQ(staged.next_rows(99), nullptr);
}

TEST(StoreInference, RangeAndListShifts) {
  std::vector<ViewSpec> views{view("stack", "obs", I64{-2, -1, 0}), view("pick", "obs", I64{0, -2}),
                              view("prev2", "actions", I64{-2, -1})};
  TrajectoryStore s(1, basic_columns(), views, opts(2));
  begin(s, {0}, {1});
  Inference r = infer(s);
  EXPECT_EQ(r.get<float>("stack"), (F32{0, 0, 1}));
  EXPECT_EQ(r.get<float>("pick"), (F32{1, 0}));
  EXPECT_EQ(r.get<std::int64_t>("prev2"), (I64{0, 0}));
  step(s, {0}, {2}, {10});
  r = infer(s);
  EXPECT_EQ(r.get<float>("stack"), (F32{0, 1, 2}));
  EXPECT_EQ(r.get<float>("pick"), (F32{2, 0}));
  EXPECT_EQ(r.get<std::int64_t>("prev2"), (I64{0, 10}));
  step(s, {0}, {3}, {20});
  r = infer(s);
  EXPECT_EQ(r.get<float>("stack"), (F32{1, 2, 3}));
  EXPECT_EQ(r.get<float>("pick"), (F32{3, 1}));
  EXPECT_EQ(r.get<std::int64_t>("prev2"), (I64{10, 20}));
  step(s, {0}, {4}, {30});
  r = infer(s);
  EXPECT_EQ(r.get<float>("stack"), (F32{2, 3, 4}));
  EXPECT_EQ(r.get<float>("pick"), (F32{4, 2}));
  EXPECT_EQ(r.get<std::int64_t>("prev2"), (I64{20, 30}));
  EXPECT_EQ(r.t, (I64{3}));
}

TEST(StoreInference, VectorObservationsKeepTheirShape) {
  std::vector<ColumnSpec> cols{obs_col("obs", {2})};
  std::vector<ViewSpec> views{view("stack", "obs", I64{-1, 0})};
  TrajectoryStore s(2, cols, views);
  const Array o = make_array<float>({2, 2}, {1, -1, 2, -2});
  const ArrayIn in = o.in();
  s.begin_episodes(I64{0, 1}, std::span<const ArrayIn>(&in, 1));
  Inference r = infer(s);
  // [n=2, 2 frames, 2]
  EXPECT_EQ(r.get<float>("stack"), (F32{0, 0, 1, -1, 0, 0, 2, -2}));
  const Array o2 = make_array<float>({2, 2}, {3, -3, 4, -4});
  const std::vector<ArrayIn> step_in{o2.in()};
  s.add_step(I64{}, step_in);
  r = infer(s);
  EXPECT_EQ(r.get<float>("stack"), (F32{1, -1, 3, -3, 2, -2, 4, -4}));
}

TEST(StoreInference, PadRowIsTheInitialState) {
  ColumnSpec so = col("state_out_0", DType::Float32, {2});
  so.pad_row = row_bytes_of(F32{0.5f, -1.5f});
  std::vector<ColumnSpec> cols{obs_col(), so};
  std::vector<ViewSpec> views{view("state_in_0", "state_out_0", -1),
                              view("state_hist", "state_out_0", I64{-2, -1})};
  TrajectoryStore s(1, cols, views);
  auto add = [&](float o, F32 state) {
    const std::vector<Array> a{make_array(F32{o}), make_array<float>({1, 2}, state)};
    s.add_step(I64{0}, ins(a));
  };
  begin(s, {0}, {1});
  Inference r = infer(s);
  EXPECT_EQ(r.get<float>("state_in_0"), (F32{0.5f, -1.5f}));
  EXPECT_EQ(r.get<float>("state_hist"), (F32{0.5f, -1.5f, 0.5f, -1.5f}));
  add(2, {1, 2});
  r = infer(s);
  EXPECT_EQ(r.get<float>("state_in_0"), (F32{1, 2}));
  EXPECT_EQ(r.get<float>("state_hist"), (F32{0.5f, -1.5f, 1, 2}));
  add(3, {3, 4});
  r = infer(s);
  EXPECT_EQ(r.get<float>("state_hist"), (F32{1, 2, 3, 4}));
  // A new episode in the slot starts from the initial state again.
  s.end_episodes(I64{0});
  begin(s, {0}, {9});
  r = infer(s);
  EXPECT_EQ(r.get<float>("state_in_0"), (F32{0.5f, -1.5f}));
  EXPECT_EQ(r.get<float>("state_hist"), (F32{0.5f, -1.5f, 0.5f, -1.5f}));
}

TEST(StoreInference, ResetPaddingReadsRowZero) {
  std::vector<ViewSpec> views{reset(view("stack_reset", "obs", I64{-2, -1, 0})),
                              view("stack_zero", "obs", I64{-2, -1, 0}), reset(view("prev_obs", "obs", -1))};
  TrajectoryStore s(1, basic_columns(), views);
  begin(s, {0}, {1});
  Inference r = infer(s);
  EXPECT_EQ(r.get<float>("stack_reset"), (F32{1, 1, 1}));
  EXPECT_EQ(r.get<float>("stack_zero"), (F32{0, 0, 1}));
  EXPECT_EQ(r.get<float>("prev_obs"), (F32{1}));
  step(s, {0}, {2}, {10});
  r = infer(s);
  EXPECT_EQ(r.get<float>("stack_reset"), (F32{1, 1, 2}));
  EXPECT_EQ(r.get<float>("stack_zero"), (F32{0, 1, 2}));
  EXPECT_EQ(r.get<float>("prev_obs"), (F32{1}));
  step(s, {0}, {3}, {20});
  r = infer(s);
  EXPECT_EQ(r.get<float>("stack_reset"), (F32{1, 2, 3}));
  EXPECT_EQ(r.get<float>("prev_obs"), (F32{2}));
  // The next episode pads with its own first row.
  s.end_episodes(I64{0});
  begin(s, {0}, {7});
  r = infer(s);
  EXPECT_EQ(r.get<float>("stack_reset"), (F32{7, 7, 7}));
  EXPECT_EQ(r.get<float>("stack_zero"), (F32{0, 0, 7}));
}

// ------------------------------------------------------ episodes never mix

void check_episodes_never_mix(std::int64_t chunk_rows) {
  SCOPED_TRACE("chunk_rows " + std::to_string(chunk_rows));
  auto views = basic_views();
  views.push_back(view("next_actions", "actions", 1));
  views.push_back(view("stack", "obs", I64{-2, -1, 0}));
  TrajectoryStore s(1, basic_columns(), views, opts(chunk_rows));
  begin(s, {0}, {1});
  step(s, {0}, {2}, {10});
  step(s, {0}, {3}, {20});
  s.end_episodes(I64{0});
  begin(s, {0}, {101});
  Inference r = infer(s);
  EXPECT_EQ(r.get<float>("obs"), (F32{101}));
  EXPECT_EQ(r.get<std::int64_t>("prev_actions"), (I64{0}));
  EXPECT_EQ(r.get<float>("stack"), (F32{0, 0, 101}));
  EXPECT_EQ(r.eps, (I64{1}));
  EXPECT_EQ(r.t, (I64{0}));
  step(s, {0}, {102}, {110});

  const Batch b = s.build_batch(false);
  ASSERT_EQ(b.count, 3);
  ASSERT_EQ(b.segments.size(), 2u);
  EXPECT_EQ(values<float>(b, "obs"), (F32{1, 2, 101}));
  EXPECT_EQ(values<float>(b, "new_obs"), (F32{2, 3, 102}));  // A's last new_obs is A's final obs
  EXPECT_EQ(values<std::int64_t>(b, "actions"), (I64{10, 20, 110}));
  EXPECT_EQ(values<std::int64_t>(b, "prev_actions"), (I64{0, 10, 0}));
  EXPECT_EQ(values<std::int64_t>(b, "next_actions"), (I64{20, 0, 0}));
  EXPECT_EQ(values<float>(b, "stack"), (F32{0, 0, 1, 0, 1, 2, 0, 0, 101}));
  EXPECT_EQ(values<std::int64_t>(b, "eps_id"), (I64{0, 0, 1}));
  EXPECT_EQ(values<std::int64_t>(b, "env_id"), (I64{0, 0, 0}));
  EXPECT_EQ(values<std::int64_t>(b, "t"), (I64{0, 1, 0}));
  EXPECT_EQ(values<bool>(b, "is_init"), (B8{true, false, true}));
}

TEST(StoreEpisodes, ViewsNeverReadAnotherEpisode) {
  check_episodes_never_mix(256);
  check_episodes_never_mix(2);
  check_episodes_never_mix(1);
}

TEST(StoreEpisodes, SlotsNeverReadEachOther) {
  auto views = basic_views();
  views.push_back(view("stack", "obs", I64{-2, -1, 0}));
  TrajectoryStore s(2, basic_columns(), views, opts(1));
  begin(s, {0}, {1});
  step(s, {0}, {2}, {10});
  step(s, {0}, {3}, {20});
  begin(s, {1}, {50});
  Inference r = infer(s, {1, 0});
  EXPECT_EQ(r.get<float>("stack"), (F32{0, 0, 50, 1, 2, 3}));
  EXPECT_EQ(r.get<std::int64_t>("prev_actions"), (I64{0, 20}));
}

// ------------------------------------------------------------ batch layout

TEST(StoreBatch, FlatLayoutSegmentsInOrder) {
  TrajectoryStore s(3, basic_columns(), basic_views(), opts(2, 100));
  EXPECT_EQ(begin(s, {0, 1, 2}, {1, 2, 3}), (I64{100, 101, 102}));
  step(s, {}, {11, 12, 13}, {1, 2, 3}, {1.5f, 2.5f, 3.5f});
  s.end_episodes(I64{2});  // eps 102 (1 step) finishes first
  step(s, {0, 1}, {21, 22}, {4, 5}, {4.5f, 5.5f});
  s.end_episodes(I64{0});  // eps 100 (2 steps) finishes second
  EXPECT_EQ(begin(s, {2, 0}, {31, 30}), (I64{103, 104}));
  step(s, {}, {40, 41, 42}, {6, 7, 8}, {6.5f, 7.5f, 8.5f});
  EXPECT_EQ(s.num_steps(), 8);
  EXPECT_EQ(s.num_complete_steps(), 3);

  const Batch b = s.build_batch(false);
  // Finished in finish order (102, 100), then ongoing by slot (104 in slot 0,
  // 101 in slot 1, 103 in slot 2).
  ASSERT_EQ(b.count, 8);
  EXPECT_EQ(b.num_seqs, 0);
  ASSERT_EQ(b.segments.size(), 5u);
  const I64 eps{102, 100, 104, 101, 103}, env{2, 0, 0, 1, 2}, len{1, 2, 1, 3, 1}, off{0, 1, 3, 4, 7};
  const B8 fin{true, true, false, false, false};
  for (std::size_t i = 0; i < 5; ++i) {
    const Segment& g = b.segments[i];
    EXPECT_EQ(g.eps_id, eps[i]) << i;
    EXPECT_EQ(g.env_id, env[i]) << i;
    EXPECT_EQ(g.t_start, 0) << i;
    EXPECT_EQ(g.length, len[i]) << i;
    EXPECT_EQ(g.row_offset, off[i]) << i;
    EXPECT_EQ(g.num_seqs, 0) << i;
    EXPECT_EQ(g.finished, fin[i]) << i;
  }
  EXPECT_EQ(values<float>(b, "obs"), (F32{3, 1, 11, 30, 2, 12, 22, 31}));
  EXPECT_EQ(values<float>(b, "new_obs"), (F32{13, 11, 21, 40, 12, 22, 41, 42}));
  EXPECT_EQ(values<std::int64_t>(b, "actions"), (I64{3, 1, 4, 6, 2, 5, 7, 8}));
  EXPECT_EQ(values<std::int64_t>(b, "prev_actions"), (I64{0, 0, 1, 0, 0, 2, 5, 0}));
  EXPECT_EQ(values<float>(b, "rewards"), (F32{3.5f, 1.5f, 4.5f, 6.5f, 2.5f, 5.5f, 7.5f, 8.5f}));
  EXPECT_EQ(values<std::int64_t>(b, "eps_id"), (I64{102, 100, 100, 104, 101, 101, 101, 103}));
  EXPECT_EQ(values<std::int64_t>(b, "env_id"), (I64{2, 0, 0, 0, 1, 1, 1, 2}));
  EXPECT_EQ(values<std::int64_t>(b, "t"), (I64{0, 0, 1, 0, 0, 1, 2, 0}));
  EXPECT_EQ(values<bool>(b, "is_init"), (B8{true, true, false, true, true, false, false, true}));
  EXPECT_EQ(find_column(b, "seq_lens"), nullptr);
  EXPECT_EQ(shape_of(b, "obs"), (I64{8}));
  EXPECT_EQ(shape_of(b, "eps_id"), (I64{8}));
  EXPECT_EQ(b.columns.size(), 9u);  // 5 views + eps_id, env_id, t, is_init
  EXPECT_EQ(s.num_steps(), 0);
}

TEST(StoreBatch, ListShiftAddsAnAxis) {
  std::vector<ColumnSpec> cols{obs_col("obs", {2}), col("actions", DType::Int64)};
  std::vector<ViewSpec> views{view("stack", "obs", I64{-1, 0}), view("new_obs", "obs", 1)};
  TrajectoryStore s(1, cols, views);
  const Array o0 = make_array<float>({1, 2}, {1, -1});
  const ArrayIn in0 = o0.in();
  s.begin_episodes(I64{0}, std::span<const ArrayIn>(&in0, 1));
  for (std::int64_t t = 0; t < 2; ++t) {
    const float v = static_cast<float>(t + 2);
    const std::vector<Array> a{make_array<float>({1, 2}, {v, -v}), make_array(I64{t})};
    s.add_step(I64{0}, ins(a));
  }
  const Batch b = s.build_batch(false);
  EXPECT_EQ(shape_of(b, "stack"), (I64{2, 2, 2}));
  EXPECT_EQ(shape_of(b, "new_obs"), (I64{2, 2}));
  EXPECT_EQ(values<float>(b, "stack"), (F32{0, 0, 1, -1, 1, -1, 2, -2}));
  EXPECT_EQ(values<float>(b, "new_obs"), (F32{2, -2, 3, -3}));
}

TEST(StoreBatch, SeqLensWithBatchRepeat) {
  ColumnSpec so = col("state_out_0", DType::Float32, {2});
  so.pad_row = row_bytes_of(F32{-1, -1});
  std::vector<ColumnSpec> cols{obs_col(), so};
  std::vector<ViewSpec> views{view("obs", "obs", 0), repeated(view("state_in_0", "state_out_0", -1), 3)};
  TrajectoryStore s(2, cols, views, opts(2));
  // state_out at step t: slot 0 [100 + t, -(100 + t)], slot 1 [200 + t, ...].
  std::int64_t t0 = 0, t1 = 0;
  auto add = [&](const I64& slots) {
    F32 o, st;
    for (auto sl : slots) {
      const std::int64_t v = sl == 0 ? 100 + t0++ : 200 + t1++;
      o.push_back(static_cast<float>(v));
      st.push_back(static_cast<float>(v));
      st.push_back(-static_cast<float>(v));
    }
    const auto n = static_cast<std::int64_t>(slots.size());
    const std::vector<Array> a{make_array(o), make_array<float>({n, 2}, st)};
    s.add_step(slots, ins(a));
  };
  begin(s, {0, 1}, {0, 0});
  add({0, 1});
  add({0, 1});
  for (int i = 0; i < 5; ++i) add({0});
  s.end_episodes(I64{0});
  // Repeated views still give one row per slot at inference.
  Inference r = infer(s, {1});
  EXPECT_EQ(r.get<float>("state_in_0"), (F32{201, -201}));

  const Batch b = s.build_batch(false);
  EXPECT_EQ(b.count, 9);  // 7 + 2
  EXPECT_EQ(b.num_seqs, 4);
  EXPECT_EQ(values<std::int32_t>(b, "seq_lens"), (std::vector<std::int32_t>{3, 3, 1, 2}));
  EXPECT_EQ(shape_of(b, "seq_lens"), (I64{4}));
  EXPECT_EQ(shape_of(b, "state_in_0"), (I64{4, 2}));
  ASSERT_NE(find_column(b, "state_in_0"), nullptr);
  EXPECT_TRUE(find_column(b, "state_in_0")->per_sequence);
  EXPECT_TRUE(find_column(b, "seq_lens")->per_sequence);
  EXPECT_FALSE(find_column(b, "obs")->per_sequence);
  // Sequences start at t = 0, 3, 6 (slot 0) and t = 0 (slot 1).
  EXPECT_EQ(values<float>(b, "state_in_0"), (F32{-1, -1, 102, -102, 105, -105, -1, -1}));
  ASSERT_EQ(b.segments.size(), 2u);
  EXPECT_EQ(b.segments[0].seq_offset, 0);
  EXPECT_EQ(b.segments[0].num_seqs, 3);
  EXPECT_EQ(b.segments[1].seq_offset, 3);
  EXPECT_EQ(b.segments[1].num_seqs, 1);

  // Slot 1 goes on after the cut: sequences start at the segment's first step.
  for (int i = 0; i < 4; ++i) add({1});
  const Batch b2 = s.build_batch(false);
  ASSERT_EQ(b2.segments.size(), 1u);
  EXPECT_EQ(b2.segments[0].t_start, 2);
  EXPECT_EQ(b2.count, 4);
  EXPECT_EQ(b2.num_seqs, 2);
  EXPECT_EQ(values<std::int32_t>(b2, "seq_lens"), (std::vector<std::int32_t>{3, 1}));
  EXPECT_EQ(values<float>(b2, "state_in_0"), (F32{201, -201, 204, -204}));
  EXPECT_EQ(values<std::int64_t>(b2, "t"), (I64{2, 3, 4, 5}));
}

TEST(StoreBatch, FutureShiftsReadZerosPastTheLastRow) {
  std::vector<ViewSpec> views{view("next_actions", "actions", 1), view("next2", "actions", I64{1, 2}),
                              view("new_obs", "obs", 1), view("obs_future", "obs", I64{1, 2})};
  TrajectoryStore s(1, basic_columns(), views, opts(2));
  begin(s, {0}, {1});
  step(s, {0}, {2}, {10});
  step(s, {0}, {3}, {20});
  step(s, {0}, {4}, {30});
  s.end_episodes(I64{0});
  const Batch b = s.build_batch(false);
  ASSERT_EQ(b.count, 3);
  EXPECT_EQ(values<std::int64_t>(b, "next_actions"), (I64{20, 30, 0}));
  EXPECT_EQ(values<std::int64_t>(b, "next2"), (I64{20, 30, 30, 0, 0, 0}));
  EXPECT_EQ(values<float>(b, "new_obs"), (F32{2, 3, 4}));
  EXPECT_EQ(values<float>(b, "obs_future"), (F32{2, 3, 3, 4, 4, 0}));
}

TEST(StoreBatch, ObservationColumnsHaveOneMoreRow) {
  std::vector<ColumnSpec> cols{obs_col("obs"), col("actions", DType::Int64),
                               col("mask", DType::UInt8, {}, ColumnKind::Observation)};
  std::vector<ViewSpec> views{view("obs", "obs", 0), view("new_obs", "obs", 1), view("mask", "mask", 0),
                              view("new_mask", "mask", 1)};
  TrajectoryStore s(1, cols, views);
  EXPECT_EQ(s.obs_columns(), (std::vector<std::size_t>{0, 2}));
  const std::vector<Array> first{make_array(F32{1}), make_array(std::vector<std::uint8_t>{7})};
  s.begin_episodes(I64{0}, ins(first));
  for (std::int64_t t = 0; t < 2; ++t) {
    const std::vector<Array> a{make_array(F32{static_cast<float>(t + 2)}), make_array(I64{t}),
                               make_array(std::vector<std::uint8_t>{static_cast<std::uint8_t>(t + 8)})};
    s.add_step(I64{0}, ins(a));
  }
  // Before end: the input dict sees the final observation (row T).
  Inference r = infer(s);
  EXPECT_EQ(r.get<float>("obs"), (F32{3}));
  EXPECT_EQ(r.get<std::uint8_t>("mask"), (std::vector<std::uint8_t>{9}));
  s.end_episodes(I64{0});
  const Batch b = s.build_batch(true);
  ASSERT_EQ(b.count, 2);
  EXPECT_EQ(values<float>(b, "obs"), (F32{1, 2}));
  EXPECT_EQ(values<float>(b, "new_obs"), (F32{2, 3}));
  EXPECT_EQ(values<std::uint8_t>(b, "mask"), (std::vector<std::uint8_t>{7, 8}));
  EXPECT_EQ(values<std::uint8_t>(b, "new_mask"), (std::vector<std::uint8_t>{8, 9}));
}

TEST(StoreBatch, EmptyBatchHasEmptyColumns) {
  TrajectoryStore s(1, basic_columns(), basic_views());
  begin(s, {0}, {1});
  const Batch b = s.build_batch(false);
  EXPECT_EQ(b.count, 0);
  EXPECT_TRUE(b.segments.empty());
  EXPECT_EQ(shape_of(b, "obs"), (I64{0}));
  EXPECT_EQ(shape_of(b, "eps_id"), (I64{0}));
}

TEST(StoreBatch, CompleteOnlyKeepsOngoingEpisodesWhole) {
  auto views = basic_views();
  views.push_back(view("stack", "obs", I64{-1, 0}));
  TrajectoryStore s(2, basic_columns(), views, opts(2));
  begin(s, {0, 1}, {1, 101});
  step(s, {}, {2, 102}, {10, 110});
  step(s, {}, {3, 103}, {20, 120});
  s.end_episodes(I64{0});
  Batch b = s.build_batch(true);
  ASSERT_EQ(b.segments.size(), 1u);
  EXPECT_EQ(b.segments[0].eps_id, 0);
  EXPECT_EQ(values<float>(b, "obs"), (F32{1, 2}));
  EXPECT_EQ(values<float>(b, "new_obs"), (F32{2, 3}));
  EXPECT_EQ(s.num_steps(), 2);
  EXPECT_EQ(s.num_complete_steps(), 0);

  b = s.build_batch(true);  // nothing finished
  EXPECT_EQ(b.count, 0);
  EXPECT_EQ(s.num_steps(), 2);

  step(s, {1}, {104}, {130});
  step(s, {1}, {105}, {140});
  step(s, {1}, {106}, {150});
  s.end_episodes(I64{1});
  b = s.build_batch(true);
  ASSERT_EQ(b.segments.size(), 1u);
  EXPECT_EQ(b.segments[0].eps_id, 1);
  EXPECT_EQ(b.segments[0].t_start, 0);
  EXPECT_EQ(b.segments[0].length, 5);
  EXPECT_TRUE(b.segments[0].finished);
  EXPECT_EQ(values<std::int64_t>(b, "t"), (I64{0, 1, 2, 3, 4}));
  EXPECT_EQ(values<float>(b, "obs"), (F32{101, 102, 103, 104, 105}));
  EXPECT_EQ(values<float>(b, "new_obs"), (F32{102, 103, 104, 105, 106}));
  EXPECT_EQ(values<std::int64_t>(b, "actions"), (I64{110, 120, 130, 140, 150}));
  EXPECT_EQ(values<std::int64_t>(b, "prev_actions"), (I64{0, 110, 120, 130, 140}));
  EXPECT_EQ(values<float>(b, "stack"), (F32{0, 101, 101, 102, 102, 103, 103, 104, 104, 105}));
  EXPECT_EQ(s.num_steps(), 0);
}

// --------------------------------------------------------- fragment cuts

TEST(StoreFragments, ViewsLookBackAcrossTheCut) {
  ColumnSpec so = col("state_out_0", DType::Float32);
  so.pad_row = row_bytes_of(F32{9});
  std::vector<ColumnSpec> cols{obs_col(), col("actions", DType::Int64), so};
  std::vector<ViewSpec> views{view("obs", "obs", 0),
                              view("new_obs", "obs", 1),
                              view("actions", "actions", 0),
                              view("prev_actions", "actions", -1),
                              view("stack", "obs", I64{-2, -1, 0}),
                              view("state_in_0", "state_out_0", -1)};
  TrajectoryStore s(1, cols, views, opts(2));
  // Step t: new obs t + 2, action 10 (t + 1), state_out 10 (t + 1) + 1.
  std::int64_t t = 0;
  auto add = [&](int n) {
    for (int i = 0; i < n; ++i, ++t) {
      const std::vector<Array> a{make_array(F32{static_cast<float>(t + 2)}), make_array(I64{10 * (t + 1)}),
                                 make_array(F32{static_cast<float>(10 * (t + 1) + 1)})};
      s.add_step(I64{0}, ins(a));
    }
  };
  begin(s, {0}, {1});
  add(5);
  Batch b = s.build_batch(false);
  ASSERT_EQ(b.segments.size(), 1u);
  EXPECT_FALSE(b.segments[0].finished);
  EXPECT_EQ(values<std::int64_t>(b, "t"), (I64{0, 1, 2, 3, 4}));
  EXPECT_EQ(values<float>(b, "new_obs"), (F32{2, 3, 4, 5, 6}));
  EXPECT_EQ(values<float>(b, "state_in_0"), (F32{9, 11, 21, 31, 41}));

  // Right after the cut the input dict still reads the earlier steps.
  Inference r = infer(s);
  EXPECT_EQ(r.get<float>("obs"), (F32{6}));
  EXPECT_EQ(r.get<std::int64_t>("prev_actions"), (I64{50}));
  EXPECT_EQ(r.get<float>("stack"), (F32{4, 5, 6}));
  EXPECT_EQ(r.get<float>("state_in_0"), (F32{51}));
  EXPECT_EQ(r.t, (I64{5}));

  add(3);
  b = s.build_batch(false);
  ASSERT_EQ(b.segments.size(), 1u);
  EXPECT_EQ(b.segments[0].eps_id, 0);
  EXPECT_EQ(b.segments[0].t_start, 5);
  EXPECT_EQ(b.segments[0].length, 3);
  EXPECT_EQ(values<std::int64_t>(b, "t"), (I64{5, 6, 7}));
  EXPECT_EQ(values<bool>(b, "is_init"), (B8{false, false, false}));
  EXPECT_EQ(values<std::int64_t>(b, "eps_id"), (I64{0, 0, 0}));
  EXPECT_EQ(values<float>(b, "obs"), (F32{6, 7, 8}));
  EXPECT_EQ(values<float>(b, "new_obs"), (F32{7, 8, 9}));
  EXPECT_EQ(values<std::int64_t>(b, "actions"), (I64{60, 70, 80}));
  EXPECT_EQ(values<std::int64_t>(b, "prev_actions"), (I64{50, 60, 70}));
  EXPECT_EQ(values<float>(b, "stack"), (F32{4, 5, 6, 5, 6, 7, 6, 7, 8}));
  EXPECT_EQ(values<float>(b, "state_in_0"), (F32{51, 61, 71}));

  add(2);
  s.end_episodes(I64{0});
  EXPECT_EQ(s.num_complete_steps(), 2);
  b = s.build_batch(false);
  ASSERT_EQ(b.segments.size(), 1u);
  EXPECT_TRUE(b.segments[0].finished);
  EXPECT_EQ(b.segments[0].t_start, 8);
  EXPECT_EQ(values<std::int64_t>(b, "prev_actions"), (I64{80, 90}));
  EXPECT_EQ(values<float>(b, "stack"), (F32{7, 8, 9, 8, 9, 10}));
  EXPECT_EQ(values<float>(b, "new_obs"), (F32{10, 11}));
  EXPECT_EQ(values<float>(b, "state_in_0"), (F32{81, 91}));
}

TEST(StoreFragments, CutEarlyKeepsPadding) {
  std::vector<ViewSpec> views{view("stack_zero", "obs", I64{-2, -1, 0}),
                              training_only(reset(view("prev_actions_reset", "actions", I64{-2, -1}))),
                              reset(view("stack_reset", "obs", I64{-2, -1, 0}))};
  TrajectoryStore s(1, basic_columns(), views, opts(1));
  begin(s, {0}, {1});
  step(s, {0}, {2}, {10});
  Batch b = s.build_batch(false);  // cut after one step
  EXPECT_EQ(values<float>(b, "stack_reset"), (F32{1, 1, 1}));
  step(s, {0}, {3}, {20});
  Inference r = infer(s);
  EXPECT_EQ(r.get<float>("stack_reset"), (F32{1, 2, 3}));
  b = s.build_batch(false);
  EXPECT_EQ(values<std::int64_t>(b, "t"), (I64{1}));
  EXPECT_EQ(values<float>(b, "stack_zero"), (F32{0, 1, 2}));
  EXPECT_EQ(values<float>(b, "stack_reset"), (F32{1, 1, 2}));
  EXPECT_EQ(values<std::int64_t>(b, "prev_actions_reset"), (I64{10, 10}));
  step(s, {0}, {4}, {30});
  step(s, {0}, {5}, {40});
  b = s.build_batch(false);
  EXPECT_EQ(values<float>(b, "stack_reset"), (F32{1, 2, 3, 2, 3, 4}));
  EXPECT_EQ(values<std::int64_t>(b, "prev_actions_reset"), (I64{10, 20, 20, 30}));
}

TEST(StoreFragments, CutAfterEveryStep) {
  auto views = basic_views();
  views.push_back(view("stack", "obs", I64{-3, -2, -1, 0}));
  TrajectoryStore s(1, basic_columns(), views, opts(1));
  begin(s, {0}, {1});
  // obs row r holds r + 1, action t holds 10 (t + 1).
  for (std::int64_t t = 0; t < 7; ++t) {
    step(s, {0}, {static_cast<float>(t + 2)}, {10 * (t + 1)});
    const Batch b = s.build_batch(false);
    ASSERT_EQ(b.count, 1) << t;
    EXPECT_EQ(values<std::int64_t>(b, "t"), (I64{t}));
    EXPECT_EQ(values<float>(b, "obs"), (F32{static_cast<float>(t + 1)}));
    EXPECT_EQ(values<float>(b, "new_obs"), (F32{static_cast<float>(t + 2)}));
    EXPECT_EQ(values<std::int64_t>(b, "prev_actions"), (I64{10 * t}));
    F32 stack;
    for (std::int64_t k = t - 3; k <= t; ++k) stack.push_back(k < 0 ? 0.0f : static_cast<float>(k + 1));
    EXPECT_EQ(values<float>(b, "stack"), stack) << t;
  }
}

// -------------------------------------------------------------- counters

TEST(StoreCounts, NumStepsAndNumCompleteSteps) {
  TrajectoryStore s(2, basic_columns(), basic_views());
  EXPECT_EQ(s.num_steps(), 0);
  begin(s, {0, 1}, {1, 2});
  EXPECT_EQ(s.num_steps(), 0);
  for (int i = 0; i < 3; ++i) step(s, {}, {1, 2}, {1, 2});
  EXPECT_EQ(s.num_steps(), 6);
  EXPECT_EQ(s.num_complete_steps(), 0);
  s.end_episodes(I64{0});
  EXPECT_EQ(s.num_steps(), 6);
  EXPECT_EQ(s.num_complete_steps(), 3);
  step(s, {1}, {3}, {3});
  EXPECT_EQ(s.num_steps(), 7);
  EXPECT_EQ(s.build_batch(true).count, 3);
  EXPECT_EQ(s.num_steps(), 4);
  EXPECT_EQ(s.num_complete_steps(), 0);
  EXPECT_EQ(s.build_batch(false).count, 4);
  EXPECT_EQ(s.num_steps(), 0);
  step(s, {1}, {4}, {4});
  EXPECT_EQ(s.num_steps(), 1);
  EXPECT_EQ(s.num_complete_steps(), 0);
  s.end_episodes(I64{1});
  EXPECT_EQ(s.num_complete_steps(), 1);
  const Batch b = s.build_batch(false);
  EXPECT_EQ(b.count, 1);
  EXPECT_EQ(values<std::int64_t>(b, "t"), (I64{4}));
  EXPECT_EQ(s.num_steps(), 0);
}

// ---------------------------------------------------------------- memory

TEST(StoreMemory, NbytesCountsStoredRows) {
  // One slot, chunk_rows 2. A storage block holds at most chunk_rows plus the
  // column's lookback plus one rows (here <= 4), so the slack is at most one
  // block per column: 4 * (4 + 8 + 4) = 64 bytes.
  TrajectoryStore s(1, basic_columns(), basic_views(), opts(2));
  EXPECT_EQ(s.nbytes(), 0u);
  begin(s, {0}, {0});
  EXPECT_GE(s.nbytes(), 4u);  // the first observation
  EXPECT_LE(s.nbytes(), 4u + 16u);
  for (int i = 0; i < 20; ++i) step(s, {0}, {1}, {1});
  // obs: 21 rows of 4 bytes; actions: 20 of 8; rewards: 20 of 4.
  const std::size_t data = 21u * 4u + 20u * 8u + 20u * 4u;  // 324
  EXPECT_GE(s.nbytes(), data);
  EXPECT_LE(s.nbytes(), data + 64u);
}

TEST(StoreMemory, NbytesShrinksAfterEpisodesAreEmitted) {
  TrajectoryStore s(1, basic_columns(), basic_views(), opts(2));
  begin(s, {0}, {0});
  for (int i = 0; i < 20; ++i) step(s, {0}, {1}, {1});
  const std::size_t full = s.nbytes();
  s.end_episodes(I64{0});
  EXPECT_EQ(s.nbytes(), full);  // not emitted yet
  s.build_batch(false);
  const std::size_t after = s.nbytes();
  EXPECT_LT(after, full / 2) << "finished, emitted episodes must be freed";

  // Steady state: the same episode again allocates nothing more.
  for (int round = 0; round < 3; ++round) {
    begin(s, {0}, {0});
    for (int i = 0; i < 20; ++i) step(s, {0}, {1}, {1});
    s.end_episodes(I64{0});
    s.build_batch(false);
    EXPECT_EQ(s.nbytes(), after) << round;
  }
}

TEST(StoreMemory, FragmentCutFreesWhatNoViewReads) {
  TrajectoryStore s(1, basic_columns(), basic_views(), opts(2));
  begin(s, {0}, {0});
  for (int i = 0; i < 40; ++i) step(s, {0}, {1}, {1});
  const std::size_t full = s.nbytes();
  s.build_batch(false);  // ongoing: keeps obs row 40 and actions row 39 only
  EXPECT_LT(s.nbytes(), full / 2);
  // And the episode goes on correctly.
  step(s, {0}, {2}, {2});
  const Batch b = s.build_batch(false);
  EXPECT_EQ(values<std::int64_t>(b, "prev_actions"), (I64{1}));
  EXPECT_EQ(values<float>(b, "obs"), (F32{1}));
  EXPECT_EQ(values<float>(b, "new_obs"), (F32{2}));
}

void run_vector_env(bool complete_only, bool restart_next_step) {
  // Three envs in lockstep with episodes of 7, 11 and 13 steps, a batch every
  // 10 steps: storage must reach a steady state, not grow with time.
  SCOPED_TRACE(std::string(complete_only ? "complete_only" : "truncate") +
               (restart_next_step ? ", reset one step later" : ", reset at once"));
  TrajectoryStore s(3, basic_columns(), basic_views(), opts(10));
  const I64 lengths{7, 11, 13};
  begin(s, {0, 1, 2}, {0, 0, 0});
  std::vector<std::size_t> after_build;
  std::int64_t emitted = 0;
  for (int t = 1; t <= 600; ++t) {
    I64 idle, active;
    const I64 cur = s.slot_eps_ids();
    for (std::int64_t e = 0; e < 3; ++e) (cur[static_cast<std::size_t>(e)] < 0 ? idle : active).push_back(e);
    // With restart_next_step, an env whose episode ended sits out one step.
    if (idle.empty()) step(s, {}, {1, 1, 1}, {1, 1, 1});
    else if (!active.empty()) step(s, active, F32(active.size(), 1.0f), I64(active.size(), 1));
    if (!idle.empty()) begin(s, idle, F32(idle.size(), 0.0f));
    const I64 len = s.slot_lengths();
    I64 done;
    for (std::int64_t e = 0; e < 3; ++e) {
      if (len[static_cast<std::size_t>(e)] == lengths[static_cast<std::size_t>(e)]) done.push_back(e);
    }
    if (!done.empty()) s.end_episodes(done);
    if (!restart_next_step) {
      I64 idle_now;
      const I64 ids = s.slot_eps_ids();
      for (std::int64_t e = 0; e < 3; ++e) {
        if (ids[static_cast<std::size_t>(e)] < 0) idle_now.push_back(e);
      }
      if (!idle_now.empty()) begin(s, idle_now, F32(idle_now.size(), 0.0f));
    }
    if (t % 10 == 0) {
      emitted += s.build_batch(complete_only).count;
      after_build.push_back(s.nbytes());
    }
  }
  EXPECT_GT(emitted, 1500);
  const std::size_t half = after_build.size() / 2;
  const std::size_t first_max = *std::max_element(after_build.begin(), after_build.begin() + static_cast<std::ptrdiff_t>(half));
  const std::size_t second_max = *std::max_element(after_build.begin() + static_cast<std::ptrdiff_t>(half), after_build.end());
  EXPECT_LE(second_max, first_max) << "storage keeps growing";
}

TEST(StoreMemory, VectorEnvReachesSteadyState) {
  run_vector_env(false, false);
  run_vector_env(true, false);
  run_vector_env(false, true);
  run_vector_env(true, true);
}

TEST(StoreMemory, BufferLiveCountReturnsWhenBatchesAreDropped) {
  const long start = Buffer::live_count();
  {
    TrajectoryStore s(2, basic_columns(), basic_views());
    begin(s, {0, 1}, {1, 2});
    step(s, {}, {3, 4}, {5, 6});
    {
      const Batch b = s.build_batch(false);
      EXPECT_EQ(Buffer::live_count(), start + static_cast<long>(b.columns.size()));
    }
    EXPECT_EQ(Buffer::live_count(), start);
  }
  EXPECT_EQ(Buffer::live_count(), start);
}

TEST(StoreMemory, BatchOutlivesTheStore) {
  const long start = Buffer::live_count();
  Batch b;
  {
    TrajectoryStore s(1, basic_columns(), basic_views());
    begin(s, {0}, {1});
    step(s, {0}, {2}, {7});
    b = s.build_batch(false);
  }
  EXPECT_EQ(values<float>(b, "obs"), (F32{1}));
  EXPECT_EQ(values<float>(b, "new_obs"), (F32{2}));
  EXPECT_EQ(values<std::int64_t>(b, "actions"), (I64{7}));
  EXPECT_GT(Buffer::live_count(), start);
  b = Batch{};
  EXPECT_EQ(Buffer::live_count(), start);
}

TEST(StoreBatch, ZeroSizeColumns) {
  // A column of shape (0,) (e.g. an empty Box) stores nothing but still has
  // rows of the right shape in every view.
  std::vector<ColumnSpec> cols{obs_col(), col("actions", DType::Int64), col("empty", DType::Float32, {0})};
  std::vector<ViewSpec> views{view("obs", "obs", 0), view("prev_actions", "actions", -1),
                              view("empty", "empty", 0), view("prev_empty", "empty", -1),
                              view("empty_hist", "empty", I64{-2, -1})};
  TrajectoryStore s(2, cols, views, opts(2));
  begin(s, {0, 1}, {1, 2});
  for (int i = 0; i < 3; ++i) {
    const float o = static_cast<float>(10 * (i + 1));
    const std::vector<Array> a{make_array(F32{o, o + 1}), make_array(I64{i, i + 100}),
                               make_array<float>({2, 0}, {})};
    s.add_step(I64{}, ins(a));
  }
  const Inference r = infer(s);
  EXPECT_EQ(r.get<float>("obs"), (F32{30, 31}));
  EXPECT_EQ(r.get<std::int64_t>("prev_actions"), (I64{2, 102}));
  EXPECT_TRUE(r.get<float>("prev_empty").empty());
  const Batch b = s.build_batch(false);
  EXPECT_EQ(b.count, 6);
  EXPECT_EQ(shape_of(b, "empty"), (I64{6, 0}));
  EXPECT_EQ(shape_of(b, "empty_hist"), (I64{6, 2, 0}));
  EXPECT_EQ(values<float>(b, "obs"), (F32{1, 10, 20, 2, 11, 21}));
  EXPECT_EQ(values<std::int64_t>(b, "prev_actions"), (I64{0, 0, 1, 0, 100, 101}));
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

// ------------------------------------------------- slots in and out of step

std::vector<ViewSpec> alignment_views() {
  return {view("obs", "obs", 0),          view("new_obs", "obs", 1),          view("prev_obs", "obs", -1),
          view("actions", "actions", 0),  view("prev_actions", "actions", -1), view("stack", "obs", I64{-1, 0})};
}

TEST(StoreSlots, LockstepWithARestartedSlot) {
  TrajectoryStore s(3, basic_columns(), alignment_views(), opts(2));
  begin(s, {0, 1, 2}, {1, 2, 3});
  step(s, {}, {11, 12, 13}, {1, 2, 3});
  step(s, {}, {21, 22, 23}, {4, 5, 6});
  s.end_episodes(I64{1});
  EXPECT_EQ(begin(s, {1}, {50}), (I64{3}));
  for (const I64& slots : {I64{}, I64{0, 1, 2}}) {
    const Inference r = infer(s, slots);
    EXPECT_EQ(r.get<float>("obs"), (F32{21, 50, 23}));
    EXPECT_EQ(r.get<float>("prev_obs"), (F32{11, 0, 13}));
    EXPECT_EQ(r.get<std::int64_t>("prev_actions"), (I64{4, 0, 6}));
    EXPECT_EQ(r.get<float>("stack"), (F32{11, 21, 0, 50, 13, 23}));
    EXPECT_EQ(r.t, (I64{2, 0, 2}));
    EXPECT_EQ(r.eps, (I64{0, 3, 2}));
  }
  Inference r = infer(s, {2, 1});
  EXPECT_EQ(r.get<float>("obs"), (F32{23, 50}));
  EXPECT_EQ(r.get<float>("prev_obs"), (F32{13, 0}));

  step(s, {}, {31, 51, 33}, {7, 8, 9});
  r = infer(s);
  EXPECT_EQ(r.get<float>("obs"), (F32{31, 51, 33}));
  EXPECT_EQ(r.get<float>("prev_obs"), (F32{21, 50, 23}));
  EXPECT_EQ(r.get<std::int64_t>("prev_actions"), (I64{7, 8, 9}));
  EXPECT_EQ(r.get<float>("stack"), (F32{21, 31, 50, 51, 23, 33}));

  const Batch b = s.build_batch(false);
  ASSERT_EQ(b.count, 9);
  EXPECT_EQ(values<std::int64_t>(b, "eps_id"), (I64{1, 1, 0, 0, 0, 3, 2, 2, 2}));
  EXPECT_EQ(values<std::int64_t>(b, "env_id"), (I64{1, 1, 0, 0, 0, 1, 2, 2, 2}));
  EXPECT_EQ(values<std::int64_t>(b, "t"), (I64{0, 1, 0, 1, 2, 0, 0, 1, 2}));
  EXPECT_EQ(values<float>(b, "obs"), (F32{2, 12, 1, 11, 21, 50, 3, 13, 23}));
  EXPECT_EQ(values<float>(b, "new_obs"), (F32{12, 22, 11, 21, 31, 51, 13, 23, 33}));
  EXPECT_EQ(values<std::int64_t>(b, "actions"), (I64{2, 5, 1, 4, 7, 8, 3, 6, 9}));
  EXPECT_EQ(values<std::int64_t>(b, "prev_actions"), (I64{0, 2, 0, 1, 4, 0, 0, 3, 6}));
  EXPECT_EQ(values<float>(b, "prev_obs"), (F32{0, 2, 0, 1, 11, 0, 0, 3, 13}));
}

TEST(StoreSlots, SlotsOutOfStep) {
  TrajectoryStore s(2, basic_columns(), alignment_views(), opts(2));
  begin(s, {0, 1}, {1, 2});
  step(s, {1}, {12}, {20});  // slot 1 runs ahead
  step(s, {1}, {22}, {21});
  step(s, {0}, {11}, {10});
  step(s, {}, {21, 32}, {11, 22});
  EXPECT_EQ(s.slot_lengths(), (I64{2, 3}));
  Inference r = infer(s);
  EXPECT_EQ(r.get<float>("obs"), (F32{21, 32}));
  EXPECT_EQ(r.get<float>("prev_obs"), (F32{11, 22}));
  EXPECT_EQ(r.get<std::int64_t>("prev_actions"), (I64{11, 22}));
  EXPECT_EQ(r.get<float>("stack"), (F32{11, 21, 22, 32}));
  EXPECT_EQ(r.t, (I64{2, 3}));

  Batch b = s.build_batch(false);
  ASSERT_EQ(b.count, 5);
  EXPECT_EQ(values<std::int64_t>(b, "eps_id"), (I64{0, 0, 1, 1, 1}));
  EXPECT_EQ(values<float>(b, "obs"), (F32{1, 11, 2, 12, 22}));
  EXPECT_EQ(values<float>(b, "new_obs"), (F32{11, 21, 12, 22, 32}));
  EXPECT_EQ(values<std::int64_t>(b, "actions"), (I64{10, 11, 20, 21, 22}));
  EXPECT_EQ(values<std::int64_t>(b, "prev_actions"), (I64{0, 10, 0, 20, 21}));

  step(s, {0}, {31}, {12});
  step(s, {}, {41, 42}, {13, 23});
  r = infer(s, {1, 0});
  EXPECT_EQ(r.get<float>("stack"), (F32{32, 42, 31, 41}));
  s.end_episodes(I64{});
  b = s.build_batch(false);
  ASSERT_EQ(b.segments.size(), 2u);
  EXPECT_EQ(b.segments[0].t_start, 2);
  EXPECT_EQ(b.segments[1].t_start, 3);
  EXPECT_EQ(values<std::int64_t>(b, "t"), (I64{2, 3, 3}));
  EXPECT_EQ(values<float>(b, "obs"), (F32{21, 31, 32}));
  EXPECT_EQ(values<float>(b, "new_obs"), (F32{31, 41, 42}));
  EXPECT_EQ(values<std::int64_t>(b, "prev_actions"), (I64{11, 12, 22}));
  EXPECT_EQ(values<float>(b, "stack"), (F32{11, 21, 21, 31, 22, 32}));
}

// KNOWN BUG (disabled so that the suite passes; run with
// --gtest_also_run_disabled_tests): with the time-major BlockStream storage,
// one slot whose ongoing episode does not step pins every later stream
// position of every slot, so emitted episodes of the other slots are never
// freed and nbytes grows without bound. Enable once fixed.
TEST(StoreMemory, StalledSlotDoesNotPinFinishedEpisodes) {
  // Slot 1 has taken one step and then waits (e.g. an agent that does not act
  // for a while); slot 0 runs whole episodes, which are emitted and must be
  // freed (docs/collector.md: "Finished episodes are freed").
  TrajectoryStore s(2, basic_columns(), basic_views(), opts(2));
  begin(s, {0, 1}, {0, 0});
  step(s, {}, {1, 1}, {1, 1});
  std::size_t after_first = 0;
  for (int round = 0; round < 3; ++round) {
    if (round > 0) begin(s, {0}, {0});
    for (int i = 0; i < 100; ++i) step(s, {0}, {1}, {1});
    s.end_episodes(I64{0});
    const std::size_t full = s.nbytes();
    s.build_batch(false);
    EXPECT_LT(s.nbytes(), full / 2) << "round " << round << ": emitted episode not freed";
    if (round == 0) after_first = s.nbytes();
    else EXPECT_LE(s.nbytes(), after_first) << "round " << round << ": storage keeps growing";
  }
}

// ------------------------------------------- random scripts against a model

/// The obvious model: each episode keeps every row of every column in a
/// vector; a view at t reads row t + s, the pad row (or row 0 with reset
/// padding) before row 0, and zeros past the last row.
class Model {
 public:
  Model(std::int64_t num_slots, std::vector<ColumnSpec> columns, std::vector<ViewSpec> views)
      : columns_(std::move(columns)), views_(std::move(views)), slots_(static_cast<std::size_t>(num_slots)) {}

  struct Episode {
    std::int64_t eps_id = 0;
    std::int64_t slot = 0;
    std::int64_t steps = 0;
    std::int64_t emitted = 0;
    bool finished = false;
    std::vector<std::vector<std::vector<std::byte>>> rows;  // per column, per row
  };

  void begin(const I64& slots, const std::vector<std::vector<std::byte>>& first_obs_rows) {
    // first_obs_rows[k * n + i]: observation column k, slot i.
    const std::size_t n = slots.size();
    for (std::size_t i = 0; i < n; ++i) {
      auto e = std::make_shared<Episode>();
      e->eps_id = next_eps_++;
      e->slot = slots[i];
      e->rows.resize(columns_.size());
      std::size_t k = 0;
      for (std::size_t c = 0; c < columns_.size(); ++c) {
        if (columns_[c].kind == ColumnKind::Observation) e->rows[c].push_back(first_obs_rows[k++ * n + i]);
      }
      slots_[static_cast<std::size_t>(slots[i])] = e;
    }
  }

  void step(const I64& slots, const std::vector<std::vector<std::vector<std::byte>>>& rows) {
    for (std::size_t i = 0; i < slots.size(); ++i) {
      Episode& e = *slots_[static_cast<std::size_t>(slots[i])];
      for (std::size_t c = 0; c < columns_.size(); ++c) e.rows[c].push_back(rows[c][i]);
      ++e.steps;
    }
  }

  void end(const I64& slots) {
    for (auto s : slots) {
      auto e = std::move(slots_[static_cast<std::size_t>(s)]);
      e->finished = true;
      if (e->steps > e->emitted) finished_.push_back(e);
    }
  }

  std::vector<std::byte> row(const Episode& e, std::size_t c, std::int64_t r, Padding padding) const {
    const ColumnSpec& col = columns_[c];
    const auto& rows = e.rows[c];
    if (r < 0) {
      if (padding == Padding::Reset && !rows.empty()) return rows[0];
      if (!col.pad_row.empty()) return col.pad_row;
      return std::vector<std::byte>(col.row_bytes(), std::byte{0});
    }
    if (r >= static_cast<std::int64_t>(rows.size())) return std::vector<std::byte>(col.row_bytes(), std::byte{0});
    return rows[static_cast<std::size_t>(r)];
  }

  void append_view(const Episode& e, const ViewSpec& v, std::int64_t t, std::vector<std::byte>& out) const {
    const auto c = static_cast<std::size_t>(column(v.column));
    for (auto sh : v.shifts) {
      const auto r = row(e, c, t + sh, v.padding);
      out.insert(out.end(), r.begin(), r.end());
    }
  }

  std::int64_t column(const std::string& name) const {
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      if (columns_[c].name == name) return static_cast<std::int64_t>(c);
    }
    return -1;
  }

  /// Expected gather_inference output of view v for `slots`.
  std::vector<std::byte> inference(const ViewSpec& v, const I64& slots) const {
    std::vector<std::byte> out;
    for (auto s : slots) {
      const Episode& e = *slots_[static_cast<std::size_t>(s)];
      append_view(e, v, e.steps, out);
    }
    return out;
  }

  /// The step up to which a batch emits episode e: all its steps, less
  /// hold[slot] if it is ongoing and `hold` is not empty.
  static std::int64_t upto(const Episode& e, const I64& hold) {
    return e.finished || hold.empty() ? e.steps : e.steps - hold[static_cast<std::size_t>(e.slot)];
  }

  std::vector<const Episode*> batch_order(bool complete_only, const I64& hold = {}) const {
    std::vector<const Episode*> order;
    for (const auto& e : finished_) order.push_back(e.get());
    if (!complete_only) {
      for (const auto& e : slots_) {
        if (e && upto(*e, hold) > e->emitted) order.push_back(e.get());
      }
    }
    return order;
  }

  void emitted(bool complete_only, const I64& hold = {}) {
    finished_.clear();
    if (!complete_only) {
      for (auto& e : slots_) {
        if (e) e->emitted = upto(*e, hold);
      }
    }
  }

  const std::vector<std::shared_ptr<Episode>>& slots() const { return slots_; }
  const std::vector<std::shared_ptr<Episode>>& finished() const { return finished_; }

 private:
  std::vector<ColumnSpec> columns_;
  std::vector<ViewSpec> views_;
  std::vector<std::shared_ptr<Episode>> slots_;
  std::vector<std::shared_ptr<Episode>> finished_;
  std::int64_t next_eps_ = 0;
};

template <class T>
std::vector<std::byte> bytes_of(std::initializer_list<T> v) {
  return row_bytes_of(std::vector<T>(v));
}

/// Every column kind, dtype and view kind: two observation columns (one a
/// vector), a scalar int64, a vector with a pad row, a bool.
std::vector<ColumnSpec> model_columns() {
  ColumnSpec so = col("state_out_0", DType::Float32, {2});
  so.pad_row = bytes_of<float>({-1.0f, -2.0f});
  return {obs_col("obs"), col("pos", DType::Int32, {2}, ColumnKind::Observation), col("actions", DType::Int64), so,
          col("flag", DType::Bool)};
}

std::vector<ViewSpec> model_views(std::int64_t repeat) {
  ViewSpec far = training_only(view("far_obs", "obs", -5));
  return {view("obs", "obs", 0),
          view("new_obs", "obs", 1),
          view("stack", "obs", I64{-2, -1, 0}),
          reset(view("stack_reset", "obs", I64{-2, -1, 0})),
          view("pos", "pos", 0),
          view("new_pos", "pos", 1),
          view("pos_hist", "pos", I64{-3, -1}),
          view("actions", "actions", 0),
          view("prev_actions", "actions", -1),
          view("next_actions", "actions", 1),
          view("prev3", "actions", I64{-3, -2, -1}),
          reset(view("around_reset", "actions", I64{-1, 0, 1})),
          repeated(view("state_in_0", "state_out_0", -1), repeat),
          view("state_out_0", "state_out_0", 0),
          view("flag", "flag", 0),
          view("prev_flag", "flag", -1),
          far};
}

StoreOptions lazy_opts(std::int64_t chunk_rows, std::size_t lazy_min_row_bytes) {
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
void check_lazy_layout(const TrajectoryStore& s, const Batch& b, std::size_t threshold) {
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

class Driver {
 public:
  /// `lazy_min_row_bytes`: the store's lazy threshold; `use_hold`: batches
  /// hold back a random number of each ongoing episode's newest steps.
  Driver(std::int64_t num_slots, std::int64_t chunk_rows, std::int64_t repeat, unsigned seed,
         std::size_t lazy_min_row_bytes = 0, bool use_hold = false)
      : num_slots_(num_slots),
        repeat_(repeat),
        lazy_(lazy_min_row_bytes),
        use_hold_(use_hold),
        store_(num_slots, model_columns(), model_views(repeat), lazy_opts(chunk_rows, lazy_min_row_bytes)),
        model_(num_slots, model_columns(), model_views(repeat)),
        rng_(seed) {}

  std::int64_t rand(std::int64_t n) { return static_cast<std::int64_t>(rng_() % static_cast<std::uint32_t>(n)); }

  I64 active() const {
    I64 out;
    for (std::int64_t s = 0; s < num_slots_; ++s) {
      if (model_.slots()[static_cast<std::size_t>(s)]) out.push_back(s);
    }
    return out;
  }
  I64 idle() const {
    I64 out;
    for (std::int64_t s = 0; s < num_slots_; ++s) {
      if (!model_.slots()[static_cast<std::size_t>(s)]) out.push_back(s);
    }
    return out;
  }
  /// A random non-empty subset of `from`, in random order.
  I64 subset(I64 from) {
    for (std::size_t i = from.size(); i > 1; --i) std::swap(from[i - 1], from[static_cast<std::size_t>(rand(static_cast<std::int64_t>(i)))]);
    from.resize(static_cast<std::size_t>(1 + rand(static_cast<std::int64_t>(from.size()))));
    return from;
  }

  void begin(const I64& slots) {
    const auto n = static_cast<std::int64_t>(slots.size());
    F32 obs;
    std::vector<std::int32_t> pos;
    std::vector<std::vector<std::byte>> rows(2 * slots.size());
    for (std::size_t i = 0; i < slots.size(); ++i) {
      const float o = static_cast<float>(++counter_);
      const auto p = static_cast<std::int32_t>(counter_);
      obs.push_back(o);
      pos.push_back(p);
      pos.push_back(-p);
      rows[i] = bytes_of<float>({o});
      rows[slots.size() + i] = bytes_of<std::int32_t>({p, -p});
    }
    const std::vector<Array> a{make_array(obs), make_array<std::int32_t>({n, 2}, pos)};
    store_.begin_episodes(slots, ins(a));
    model_.begin(slots, rows);
  }

  void step(const I64& slots) {
    const std::size_t n = slots.empty() ? static_cast<std::size_t>(num_slots_) : slots.size();
    I64 model_slots = slots;
    if (slots.empty()) model_slots = active();
    F32 obs, state;
    std::vector<std::int32_t> pos;
    I64 act;
    std::vector<bool> flag;
    std::vector<std::vector<std::vector<std::byte>>> rows(5);
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t v = ++counter_;
      const auto f = static_cast<float>(v);
      const auto p = static_cast<std::int32_t>(v);
      obs.push_back(f);
      pos.push_back(p);
      pos.push_back(-p);
      act.push_back(v);
      state.push_back(f);
      state.push_back(-f);
      flag.push_back(v % 3 == 0);
      rows[0].push_back(bytes_of<float>({f}));
      rows[1].push_back(bytes_of<std::int32_t>({p, -p}));
      rows[2].push_back(bytes_of<std::int64_t>({v}));
      rows[3].push_back(bytes_of<float>({f, -f}));
      rows[4].push_back(bytes_of<std::uint8_t>({static_cast<std::uint8_t>(v % 3 == 0)}));
    }
    const auto nn = static_cast<std::int64_t>(n);
    const std::vector<Array> a{make_array(obs), make_array<std::int32_t>({nn, 2}, pos), make_array(act),
                               make_array<float>({nn, 2}, state), make_array(flag)};
    store_.add_step(slots, ins(a));
    model_.step(model_slots, rows);
  }

  void end(const I64& slots) {
    store_.end_episodes(slots);
    model_.end(slots);
  }

  void check_inference(const I64& slots) {
    const I64 model_slots = slots.empty() ? active() : slots;
    const Inference r = infer(store_, slots);
    for (std::size_t k = 0; k < store_.inference_views().size(); ++k) {
      const ViewSpec& v = store_.views()[store_.inference_views()[k]];
      ASSERT_TRUE(testing::same_bytes(r.out[k], model_.inference(v, model_slots), store_.view_row_bytes(
                                          store_.inference_views()[k])))
          << "inference view '" << v.name << "' at op " << op_;
    }
    I64 t, eps;
    for (auto s : model_slots) {
      t.push_back(model_.slots()[static_cast<std::size_t>(s)]->steps);
      eps.push_back(model_.slots()[static_cast<std::size_t>(s)]->eps_id);
    }
    ASSERT_EQ(r.t, t) << "op " << op_;
    ASSERT_EQ(r.eps, eps) << "op " << op_;
  }

  void check_batch(bool complete_only) {
    I64 hold;
    if (use_hold_) {
      for (const auto& e : model_.slots()) hold.push_back(e ? rand(e->steps - e->emitted + 1) : 0);
    }
    const auto order = model_.batch_order(complete_only, hold);
    const Batch b = store_.build_batch(complete_only, hold);
    ASSERT_EQ(b.segments.size(), order.size()) << "op " << op_;
    std::int64_t count = 0, seqs = 0;
    I64 eps, env, ts;
    std::vector<bool> init;
    std::vector<std::int32_t> seq_lens;
    for (std::size_t i = 0; i < order.size(); ++i) {
      const auto& e = *order[i];
      const Segment& g = b.segments[i];
      const std::int64_t end = Model::upto(e, hold);
      const std::int64_t len = end - e.emitted;
      ASSERT_EQ(g.eps_id, e.eps_id) << "op " << op_;
      ASSERT_EQ(g.env_id, e.slot);
      ASSERT_EQ(g.t_start, e.emitted);
      ASSERT_EQ(g.length, len);
      ASSERT_EQ(g.row_offset, count);
      ASSERT_EQ(g.finished, e.finished);
      for (std::int64_t t = e.emitted; t < end; ++t) {
        eps.push_back(e.eps_id);
        env.push_back(e.slot);
        ts.push_back(t);
        init.push_back(t == 0);
      }
      count += len;
      if (repeat_ > 1) {
        ASSERT_EQ(g.seq_offset, seqs);
        for (std::int64_t q = 0; q * repeat_ < len; ++q, ++seqs)
          seq_lens.push_back(static_cast<std::int32_t>(std::min(repeat_, len - q * repeat_)));
      }
    }
    ASSERT_EQ(b.count, count);
    EXPECT_EQ(values<std::int64_t>(b, "eps_id"), eps);
    EXPECT_EQ(values<std::int64_t>(b, "env_id"), env);
    EXPECT_EQ(values<std::int64_t>(b, "t"), ts);
    EXPECT_EQ(values<bool>(b, "is_init"), init);
    if (repeat_ > 1) {
      EXPECT_EQ(b.num_seqs, seqs);
      EXPECT_EQ(values<std::int32_t>(b, "seq_lens"), seq_lens);
    }
    for (std::size_t v : store_.training_views()) {
      const ViewSpec& view = store_.views()[v];
      std::vector<std::byte> want;
      for (const auto* e : order) {
        const std::int64_t end = Model::upto(*e, hold);
        if (view.batch_repeat > 1) {
          for (std::int64_t t = e->emitted; t < end; t += view.batch_repeat) model_.append_view(*e, view, t, want);
        } else {
          for (std::int64_t t = e->emitted; t < end; ++t) model_.append_view(*e, view, t, want);
        }
      }
      const BatchColumn* c = find_column(b, view.name);
      ASSERT_NE(c, nullptr) << view.name;
      ASSERT_EQ(testing::num_elems(c->shape) * itemsize(c->dtype), want.size()) << view.name << " at op " << op_;
      // A lazy column's value is base_rows[index].
      const std::vector<std::byte> got = testing::materialize(b, *c);
      ASSERT_TRUE(testing::same_bytes(got, want, store_.view_row_bytes(v)))
          << "batch view '" << view.name << "'" << (c->base >= 0 ? " (lazy)" : "") << " at op " << op_;
    }
    ASSERT_NO_FATAL_FAILURE(check_lazy_layout(store_, b, lazy_)) << "op " << op_;
    model_.emitted(complete_only, hold);
  }

  void check_counts() {
    std::int64_t steps = 0, complete = 0;
    I64 ids, lengths;
    for (const auto& e : model_.finished()) complete += e->steps - e->emitted;
    steps = complete;
    for (const auto& e : model_.slots()) {
      if (e) steps += e->steps - e->emitted;
      ids.push_back(e ? e->eps_id : -1);
      lengths.push_back(e ? e->steps : -1);
    }
    ASSERT_EQ(store_.num_steps(), steps) << "op " << op_;
    ASSERT_EQ(store_.num_complete_steps(), complete) << "op " << op_;
    ASSERT_EQ(store_.slot_eps_ids(), ids) << "op " << op_;
    ASSERT_EQ(store_.slot_lengths(), lengths) << "op " << op_;
  }

  void run(int num_ops) {
    for (op_ = 0; op_ < num_ops; ++op_) {
      const I64 act = active();
      const I64 idl = idle();
      const std::int64_t r = rand(100);
      if (!idl.empty() && (act.empty() || r < 10)) {
        begin(subset(idl));
      } else if (r < 40 && idl.empty()) {
        step({});
      } else if (r < 70) {
        step(subset(act));
      } else if (r < 76) {
        end(subset(act));
      } else if (r < 80) {
        ASSERT_NO_FATAL_FAILURE(check_batch(false));
      } else if (r < 82) {
        ASSERT_NO_FATAL_FAILURE(check_batch(true));
      } else if (idl.empty() && r < 91) {
        ASSERT_NO_FATAL_FAILURE(check_inference({}));
      } else {
        ASSERT_NO_FATAL_FAILURE(check_inference(subset(act)));
      }
      ASSERT_NO_FATAL_FAILURE(check_counts());
    }
    if (!active().empty()) end(active());
    ASSERT_NO_FATAL_FAILURE(check_batch(false));
    EXPECT_EQ(store_.num_steps(), 0);
  }

 private:
  std::int64_t num_slots_;
  std::int64_t repeat_;
  std::size_t lazy_;
  bool use_hold_;
  TrajectoryStore store_;
  Model model_;
  std::mt19937 rng_;
  std::int64_t counter_ = 0;
  int op_ = 0;
};

TEST(StoreModel, RandomScriptsMatchTheModel) {
  struct Config {
    std::int64_t slots, chunk_rows, repeat;
  };
  const Config configs[] = {{1, 1, 1}, {1, 4, 3}, {3, 1, 1}, {3, 2, 4}, {4, 5, 1}, {2, 64, 2}, {5, 3, 3}};
  unsigned seed = 1;
  for (const Config& c : configs) {
    for (int rep = 0; rep < 3; ++rep, ++seed) {
      SCOPED_TRACE("slots " + std::to_string(c.slots) + " chunk_rows " + std::to_string(c.chunk_rows) + " repeat " +
                   std::to_string(c.repeat) + " seed " + std::to_string(seed));
      Driver d(c.slots, c.chunk_rows, c.repeat, seed);
      d.run(1000);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(StoreModel, RandomScriptsWithLazyColumnsAndHoldMatchTheModel) {
  struct Config {
    std::int64_t slots, chunk_rows, repeat;
  };
  const Config configs[] = {{1, 1, 1}, {1, 4, 3}, {3, 1, 1}, {3, 2, 4}, {4, 5, 1}, {2, 64, 2}, {5, 3, 3}};
  // 0: eager (hold only); 1: every training view with batch_repeat 1 is lazy;
  // 8: pos, actions and state_out_0 lazy, obs (4 bytes) and flag (1) eager.
  const std::size_t thresholds[] = {0, 1, 8};
  unsigned seed = 100;
  for (std::size_t lazy : thresholds) {
    for (const Config& c : configs) {
      for (int rep = 0; rep < 2; ++rep, ++seed) {
        SCOPED_TRACE("lazy_min_row_bytes " + std::to_string(lazy) + " slots " + std::to_string(c.slots) +
                     " chunk_rows " + std::to_string(c.chunk_rows) + " repeat " + std::to_string(c.repeat) +
                     " seed " + std::to_string(seed));
        Driver d(c.slots, c.chunk_rows, c.repeat, seed, lazy, /*use_hold=*/true);
        d.run(1000);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

// ------------------------------------------------------------ lazy columns

/// A uint8 [4, 4] observation (16 bytes a row), a float32 [3] state whose pad
/// row is an initial state (12 bytes), int64 actions (8) and float32 rewards (4).
std::vector<ColumnSpec> lazy_columns() {
  ColumnSpec state = col("state", DType::Float32, {3});
  state.pad_row = bytes_of<float>({0.5f, -1.0f, 2.0f});
  return {col("obs", DType::UInt8, {4, 4}, ColumnKind::Observation), state, col("actions", DType::Int64),
          col("rewards", DType::Float32)};
}

/// Int shifts (0, +1 = new_obs, -1, +2), a range ("-3:0"), lists with gaps and
/// past the last row, zero and reset padding, and the state's pad row.
std::vector<ViewSpec> lazy_views() {
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
std::vector<std::byte> counter_row(const ColumnSpec& col, std::int64_t v) {
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

/// The int64 index of lazy column `name`, flattened.
I64 lazy_index(const Batch& b, std::string_view name) {
  const BatchColumn* c = find_column(b, name);
  if (c == nullptr || c->base < 0) {
    ADD_FAILURE() << "no lazy column '" << name << "'";
    return {};
  }
  return read_values<std::int64_t>(c->buffer->data(), testing::num_elems(c->index_shape));
}

TEST(StoreLazy, MatchesEagerOverFragmentsEpisodeEndsAndSlotsOutOfStep) {
  for (std::size_t threshold : {std::size_t{1}, std::size_t{8}, std::size_t{12}, std::size_t{16}}) {
    for (std::int64_t chunk_rows : {1, 3, 16}) {
      SCOPED_TRACE("lazy_min_row_bytes " + std::to_string(threshold) + " chunk_rows " + std::to_string(chunk_rows));
      Twin w(3, chunk_rows, threshold);
      w.begin({0, 1, 2});
      w.step({}, 2);
      w.batch();  // a fragment cut at t = 2: nothing has ended
      w.step({}, 5);
      w.end({1});  // ends mid-fragment
      w.begin({1});
      w.step({}, 2);
      w.batch();  // looks back across the first cut; one finished episode, one new
      w.step({0, 2}, 3);  // slot 1 out of step
      w.step({1});
      w.step({2, 0});
      w.end({0});
      w.batch();
      w.step({1, 2}, 4);
      w.end({1, 2});
      const Batch b = w.batch();
      EXPECT_EQ(b.segments.size(), 2u);
      EXPECT_EQ(w.store().num_steps(), 0);
      w.batch();  // empty
      EXPECT_GT(w.lazy_columns_seen(), 0);
    }
  }
}

TEST(StoreLazy, MatchesEagerWhenViewsCrossSmallBlocks) {
  // Fragments of 7 steps in blocks of 1 or 2 rows: every multi-row view reads
  // across blocks, and the look-back of a cut episode is compacted.
  for (std::int64_t chunk_rows : {1, 2}) {
    SCOPED_TRACE("chunk_rows " + std::to_string(chunk_rows));
    Twin w(2, chunk_rows, 1);
    w.begin({0, 1});
    for (int f = 0; f < 6; ++f) {
      w.step({}, 3);
      if (f % 2 == 1) {
        w.end({f % 4 == 1 ? 0 : 1});
        w.begin({f % 4 == 1 ? 0 : 1});
      }
      w.step({}, 4);
      const Batch b = w.batch();
      EXPECT_EQ(b.count, 14);
    }
    w.end({});
    w.batch();
  }
}

TEST(StoreLazy, PaddingPadRowAndFutureShifts) {
  Twin w(1, 8, 1);
  w.begin({0});
  w.step({}, 3);
  w.end({0});
  const Batch b = w.batch();
  ASSERT_EQ(b.count, 3);
  ASSERT_EQ(b.segments.size(), 1u);
  // One base per stored column, in column order.
  ASSERT_EQ(b.bases.size(), 4u);
  // Episode rows start at base row 2; obs has 4 rows, the step columns 3.
  EXPECT_EQ(b.bases[0].shape, (I64{2 + 4, 4, 4}));
  EXPECT_EQ(b.bases[1].shape, (I64{2 + 3, 3}));
  EXPECT_EQ(lazy_index(b, "obs"), (I64{2, 3, 4}));
  EXPECT_EQ(lazy_index(b, "new_obs"), (I64{3, 4, 5}));
  EXPECT_EQ(lazy_index(b, "prev_obs"), (I64{kLazyPadRow, 2, 3}));
  EXPECT_EQ(lazy_index(b, "stack"), (I64{0, 0, 0, 2, 0, 0, 2, 3, 0, 2, 3, 4}));
  EXPECT_EQ(lazy_index(b, "stack_reset"), (I64{2, 2, 2, 2, 2, 2, 2, 3, 2, 2, 3, 4}));
  // Past the last row (obs row 3 is the last): the zero row.
  EXPECT_EQ(lazy_index(b, "future_obs"), (I64{3, 4, 5, 4, 5, 1, 5, 1, 1}));
  EXPECT_EQ(lazy_index(b, "gaps"), (I64{0, 0, 2, 4, 0, 0, 3, 5, 0, 2, 4, 1}));
  // state_in at t = 0 reads the pad row: the initial state.
  EXPECT_EQ(lazy_index(b, "state_in"), (I64{kLazyPadRow, 2, 3}));
  const std::vector<std::byte> state_in = testing::materialize(b, *find_column(b, "state_in"));
  ASSERT_EQ(state_in.size(), 3u * 12u);
  EXPECT_EQ(read_values<float>(state_in.data(), 3), (F32{0.5f, -1.0f, 2.0f}));
  EXPECT_EQ(lazy_index(b, "state_hist"), (I64{2, 2, 2, 2, 2, 3}));
  EXPECT_EQ(lazy_index(b, "prev_actions_reset"), (I64{2, 2, 3}));
  EXPECT_EQ(lazy_index(b, "next2_actions"), (I64{4, kLazyZeroRow, kLazyZeroRow}));
}

TEST(StoreLazy, LookBackAcrossTheCutReadsKeptRows) {
  Twin w(1, 4, 1);
  w.begin({0});
  w.step({}, 6);
  w.batch();
  w.step({}, 2);
  const Batch b = w.batch();
  ASSERT_EQ(b.segments.size(), 1u);
  EXPECT_EQ(b.segments[0].t_start, 6);
  // obs: the views read rows 6 - 5 (gaps) to 7 + 3 (future_obs), of which the
  // episode has rows up to 8.
  EXPECT_EQ(b.bases[0].shape[0], 2 + (9 - 1));
  EXPECT_EQ(lazy_index(b, "obs"), (I64{2 + 5, 2 + 6}));
  EXPECT_EQ(lazy_index(b, "stack_reset"), (I64{2 + 2, 2 + 3, 2 + 4, 2 + 5, 2 + 3, 2 + 4, 2 + 5, 2 + 6}));
  EXPECT_EQ(lazy_index(b, "future_obs"), (I64{2 + 6, 2 + 7, 1, 2 + 7, 1, 1}));
}

TEST(StoreLazy, CompleteOnlyAndHold) {
  for (std::size_t threshold : {std::size_t{1}, std::size_t{12}}) {
    SCOPED_TRACE("lazy_min_row_bytes " + std::to_string(threshold));
    Twin w(2, 4, threshold);
    w.begin({0, 1});
    w.step({}, 3);
    w.end({0});
    Batch b = w.batch(true);  // only the finished episode
    ASSERT_EQ(b.segments.size(), 1u);
    EXPECT_TRUE(b.segments[0].finished);
    w.begin({0});
    w.step({}, 4);
    // Slot 0: 4 steps, 2 held; slot 1: 7 steps, 1 held. new_obs and the
    // future shifts of the last emitted steps read held rows.
    b = w.batch(false, {2, 1});
    ASSERT_EQ(b.segments.size(), 2u);
    EXPECT_EQ(b.segments[0].length, 2);
    EXPECT_EQ(b.segments[1].length, 6);
    w.step({}, 2);
    b = w.batch(true);  // nothing finished
    EXPECT_EQ(b.count, 0);
    b = w.batch(false, {0, 3});  // slot 1 holds every unemitted step
    ASSERT_EQ(b.segments.size(), 1u);
    EXPECT_EQ(b.segments[0].t_start, 2);
    EXPECT_EQ(b.segments[0].length, 4);
    w.step({}, 3);  // slot 0: 9 steps, 6 emitted; slot 1: 12 steps, 6 emitted
    b = w.batch(false, {0, 2});
    ASSERT_EQ(b.segments.size(), 2u);
    EXPECT_EQ(b.segments[1].t_start, 6);
    EXPECT_EQ(b.segments[1].length, 4);
    w.end({0, 1});  // slot 0 has nothing left; slot 1 its 2 held steps
    b = w.batch(true);
    ASSERT_EQ(b.segments.size(), 1u);
    EXPECT_EQ(b.segments[0].t_start, 10);
    EXPECT_EQ(w.store().num_steps(), 0);
  }
}

TEST(StoreLazy, ZeroStepEpisodesAndEmptyBatches) {
  Twin w(3, 2, 1);
  w.begin({0, 1, 2});
  w.end({1});  // 0 steps: never in a batch
  Batch b = w.batch();
  EXPECT_EQ(b.count, 0);
  // An empty batch still has its bases: the pad row and the zero row.
  ASSERT_EQ(b.bases.size(), 4u);
  for (const auto& base : b.bases) EXPECT_EQ(base.shape[0], 2) << base.name;
  w.begin({1});
  w.step({}, 2);
  w.end({0, 2});
  w.begin({0});
  w.end({0});
  w.begin({0, 2});
  w.step({2});
  w.end({2});
  b = w.batch();
  EXPECT_EQ(b.count, 2 + 2 + 2 + 1);
  w.end({0, 1});
  b = w.batch();
  EXPECT_EQ(b.count, 0);
}

TEST(StoreLazy, ResetPaddingWithOnlyPastShifts) {
  // A column whose lazy views all read before t with reset padding: a
  // segment's own rows may end before row 0, which they still read.
  const std::vector<ColumnSpec> cols{col("obs", DType::UInt8, {4, 4}, ColumnKind::Observation),
                                     col("memory", DType::Float32, {2})};
  const std::vector<ViewSpec> views{view("obs", "obs", 0), reset(view("obs_hist", "obs", I64{-2, -1})),
                                    training_only(reset(view("mem_hist", "memory", I64{-3, -1}))),
                                    training_only(reset(view("mem_prev", "memory", -1)))};
  for (std::int64_t chunk_rows : {1, 4}) {
    SCOPED_TRACE("chunk_rows " + std::to_string(chunk_rows));
    Twin w(2, chunk_rows, 1, cols, views);
    w.begin({0, 1});
    w.step({});
    Batch b = w.batch();  // t_start 0, length 1: the views read rows -3..-1 only
    EXPECT_EQ(lazy_index(b, "mem_prev"), (I64{2, 3}));
    w.step({});
    b = w.batch();
    w.step({}, 3);
    b = w.batch(false, {2, 0});
    w.end({1});
    w.begin({1});
    w.step({}, 2);
    b = w.batch(false, {0, 1});
    w.end({});
    w.batch();
  }
}

TEST(StoreLazy, RandomScriptsMatchEager) {
  for (std::size_t threshold : {std::size_t{1}, std::size_t{8}, std::size_t{13}}) {
    for (std::int64_t chunk_rows : {1, 2, 5, 64}) {
      for (std::int64_t slots : {1, 4}) {
        const unsigned seed = static_cast<unsigned>(threshold * 1000 + static_cast<std::size_t>(chunk_rows * 10 + slots));
        SCOPED_TRACE("lazy_min_row_bytes " + std::to_string(threshold) + " chunk_rows " + std::to_string(chunk_rows) +
                     " slots " + std::to_string(slots));
        std::mt19937 rng(seed);
        const auto rnd = [&](std::int64_t n) { return static_cast<std::int64_t>(rng() % static_cast<std::uint32_t>(n)); };
        Twin w(slots, chunk_rows, threshold);
        std::vector<bool> busy(static_cast<std::size_t>(slots), false);
        I64 steps(static_cast<std::size_t>(slots), 0), emitted(static_cast<std::size_t>(slots), 0);
        const auto pick = [&](bool want_busy) {
          I64 out;
          for (std::int64_t s = 0; s < slots; ++s) {
            if (busy[static_cast<std::size_t>(s)] == want_busy && rnd(2) == 0) out.push_back(s);
          }
          return out;
        };
        for (int op = 0; op < 400; ++op) {
          const std::int64_t r = rnd(100);
          if (r < 15) {
            const I64 s = pick(false);
            if (s.empty()) continue;
            w.begin(s);
            for (auto x : s) {
              const auto i = static_cast<std::size_t>(x);
              busy[i] = true;
              steps[i] = 0;
              emitted[i] = 0;
            }
          } else if (r < 70) {
            const I64 s = pick(true);
            if (s.empty()) continue;
            w.step(s);
            for (auto x : s) ++steps[static_cast<std::size_t>(x)];
          } else if (r < 80) {
            const I64 s = pick(true);
            if (s.empty()) continue;
            w.end(s);
            for (auto x : s) busy[static_cast<std::size_t>(x)] = false;
          } else {
            const bool complete_only = r < 84;
            I64 hold;
            if (r >= 92) {
              for (std::int64_t s = 0; s < slots; ++s) {
                const auto i = static_cast<std::size_t>(s);
                hold.push_back(busy[i] ? rnd(steps[i] - emitted[i] + 1) : 0);
              }
            }
            w.batch(complete_only, hold);
            if (!complete_only) {
              for (std::int64_t s = 0; s < slots; ++s) {
                const auto i = static_cast<std::size_t>(s);
                if (busy[i]) emitted[i] = steps[i] - (hold.empty() ? 0 : hold[i]);
              }
            }
          }
          if (::testing::Test::HasFailure()) return;
        }
        for (std::int64_t s = 0; s < slots; ++s) {
          if (busy[static_cast<std::size_t>(s)]) w.end({s});
        }
        w.batch();
        EXPECT_EQ(w.store().num_steps(), 0);
      }
    }
  }
}

TEST(StoreLazy, ThresholdDecidesWhichViewsAreLazy) {
  std::vector<ViewSpec> views = lazy_views();
  views.push_back(repeated(training_only(view("state_seq", "state", -1)), 2));
  for (std::size_t threshold : {std::size_t{0}, std::size_t{1}, std::size_t{8}, std::size_t{13}, std::size_t{17}}) {
    SCOPED_TRACE("lazy_min_row_bytes " + std::to_string(threshold));
    Twin w(2, 4, threshold, lazy_columns(), views);
    w.begin({0, 1});
    w.step({}, 5);
    w.end({1});
    const Batch b = w.batch();
    std::vector<std::string> lazy, bases;
    for (const auto& c : b.columns) {
      if (c.base >= 0) lazy.push_back(c.name);
    }
    for (const auto& c : b.bases) bases.push_back(c.name);
    using S = std::vector<std::string>;
    // Row bytes: obs 16, state 12, actions 8, rewards 4. The repeated view
    // (state_seq) and the boundary columns are never lazy.
    const S obs_views{"obs", "new_obs", "prev_obs", "stack", "stack_reset", "gaps", "future_obs"};
    const S state_views{"state_in", "state_out", "state_hist"};
    const S action_views{"actions", "prev_actions", "next2_actions", "prev_actions_reset"};
    S want, want_bases;
    if (threshold >= 1 && threshold <= 16) want.insert(want.end(), obs_views.begin(), obs_views.end());
    if (threshold >= 1 && threshold <= 12) want.insert(want.end(), state_views.begin(), state_views.end());
    if (threshold >= 1 && threshold <= 8) want.insert(want.end(), action_views.begin(), action_views.end());
    if (threshold == 1) want.insert(want.end(), {"rewards", "reward_hist"});
    if (threshold >= 1 && threshold <= 16) want_bases.push_back("obs");
    if (threshold >= 1 && threshold <= 12) want_bases.push_back("state");
    if (threshold >= 1 && threshold <= 8) want_bases.push_back("actions");
    if (threshold == 1) want_bases.push_back("rewards");
    EXPECT_EQ(lazy, want);
    EXPECT_EQ(bases, want_bases);
    const BatchColumn* seq = find_column(b, "state_seq");
    ASSERT_NE(seq, nullptr);
    EXPECT_LT(seq->base, 0);
    EXPECT_TRUE(seq->per_sequence);
    for (const char* name : {"eps_id", "env_id", "t", "is_init", "seq_lens"}) {
      const BatchColumn* c = find_column(b, name);
      ASSERT_NE(c, nullptr) << name;
      EXPECT_LT(c->base, 0) << name;
    }
  }
}

TEST(StoreLazy, BaseHoldsEachEpisodeRowOnce) {
  // B slots, obs uint8 [8, 8], views obs, new_obs and a "-3:0" stack: the
  // base holds each observation row the batch reads once, not once per view.
  constexpr std::int64_t B = 3, T = 5;
  const std::vector<ColumnSpec> cols{col("obs", DType::UInt8, {8, 8}, ColumnKind::Observation)};
  const std::vector<ViewSpec> views{view("obs", "obs", 0), view("new_obs", "obs", 1),
                                    view("stack", "obs", I64{-3, -2, -1, 0})};
  Twin w(B, T, 64, cols, views);
  w.begin({0, 1, 2});
  w.step({}, T);
  Batch b = w.batch();
  ASSERT_EQ(b.bases.size(), 1u);
  EXPECT_EQ(b.bases[0].name, "obs");
  // From t = 0: rows 0..T of each episode.
  EXPECT_EQ(b.bases[0].shape, (I64{2 + B * (T + 1), 8, 8}));
  I64 obs, new_obs, stack;
  for (std::int64_t s = 0; s < B; ++s) {
    const std::int64_t off = 2 + s * (T + 1);
    for (std::int64_t t = 0; t < T; ++t) {
      obs.push_back(off + t);
      new_obs.push_back(off + t + 1);
      for (std::int64_t d = -3; d <= 0; ++d) stack.push_back(t + d < 0 ? kLazyPadRow : off + t + d);
    }
  }
  EXPECT_EQ(lazy_index(b, "obs"), obs);
  EXPECT_EQ(lazy_index(b, "new_obs"), new_obs);
  EXPECT_EQ(lazy_index(b, "stack"), stack);
  EXPECT_EQ(find_column(b, "stack")->index_shape, (I64{B * T, 4}));
  EXPECT_EQ(find_column(b, "stack")->shape, (I64{B * T, 4, 8, 8}));

  // A later fragment (t_start = T) also reads the 3 rows before it.
  w.step({}, T);
  b = w.batch();
  ASSERT_EQ(b.bases.size(), 1u);
  EXPECT_EQ(b.bases[0].shape, (I64{2 + B * (T + 1 + 3), 8, 8}));
  obs.clear();
  for (std::int64_t s = 0; s < B; ++s) {
    for (std::int64_t t = 0; t < T; ++t) obs.push_back(2 + s * (T + 4) + 3 + t);
  }
  EXPECT_EQ(lazy_index(b, "obs"), obs);

  // 64-byte rows at a threshold of 65: eager, no base.
  Twin e(B, T, 65, cols, views);
  e.begin({0, 1, 2});
  e.step({}, T);
  b = e.batch();
  EXPECT_TRUE(b.bases.empty());
  EXPECT_EQ(e.lazy_columns_seen(), 0);
}

// ------------------------------------------------------------ buffer cache

constexpr std::size_t kMiB = std::size_t{1} << 20;

TEST(BufferCache, ReusesAFreedLargeBlockWithinAnEighth) {
  std::byte* p = nullptr;
  {
    Buffer a(52 * kMiB);
    p = a.data();
    std::memset(p, 1, a.size());
  }
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % (2 * kMiB), 0u);
  {
    // 20 MiB: the 52 MiB block is far more than 1/8 larger.
    Buffer small(20 * kMiB);
    EXPECT_NE(small.data(), p);
  }
  {
    // 53 MiB: larger than the block.
    Buffer larger(53 * kMiB);
    EXPECT_NE(larger.data(), p);
  }
  {
    // 46 MiB + 1 rounds up to 48 MiB (2 MiB pages), and 52 <= 48 * 9/8 = 54
    // (though 52 > 9/8 of the unrounded request).
    Buffer b(46 * kMiB + 1);
    EXPECT_EQ(b.data(), p);
    EXPECT_EQ(b.size(), 46 * kMiB + 1);
    std::memset(b.data(), 2, b.size());
  }
  {
    // The block went back with its full 52 MiB, not the 46 MiB asked for.
    Buffer c(52 * kMiB);
    EXPECT_EQ(c.data(), p);
    std::memset(c.data(), 3, c.size());
  }
}

TEST(BufferCache, TakesTheBestFit) {
  std::byte* p70 = nullptr;
  std::byte* p66 = nullptr;
  {
    auto a = std::make_unique<Buffer>(70 * kMiB);
    auto b = std::make_unique<Buffer>(66 * kMiB);
    p70 = a->data();
    p66 = b->data();
    a.reset();  // the larger block is cached first: a first fit would take it
    b.reset();
  }
  {
    // 64 MiB: both blocks are within 1/8 (72 MiB); the smaller one fits best.
    Buffer c(64 * kMiB);
    EXPECT_EQ(c.data(), p66);
    Buffer d(64 * kMiB);
    EXPECT_EQ(d.data(), p70);
    Buffer e(64 * kMiB);  // nothing left in range
    EXPECT_NE(e.data(), p66);
    EXPECT_NE(e.data(), p70);
  }
  {
    // Small buffers never go through the cache.
    Buffer f(4 * kMiB);
    EXPECT_NE(f.data(), p66);
    EXPECT_NE(f.data(), p70);
  }
}

}  // namespace
}  // namespace trajview
