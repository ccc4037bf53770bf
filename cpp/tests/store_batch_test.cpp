// TrajectoryStore::build_batch: the flat layout, segments, sequences, fragment
// cuts (views look back across them) and the step counters.
#include "trajview/store.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "store_helpers.h"
#include "test_util.h"
#include "trajview/buffer.h"

namespace trajview {
namespace {

using testing::Array;
using testing::B8;
using testing::F32;
using testing::I64;
using testing::Inference;
using testing::basic_columns;
using testing::basic_views;
using testing::begin;
using testing::col;
using testing::find_column;
using testing::infer;
using testing::ins;
using testing::make_array;
using testing::obs_col;
using testing::opts;
using testing::repeated;
using testing::reset;
using testing::row_bytes_of;
using testing::shape_of;
using testing::step;
using testing::training_only;
using testing::values;
using testing::view;

// ------------------------------------------------------------ batch layout

TEST(StoreBatch, EnvIdIsSlotOverSlotsPerEnv) {
  // A multi-agent sampler's slots: env * agents + agent. Batches name the env.
  StoreOptions o = opts(4);
  o.slots_per_env = 2;
  TrajectoryStore s(6, basic_columns(), basic_views(), o);
  begin(s, {0, 1, 2, 3, 4, 5}, {0, 1, 2, 3, 4, 5});
  step(s, {}, {10, 11, 12, 13, 14, 15}, {0, 1, 2, 3, 4, 5});
  s.end_episodes(I64{3});
  step(s, {5, 0}, {25, 20}, {5, 0});
  const Batch b = s.build_batch(false);
  I64 env;
  for (const Segment& g : b.segments) env.push_back(g.env_id);
  EXPECT_EQ(env, (I64{1, 0, 0, 1, 2, 2}));  // finished slot 3, then slots 0, 1, 2, 4, 5
  EXPECT_EQ(values<std::int64_t>(b, "env_id"), (I64{1, 0, 0, 0, 1, 2, 2, 2}));
  for (std::int64_t bad : {0, -1, 4}) {
    StoreOptions ob = opts(4);
    ob.slots_per_env = bad;
    EXPECT_TRUE(testing::throws_invalid_argument([&] { TrajectoryStore(6, basic_columns(), basic_views(), ob); },
                                                 {"slots_per_env", "divide num_envs (6)", std::to_string(bad)}))
        << bad;
  }
}

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

TEST(StoreBatch, StacksOfSeveralRunsAcrossChunksAndEpisodes) {
  // A segment's stacks are gathered through a window per run of consecutive shifts (gather_view_rows): runs
  // {-3, -2} and {0} and {2}, reads before the start (padding zeros, or row 0 with "reset") and past the last row
  // (zeros), rows in chunks of 3, a finished episode then an ongoing one in the same batch.
  ViewSpec rstack = view("rstack", "obs", I64{-3, -2, 0, 2});
  rstack.padding = Padding::Reset;
  std::vector<ViewSpec> views{view("stack", "obs", I64{-3, -2, 0, 2}), rstack,
                              view("astack", "actions", I64{-2, -1, 0})};
  TrajectoryStore s(1, basic_columns(), views, opts(3));
  begin(s, {0}, {1});  // episode 0: obs row r is r + 1 (rows 0-6), action t is 10 (t + 1)
  for (std::int64_t t = 0; t < 6; ++t) step(s, {0}, {static_cast<float>(t + 2)}, {10 * (t + 1)});
  s.end_episodes(I64{0});
  begin(s, {0}, {100});  // episode 1: obs rows 100, 101, 102; actions 7, 8
  step(s, {0}, {101}, {7});
  step(s, {0}, {102}, {8});
  const Batch b = s.build_batch(false);
  ASSERT_EQ(b.segments.size(), 2u);
  EXPECT_EQ(values<float>(b, "stack"), (F32{0, 0, 1, 3, 0, 0, 2, 4, 0, 1, 3, 5, 1, 2, 4, 6, 2, 3, 5, 7, 3, 4, 6, 0,
                                            0, 0, 100, 102, 0, 0, 101, 0}));
  EXPECT_EQ(values<float>(b, "rstack"), (F32{1, 1, 1, 3, 1, 1, 2, 4, 1, 1, 3, 5, 1, 2, 4, 6, 2, 3, 5, 7, 3, 4, 6, 0,
                                             100, 100, 100, 102, 100, 100, 101, 0}));
  EXPECT_EQ(values<std::int64_t>(b, "astack"),
            (I64{0, 0, 10, 0, 10, 20, 10, 20, 30, 20, 30, 40, 30, 40, 50, 40, 50, 60, 0, 0, 7, 0, 7, 8}));
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

TEST(StoreBatch, ColumnsBeyondOneAllocationThrowAndChangeNothing) {
  // 1 MiB rows read at 100000 offsets: a batch row of the view is ~98 GiB, so
  // 11 rows exceed kMaxAllocBytes. build_batch sizes the column (checked)
  // before allocating it and throws std::length_error naming the view; the
  // store still holds every step.
  constexpr std::int64_t kElems = std::int64_t{1} << 18;
  std::vector<ColumnSpec> cols{obs_col(), col("big", DType::Float32, {kElems})};
  std::vector<ViewSpec> views{view("obs", "obs", 0), training_only(view("ahead", "big", I64(kMaxViewShifts, 0)))};
  TrajectoryStore s(1, cols, views, opts(16));
  begin(s, {0}, {0});
  const F32 row(static_cast<std::size_t>(kElems), 1.0F);
  for (int i = 0; i < 11; ++i) {
    const std::vector<Array> a{make_array(F32{static_cast<float>(i)}), make_array<float>({1, kElems}, row)};
    s.add_step(I64{}, ins(a));
  }
  const long live = Buffer::live_count();
  for (int attempt = 0; attempt < 2; ++attempt) {
    EXPECT_TRUE(testing::throws_length_error([&] { (void)s.build_batch(false); },
                                             {"batch column 'ahead'", "limit of 1099511627776 bytes"}));
    EXPECT_EQ(s.num_steps(), 11);
    EXPECT_EQ(Buffer::live_count(), live);  // what was built before the throw is freed
  }
  s.end_episodes(I64{0});
  EXPECT_EQ(s.num_complete_steps(), 11);
}

}  // namespace
}  // namespace trajview
