// The trajectory store: per env slot, the running episode's columns, and every
// view (compute-actions input, postprocessing / training batch) built from
// that single copy.
//
// One class, implemented by concept:
//   store.cpp         construction, episode slots (begin / add_step / end), counters
//   store_gather.cpp  view arithmetic: row addressing, copy_rows, gather_inference
//   store_batch.cpp   build_batch in named steps
//   store_memory.cpp  what episodes still need, realignment, release, nbytes
//   store_episode.h   (private) the Episode record those files share
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "trajview/batch.h"
#include "trajview/block_stream.h"
#include "trajview/spec.h"

namespace trajview {

/// Env slots of a store (num_envs): in [1, kMaxSlots].
inline constexpr std::int64_t kMaxSlots = std::int64_t{1} << 20;
/// StoreOptions::chunk_rows: in [1, kMaxChunkRows].
inline constexpr std::int64_t kMaxChunkRows = std::int64_t{1} << 24;

struct StoreOptions {
  /// Steps per slot that a storage block holds beyond its columns' lookback:
  /// set it to the steps collected between build_batch calls (the rollout
  /// fragment length) and a fragment fits one block.
  std::int64_t chunk_rows = 256;
  /// Episode ids count up from here (any int64); begin_episodes throws
  /// std::length_error rather than pass the int64 end (ids stop at 2^63 - 2).
  std::int64_t eps_id_start = 0;
  /// Whether batches carry env_id (eps_id, t and is_init they always carry).
  bool emit_env_id = true;
  /// 0: every training view is copied into the batch. Otherwise the views
  /// (batch_repeat 1) of columns whose rows have at least this many bytes are
  /// lazy: the batch holds each such column's rows once plus an index per view.
  std::size_t lazy_min_row_bytes = 0;
  /// env_id of slot s is s / slots_per_env: a multi-agent sampler gives each
  /// env slots_per_env slots (one per agent), and batches and inference name
  /// the env, not the slot. 1: env_id is the slot.
  std::int64_t slots_per_env = 1;
};

/// Per env slot, the episode in progress, plus finished episodes not yet
/// emitted. Every view is built from one stored copy of each row.
///
/// Limits (checked at construction, std::invalid_argument naming the setting,
/// the bound and the value): num_slots <= kMaxSlots, chunk_rows <=
/// kMaxChunkRows, and the spec limits of spec.h (view offsets within
/// kMaxShift, ...). A column's storage block (chunk_rows + its lookback + 1
/// rows x num_slots x row bytes) and one row of a view (offsets x row bytes)
/// must fit kMaxAllocBytes (std::length_error otherwise), and so must each
/// column of a batch when build_batch sizes it.
///
/// Invariants:
/// * every input is validated before anything is written: a call that throws
///   leaves the store as it was;
/// * views never read another episode's rows;
/// * after build_batch, an ongoing episode keeps per column only the rows that
///   its views can still read (its largest lookback); finished episodes are
///   freed.
///
/// Thread safety: none inside; callers serialize the calls that change the
/// store (the _TrajectoryStore binding holds one mutex around every call).
class TrajectoryStore {
 public:
  TrajectoryStore(std::int64_t num_slots, std::vector<ColumnSpec> columns, std::vector<ViewSpec> views,
                  StoreOptions options = {});
  ~TrajectoryStore();
  TrajectoryStore(const TrajectoryStore&) = delete;
  TrajectoryStore& operator=(const TrajectoryStore&) = delete;

  std::int64_t num_slots() const noexcept { return num_slots_; }
  const std::vector<ColumnSpec>& columns() const noexcept { return columns_; }
  const std::vector<ViewSpec>& views() const noexcept { return views_; }
  /// Indices (into views()) of the views in the compute-actions input.
  const std::vector<std::size_t>& inference_views() const noexcept { return inference_views_; }
  /// Indices (into views()) of the views in batches.
  const std::vector<std::size_t>& training_views() const noexcept { return training_views_; }
  /// Indices (into columns()) of the observation columns.
  const std::vector<std::size_t>& obs_columns() const noexcept { return obs_columns_; }
  /// Index of a column by name, or -1.
  std::int64_t column_index(const std::string& name) const noexcept;
  /// Rows of a view per timestep (1 for an int shift) times the column's row bytes.
  std::size_t view_row_bytes(std::size_t view) const noexcept;

