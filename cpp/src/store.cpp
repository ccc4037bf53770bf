// TrajectoryStore: construction and validation of its columns and views, the
// episode slots (begin_episodes, add_step, next_rows, end_episodes) and the
// step counters. Every call validates all of its input before it writes.
#include "trajview/store.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "store_episode.h"
#include "trajview/buffer.h"
#include "trajview/checked.h"

namespace trajview {
namespace {

constexpr const char* kBoundaryColumns[] = {"eps_id", "env_id", "t", "is_init", "seq_lens"};

}  // namespace

TrajectoryStore::TrajectoryStore(std::int64_t num_slots, std::vector<ColumnSpec> columns,
                                 std::vector<ViewSpec> views, StoreOptions options)
    : num_slots_(num_slots), columns_(std::move(columns)), views_(std::move(views)), options_(options) {
  if (num_slots_ < 1) throw std::invalid_argument("num_envs must be >= 1, got " + std::to_string(num_slots_));
  if (num_slots_ > kMaxSlots)
    throw std::invalid_argument("num_envs must be <= " + std::to_string(kMaxSlots) + " (kMaxSlots), got " +
                                std::to_string(num_slots_));
  if (options_.chunk_rows < 1)
    throw std::invalid_argument("chunk_rows must be >= 1, got " + std::to_string(options_.chunk_rows));
  if (options_.chunk_rows > kMaxChunkRows)
    throw std::invalid_argument("chunk_rows must be <= " + std::to_string(kMaxChunkRows) + " (kMaxChunkRows), got " +
                                std::to_string(options_.chunk_rows));
  if (options_.slots_per_env < 1 || num_slots_ % options_.slots_per_env != 0)
    throw std::invalid_argument("slots_per_env must be >= 1 and divide num_envs (" + std::to_string(num_slots_) +
                                "), got " + std::to_string(options_.slots_per_env));
  if (columns_.empty()) throw std::invalid_argument("a store needs at least one column, got none");
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    const auto& col = columns_[c];
    // (No boundary name is empty, so this check may come before check_column's.)
    for (const char* b : kBoundaryColumns) {
      if (col.name == b)
        throw std::invalid_argument("column '" + col.name + "' is a boundary column the store computes; it cannot be stored");
    }
    check_column(columns_, c);
    if (!col.pad_row.empty() && col.pad_row.size() != col.row_bytes())
      throw std::invalid_argument("column '" + col.name + "': pad row must be " + std::to_string(col.row_bytes()) +
                                  " bytes (dtype " + std::string(dtype_name(col.dtype)) + ", shape " +
                                  shape_str(col.shape) + "), got " + std::to_string(col.pad_row.size()));
    obs_index_.push_back(col.kind == ColumnKind::Observation ? static_cast<std::int64_t>(obs_columns_.size()) : -1);
    if (col.kind == ColumnKind::Observation) obs_columns_.push_back(c);
    pad_rows_.push_back(col.pad_row.empty() ? std::vector<std::byte>(col.row_bytes(), std::byte{0}) : col.pad_row);
  }
  pos_.assign(static_cast<std::size_t>(num_slots_), 0);
  steps_.assign(static_cast<std::size_t>(num_slots_), -1);
  slot_eps_.assign(static_cast<std::size_t>(num_slots_), -1);
  lookback_.assign(columns_.size(), 0);
  for (std::size_t v = 0; v < views_.size(); ++v) {
    const auto& view = views_[v];
    for (const char* b : kBoundaryColumns) {
      if (view.name == b)
        throw std::invalid_argument("view '" + view.name + "' has the name of a boundary column the store computes");
    }
    for (std::size_t w = 0; w < v; ++w) {
      if (views_[w].name == view.name) throw std::invalid_argument("view '" + view.name + "' is declared twice");
    }
    const std::int64_t c = column_index(view.column);
    if (c < 0) {
      std::string known;
      for (const auto& col : columns_) known += (known.empty() ? "" : ", ") + col.name;
      throw std::invalid_argument("view '" + view.name + "' reads column '" + view.column +
                                  "', which no one produces; known columns: " + known);
    }
    // Bounds every offset and the repeat before any arithmetic uses them.
    check_view_shifts(view);
    check_batch_repeat(view);
    const auto& col = columns_[static_cast<std::size_t>(c)];
    // One row of the view (an inference output row, a batch row) must be allocatable.
    check_bytes(checked_mul(view.shifts.size(), col.row_bytes(), "view '" + view.name + "': offsets x row bytes"),
                kMaxAllocBytes, "view '" + view.name + "': one row");
    const auto [lo, hi] = std::minmax_element(view.shifts.begin(), view.shifts.end());
    const bool knowable = col.kind == ColumnKind::Observation ? *hi <= 0 : *hi <= -1;
    if (view.padding == Padding::Reset && col.kind == ColumnKind::Step && view.for_inference && knowable)
      throw std::invalid_argument("view '" + view.name + "': padding='reset' on step column '" + col.name +
                                  "' cannot be used for compute actions (its first row is not known at t=0); "
                                  "set used_for_compute_actions=False or padding='zero'");
    if (view.batch_repeat > 1 && view.for_training) {
      if (batch_repeat_ > 1 && batch_repeat_ != view.batch_repeat)
        throw std::invalid_argument("view '" + view.name + "': batch_repeat_value " +
                                    std::to_string(view.batch_repeat) + " differs from another view's " +
                                    std::to_string(batch_repeat_) + "; all repeated views must share it");
      batch_repeat_ = view.batch_repeat;
    }
    view_column_.push_back(static_cast<std::size_t>(c));
    if (view.for_inference && knowable) inference_views_.push_back(v);
    if (view.for_training) training_views_.push_back(v);
    if (view.for_inference || view.for_training)
      lookback_[static_cast<std::size_t>(c)] = std::max(lookback_[static_cast<std::size_t>(c)], -*lo);
  }
  pools_.reserve(columns_.size());
  streams_.reserve(columns_.size());
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    // A block holds a fragment of chunk_rows steps plus the rows its views
    // look back at, so that a cut-and-compacted episode fits in one block.
    // (An observation column also keeps the newest observation: one more.)
    // (Bounded: chunk_rows <= kMaxChunkRows, lookback <= kMaxShift.)
    const std::int64_t rows = options_.chunk_rows + lookback_[c] + (obs_index_[c] >= 0 ? 1 : 0);
    const std::size_t rb = columns_[c].row_bytes();
    const std::string what = "column '" + columns_[c].name + "': a storage block (chunk_rows + lookback rows x " +
                             "num_envs x row bytes)";
    const std::size_t block =
        checked_mul(checked_mul(static_cast<std::size_t>(rows), static_cast<std::size_t>(num_slots_), what), rb, what);
    pools_.emplace_back(check_bytes(block, kMaxAllocBytes, what), std::size_t{1});
    streams_.emplace_back(rb, num_slots_, rows, pools_.back());
  }
  next_eps_id_ = options_.eps_id_start;
  slots_.resize(static_cast<std::size_t>(num_slots_));
}

