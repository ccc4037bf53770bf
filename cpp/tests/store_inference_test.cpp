// TrajectoryStore: episode lifecycle per slot and the compute-actions views
// (gather_inference, next_rows); views never read another episode or slot.
#include "trajview/store.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "store_helpers.h"
#include "test_util.h"

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
using testing::infer;
using testing::ins;
using testing::make_array;
using testing::obs_col;
using testing::opts;
using testing::reset;
using testing::row_bytes_of;
using testing::same_batch;
using testing::step;
using testing::throws_invalid_argument;
using testing::values;
using testing::view;

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

TEST(StoreInference, OneSlotStacksAcrossBlocksAndEpisodes) {
  // One slot (PolicyRunner's implicit episode): a stack is a run of one block's rows, read in one copy, or spans two
  // blocks (opts(2): small blocks), or reaches before the episode (padding). Each read equals the history's rows.
  std::vector<ViewSpec> views{view("stack", "obs", I64{-4, -3, -2, -1, 0}), view("prev3", "actions", I64{-3, -2, -1})};
  TrajectoryStore s(1, basic_columns(), views, opts(2));
  float next_obs = 1;
  std::int64_t next_action = 100;
  for (int episode = 0; episode < 3; ++episode) {
    F32 obs{next_obs++};
    I64 actions;
    begin(s, {0}, {obs.back()});
    for (int t = 0; t < 13 + 3 * episode; ++t) {
      Inference r = infer(s);
      F32 stack;
      for (std::int64_t k = -4; k <= 0; ++k) stack.push_back(t + k >= 0 ? obs[static_cast<std::size_t>(t + k)] : 0.0f);
      I64 prev3;
      for (std::int64_t k = -3; k <= -1; ++k) prev3.push_back(t + k >= 0 ? actions[static_cast<std::size_t>(t + k)] : 0);
      ASSERT_EQ(r.get<float>("stack"), stack) << "episode " << episode << " t " << t;
      ASSERT_EQ(r.get<std::int64_t>("prev3"), prev3) << "episode " << episode << " t " << t;
      obs.push_back(next_obs++);
      actions.push_back(next_action++);
      step(s, {}, {obs.back()}, {actions.back()});  // (all slots: the aligned step, as the runner's)
    }
    s.end_episodes(I64{0});
  }
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

}  // namespace
}  // namespace trajview
