// Replay storage in the flat layout: a circular buffer of env steps, sampled as
// sub-trajectory slices with any view built at sample time from one stored copy.
//
// Implemented in replay.cpp (the ring, add, trajectories), replay_priority.cpp
// (priorities), replay_sample.cpp (sample, gather, views, slice-end marks) and
// replay_state.cpp (meta and a checked restore).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <shared_mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "trajview/batch.h"
#include "trajview/buffer.h"
#include "trajview/dtype.h"
#include "trajview/spec.h"
#include "trajview/sum_tree.h"

namespace trajview {

/// Rows of the ring (capacity): in [1, kMaxCapacity]; each column's ring
/// (capacity x row bytes) must also fit kMaxAllocBytes.
inline constexpr std::int64_t kMaxCapacity = std::int64_t{1} << 40;
/// Rows one sample / gather asks for: num_slices x slice_len (sample), or
/// picks x slice_len (gather), at most kMaxSampleRows (2^30, about a billion).
inline constexpr std::int64_t kMaxSampleRows = std::int64_t{1} << 30;
/// Largest write head and trajectory uid `restore` accepts (2^62: far beyond any run; keeps the store's row
/// arithmetic within int64).
inline constexpr std::int64_t kMaxRestoreCount = std::int64_t{1} << 62;

/// One contiguous run of a trajectory's steps in the ring: absolute rows
/// [g0, g0 + n) hold steps [step0, step0 + n); when `tail`, absolute row
/// g0 + n holds the observation after the piece's last step (new_obs), a row
/// that is not a step.
struct ReplayPiece {
  std::int64_t g0 = 0;
  std::int64_t n = 0;
  std::int64_t step0 = 0;
  bool tail = false;
};

/// A stored trajectory: its pieces in step order.
struct ReplayTrajectory {
  std::int64_t uid = 0;       ///< 0, 1, 2, ... in order of creation
  std::int64_t key = 0;       ///< the eps_id / traj id it was added under
  std::int64_t first_g = 0;   ///< absolute row of its first step
  std::int64_t steps = 0;
  std::int64_t last_t = 0;    ///< t of its last step (when adds carry t)
  bool open = true;           ///< may be continued by a later add (no done flag yet)
  bool starts_episode = true; ///< its first stored step is an episode's first step
  std::vector<ReplayPiece> pieces;