TrajectoryStore::~TrajectoryStore() = default;

std::int64_t TrajectoryStore::column_index(const std::string& name) const noexcept {
  return find_column_index(columns_, name);
}

std::size_t TrajectoryStore::view_row_bytes(std::size_t view) const noexcept {
  const auto& v = views_[view];
  return (v.adds_axis ? v.shifts.size() : 1) * columns_[view_column_[view]].row_bytes();
}

std::size_t TrajectoryStore::num_rows(std::span<const std::int64_t> slots) const noexcept {
  return slots.empty() ? static_cast<std::size_t>(num_slots_) : slots.size();
}

void TrajectoryStore::check_slots(std::span<const std::int64_t> slots, const char* what) const {
  if (slots.size() > static_cast<std::size_t>(num_slots_))
    throw std::invalid_argument(std::string(what) + ": env_ids must be distinct slots in [0, " +
                                std::to_string(num_slots_) + "), got " + std::to_string(slots.size()) + " ids");
  std::vector<bool> seen(static_cast<std::size_t>(num_slots_), false);
  for (auto s : slots) {
    if (s < 0 || s >= num_slots_)
      throw std::invalid_argument(std::string(what) + ": env_ids must be in [0, " + std::to_string(num_slots_) +
                                  "), got " + std::to_string(s));
    if (seen[static_cast<std::size_t>(s)])
      throw std::invalid_argument(std::string(what) + ": env_ids must be distinct, got " + std::to_string(s) +
                                  " twice");
    seen[static_cast<std::size_t>(s)] = true;
  }
}