  /// Starts an episode in each slot; `obs` has one array per observation
  /// column (obs_columns() order), each [slots.size(), *shape]. Returns eps ids.
  std::vector<std::int64_t> begin_episodes(std::span<const std::int64_t> slots, std::span<const ArrayIn> obs);

  /// Appends one step to each slot's episode (all slots, in order, when
  /// `slots` is empty). `inputs[c]` is column c's [n, *shape] data.
  void add_step(std::span<const std::int64_t> slots, std::span<const ArrayIn> inputs);

  /// Where the next add_step of every slot (slots empty) writes column c:
  /// [num_slots, *shape] rows, contiguous; null unless every slot has an
  /// episode in progress and all stand at the same position. A caller that
  /// writes a step's rows there and passes that memory to add_step saves the
  /// copy. Valid until the next call that changes the store.
  std::byte* next_rows(std::size_t c);

  /// Marks each slot's episode finished; the slot becomes idle.
  void end_episodes(std::span<const std::int64_t> slots);

  /// Rows a caller must provide for gather_inference's outputs.
  std::size_t num_rows(std::span<const std::int64_t> slots) const noexcept;

  /// Checks that every slot has an episode in progress (empty = all slots).
  void check_active(std::span<const std::int64_t> slots, const char* what) const;

  /// Writes the compute-actions views for `slots` (empty = all) into
  /// `outputs[i]` for inference_views()[i], each [n, (len(shift),) *shape],
  /// plus each slot's current t and eps id. Touches no shared state: safe to
  /// call without the GIL.
  void gather_inference(std::span<const std::int64_t> slots, std::span<std::byte* const> outputs,
                        std::int64_t* t_out, std::int64_t* eps_out) const;

  /// Emits every step not emitted before: finished episodes (in the order
  /// they finished), then, unless complete_only, each ongoing episode's steps
  /// since its last emission. See the class invariants for what is freed.
  /// `hold` (empty, or one count per slot) keeps that slot's newest steps of
  /// its ongoing episode back for the next batch.
  Batch build_batch(bool complete_only, std::span<const std::int64_t> hold = {});
  /// What build_batch(false) frees, without building the batch: every step
  /// not emitted before counts as emitted, and only the rows a view can still
  /// read stay (for a store whose steps nobody trains on: a policy acting
  /// outside a worker).
  void discard_steps();

  std::int64_t num_steps() const noexcept;
  std::int64_t num_complete_steps() const noexcept;
  /// Bytes of row storage allocated (held rows, chunk slack and idle chunks).
  std::size_t nbytes() const noexcept;
  /// Bytes of the rows that episodes still need (stream positions from the
  /// oldest row a view can read to the newest, for all slots, plus first
  /// observations): what nbytes() would be with no slack and no idle chunks.
  std::size_t held_nbytes() const noexcept;
  /// Per slot: the running episode's id / length (steps), -1 when idle.
  std::vector<std::int64_t> slot_eps_ids() const;
  std::vector<std::int64_t> slot_lengths() const;

 private:
  struct Episode;    // store_episode.h
  struct LazyBases;  // store_batch.cpp