  /// The final observation's absolute row (the last piece's tail), or -1.
  std::int64_t tail_g() const noexcept;
};

/// A sampled slice: `length` steps of trajectory `uid` from step `start`.
struct SlicePick {
  std::int64_t uid = 0;
  std::int64_t start = 0;
  std::int64_t length = 0;
};

/// How `sample` picks its slices (trajview._core.SampleMode in Python: the
/// one definition of the modes).
enum class SampleMode : std::uint8_t {
  /// A trajectory uniformly among the eligible ones, then a start uniformly
  /// (TorchRL's SliceSampler).
  PerTrajectory,
  /// A start step uniformly among all stored steps that may start a slice
  /// (TorchRL's RandomSampler for slice_len 1).
  PerStep,
  /// A start step with probability proportional to its priority leaf among
  /// the steps that may start a slice (TorchRL's PrioritizedSampler and
  /// PrioritizedSliceSampler); each slice gets the importance weight
  /// (leaf / min positive leaf) ^ -beta.
  Prioritized,
  /// The slices in `picks`, as given (samplers that pick in Python, e.g. the
  /// epochs of the without-replacement samplers).
  Given,
};

/// What to sample (TorchRL's SliceSampler semantics): a sampler's request.
struct SliceRequest {
  SampleMode mode = SampleMode::PerTrajectory;
  std::int64_t num_slices = 1;
  std::int64_t slice_len = 1;
  /// true: only trajectories of at least slice_len steps; false: shorter
  /// trajectories give shorter slices (their whole length).
  bool strict_length = false;
  /// Every slice padded to slice_len rows by repeating its last real row;
  /// the batch gets a bool `mask` column (false on padding).
  bool pad_output = false;
  std::uint64_t seed = 0;
  /// Importance-weight exponent (Prioritized).
  double beta = 0.0;
  /// Slice ends (TorchRL's truncated_key; "" marks nothing): the sample's
  /// column of this name is true at each slice's last real step (padding rows
  /// are not marked). A stored column of this name (bool) keeps its values
  /// and gets the marks; otherwise the batch gets a computed bool column.
  std::string truncated_key;
  /// A stored column of this name (e.g. "dones"; any bool, int or float
  /// dtype) gets the same marks (a one), whether or not `truncated_key` is
  /// stored; not stored: nothing. Only with a truncated_key.
  std::string done_key;
  /// The slices of SampleMode::Given.
  std::vector<SlicePick> picks;
};

/// A sampled batch: one column per requested view, plus `is_init` (and
/// `mask` when padded); `index` is each output row's absolute stored row
/// (padding rows repeat their slice's last); `steps_left` is, per output row,
/// the steps of its trajectory from that row's step on (1 at the last
/// stored step); `weights` holds one importance weight per slice
/// (Prioritized only, else empty).
struct ReplayBatch {
  std::int64_t count = 0;
  std::vector<BatchColumn> columns;
  std::vector<SlicePick> slices;
  std::vector<std::int64_t> index;
  std::vector<std::int64_t> steps_left;
  std::vector<double> weights;
};

/// The bookkeeping of a ReplayStore besides its column rows (persistence).
struct ReplayMeta {
  std::int64_t head = 0;
  std::int64_t next_uid = 0;
  std::vector<ReplayTrajectory> trajectories;  ///< oldest first
  /// Priorities: enabled, alpha, eps, max priority and one leaf per ring row
  /// (exactly: (p + eps)^alpha may lie beyond a double's range).
  bool prioritized = false;
  double alpha = 1.0;
  double eps = 1e-8;
  double max_priority = 1.0;
  std::vector<SumTree::Weight> leaves;
};

/// The first row of each trajectory piece of `n` rows: a piece is a maximal run of one key, cut after each
/// row whose `done` flag is set. The one place the rule lives: `ReplayStore::add` cuts by it, and Python's
/// writer-side checks call it (trajview._core.trajectory_pieces).
std::vector<std::int64_t> piece_starts(std::int64_t n, const std::int64_t* keys, const std::uint8_t* done);

/// A circular buffer of `capacity` rows per column, each env step stored once.
///
/// Trajectories: `add` splits its rows into pieces where the key changes or
/// after a row with `done` set. A piece joins the open trajectory with the same
/// key when t continues (or t is not given); otherwise it starts a new one.
/// Each piece of an add given next observations is followed by one extra row
/// holding the observation after its last step (the trajectory's final
/// observation when it is its last piece): `new_obs` is `obs` read at +1.
///
/// Overwriting: the oldest rows are overwritten first. A trajectory whose
/// first step is overwritten is dropped whole (never sampled again; a later
/// continuation starts a new trajectory), so a slice never crosses a
/// trajectory boundary, the write head, or a partly overwritten trajectory.
///
/// Views: the value of view (column, shifts) at step j of a trajectory is
/// the column at step j + s; before its first stored step it is zeros (or
/// step 0's row for Padding::Reset); at step == steps an observation column
/// reads the final observation; past that, zeros.
///
/// Limits: the spec limits of spec.h (view offsets within kMaxShift, ...),
/// kMaxCapacity and kMaxSampleRows above (std::invalid_argument naming the
/// setting, bound and value); every buffer a sample builds must fit
/// kMaxAllocBytes (std::length_error naming the view).
///
/// Priorities (optional, `enable_priorities`): one sum-tree leaf per ring row,
/// (p + eps)^alpha for a stored step, 0 for final-observation rows and rows of
/// dropped trajectories, held exactly for any finite p >= 0 (SumTree: no
/// overflow to inf, no "all zero" from tiny ones). A newly written step gets
/// TorchRL's default (max priority + eps)^alpha, so an overwritten row's
/// priority is reset.
///
/// Thread safety: `add` and `update_priority` take the lock exclusively,
/// `sample` and the accessors share it, so writers and any number of
/// samplers can run at once without torn rows.
class ReplayStore {
 public:
  /// Columns of kind Observation may take next observations in `add`.
  ReplayStore(std::int64_t capacity, std::vector<ColumnSpec> columns);
  /// The same, with the rows in memory the caller provides (e.g. memory-mapped
  /// files): `rings[c]` points to capacity x row bytes of column c, valid and
  /// not moved while `owner` (held until the store is destroyed) lives.
  ReplayStore(std::int64_t capacity, std::vector<ColumnSpec> columns, std::vector<std::byte*> rings,
              std::shared_ptr<const void> owner);
  ReplayStore(const ReplayStore&) = delete;
  ReplayStore& operator=(const ReplayStore&) = delete;

