// TrajectoryStore lazy columns: a lazy batch materializes to the eager one byte
// for byte (store_twin.h), lazy views and bases follow the threshold, and a
// base holds each episode row once.
#include "trajview/store.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "store_helpers.h"
#include "store_twin.h"
#include "test_util.h"

namespace trajview {
namespace {

using testing::F32;
using testing::I64;
using testing::Twin;
using testing::col;
using testing::find_column;
using testing::lazy_columns;
using testing::lazy_views;
using testing::read_values;
using testing::repeated;
using testing::reset;
using testing::training_only;
using testing::view;

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

}  // namespace
}  // namespace trajview