void TrajectoryStore::check_active(std::span<const std::int64_t> slots, const char* what) const {
  if (slots.empty()) {
    if (active_ == num_slots_) return;
    for (std::int64_t s = 0; s < num_slots_; ++s) {
      if (!slots_[static_cast<std::size_t>(s)])
        throw std::invalid_argument(std::string(what) + ": env " + std::to_string(s) +
                                    " has no episode in progress (call begin_episodes first, or pass env_ids)");
    }
    return;
  }
  check_slots(slots, what);
  for (auto s : slots) {
    if (!slots_[static_cast<std::size_t>(s)])
      throw std::invalid_argument(std::string(what) + ": env " + std::to_string(s) +
                                  " has no episode in progress (call begin_episodes first)");
  }
}

void TrajectoryStore::check_input(std::size_t column, const ArrayIn& in, std::int64_t n) const {
  const auto& col = columns_[column];
  check_array(col, in, n, "column");
  if (in.data == nullptr && n > 0 && col.row_bytes() > 0)
    throw std::invalid_argument("column '" + col.name + "': no data");
}

std::vector<std::int64_t> TrajectoryStore::begin_episodes(std::span<const std::int64_t> slots,
                                                          std::span<const ArrayIn> obs) {
  check_slots(slots, "begin_episodes");
  for (auto s : slots) {
    const auto& e = slots_[static_cast<std::size_t>(s)];
    if (e)
      throw std::invalid_argument("begin_episodes: env " + std::to_string(s) + " has an episode in progress (eps_id " +
                                  std::to_string(e->eps_id) + "); end it with end_episodes first");
  }
  if (obs.size() != obs_columns_.size())
    throw std::invalid_argument("begin_episodes: expected " + std::to_string(obs_columns_.size()) +
                                " observation arrays, got " + std::to_string(obs.size()));
  const auto n = static_cast<std::int64_t>(slots.size());
  for (std::size_t i = 0; i < obs.size(); ++i) check_input(obs_columns_[i], obs[i], n);
  // Ids count up from eps_id_start: they must not pass the int64 end.
  (void)checked_add(next_eps_id_, n, "begin_episodes: episode ids (the next id + episodes begun)");

  std::vector<std::int64_t> ids;
  ids.reserve(slots.size());
  for (std::size_t i = 0; i < slots.size(); ++i) {
    auto e = std::make_unique<Episode>();
    e->eps_id = next_eps_id_++;
    e->slot = slots[i];
    e->g0 = pos_[static_cast<std::size_t>(slots[i])];
    e->first_obs.reserve(obs_columns_.size());
    for (std::size_t k = 0; k < obs_columns_.size(); ++k) {
      const std::size_t rb = columns_[obs_columns_[k]].row_bytes();
      const auto* src = static_cast<const std::byte*>(obs[k].data) + i * rb;
      e->first_obs.emplace_back(src, src + rb);
      episode_bytes_ += rb;
    }
    ids.push_back(e->eps_id);
    steps_[static_cast<std::size_t>(slots[i])] = 0;
    ++active_;
    slot_eps_[static_cast<std::size_t>(slots[i])] = e->eps_id;
    slots_[static_cast<std::size_t>(slots[i])] = std::move(e);
  }
  return ids;
}

