// ReplayStore::restore checks every field of a ReplayMeta (what a replay dump's
// state file becomes) before changing anything: each damaged field is refused
// with std::invalid_argument naming it, the store keeps its state, and a state
// whose uids skip ahead (which made find() read past the trajectory table) is
// among them. A valid meta restores exactly.
#include "trajview/replay.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"

namespace trajview {
namespace {

using testing::col;
using testing::F32;
using testing::I64;
using testing::ins;
using testing::make_array;
using testing::throws_invalid_argument;

ReplayStore store(std::int64_t capacity) {
  return ReplayStore(capacity, {col("obs", DType::Float32, {}, ColumnKind::Observation)});
}

/// Adds steps with next observations (one final-observation row per piece).
void add(ReplayStore& s, const F32& obs, const I64& keys, const I64& t, const std::vector<std::uint8_t>& done) {
  const auto n = static_cast<std::int64_t>(obs.size());
  std::vector<testing::Array> in{make_array<float>(obs)}, nx{make_array<float>(obs)};
  auto a = ins(in), b = ins(nx);
  s.add(n, a, b, keys.data(), t.data(), done.data());
}

/// Into a store of 20 rows, written past the end once: an ended trajectory, one of two pieces, and an open one, prioritized.
void fill(ReplayStore& s) {
  s.enable_priorities(0.6, 0.01);
  add(s, {1, 2, 3, 4, 5, 6}, {1, 1, 1, 1, 1, 1}, {0, 1, 2, 3, 4, 5}, {0, 0, 0, 0, 0, 1});  // rows 0..6
  add(s, {1, 2, 3}, {2, 2, 2}, {0, 1, 2}, {0, 0, 1});                                     // rows 7..10
  add(s, {1, 2}, {3, 3}, {0, 1}, {0, 0});                                                 // rows 11..13
  add(s, {3, 4}, {3, 3}, {2, 3}, {0, 0});                                                 // rows 14..16 (joins)
  add(s, {1, 2, 3}, {4, 4, 4}, {0, 1, 2}, {0, 0, 0});  // rows 17..20: overwrites row 0, drops trajectory 1
  (void)s.update_priority(I64{8, 12}, std::vector<double>{3.0, 0.5});
}

ReplayMeta filled_meta() {
  auto s = store(20);
  fill(s);
  return s.meta();
}

TEST(ReplayRestore, AValidMetaRestoresExactly) {
  auto s = store(20);
  fill(s);
  const ReplayMeta m = s.meta();
  ASSERT_EQ(m.trajectories.size(), 3u);
  ASSERT_EQ(m.trajectories[1].pieces.size(), 2u);
  auto t = store(20);
  t.restore(m);
  EXPECT_EQ(t.step_rows(), s.step_rows());
  EXPECT_EQ(t.priority_leaves(s.step_rows()), s.priority_leaves(s.step_rows()));
  EXPECT_EQ(t.num_steps(), s.num_steps());
  EXPECT_EQ(t.rows_written(), 21);
  // The open trajectories still take their continuations, and new ones get the next uid.
  add(t, {5}, {3}, {4}, {1});
  add(s, {5}, {3}, {4}, {1});
  EXPECT_EQ(t.step_rows(), s.step_rows());
  add(t, {9}, {8}, {0}, {1});
  EXPECT_EQ(t.trajectories().back().uid, m.next_uid);
  // An empty store's meta, with any next_uid, restores too.
  ReplayMeta empty;
  empty.next_uid = 1234;
  auto u = store(4);
  u.restore(empty);
  add(u, {1}, {1}, {0}, {1});
  EXPECT_EQ(u.trajectories().front().uid, 1234);
}

struct Damage {
  std::string name;
  std::function<void(ReplayMeta&)> apply;
  std::string message;  // a part of the error message
};

TEST(ReplayRestore, EveryDamagedFieldIsRefusedAndChangesNothing) {
  const ReplayMeta good = filled_meta();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::int64_t big = std::numeric_limits<std::int64_t>::max();
  const std::vector<Damage> cases = {
      {"head < 0", [](ReplayMeta& m) { m.head = -1; }, "head"},
      {"head huge", [](ReplayMeta& m) { m.head = kMaxRestoreCount + 1; }, "head"},
      {"next_uid skips ahead", [](ReplayMeta& m) { m.next_uid += 5; }, "next_uid"},
      {"next_uid behind", [](ReplayMeta& m) { m.next_uid -= 1; }, "next_uid"},
      {"next_uid < 0", [](ReplayMeta& m) { m.next_uid = -3; }, "next_uid"},
      {"uid gap", [](ReplayMeta& m) { m.trajectories[1].uid += 1; }, "consecutive"},
      {"uid negative", [](ReplayMeta& m) { m.trajectories[0].uid = -1; }, "uid"},
      {"no pieces", [](ReplayMeta& m) { m.trajectories[0].pieces.clear(); }, "no pieces"},
      {"empty piece", [](ReplayMeta& m) { m.trajectories[1].pieces[1].n = 0; }, ">= 1 step"},
      {"negative piece", [](ReplayMeta& m) { m.trajectories[1].pieces[1].n = -4; }, ">= 1 step"},
      {"step gap", [](ReplayMeta& m) { m.trajectories[1].pieces[1].step0 += 1; }, "starts at step"},
      {"steps", [](ReplayMeta& m) { m.trajectories[0].steps += 1; }, "steps"},
      {"first row", [](ReplayMeta& m) { m.trajectories[0].first_g += 1; }, "first row"},
      {"overwritten rows", [](ReplayMeta& m) {
         m.trajectories[0].pieces[0].g0 = 0;  // row 0 was overwritten
         m.trajectories[0].first_g = 0;
       }, "stored rows"},
      {"past the head", [](ReplayMeta& m) { m.trajectories[2].pieces[0].n += 1; }, "stored rows"},
      {"huge row", [=](ReplayMeta& m) {
         m.trajectories[2].pieces[0].g0 = big;
         m.trajectories[2].first_g = big;
       }, "stored rows"},
      {"huge length", [=](ReplayMeta& m) { m.trajectories[2].pieces[0].n = big; }, "stored rows"},
      {"pieces out of order", [](ReplayMeta& m) { std::swap(m.trajectories[1].pieces[0], m.trajectories[1].pieces[1]); },
       ""},
      {"row claimed twice", [](ReplayMeta& m) {
         // trajectory 0 (rows 7..9, final obs at 10) and a piece over row 9
         auto& p = m.trajectories[1].pieces[0];
         m.trajectories[1].first_g = p.g0 = 9;
       }, "claimed by another piece"},
      {"trajectories out of order", [](ReplayMeta& m) {
         std::swap(m.trajectories[0], m.trajectories[1]);
         std::swap(m.trajectories[0].uid, m.trajectories[1].uid);
       }, "oldest first"},
      {"two open with one key", [](ReplayMeta& m) {
         m.trajectories[1].open = true;
         m.trajectories[2].open = true;
         m.trajectories[2].key = m.trajectories[1].key;
       }, "open trajectory with key"},
      {"too few leaves", [](ReplayMeta& m) { m.leaves.pop_back(); }, "priority leaves"},
      {"NaN leaf", [=](ReplayMeta& m) { m.leaves[8] = SumTree::Weight{nan, 0}; }, "leaf 8"},
      {"negative leaf", [](ReplayMeta& m) { m.leaves[8] = SumTree::Weight{-0.5, 1}; }, "leaf 8"},
      {"unnormalized leaf", [](ReplayMeta& m) { m.leaves[8] = SumTree::Weight{1.5, 0}; }, "leaf 8"},
      {"leaf of a final observation", [](ReplayMeta& m) { m.leaves[10] = SumTree::Weight{0.5, 1}; }, "leaf 10"},
      {"infinite alpha", [](ReplayMeta& m) { m.alpha = INFINITY; }, "alpha"},
      {"negative eps", [](ReplayMeta& m) { m.eps = -1.0; }, "eps"},
      {"NaN max priority", [=](ReplayMeta& m) { m.max_priority = nan; }, "max_priority"},
      {"leaves without priorities", [](ReplayMeta& m) { m.prioritized = false; }, "not prioritized"},
  };
  auto target = store(20);
  target.enable_priorities(0.6, 0.01);
  add(target, {7, 8}, {9, 9}, {0, 1}, {0, 1});
  const auto rows_before = target.step_rows();
  const auto leaves_before = target.priority_leaves(rows_before);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    ReplayMeta m = good;
    c.apply(m);
    EXPECT_TRUE(throws_invalid_argument([&] { target.restore(m); }, {"restore: ", c.message}));
    EXPECT_EQ(target.step_rows(), rows_before);
    EXPECT_EQ(target.priority_leaves(rows_before), leaves_before);
    EXPECT_EQ(target.rows_written(), 3);
  }
  target.restore(good);  // and the undamaged one still restores
  EXPECT_EQ(target.rows_written(), good.head);
}

TEST(ReplayRestore, ARestoredTableMatchesItsRowsForEverySampler) {
  // Whatever a valid restore holds, every sampling mode reads within the table.
  auto t = store(20);
  t.restore(filled_meta());
  SliceRequest req;
  req.num_slices = 64;
  req.slice_len = 2;
  req.seed = 3;
  req.beta = 0.4;
  for (auto mode : {SampleMode::PerTrajectory, SampleMode::PerStep, SampleMode::Prioritized}) {
    req.mode = mode;
    auto b = t.sample(req, {});
    for (const auto& p : b.slices) {
      bool found = false;
      for (const auto& tr : t.trajectories())
        found = found || (tr.uid == p.uid && p.start >= 0 && p.start + p.length <= tr.steps);
      EXPECT_TRUE(found) << "uid " << p.uid << " start " << p.start;
    }
  }
}

}  // namespace
}  // namespace trajview