  void check_slots(std::span<const std::int64_t> slots, const char* what) const;
  void check_input(std::size_t column, const ArrayIn& in, std::int64_t n) const;
  /// Address of row r of column c (0 <= r < rows available), or null if absent.
  const std::byte* row(const Episode& e, std::size_t c, std::int64_t r) const noexcept;
  std::int64_t rows_available(const Episode& e, std::size_t c) const noexcept;
  std::int64_t steps(const Episode& e) const noexcept;
  void copy_rows(const Episode& e, std::size_t column, std::int64_t r0, std::int64_t r1, Padding padding,
                 std::byte* dst) const;
  /// View `view` of step t (one view row) into dst: gather_view_rows of one step.
  void gather_view(const Episode& e, std::size_t view, std::int64_t t, std::byte* dst) const;
  /// gather_view of rows t0 .. t0 + n - 1 into n consecutive view rows: each run of consecutive shifts (a frame
  /// stack's) copies the rows the n steps read once, into a window, and each step's run from it in one copy.
  void gather_view_rows(const Episode& e, std::size_t view, std::int64_t t0, std::int64_t n, std::byte* dst) const;
  /// gather_inference of an `adds_axis` view (a frame stack) while every slot is active and aligned (`steps`: each
  /// slot's steps): false, writing nothing, where a shift reads past an episode's last row or a position not held.
  bool gather_aligned_stack(std::size_t view, std::span<const std::int64_t> steps, std::byte* out) const;
  /// The stack rows (shifts) gather_aligned_stack takes; longer views take gather_view.
  static constexpr std::size_t kMaxStackRows = 128;
  void release_storage(bool compact);
  /// First stream position of column c that episode e can still read.
  std::int64_t first_needed(const Episode& e, std::size_t c) const noexcept;
  /// Moves every slot up to the newest position (copying the rows a lagging
  /// episode still needs), so that no slot pins old blocks.
  void realign_slots();

  // build_batch's steps, in order (store_batch.cpp).
  /// Per slot: the step up to which its ongoing episode is emitted (checks `hold`).
  std::vector<std::int64_t> emit_limits(std::span<const std::int64_t> hold) const;
  /// The episodes to emit, in batch order; fills batch.segments, count, num_seqs.
  std::vector<const Episode*> plan_segments(bool complete_only, const std::vector<std::int64_t>& upto,
                                            Batch& batch) const;
  /// Per stored column with lazy views: its base (pad row, zero row, each
  /// segment's rows once) in batch.bases.
  LazyBases add_lazy_bases(const std::vector<const Episode*>& order, Batch& batch) const;
  /// Training view v as int64 indices into its column's base.
  void add_lazy_view(std::size_t v, const std::vector<const Episode*>& order, const LazyBases& lazy,
                     Batch& batch) const;
  /// Training view v copied out (per row, or per sequence when it repeats).
  void add_copied_view(std::size_t v, const std::vector<const Episode*>& order, Batch& batch) const;
  /// eps_id, env_id (if emitted), t, is_init, and seq_lens (if a view repeats).
  void add_boundary_columns(Batch& batch) const;
  /// Marks the batch's steps emitted and frees what no view can read any more.
  void free_emitted(bool complete_only, const std::vector<std::int64_t>& upto);

  std::int64_t num_slots_;
  std::vector<ColumnSpec> columns_;
  std::vector<ViewSpec> views_;
  StoreOptions options_;
  std::vector<std::size_t> inference_views_;
  std::vector<std::size_t> training_views_;
  std::vector<std::size_t> obs_columns_;
  std::vector<std::int64_t> obs_index_;          // per column: index into obs_columns_, or -1
  std::vector<std::size_t> view_column_;         // per view: its column index
  std::vector<std::int64_t> lookback_;           // per column: max rows read before t (>= 0)
  std::vector<std::vector<std::byte>> pad_rows_;  // per column: the pad row (zeros if unset)
  std::vector<ChunkPool> pools_;                 // per column; outlives streams_
  std::vector<BlockStream> streams_;             // per column: rows of every slot, time-major
  std::vector<std::int64_t> pos_;                // per slot: next stream position to write
  std::vector<std::int64_t> steps_;              // per slot: the running episode's steps, or -1
  std::vector<std::int64_t> slot_eps_;           // per slot: the running episode's id, or -1
  std::int64_t active_ = 0;                      // slots with an episode in progress
  std::int64_t aligned_pos_ = 0;                 // the common pos_ of all slots, or -1
  std::vector<std::unique_ptr<Episode>> slots_;  // per slot: running episode or null
  std::vector<std::unique_ptr<Episode>> finished_;
  std::int64_t next_eps_id_;
  std::int64_t batch_repeat_ = 1;
  std::size_t episode_bytes_ = 0;                // bytes of live episodes' first observations
};

}  // namespace trajview
