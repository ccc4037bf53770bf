// The trajectory store: per env slot, the running episode's columns, and every
// view (compute-actions input, postprocessing / training batch) built from
// that single copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "trajview/buffer.h"
#include "trajview/dtype.h"
#include "trajview/block_stream.h"

namespace trajview {

/// Observation columns hold T + 1 rows per episode of T steps (row 0 from
/// begin_episodes); step columns hold T rows (row t from the add_step of t).
enum class ColumnKind : std::uint8_t { Observation, Step };

/// What views read before an episode's first row.
enum class Padding : std::uint8_t {
  Zero,   ///< the column's pad row (zeros unless the column sets one)
  Reset,  ///< the episode's row 0
};

/// A stored column.
struct ColumnSpec {
  std::string name;
  DType dtype = DType::Float32;
  std::vector<std::int64_t> shape;  ///< per-step shape
  ColumnKind kind = ColumnKind::Step;
  /// Row read before the episode's start; empty means zeros. Must be
  /// row_bytes() long otherwise (e.g. a recurrent policy's initial state).
  std::vector<std::byte> pad_row;

  std::size_t row_elems() const noexcept;
  std::size_t row_bytes() const noexcept { return row_elems() * itemsize(dtype); }
};

/// A view of one column: value at t is column[t + s] for each s in shifts.
struct ViewSpec {
  std::string name;
  std::string column;
  std::vector<std::int64_t> shifts;  ///< non-empty
  bool adds_axis = false;            ///< list/range shift: [n, len(shifts), ...]
  Padding padding = Padding::Zero;
  std::int64_t batch_repeat = 1;     ///< k > 1: one row per sequence of k steps
  bool for_inference = true;
  bool for_training = true;
};

/// A read-only array handed in by the caller: C-contiguous, leading axis n.
struct ArrayIn {
  const void* data = nullptr;
  DType dtype = DType::Float32;
  std::span<const std::int64_t> shape;
};

/// One episode's contiguous steps in a batch.
struct Segment {
  std::int64_t eps_id = 0;
  std::int64_t env_id = 0;
  std::int64_t t_start = 0;
  std::int64_t length = 0;
  std::int64_t row_offset = 0;
  std::int64_t seq_offset = 0;
  std::int64_t num_seqs = 0;
  bool finished = false;
};

/// A column of a built batch. The buffer is fresh and owned by whoever holds it.
///
/// A *lazy* column (base >= 0) is not copied out: its buffer holds int64 row
/// indices (shape index_shape: [rows] or [rows, len(shifts)]) into
/// Batch::bases[base], and its value is base_rows[index] (shape `shape`).
struct BatchColumn {
  std::string name;
  DType dtype = DType::Float32;
  std::vector<std::int64_t> shape;  ///< full shape, leading axis = rows or sequences
  bool per_sequence = false;
  std::shared_ptr<Buffer> buffer;
  std::int64_t base = -1;                 ///< index into Batch::bases, or -1 (the values are in buffer)
  std::vector<std::int64_t> index_shape{};  ///< lazy columns: the shape of the int64 index in buffer
};

/// A postprocessing / training batch in the flat layout.
struct Batch {
  std::int64_t count = 0;     ///< timestep rows
  std::int64_t num_seqs = 0;  ///< sequences (0 if no view repeats)
  std::vector<BatchColumn> columns;
  std::vector<Segment> segments;
  /// Row arrays of the lazy columns, one per stored column they read, named
  /// after it: [kLazyPadRow] = the column's pad row, [kLazyZeroRow] = zeros,
  /// then each segment's rows that its views read, once.
  std::vector<BatchColumn> bases;
};

/// Rows 0 and 1 of every lazy base.
inline constexpr std::int64_t kLazyPadRow = 0;
inline constexpr std::int64_t kLazyZeroRow = 1;

struct StoreOptions {
  /// Steps per slot that a storage block holds beyond its columns' lookback:
  /// set it to the steps collected between build_batch calls (the rollout
  /// fragment length) and a fragment fits one block.
  std::int64_t chunk_rows = 256;
  std::int64_t eps_id_start = 0;
  /// Whether batches carry env_id (eps_id, t and is_init they always carry).
  bool emit_env_id = true;
  /// 0: every training view is copied into the batch. Otherwise the views
  /// (batch_repeat 1) of columns whose rows have at least this many bytes are
  /// lazy: the batch holds each such column's rows once plus an index per view.
  std::size_t lazy_min_row_bytes = 0;
};

/// Per env slot, the episode in progress, plus finished episodes not yet
/// emitted. Every view is built from one stored copy of each row.
///
/// Invariants:
/// * every input is validated before anything is written: a call that throws
///   leaves the store as it was;
/// * views never read another episode's rows;
/// * after build_batch, an ongoing episode keeps per column only the rows that
///   its views can still read (its largest lookback); finished episodes are
///   freed.
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
  struct Episode;

  void check_slots(std::span<const std::int64_t> slots, const char* what) const;
  void check_input(std::size_t column, const ArrayIn& in, std::int64_t n) const;
  /// Address of row r of column c (0 <= r < rows available), or null if absent.
  const std::byte* row(const Episode& e, std::size_t c, std::int64_t r) const noexcept;
  std::int64_t rows_available(const Episode& e, std::size_t c) const noexcept;
  std::int64_t steps(const Episode& e) const noexcept;
  void copy_rows(const Episode& e, std::size_t column, std::int64_t r0, std::int64_t r1, Padding padding,
                 std::byte* dst) const;
  void gather_view(const Episode& e, std::size_t view, std::int64_t t, std::byte* dst) const;
  void release_storage(bool compact);
  /// First stream position of column c that episode e can still read.
  std::int64_t first_needed(const Episode& e, std::size_t c) const noexcept;
  /// Moves every slot up to the newest position (copying the rows a lagging
  /// episode still needs), so that no slot pins old blocks.
  void realign_slots();

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