  std::int64_t capacity() const noexcept { return capacity_; }
  const std::vector<ColumnSpec>& columns() const noexcept { return columns_; }
  std::int64_t column_index(const std::string& name) const noexcept;

  /// Appends n steps. `inputs[c]` is column c's [n, *shape] data (exact dtype).
  /// `next_obs` is empty, or one array per column: [n, *shape] for an
  /// Observation column (row i = the observation after step i; only each
  /// piece's last row is read) and data == nullptr for the others. `keys` is
  /// [n] trajectory ids, `t` [n] timesteps or null, `done` [n] (0/1).
  /// Validates everything before writing; throws std::invalid_argument.
  void add(std::int64_t n, std::span<const ArrayIn> inputs, std::span<const ArrayIn> next_obs,
           const std::int64_t* keys, const std::int64_t* t, const std::uint8_t* done);

  /// Samples req.num_slices slices as req.mode says (Given: gathers
  /// req.picks). PerTrajectory: a trajectory uniformly among the eligible
  /// ones, then a start uniformly among those leaving slice_len steps (0 for a
  /// shorter trajectory). PerStep and Prioritized pick a start step; with
  /// strict_length only steps with slice_len steps from them on may start,
  /// otherwise the slice is cut at its trajectory's end. Builds every view in
  /// `views` (ViewSpec.column names a stored column) into fresh buffers, and
  /// the slice-end marks of req.truncated_key / req.done_key. Throws
  /// std::invalid_argument when nothing can be sampled or priorities are not
  /// enabled for Prioritized.
  ReplayBatch sample(const SliceRequest& req, std::span<const ViewSpec> views) const;

  /// Turns priorities on (before or after adds: stored steps get the default
  /// priority). alpha >= 0, eps >= 0 (std::invalid_argument otherwise).
  void enable_priorities(double alpha, double eps);
  bool prioritized() const noexcept { return prio_ != nullptr; }
  /// Sets the priority of each stored step at absolute row rows[i] to
  /// priorities[i] (leaf (p + eps)^alpha; the max priority grows to p), as
  /// TorchRL's update_priority; a later entry for the same row wins.
  /// Priorities must be finite and >= 0, and every row must have held a step
  /// (0 <= row < rows written, not a final-observation row):
  /// std::invalid_argument naming the first bad one, nothing changed. Rows
  /// overwritten since (or whose trajectory was dropped) are skipped: returns
  /// how many, also added to skipped_priority_updates().
  std::int64_t update_priority(std::span<const std::int64_t> rows, std::span<const double> priorities);
  /// The leaf of each absolute row (0 where it holds no sampleable step;
  /// +inf where the leaf is beyond a double's range).
  std::vector<double> priority_leaves(std::span<const std::int64_t> rows) const;
  double max_priority() const;
  /// Priority updates skipped since priorities were enabled (or restored).
  std::int64_t skipped_priority_updates() const;

  /// The absolute row of every sampleable step, oldest trajectory first.
  std::vector<std::int64_t> step_rows() const;
  /// (uid, step, 1) of the step at each absolute row, or uid -1 where the row
  /// holds no sampleable step any more.
  std::vector<SlicePick> locate(std::span<const std::int64_t> rows) const;
  /// (uid, steps) of every sampleable trajectory, oldest first.
  std::vector<std::pair<std::int64_t, std::int64_t>> trajectory_lengths() const;

  /// Everything but the rows (under the shared lock).
  ReplayMeta meta() const;
  /// Replaces the bookkeeping by `m` (from meta() of a store with the same
  /// capacity and columns); the rows must be restored through column_data.
  /// Checks m whole before changing anything (std::invalid_argument naming the
  /// field): head and next_uid in [0, kMaxRestoreCount], uids consecutive and
  /// next_uid the newest + 1, trajectories ordered by first row, each piece
  /// within the stored rows [head - capacity, head) with its steps contiguous,
  /// no ring row claimed twice, at most one open trajectory per key, finite
  /// settings, and one finite leaf >= 0 per row (0 where no step is held).
  /// (In replay_state.cpp.)
  void restore(ReplayMeta m);
  /// Column c's ring: capacity x row bytes. The caller locks out writers
  /// (persistence runs with no concurrent add).
  std::byte* column_data(std::size_t c) noexcept { return base_[c]; }
  const std::byte* column_data(std::size_t c) const noexcept { return base_[c]; }