void TrajectoryStore::add_step(std::span<const std::int64_t> slots, std::span<const ArrayIn> inputs) {
  check_active(slots, "add_step");
  if (inputs.size() != columns_.size())
    throw std::invalid_argument("add_step: expected " + std::to_string(columns_.size()) + " columns, got " +
                                std::to_string(inputs.size()));
  const auto n = static_cast<std::int64_t>(num_rows(slots));
  for (std::size_t c = 0; c < columns_.size(); ++c) check_input(c, inputs[c], n);

  const bool all = slots.empty() || n == num_slots_;
  if (slots.empty() && aligned_pos_ >= 0) {
    // Every slot writes the same position: one copy per column.
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      if (streams_[c].stride() == 0) continue;
      std::byte* dst = streams_[c].position_for_write(aligned_pos_);
      if (dst != inputs[c].data) std::memcpy(dst, inputs[c].data, streams_[c].stride());  // else: written by next_rows' caller
    }
    ++aligned_pos_;
    for (auto& t : steps_) ++t;
    for (auto& p : pos_) ++p;
    return;
  }
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    BlockStream& stream = streams_[c];
    const std::size_t rb = stream.row_bytes();
    if (rb == 0) continue;
    const auto* src = static_cast<const std::byte*>(inputs[c].data);
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t s = slots.empty() ? i : slots[static_cast<std::size_t>(i)];
      std::memcpy(stream.position_for_write(pos_[static_cast<std::size_t>(s)]) + static_cast<std::size_t>(s) * rb,
                  src + static_cast<std::size_t>(i) * rb, rb);
    }
  }
  std::int64_t top = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto s = static_cast<std::size_t>(slots.empty() ? i : slots[static_cast<std::size_t>(i)]);
    ++steps_[s];
    top = std::max(top, ++pos_[s]);
  }
  // Slots that did not step and hold no step yet (idle, or an episode just
  // begun) move up to the others, so that a vector of envs stays aligned.
  if (!all) {
    for (std::size_t s = 0; s < slots_.size(); ++s) {
      Episode* e = slots_[s].get();
      if (pos_[s] < top && steps_[s] <= 0) {
        pos_[s] = top;
        if (e) e->g0 = top;
      }
    }
  }
  aligned_pos_ = pos_[0];
  for (auto p : pos_) {
    if (p != aligned_pos_) {
      aligned_pos_ = -1;
      break;
    }
  }
}

std::byte* TrajectoryStore::next_rows(std::size_t c) {
  if (c >= columns_.size() || aligned_pos_ < 0 || active_ != num_slots_ || streams_[c].stride() == 0) return nullptr;
  return streams_[c].position_for_write(aligned_pos_);
}

void TrajectoryStore::end_episodes(std::span<const std::int64_t> slots) {
  check_active(slots, "end_episodes");
  const auto n = static_cast<std::int64_t>(num_rows(slots));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t s = slots.empty() ? i : slots[static_cast<std::size_t>(i)];
    auto e = std::move(slots_[static_cast<std::size_t>(s)]);
    e->steps = steps_[static_cast<std::size_t>(s)];
    e->finished = true;
    steps_[static_cast<std::size_t>(s)] = -1;
    --active_;
    slot_eps_[static_cast<std::size_t>(s)] = -1;
    if (steps(*e) > e->emitted) {
      finished_.push_back(std::move(e));
    } else {
      for (const auto& f : e->first_obs) episode_bytes_ -= f.size();
    }
  }
}

std::int64_t TrajectoryStore::num_steps() const noexcept {
  std::int64_t n = num_complete_steps();
  for (const auto& e : slots_) {
    if (e) n += steps(*e) - e->emitted;
  }
  return n;
}

std::int64_t TrajectoryStore::num_complete_steps() const noexcept {
  std::int64_t n = 0;
  for (const auto& e : finished_) n += e->steps - e->emitted;
  return n;
}

std::vector<std::int64_t> TrajectoryStore::slot_eps_ids() const {
  return slot_eps_;
}

std::vector<std::int64_t> TrajectoryStore::slot_lengths() const {
  return steps_;
}

}  // namespace trajview
