// ReplayStore: trajectories in the ring (continuations, broken time, overwriting),
// views of sampled slices, sampling options, bad input, and one writer with many
// samplers. Its view() helper is its own: replay views name the extra axis.
#include "trajview/replay.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

#include "test_util.h"
#include "trajview/buffer.h"

namespace trajview {
namespace {

using testing::Array;
using testing::col;
using testing::F32;
using testing::I64;
using testing::ins;
using testing::make_array;
using testing::read_values;
using testing::throws_invalid_argument;

ViewSpec view(std::string name, std::string column, std::vector<std::int64_t> shifts, bool adds_axis = false,
              Padding padding = Padding::Zero) {
  ViewSpec v;
  v.name = std::move(name);
  v.column = std::move(column);
  v.shifts = std::move(shifts);
  v.adds_axis = adds_axis;
  v.padding = padding;
  return v;
}

/// obs float32 (observation column), actions int64, truncateds bool.
ReplayStore make_store(std::int64_t capacity) {
  return ReplayStore(capacity, {col("obs", DType::Float32, {}, ColumnKind::Observation), col("actions", DType::Int64),
                                col("truncateds", DType::Bool)});
}

/// Adds steps whose obs are `obs`, actions obs*10, next obs = obs + 1, with
/// the given keys, t and done flags.
void add(ReplayStore& s, const F32& obs, const I64& keys, const I64& t, const std::vector<std::uint8_t>& done,
         bool with_next = true) {
  const auto n = static_cast<std::int64_t>(obs.size());
  I64 act;
  F32 next;
  std::vector<bool> trunc;
  for (float o : obs) {
    act.push_back(static_cast<std::int64_t>(o * 10));
    next.push_back(o + 1);
    trunc.push_back(false);
  }
  std::vector<Array> in{make_array<float>({n}, obs), make_array<std::int64_t>({n}, act), make_array<bool>({n}, trunc)};
  std::vector<Array> nx{make_array<float>({n}, next), Array{{}, DType::Int64, {}}, Array{{}, DType::Bool, {}}};
  auto nxi = ins(nx);
  s.add(n, ins(in), with_next ? std::span<const ArrayIn>(nxi) : std::span<const ArrayIn>(), keys.data(),
        t.empty() ? nullptr : t.data(), done.data());
}

template <class T>
std::vector<T> column(const ReplayBatch& b, const std::string& name) {
  for (const auto& c : b.columns) {
    if (c.name == name) return read_values<T>(c.buffer->data(), testing::num_elems(c.shape));
  }
  ADD_FAILURE() << "no column " << name;
  return {};
}

ReplayBatch sample_as(const ReplayStore& s, SliceRequest req, SampleMode mode, double beta,
                      std::span<const ViewSpec> views) {
  req.mode = mode;
  req.beta = beta;
  return s.sample(req, views);
}

std::vector<ViewSpec> basic_views() {
  return {view("obs", "obs", {0}), view("actions", "actions", {0}), view("truncateds", "truncateds", {0}),
          view("new_obs", "obs", {1}), view("stack", "obs", {-2, -1, 0}, true), view("prev_actions", "actions", {-1})};
}

TEST(Replay, ViewsOfOneTrajectory) {
  auto s = make_store(16);
  add(s, {1, 2, 3, 4}, {7, 7, 7, 7}, {0, 1, 2, 3}, {0, 0, 0, 1});
  ASSERT_EQ(s.num_steps(), 4);
  ASSERT_EQ(s.rows_written(), 5);  // 4 steps + the final observation
  SliceRequest req;
  req.slice_len = 4;
  const auto views = basic_views();
  SlicePick pick{0, 0, 4};
  auto b = s.gather({&pick, 1}, req, views);
  ASSERT_EQ(b.count, 4);
  EXPECT_EQ(column<float>(b, "obs"), (F32{1, 2, 3, 4}));
  EXPECT_EQ(column<float>(b, "new_obs"), (F32{2, 3, 4, 5}));  // the final observation kept
  EXPECT_EQ(column<float>(b, "stack"), (F32{0, 0, 1, 0, 1, 2, 1, 2, 3, 2, 3, 4}));
  EXPECT_EQ(column<std::int64_t>(b, "prev_actions"), (I64{0, 10, 20, 30}));
  EXPECT_EQ(column<bool>(b, "is_init"), (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(b.index, (I64{0, 1, 2, 3}));

  // A slice from the middle: is_init at its first step, the stack reaches back.
  SlicePick mid{0, 2, 2};
  req.truncated_key = "truncateds";
  b = s.gather({&mid, 1}, req, views);
  EXPECT_EQ(column<float>(b, "stack"), (F32{1, 2, 3, 2, 3, 4}));
  EXPECT_EQ(column<bool>(b, "is_init"), (std::vector<bool>{true, false}));
  EXPECT_EQ(column<bool>(b, "truncateds"), (std::vector<bool>{false, true}));
  EXPECT_EQ(column<float>(b, "new_obs"), (F32{4, 5}));
}

TEST(Replay, ResetPaddingReadsFirstStep) {
  auto s = make_store(16);
  add(s, {1, 2, 3}, {0, 0, 0}, {0, 1, 2}, {0, 0, 1});
  SliceRequest req;
  req.slice_len = 3;
  std::vector<ViewSpec> views{view("stack", "obs", {-1, 0}, true, Padding::Reset)};
  SlicePick pick{0, 0, 3};
  auto b = s.gather({&pick, 1}, req, views);
  EXPECT_EQ(column<float>(b, "stack"), (F32{1, 1, 1, 2, 2, 3}));
}

TEST(Replay, ContinuationJoinsTheStoredTrajectory) {
  auto s = make_store(32);
  // Two trajectories interleaved across two adds (fragments of two envs).
  add(s, {1, 2, 100, 101}, {5, 5, 9, 9}, {0, 1, 0, 1}, {0, 0, 0, 0});
  add(s, {3, 4, 102}, {5, 5, 9}, {2, 3, 2}, {0, 1, 1});
  ASSERT_EQ(s.num_trajectories(), 2);
  auto trajs = s.trajectories();
  EXPECT_EQ(trajs[0].steps, 4);
  EXPECT_EQ(trajs[0].pieces.size(), 2U);
  EXPECT_FALSE(trajs[0].open);
  SliceRequest req;
  req.slice_len = 4;
  const auto views = basic_views();
  SlicePick pick{0, 0, 4};
  auto b = s.gather({&pick, 1}, req, views);
  EXPECT_EQ(column<float>(b, "obs"), (F32{1, 2, 3, 4}));
  EXPECT_EQ(column<float>(b, "new_obs"), (F32{2, 3, 4, 5}));  // across the cut: obs of the next piece
  EXPECT_EQ(column<float>(b, "stack"), (F32{0, 0, 1, 0, 1, 2, 1, 2, 3, 2, 3, 4}));
  SlicePick other{1, 1, 2};
  b = s.gather({&other, 1}, req, views);
  EXPECT_EQ(column<float>(b, "stack"), (F32{0, 100, 101, 100, 101, 102}));
  EXPECT_EQ(column<float>(b, "new_obs"), (F32{102, 103}));
}

TEST(Replay, BrokenTimeStartsANewTrajectory) {
  auto s = make_store(32);
  add(s, {1, 2}, {5, 5}, {0, 1}, {0, 0});
  add(s, {3, 4}, {5, 5}, {7, 8}, {0, 0});  // t jumps: not a continuation
  auto trajs = s.trajectories();
  ASSERT_EQ(trajs.size(), 2U);
  EXPECT_FALSE(trajs[0].open);
  EXPECT_FALSE(trajs[1].starts_episode);  // t = 7 at its first step
  // Without t, the key alone joins.
  auto s2 = make_store(32);
  add(s2, {1, 2}, {5, 5}, {}, {0, 0});
  add(s2, {3}, {5}, {}, {1});
  ASSERT_EQ(s2.num_trajectories(), 1);
  EXPECT_EQ(s2.trajectories()[0].steps, 3);
}

TEST(Replay, OverwritingDropsWholeTrajectories) {
  auto s = make_store(10);
  add(s, {1, 2, 3}, {0, 0, 0}, {0, 1, 2}, {0, 0, 1});      // rows 0..3
  add(s, {11, 12, 13}, {1, 1, 1}, {0, 1, 2}, {0, 0, 0});   // rows 4..7, open
  EXPECT_EQ(s.num_trajectories(), 2);
  add(s, {21, 22}, {2, 2}, {0, 1}, {0, 1});                // rows 8..10: overwrites row 0
  auto trajs = s.trajectories();
  ASSERT_EQ(trajs.size(), 2U);
  EXPECT_EQ(trajs[0].key, 1);
  EXPECT_EQ(s.num_steps(), 5);
  // Continuing key 1 would need rows 4.. to survive 4 more rows: they would not.
  add(s, {14, 15, 16}, {1, 1, 1}, {3, 4, 5}, {0, 0, 1});   // rows 11..14
  trajs = s.trajectories();
  ASSERT_EQ(trajs.size(), 2U);
  EXPECT_EQ(trajs[0].key, 2);
  EXPECT_EQ(trajs[1].key, 1);
  EXPECT_FALSE(trajs[1].starts_episode);
  EXPECT_EQ(trajs[1].steps, 3);
  SliceRequest req;
  req.slice_len = 3;
  const auto views = basic_views();
  SlicePick pick{trajs[1].uid, 0, 3};
  auto b = s.gather({&pick, 1}, req, views);
  EXPECT_EQ(column<float>(b, "obs"), (F32{14, 15, 16}));
  EXPECT_EQ(column<float>(b, "stack"), (F32{0, 0, 14, 0, 14, 15, 14, 15, 16}));  // nothing before its first stored step
  EXPECT_EQ(column<bool>(b, "is_init"), (std::vector<bool>{true, false, false}));
}

TEST(Replay, SampleStrictAndPadded) {
  auto s = make_store(64);
  add(s, {1, 2}, {0, 0}, {0, 1}, {0, 1});
  add(s, {10, 11, 12, 13, 14, 15}, {1, 1, 1, 1, 1, 1}, {0, 1, 2, 3, 4, 5}, {0, 0, 0, 0, 0, 1});
  const auto views = basic_views();
  SliceRequest req;
  req.num_slices = 50;
  req.slice_len = 4;
  req.strict_length = true;
  req.seed = 3;
  auto b = s.sample(req, views);
  EXPECT_EQ(b.count, 200);
  for (const auto& p : b.slices) {
    EXPECT_EQ(p.uid, 1);
    EXPECT_LE(p.start, 2);
  }
  req.strict_length = false;
  b = s.sample(req, views);
  std::int64_t rows = 0;
  bool saw_short = false;
  for (const auto& p : b.slices) {
    rows += p.length;
    if (p.uid == 0) {
      EXPECT_EQ(p.length, 2);
      saw_short = true;
    }
  }
  EXPECT_TRUE(saw_short);
  EXPECT_EQ(b.count, rows);
  req.pad_output = true;
  req.truncated_key = "truncateds";
  SlicePick pick{0, 0, 2};
  b = s.gather({&pick, 1}, req, views);
  EXPECT_EQ(b.count, 4);
  EXPECT_EQ(column<float>(b, "obs"), (F32{1, 2, 2, 2}));
  EXPECT_EQ(column<bool>(b, "mask"), (std::vector<bool>{true, true, false, false}));
  // Only the last real step is marked, not the padding rows (as TorchRL).
  EXPECT_EQ(column<bool>(b, "truncateds"), (std::vector<bool>{false, true, false, false}));
  // Same seed, same sample.
  req.pad_output = false;
  auto x = s.sample(req, views), y = s.sample(req, views);
  EXPECT_EQ(column<float>(x, "stack"), column<float>(y, "stack"));
}

TEST(Replay, BadInputNamesWhatIsWrong) {
  EXPECT_TRUE(throws_invalid_argument([] { make_store(0); }, {"capacity", "0"}));
  auto s = make_store(4);
  EXPECT_TRUE(throws_invalid_argument([&] { add(s, {1, 2, 3, 4}, {0, 0, 0, 0}, {0, 1, 2, 3}, {0, 0, 0, 0}); },
                                      {"4 steps", "1 final-observation rows", "capacity 4"}));
  std::vector<Array> in{make_array<double>({1}, std::vector<double>{1.0}), make_array<std::int64_t>({1}, I64{1}),
                        make_array<bool>({1}, std::vector<bool>{false})};
  I64 keys{0};
  std::vector<std::uint8_t> done{0};
  EXPECT_TRUE(throws_invalid_argument([&] { s.add(1, ins(in), {}, keys.data(), nullptr, done.data()); },
                                      {"column 'obs'", "float32", "float64"}));
  in[0] = make_array<float>({1, 1}, F32{1.0F});
  EXPECT_TRUE(throws_invalid_argument([&] { s.add(1, ins(in), {}, keys.data(), nullptr, done.data()); },
                                      {"column 'obs'", "expected shape (1,)", "got (1, 1)"}));
  EXPECT_EQ(s.rows_written(), 0);
  SliceRequest req;
  EXPECT_TRUE(throws_invalid_argument([&] { s.sample(req, basic_views()); }, {"holds no steps"}));
  add(s, {1}, {0}, {0}, {1});
  std::vector<ViewSpec> bad{view("x", "nope", {0})};
  EXPECT_TRUE(throws_invalid_argument([&] { s.sample(req, bad); }, {"view 'x'", "'nope'", "obs, actions"}));
  req.slice_len = 5;
  req.strict_length = true;
  EXPECT_TRUE(throws_invalid_argument([&] { s.sample(req, basic_views()); }, {"slice_len=5", "strict_length"}));
  req.num_slices = 0;
  EXPECT_TRUE(throws_invalid_argument([&] { s.sample(req, basic_views()); }, {"num_slices", "0"}));
}

// ------------------------------------------------------------------ limits

constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kI64Min = std::numeric_limits<std::int64_t>::min();

TEST(ReplayLimits, CapacityAndRingBytes) {
  for (std::int64_t bad : {kMaxCapacity + 1, kI64Max})
    EXPECT_TRUE(throws_invalid_argument([&] { make_store(bad); }, {"capacity", "1099511627776", std::to_string(bad)}))
        << bad;
  EXPECT_TRUE(throws_invalid_argument([] { make_store(kI64Min); }, {"capacity", ">= 1"}));
  // capacity x row bytes beyond kMaxAllocBytes: std::length_error naming the
  // column, before anything is allocated.
  EXPECT_TRUE(testing::throws_length_error(
      [] { ReplayStore s(std::int64_t{1} << 30, {col("obs", DType::Float32), col("img", DType::UInt8, {2048})}); },
      {"column 'img'", "capacity x row bytes", "limit of 1099511627776 bytes"}));
  EXPECT_TRUE(throws_invalid_argument(
      [] { ReplayStore s(4, {col("img", DType::UInt8, {std::int64_t{1} << 40, std::int64_t{1} << 40})}); },
      {"column 'img'", "bytes per row"}));
}

TEST(ReplayLimits, ViewOffsetsWithinKMaxShift) {
  auto s = make_store(16);
  add(s, {1, 2, 3}, {0, 0, 0}, {0, 1, 2}, {0, 0, 1});
  SliceRequest req;
  req.slice_len = 3;
  SlicePick pick{0, 0, 3};
  for (std::int64_t bad : {-kMaxShift - 1, kMaxShift + 1, std::int64_t{-1} << 62, kI64Max, kI64Min}) {
    std::vector<ViewSpec> views{view("far", "obs", {bad})};
    EXPECT_TRUE(throws_invalid_argument([&] { s.sample(req, views); },
                                        {"view 'far'", "[-1000000, 1000000]", std::to_string(bad)}))
        << bad;
    views = {view("far", "obs", {0, bad}, true)};
    EXPECT_TRUE(throws_invalid_argument([&] { s.gather({&pick, 1}, req, views); },
                                        {"view 'far'", "kMaxShift", std::to_string(bad)}))
        << bad;
  }
  std::vector<ViewSpec> two{view("two", "obs", {0, 1})};  // an int shift with two offsets
  EXPECT_TRUE(throws_invalid_argument([&] { s.sample(req, two); }, {"view 'two'", "exactly one offset"}));
  std::vector<ViewSpec> many{view("many", "obs", std::vector<std::int64_t>(kMaxViewShifts + 1, 0), true)};
  EXPECT_TRUE(throws_invalid_argument([&] { s.sample(req, many); }, {"view 'many'", "100000", "100001"}));
  // At the bound: zeros (or step 0 with reset padding); the final observation
  // is read at exactly +steps - start.
  std::vector<ViewSpec> at{view("back", "obs", {-kMaxShift}),
                           view("back_reset", "obs", {-kMaxShift}, false, Padding::Reset),
                           view("ahead", "obs", {kMaxShift}),
                           view("both", "actions", {-kMaxShift, 0, kMaxShift}, true)};
  auto b = s.gather({&pick, 1}, req, at);
  EXPECT_EQ(column<float>(b, "back"), (F32{0, 0, 0}));
  EXPECT_EQ(column<float>(b, "back_reset"), (F32{1, 1, 1}));
  EXPECT_EQ(column<float>(b, "ahead"), (F32{0, 0, 0}));
  EXPECT_EQ(column<std::int64_t>(b, "both"), (I64{0, 10, 0, 0, 20, 0, 0, 30, 0}));
  EXPECT_EQ(b.index, (I64{0, 1, 2}));
}

TEST(ReplayLimits, FarOffsetsReadTheSameRowsAsNearOnes) {
  // One trajectory of 200 steps (obs = step, final observation 200). Views
  // 150 steps away make a window much larger than a 1-step slice reads, so
  // their rows are looked up per read: the same rows the rule gives.
  auto s = make_store(256);
  F32 obs;
  I64 keys, t;
  std::vector<std::uint8_t> done;
  for (int i = 0; i < 200; ++i) {
    obs.push_back(static_cast<float>(i));
    keys.push_back(3);
    t.push_back(i);
    done.push_back(i == 199 ? 1 : 0);
  }
  add(s, obs, keys, t, done);
  std::vector<ViewSpec> views{view("back", "obs", {-150}), view("back_reset", "obs", {-150}, false, Padding::Reset),
                              view("ahead", "obs", {150}), view("final", "obs", {40}),
                              view("acts", "actions", {-150, 0, 40}, true)};
  SliceRequest req;
  req.slice_len = 2;
  req.pad_output = true;
  std::vector<SlicePick> picks{{0, 160, 1}, {0, 10, 2}};
  auto b = s.gather(picks, req, views);
  ASSERT_EQ(b.count, 4);
  EXPECT_EQ(column<float>(b, "back"), (F32{10, 10, 0, 0}));
  EXPECT_EQ(column<float>(b, "back_reset"), (F32{10, 10, 0, 0}));
  EXPECT_EQ(column<float>(b, "ahead"), (F32{0, 0, 160, 161}));
  EXPECT_EQ(column<float>(b, "final"), (F32{200, 200, 50, 51}));  // step 200 = the final observation
  EXPECT_EQ(column<std::int64_t>(b, "acts"), (I64{100, 1600, 0, 100, 1600, 0, 0, 100, 500, 0, 110, 510}));
  EXPECT_EQ(b.index, (I64{160, 160, 10, 11}));
  EXPECT_EQ(column<bool>(b, "mask"), (std::vector<bool>{true, false, true, true}));
}

TEST(ReplayLimits, HugeSampleSizes) {
  auto s = make_store(16);
  add(s, {1, 2, 3}, {0, 0, 0}, {0, 1, 2}, {0, 0, 1});
  const auto views = basic_views();
  SliceRequest req;
  // num_slices x slice_len beyond kMaxSampleRows, overflowing or not.
  const std::pair<std::int64_t, std::int64_t> bad[] = {{kI64Max, 1},
                                                       {kMaxSampleRows + 1, 1},
                                                       {kI64Max, kI64Max},
                                                       {std::int64_t{1} << 32, std::int64_t{1} << 32},
                                                       {2, kMaxSampleRows}};
  for (auto [slices, len] : bad) {
    req.num_slices = slices;
    req.slice_len = len;
    EXPECT_TRUE(throws_invalid_argument([&] { s.sample(req, views); }, {"kMaxSampleRows", "1073741824"}))
        << slices << " x " << len;
  }
  req.num_slices = 1;
  req.slice_len = kI64Min;
  EXPECT_TRUE(throws_invalid_argument([&] { s.sample(req, views); }, {"slice_len", ">= 1"}));
  // gather: picks x slice_len, and picks whose start + length would overflow.
  req.slice_len = kMaxSampleRows;
  std::vector<SlicePick> two{{0, 0, 1}, {0, 0, 1}};
  EXPECT_TRUE(throws_invalid_argument([&] { s.gather(two, req, views); }, {"gather", "picks x slice_len", "2 x"}));
  req.slice_len = 3;
  for (SlicePick p : {SlicePick{0, kI64Max, 1}, SlicePick{0, 1, kI64Max}, SlicePick{0, kI64Max, kI64Max},
                      SlicePick{0, kI64Min, 1}, SlicePick{0, 0, kI64Min}, SlicePick{kI64Max, 0, 1},
                      SlicePick{kI64Min, 0, 1}}) {
    EXPECT_TRUE(throws_invalid_argument([&] { s.gather({&p, 1}, req, views); }, {"gather"}))
        << p.uid << " " << p.start << " " << p.length;
  }
  // At the limit the request is only checked, not refused: a sample of
  // kMaxSampleRows rows would be fine (not run here: it allocates gigabytes).
  EXPECT_EQ(s.num_steps(), 3);
}

TEST(ReplayLimits, ViewBuffersBeyondOneAllocationThrowLengthError) {
  // 1 MiB rows read at 100000 offsets: ~98 GiB per sampled row; 11 rows
  // exceed kMaxAllocBytes: std::length_error naming the view, before any
  // view buffer is allocated.
  constexpr std::int64_t kElems = std::int64_t{1} << 18;
  ReplayStore s(16, {col("big", DType::Float32, {kElems})});
  const F32 rows(static_cast<std::size_t>(11 * kElems), 1.0F);
  std::vector<Array> in{make_array<float>({11, kElems}, rows)};
  const I64 keys(11, 0);
  const std::vector<std::uint8_t> done(11, 0);
  s.add(11, ins(in), {}, keys.data(), nullptr, done.data());
  std::vector<ViewSpec> views{view("big", "big", {0}),
                              view("ahead", "big", std::vector<std::int64_t>(kMaxViewShifts, 0), true)};
  SliceRequest req;
  req.num_slices = 11;
  req.slice_len = 1;
  const long live = Buffer::live_count();
  EXPECT_TRUE(testing::throws_length_error([&] { s.sample(req, views); },
                                           {"view 'ahead'", "limit of 1099511627776 bytes"}));
  EXPECT_EQ(Buffer::live_count(), live);
}

TEST(ReplayLimits, TimestepsAtTheInt64Ends) {
  // t at the int64 ends is the caller's data: continuing it must not overflow.
  auto s = make_store(16);
  add(s, {1}, {4}, {kI64Max}, {0});
  add(s, {2}, {4}, {kI64Min}, {0});  // not kI64Max + 1: a new trajectory
  EXPECT_EQ(s.num_trajectories(), 2);
  add(s, {3}, {4}, {}, {0});  // without t: joins, and last_t counts on
  add(s, {5}, {4}, {kI64Max}, {0});
  add(s, {6}, {4}, {}, {0});  // last_t + 1 wraps, no overflow
  add(s, {7}, {4}, {kI64Min + 1}, {1});
  EXPECT_EQ(s.num_steps(), 6);
}

// One writer, several samplers: every sampled row must be a row that was
// written whole. Rows encode one value v in every element of every column.
TEST(Replay, OneWriterManySamplersSeeNoTornRows) {
  constexpr std::int64_t kWidth = 64;
  ReplayStore s(256, {col("obs", DType::Float32, {kWidth}, ColumnKind::Observation), col("actions", DType::Int64)});
  std::vector<ViewSpec> views{view("obs", "obs", {0}), view("actions", "actions", {0}),
                              view("stack", "obs", {-1, 0}, true), view("new_obs", "obs", {1})};
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> failures{0}, samples{0};
  auto writer = [&] {
    float v = 1;
    std::int64_t key = 0;
    for (int round = 0; round < 3000; ++round, ++key) {
      constexpr std::int64_t n = 20;
      F32 obs, next;
      I64 act, keys(n, key), t;
      std::vector<std::uint8_t> done(n, 0);
      done[n - 1] = 1;
      for (std::int64_t i = 0; i < n; ++i, v += 1) {
        for (std::int64_t w = 0; w < kWidth; ++w) {
          obs.push_back(v);
          next.push_back(v + 1);
        }
        act.push_back(static_cast<std::int64_t>(v));
        t.push_back(i);
      }
      std::vector<Array> in{make_array<float>({n, kWidth}, obs), make_array<std::int64_t>({n}, act)};
      std::vector<Array> nx{make_array<float>({n, kWidth}, next), Array{{}, DType::Int64, {}}};
      auto nxi = ins(nx);
      s.add(n, ins(in), nxi, keys.data(), t.data(), done.data());
    }
    stop = true;
  };
  auto sampler = [&](std::uint64_t seed) {
    SliceRequest req;
    req.num_slices = 8;
    req.slice_len = 5;
    while (!stop) {
      if (s.num_steps() == 0) continue;
      req.seed = seed++;
      auto b = s.sample(req, views);
      auto obs = column<float>(b, "obs");
      auto act = column<std::int64_t>(b, "actions");
      auto nxt = column<float>(b, "new_obs");
      auto stk = column<float>(b, "stack");
      for (std::int64_t r = 0; r < b.count; ++r) {
        const auto ur = static_cast<std::size_t>(r);
        const float v = obs[ur * kWidth];
        bool ok = static_cast<std::int64_t>(v) == act[ur];
        for (std::int64_t w = 0; w < kWidth; ++w) {
          const auto uw = static_cast<std::size_t>(w);
          ok = ok && obs[ur * kWidth + uw] == v && nxt[ur * kWidth + uw] == v + 1 &&
               stk[(ur * 2 + 1) * kWidth + uw] == v;
          const float before = stk[ur * 2 * kWidth + uw];
          ok = ok && (before == v - 1 || before == 0);
        }
        if (!ok) ++failures;
      }
      ++samples;
    }
  };
  std::thread w(writer);
  std::vector<std::thread> readers;
  for (std::uint64_t k = 0; k < 3; ++k) readers.emplace_back(sampler, 1000 * k);
  w.join();
  for (auto& r : readers) r.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(samples.load(), 0);
}

}  // namespace
}  // namespace trajview

namespace trajview {
namespace {

TEST(ReplayModes, PerStepIsUniformOverStepsAndNeverCrossesAnEnd) {
  auto s = make_store(64);
  add(s, {1, 2}, {1, 1}, {0, 1}, {0, 1});           // 2 steps
  add(s, {10, 11, 12, 13, 14, 15}, {2, 2, 2, 2, 2, 2}, {0, 1, 2, 3, 4, 5}, {0, 0, 0, 0, 0, 1});  // 6 steps
  SliceRequest req;
  req.num_slices = 16000;
  req.slice_len = 1;
  req.seed = 3;
  const auto views = basic_views();
  auto b = sample_as(s, req, SampleMode::PerStep, 0.0, views);
  std::vector<int> counts(16, 0);
  for (auto o : column<float>(b, "obs")) ++counts[static_cast<std::size_t>(o)];
  for (int o : {1, 2, 10, 11, 12, 13, 14, 15}) EXPECT_NEAR(counts[static_cast<std::size_t>(o)] / 16000.0, 1.0 / 8, 0.015);
  // Slices of 3 (strict): only starts with 3 steps left.
  req.slice_len = 3;
  req.strict_length = true;
  req.num_slices = 200;
  b = sample_as(s, req, SampleMode::PerStep, 0.0, views);
  for (const auto& p : b.slices) {
    EXPECT_EQ(p.uid, 1);
    EXPECT_LE(p.start, 3);
    EXPECT_EQ(p.length, 3);
  }
  EXPECT_EQ(b.steps_left.size(), 600u);
}

TEST(ReplayModes, PrioritiesFollowTorchRLAndResetOnOverwrite) {
  auto s = make_store(8);
  s.enable_priorities(0.5, 0.0);
  add(s, {1, 2, 3}, {1, 1, 1}, {0, 1, 2}, {0, 0, 1});  // rows 0..2, final obs at 3
  EXPECT_EQ(s.priority_leaves(std::vector<std::int64_t>{0, 1, 2, 3}), (std::vector<double>{1, 1, 1, 0}));
  // A final-observation row and a row never written are errors naming the index; nothing changes.
  EXPECT_TRUE(throws_invalid_argument(
      [&] { s.update_priority(std::vector<std::int64_t>{0, 3}, std::vector<double>{9.0, 1.0}); },
      {"index 3", "final observation"}));
  EXPECT_TRUE(throws_invalid_argument(
      [&] { s.update_priority(std::vector<std::int64_t>{0, 99}, std::vector<double>{9.0, 1.0}); },
      {"index 99", "never held a row"}));
  EXPECT_TRUE(throws_invalid_argument(
      [&] { s.update_priority(std::vector<std::int64_t>{0, 1}, std::vector<double>{9.0, -1.0}); },
      {"index 1", "finite and >= 0", "-1"}));
  EXPECT_DOUBLE_EQ(s.max_priority(), 1.0);
  EXPECT_EQ(s.update_priority(std::vector<std::int64_t>{0}, std::vector<double>{9.0}), 0);  // none skipped
  EXPECT_DOUBLE_EQ(s.priority_leaves(std::vector<std::int64_t>{0})[0], 3.0);
  EXPECT_DOUBLE_EQ(s.max_priority(), 9.0);
  SliceRequest req;
  req.num_slices = 20000;
  req.slice_len = 1;
  req.seed = 5;
  auto b = sample_as(s, req, SampleMode::Prioritized, 1.0, basic_views());
  int first = 0;
  for (std::size_t i = 0; i < b.index.size(); ++i) {
    if (b.index[i] == 0) {
      ++first;
      EXPECT_DOUBLE_EQ(b.weights[i], 1.0 / 3.0);  // (3 / 1) ^ -1
    } else {
      EXPECT_DOUBLE_EQ(b.weights[i], 1.0);
    }
  }
  EXPECT_NEAR(first / 20000.0, 3.0 / 5.0, 0.015);
  // New steps get (max priority + eps) ^ alpha = 3; overwriting rows 0..2 resets them.
  add(s, {7, 8, 9, 10, 11}, {2, 2, 2, 2, 2}, {0, 1, 2, 3, 4}, {0, 0, 0, 0, 1});  // rows 4..8, final at 9
  EXPECT_EQ(s.num_trajectories(), 1);
  EXPECT_EQ(s.priority_leaves(std::vector<std::int64_t>{0, 4, 8, 9}), (std::vector<double>{0, 3, 3, 0}));
  // Overwritten since: skipped and counted.
  EXPECT_EQ(s.update_priority(std::vector<std::int64_t>{0, 1, 4}, std::vector<double>{4.0, 4.0, 4.0}), 2);
  EXPECT_EQ(s.skipped_priority_updates(), 2);
}

TEST(ReplayModes, MetaRestoreRoundTrips) {
  auto s = make_store(16);
  s.enable_priorities(1.0, 0.0);
  add(s, {1, 2, 3}, {1, 1, 1}, {0, 1, 2}, {0, 0, 0});
  add(s, {5, 6}, {2, 2}, {0, 1}, {0, 1});
  (void)s.update_priority(std::vector<std::int64_t>{1}, std::vector<double>{5.0});
  auto t = make_store(16);
  t.restore(s.meta());
  for (std::size_t c = 0; c < 3; ++c)
    std::memcpy(t.column_data(c), s.column_data(c), 16 * s.columns()[c].row_bytes());
  EXPECT_EQ(t.step_rows(), s.step_rows());
  EXPECT_EQ(t.priority_leaves(s.step_rows()), s.priority_leaves(s.step_rows()));
  SliceRequest req;
  req.num_slices = 50;
  req.seed = 9;
  auto a = sample_as(s, req, SampleMode::Prioritized, 0.4, basic_views());
  auto b = sample_as(t, req, SampleMode::Prioritized, 0.4, basic_views());
  EXPECT_EQ(column<float>(a, "stack"), column<float>(b, "stack"));
  EXPECT_EQ(a.weights, b.weights);
  ReplayMeta bad = s.meta();
  bad.trajectories[0].steps = 99;
  EXPECT_THROW(t.restore(bad), std::invalid_argument);
  // The continuation still joins the open trajectory after a restore.
  add(t, {4}, {1}, {3}, {1});
  EXPECT_EQ(t.trajectories()[0].steps, 4);
}

TEST(ReplayPieces, StartAtANewKeyAndAfterADoneRow) {
  // The one cutting rule: add cuts by it, and Python's writer checks call it (_core.trajectory_pieces).
  const std::vector<std::int64_t> keys{1, 1, 1, 2, 2, 2, 2, 1};
  const std::vector<std::uint8_t> done{0, 1, 0, 0, 0, 1, 1, 0};
  EXPECT_EQ(piece_starts(8, keys.data(), done.data()), (std::vector<std::int64_t>{0, 2, 3, 6, 7}));
  EXPECT_TRUE(piece_starts(0, keys.data(), done.data()).empty());
  EXPECT_EQ(piece_starts(1, keys.data(), done.data()), (std::vector<std::int64_t>{0}));
}

}  // namespace
}  // namespace trajview