  /// Builds the views of explicitly given slices (no randomness).
  ReplayBatch gather(std::span<const SlicePick> picks, const SliceRequest& req, std::span<const ViewSpec> views) const;

  /// Steps in sampleable trajectories.
  std::int64_t num_steps() const;
  /// Rows written since construction (steps and final-observation rows).
  std::int64_t rows_written() const;
  std::int64_t num_trajectories() const;
  /// Bytes of row storage allocated.
  std::size_t nbytes() const noexcept;
  /// A copy of the sampleable trajectories, oldest first.
  std::vector<ReplayTrajectory> trajectories() const;

 private:
  void check_views(std::span<const ViewSpec> views) const;
  ReplayBatch build(std::vector<SlicePick> picks, const SliceRequest& req, std::span<const ViewSpec> views) const;
  const ReplayTrajectory* find(std::int64_t uid) const noexcept;
  /// The sampleable step at absolute row g: its trajectory and step, or nullptr.
  const ReplayTrajectory* step_at(std::int64_t g, std::int64_t* step) const noexcept;
  /// The absolute row that ring position r holds now.
  std::int64_t abs_row(std::int64_t r) const noexcept;
  /// TorchRL's leaf (p + eps)^alpha, exactly (beyond a double's range too).
  SumTree::Weight leaf_of_priority(double p) const noexcept;
  SumTree::Weight default_leaf() const noexcept;
  /// Throws std::invalid_argument unless `m` is a state this store can hold (see restore).
  void check_meta(const ReplayMeta& m) const;
  /// The slices of PerStep / Prioritized (and their importance weights).
  void pick_steps(const SliceRequest& req, std::vector<SlicePick>& picks, std::vector<double>& weights) const;
  /// The slices of PerTrajectory.
  void pick_trajectories(const SliceRequest& req, std::vector<SlicePick>& picks) const;
  /// Checks given slices against the stored trajectories.
  void check_picks(std::span<const SlicePick> picks, const SliceRequest& req) const;
  /// Rebuilds row_uid_/row_step_ (and zeroes leaves of rows without a step) from trajs_.
  void reindex_rows();
  /// Absolute row of step j of t (0 <= j < t.steps).
  static std::int64_t step_g(const ReplayTrajectory& t, std::int64_t j) noexcept;
  void drop_overwritten();

  std::int64_t capacity_;
  std::vector<ColumnSpec> columns_;
  std::vector<AlignedBytes> owned_;     // per column: capacity rows (empty with caller-provided rings)
  std::vector<std::byte*> base_;        // per column: its ring (owned_ or the caller's)
  std::shared_ptr<const void> owner_;   // keeps caller-provided rings alive
  std::int64_t head_ = 0;           // next absolute row to write
  std::deque<ReplayTrajectory> trajs_;
  std::int64_t next_uid_ = 0;
  std::int64_t live_steps_ = 0;
  std::unordered_map<std::int64_t, std::int64_t> open_;  // key -> uid of its open trajectory
  std::vector<std::int64_t> row_uid_;   // per ring row: uid of the trajectory whose step it holds, or -1
  std::vector<std::int64_t> row_step_;  // per ring row: that step, or -1 (unused, dropped) or kTailRow
  static constexpr std::int64_t kTailRow = -2;  // row_step_ of a final-observation row
  std::unique_ptr<SumTree> prio_;       // priority leaves per ring row (null: not prioritized)
  double alpha_ = 1.0;
  double eps_ = 1e-8;
  double max_priority_ = 1.0;
  std::int64_t skipped_updates_ = 0;
  std::vector<std::size_t> upd_rows_;  // update_priority's scratch (under the exclusive lock)
  std::vector<SumTree::Weight> upd_leaves_;
  mutable std::shared_mutex mu_;
};

}  // namespace trajview
