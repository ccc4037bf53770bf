#include "trajview/store.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

namespace trajview {
namespace {

constexpr const char* kBoundaryColumns[] = {"eps_id", "env_id", "t", "is_init", "seq_lens"};

}  // namespace

std::size_t ColumnSpec::row_elems() const noexcept {
  std::size_t n = 1;
  for (auto d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

/// An episode of one slot. Step row t of every column lives at stream
/// position g0 + t; observation row t >= 1 at position g0 + t - 1 (written by
/// the add_step of step t - 1), and row 0 (the reset observation) in first_obs.
struct TrajectoryStore::Episode {
  std::int64_t eps_id = 0;
  std::int64_t slot = 0;
  std::int64_t g0 = 0;       // stream position of step 0
  std::int64_t steps = 0;    // steps written
  std::int64_t emitted = 0;  // steps [0, emitted) already in a batch
  bool finished = false;
  std::vector<std::vector<std::byte>> first_obs;  // per observation column
};

TrajectoryStore::TrajectoryStore(std::int64_t num_slots, std::vector<ColumnSpec> columns,
                                 std::vector<ViewSpec> views, StoreOptions options)
    : num_slots_(num_slots), columns_(std::move(columns)), views_(std::move(views)), options_(options) {
  if (num_slots_ < 1) throw std::invalid_argument("num_envs must be >= 1, got " + std::to_string(num_slots_));
  if (options_.chunk_rows < 1)
    throw std::invalid_argument("chunk_rows must be >= 1, got " + std::to_string(options_.chunk_rows));
  if (columns_.empty()) throw std::invalid_argument("a store needs at least one column, got none");
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    const auto& col = columns_[c];
    if (col.name.empty()) throw std::invalid_argument("column names must not be empty");
    for (const char* b : kBoundaryColumns) {
      if (col.name == b)
        throw std::invalid_argument("column '" + col.name + "' is a boundary column the store computes; it cannot be stored");
    }
    for (std::size_t d = 0; d < c; ++d) {
      if (columns_[d].name == col.name) throw std::invalid_argument("column '" + col.name + "' is declared twice");
    }
    for (auto dim : col.shape) {
      if (dim < 0)
        throw std::invalid_argument("column '" + col.name + "': shape must have dims >= 0, got " + shape_str(col.shape));
    }
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
    if (view.shifts.empty()) throw std::invalid_argument("view '" + view.name + "': shift must not be empty");
    if (!view.adds_axis && view.shifts.size() != 1)
      throw std::invalid_argument("view '" + view.name + "': an int shift has exactly one offset");
    if (view.batch_repeat < 1)
      throw std::invalid_argument("view '" + view.name + "': batch_repeat_value must be >= 1, got " +
                                  std::to_string(view.batch_repeat));
    const auto& col = columns_[static_cast<std::size_t>(c)];
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
    const std::int64_t rows = options_.chunk_rows + lookback_[c] + (obs_index_[c] >= 0 ? 1 : 0);
    const std::size_t rb = columns_[c].row_bytes();
    pools_.emplace_back(static_cast<std::size_t>(rows) * static_cast<std::size_t>(num_slots_) * rb, std::size_t{1});
    streams_.emplace_back(rb, num_slots_, rows, pools_.back());
  }
  next_eps_id_ = options_.eps_id_start;
  slots_.resize(static_cast<std::size_t>(num_slots_));
}

TrajectoryStore::~TrajectoryStore() = default;

std::int64_t TrajectoryStore::column_index(const std::string& name) const noexcept {
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    if (columns_[c].name == name) return static_cast<std::int64_t>(c);
  }
  return -1;
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
  if (in.dtype != col.dtype)
    throw std::invalid_argument("column '" + col.name + "': expected dtype " + std::string(dtype_name(col.dtype)) +
                                ", got " + std::string(dtype_name(in.dtype)));
  bool ok = in.shape.size() == col.shape.size() + 1 && in.shape[0] == n;
  for (std::size_t d = 0; ok && d < col.shape.size(); ++d) ok = in.shape[d + 1] == col.shape[d];
  if (!ok) {
    std::vector<std::int64_t> want{n};
    want.insert(want.end(), col.shape.begin(), col.shape.end());
    throw std::invalid_argument("column '" + col.name + "': expected shape " + shape_str(want) + ", got " +
                                shape_str(in.shape));
  }
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

std::int64_t TrajectoryStore::steps(const Episode& e) const noexcept {
  return e.finished ? e.steps : steps_[static_cast<std::size_t>(e.slot)];
}

std::int64_t TrajectoryStore::rows_available(const Episode& e, std::size_t c) const noexcept {
  return steps(e) + (obs_index_[c] >= 0 ? 1 : 0);
}

const std::byte* TrajectoryStore::row(const Episode& e, std::size_t c, std::int64_t r) const noexcept {
  const std::int64_t k = obs_index_[c];
  if (k >= 0) {
    if (r == 0) return e.first_obs[static_cast<std::size_t>(k)].data();
    return streams_[c].at(e.g0 + r - 1, e.slot);
  }
  return streams_[c].at(e.g0 + r, e.slot);
}

void TrajectoryStore::copy_rows(const Episode& e, std::size_t c, std::int64_t r0, std::int64_t r1, Padding padding,
                                std::byte* dst) const {
  const std::size_t rb = columns_[c].row_bytes();
  if (rb == 0) return;
  const std::int64_t avail = rows_available(e, c);
  std::int64_t r = r0;
  if (r < 0) {
    const std::byte* pad = padding == Padding::Reset && avail > 0 ? row(e, c, 0) : pad_rows_[c].data();
    const std::int64_t stop = std::min<std::int64_t>(0, r1);
    for (; r < stop; ++r, dst += rb) std::memcpy(dst, pad, rb);
  }
  const std::int64_t hi = std::min(r1, avail);
  for (; r < hi; ++r, dst += rb) std::memcpy(dst, row(e, c, r), rb);
  if (r < r1) std::memset(dst, 0, static_cast<std::size_t>(r1 - r) * rb);
}

void TrajectoryStore::gather_view(const Episode& e, std::size_t v, std::int64_t t, std::byte* dst) const {
  const ViewSpec& view = views_[v];
  const std::size_t c = view_column_[v];
  const auto& shifts = view.shifts;
  const std::size_t rb = columns_[c].row_bytes();
  // Runs of consecutive offsets ("-3:0") are one copy.
  std::size_t i = 0;
  while (i < shifts.size()) {
    std::size_t j = i + 1;
    while (j < shifts.size() && shifts[j] == shifts[j - 1] + 1) ++j;
    copy_rows(e, c, t + shifts[i], t + shifts[j - 1] + 1, view.padding, dst);
    dst += (j - i) * rb;
    i = j;
  }
}

void TrajectoryStore::gather_inference(std::span<const std::int64_t> slots, std::span<std::byte* const> outputs,
                                       std::int64_t* t_out, std::int64_t* eps_out) const {
  const std::size_t n = num_rows(slots);
  const bool aligned = slots.empty() && aligned_pos_ >= 0;
  for (std::size_t k = 0; k < inference_views_.size(); ++k) {
    const std::size_t v = inference_views_[k];
    const ViewSpec& view = views_[v];
    const std::size_t c = view_column_[v];
    const std::size_t vrb = view_row_bytes(v);
    if (aligned && !view.adds_axis) {
      // Every slot reads the same stream position: one copy, then patch the
      // slots whose row is before the stream (row 0 of an observation column,
      // or padding).
      const bool is_obs = obs_index_[c] >= 0;
      const std::int64_t shift = view.shifts[0];
      const std::int64_t p = aligned_pos_ + shift - (is_obs ? 1 : 0);
      if (streams_[c].holds(p) && vrb > 0) {
        std::memcpy(outputs[k], streams_[c].position(p), streams_[c].stride());
        const std::int64_t first_in_stream = (is_obs ? 1 : 0) - shift;
        for (std::size_t i = 0; i < n; ++i) {
          if (steps_[i] < first_in_stream) gather_view(*slots_[i], v, steps_[i], outputs[k] + i * vrb);
        }
        continue;
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t s = slots.empty() ? static_cast<std::int64_t>(i) : slots[i];
      const Episode& e = *slots_[static_cast<std::size_t>(s)];
      gather_view(e, v, steps(e), outputs[k] + i * vrb);
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    const auto s = static_cast<std::size_t>(slots.empty() ? static_cast<std::int64_t>(i) : slots[i]);
    if (t_out) t_out[i] = steps_[s];
    if (eps_out) eps_out[i] = slot_eps_[s];
  }
}

Batch TrajectoryStore::build_batch(bool complete_only, std::span<const std::int64_t> hold) {
  if (!hold.empty() && hold.size() != static_cast<std::size_t>(num_slots_))
    throw std::invalid_argument("build_batch: hold must have one count per env slot (" + std::to_string(num_slots_) +
                                "), got " + std::to_string(hold.size()));
  // Per slot: the step up to which its ongoing episode is emitted.
  std::vector<std::int64_t> upto(static_cast<std::size_t>(num_slots_), 0);
  for (std::size_t s = 0; s < slots_.size(); ++s) {
    const Episode* e = slots_[s].get();
    if (!e) continue;
    const std::int64_t h = hold.empty() ? 0 : hold[s];
    if (h < 0 || h > steps(*e) - e->emitted)
      throw std::invalid_argument("build_batch: hold[" + std::to_string(s) + "] must be in [0, " +
                                  std::to_string(steps(*e) - e->emitted) + "] (its unemitted steps), got " +
                                  std::to_string(h));
    upto[s] = steps(*e) - h;
  }
  std::vector<Episode*> order;
  for (auto& e : finished_) order.push_back(e.get());
  if (!complete_only) {
    for (auto& e : slots_) {
      if (e && upto[static_cast<std::size_t>(e->slot)] > e->emitted) order.push_back(e.get());
    }
  }
  Batch batch;
  const std::int64_t k = batch_repeat_;
  for (Episode* e : order) {
    Segment seg;
    seg.eps_id = e->eps_id;
    seg.env_id = e->slot;
    seg.t_start = e->emitted;
    seg.length = (e->finished ? e->steps : upto[static_cast<std::size_t>(e->slot)]) - e->emitted;
    seg.row_offset = batch.count;
    seg.seq_offset = batch.num_seqs;
    seg.num_seqs = k > 1 ? (seg.length + k - 1) / k : 0;
    seg.finished = e->finished;
    batch.count += seg.length;
    batch.num_seqs += seg.num_seqs;
    batch.segments.push_back(seg);
  }

  auto make = [&](std::string name, DType dtype, std::vector<std::int64_t> shape, bool per_seq) -> BatchColumn& {
    std::size_t bytes = itemsize(dtype);
    for (auto d : shape) bytes *= static_cast<std::size_t>(d);
    batch.columns.push_back(BatchColumn{std::move(name), dtype, std::move(shape), per_seq, std::make_shared<Buffer>(bytes)});
    return batch.columns.back();
  };

  // Lazy columns: per stored column, the rows its lazy views read, once
  // (lazy_base[c] >= 0 indexes batch.bases), and per segment where its rows
  // start in that base and which episode row comes first.
  std::vector<std::int64_t> lazy_base(columns_.size(), -1);
  std::vector<std::vector<std::int64_t>> lazy_first(columns_.size());   // per segment: first episode row
  std::vector<std::vector<std::int64_t>> lazy_offset(columns_.size());  // per segment: its first base row
  if (options_.lazy_min_row_bytes > 0) {
    std::vector<std::int64_t> lo(columns_.size(), 0), hi(columns_.size(), 0);
    std::vector<bool> any(columns_.size(), false), reset(columns_.size(), false);
    for (std::size_t v : training_views_) {
      const std::size_t c = view_column_[v];
      if (views_[v].batch_repeat > 1 || columns_[c].row_bytes() < options_.lazy_min_row_bytes) continue;
      const auto [mn, mx] = std::minmax_element(views_[v].shifts.begin(), views_[v].shifts.end());
      lo[c] = any[c] ? std::min(lo[c], *mn) : *mn;
      hi[c] = any[c] ? std::max(hi[c], *mx) : *mx;
      any[c] = true;
      reset[c] = reset[c] || views_[v].padding == Padding::Reset;
    }
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      if (!any[c]) continue;
      const std::size_t rb = columns_[c].row_bytes();
      auto& first = lazy_first[c];
      auto& offset = lazy_offset[c];
      std::int64_t rows = 2;  // kLazyPadRow, kLazyZeroRow
      for (std::size_t si = 0; si < order.size(); ++si) {
        const Segment& seg = batch.segments[si];
        const std::int64_t a = std::max<std::int64_t>(0, seg.t_start + lo[c]);
        std::int64_t b = seg.t_start + seg.length + hi[c];
        // padding="reset" reads row 0 before the episode's start.
        if (reset[c] && seg.t_start + lo[c] < 0) b = std::max<std::int64_t>(b, 1);
        b = seg.length == 0 ? a : std::min(rows_available(*order[si], c), b);
        first.push_back(a);
        offset.push_back(rows);
        rows += std::max<std::int64_t>(0, b - a);
      }
      std::vector<std::int64_t> shape{rows};
      shape.insert(shape.end(), columns_[c].shape.begin(), columns_[c].shape.end());
      batch.bases.push_back(BatchColumn{columns_[c].name, columns_[c].dtype, std::move(shape), false,
                                        std::make_shared<Buffer>(static_cast<std::size_t>(rows) * rb)});
      std::byte* dst = batch.bases.back().buffer->data();
      std::memcpy(dst + static_cast<std::size_t>(kLazyPadRow) * rb, pad_rows_[c].data(), rb);
      std::memset(dst + static_cast<std::size_t>(kLazyZeroRow) * rb, 0, rb);
      for (std::size_t si = 0; si < order.size(); ++si) {
        const std::int64_t n = (si + 1 < order.size() ? offset[si + 1] : rows) - offset[si];
        copy_rows(*order[si], c, first[si], first[si] + n, Padding::Zero,
                  dst + static_cast<std::size_t>(offset[si]) * rb);
      }
      lazy_base[c] = static_cast<std::int64_t>(batch.bases.size()) - 1;
    }
  }

  for (std::size_t v : training_views_) {
    const ViewSpec& view = views_[v];
    const std::size_t c = view_column_[v];
    const ColumnSpec& col = columns_[c];
    const bool per_seq = view.batch_repeat > 1;
    std::vector<std::int64_t> shape{per_seq ? batch.num_seqs : batch.count};
    if (view.adds_axis) shape.push_back(static_cast<std::int64_t>(view.shifts.size()));
    if (lazy_base[c] >= 0 && !per_seq) {
      // The index of each (row, shift) into the base.
      const auto ns = static_cast<std::int64_t>(view.shifts.size());
      std::vector<std::int64_t> index_shape = shape;
      shape.insert(shape.end(), col.shape.begin(), col.shape.end());
      BatchColumn& out = make(view.name, DType::Int64, index_shape, false);
      out.dtype = col.dtype;
      out.shape = std::move(shape);
      out.base = lazy_base[c];
      out.index_shape = std::move(index_shape);
      auto* idx = reinterpret_cast<std::int64_t*>(out.buffer->data());
      for (std::size_t si = 0; si < order.size(); ++si) {
        const Episode& e = *order[si];
        const Segment& seg = batch.segments[si];
        const std::int64_t avail = rows_available(e, c);
        const std::int64_t first = lazy_first[c][si];
        const std::int64_t off = lazy_offset[c][si];
        // Before the episode: the pad row, or row 0 (in the base: a pre-start
        // read means the segment's rows start at row 0).
        const std::int64_t pre = view.padding == Padding::Reset && avail > 0 ? off - first : kLazyPadRow;
        std::int64_t* out_row = idx + seg.row_offset * ns;
        for (std::int64_t t = seg.t_start; t < seg.t_start + seg.length; ++t) {
          for (std::int64_t j = 0; j < ns; ++j) {
            const std::int64_t r = t + view.shifts[static_cast<std::size_t>(j)];
            *out_row++ = r < 0 ? pre : r >= avail ? kLazyZeroRow : off + (r - first);
          }
        }
      }
      continue;
    }
    shape.insert(shape.end(), col.shape.begin(), col.shape.end());
    BatchColumn& out = make(view.name, col.dtype, std::move(shape), per_seq);
    const std::size_t vrb = view_row_bytes(v);
    std::byte* base = out.buffer->data();
    for (std::size_t si = 0; si < order.size(); ++si) {
      const Episode& e = *order[si];
      const Segment& seg = batch.segments[si];
      if (per_seq) {
        for (std::int64_t q = 0; q < seg.num_seqs; ++q)
          gather_view(e, v, seg.t_start + q * k, base + static_cast<std::size_t>(seg.seq_offset + q) * vrb);
      } else if (!view.adds_axis) {
        const std::int64_t s = view.shifts[0];
        copy_rows(e, c, seg.t_start + s, seg.t_start + seg.length + s, view.padding,
                  base + static_cast<std::size_t>(seg.row_offset) * vrb);
      } else {
        std::byte* dst = base + static_cast<std::size_t>(seg.row_offset) * vrb;
        for (std::int64_t t = seg.t_start; t < seg.t_start + seg.length; ++t, dst += vrb) gather_view(e, v, t, dst);
      }
    }
  }

  auto* eps = reinterpret_cast<std::int64_t*>(make("eps_id", DType::Int64, {batch.count}, false).buffer->data());
  std::int64_t* env = nullptr;
  if (options_.emit_env_id)
    env = reinterpret_cast<std::int64_t*>(make("env_id", DType::Int64, {batch.count}, false).buffer->data());
  auto* ts = reinterpret_cast<std::int64_t*>(make("t", DType::Int64, {batch.count}, false).buffer->data());
  auto* init = reinterpret_cast<bool*>(make("is_init", DType::Bool, {batch.count}, false).buffer->data());
  std::int32_t* seq_lens = nullptr;
  if (k > 1) seq_lens = reinterpret_cast<std::int32_t*>(make("seq_lens", DType::Int32, {batch.num_seqs}, true).buffer->data());
  for (const Segment& seg : batch.segments) {
    for (std::int64_t i = 0; i < seg.length; ++i) {
      const auto r = static_cast<std::size_t>(seg.row_offset + i);
      eps[r] = seg.eps_id;
      if (env) env[r] = seg.env_id;
      ts[r] = seg.t_start + i;
      init[r] = seg.t_start + i == 0;
    }
    for (std::int64_t q = 0; q < seg.num_seqs; ++q)
      seq_lens[seg.seq_offset + q] = static_cast<std::int32_t>(std::min(k, seg.length - q * k));
  }

  // Free what no view can read any more.
  for (auto& e : finished_) {
    for (const auto& f : e->first_obs) episode_bytes_ -= f.size();
  }
  finished_.clear();
  if (!complete_only) {
    for (auto& e : slots_) {
      if (e) e->emitted = upto[static_cast<std::size_t>(e->slot)];
    }
  }
  release_storage(!complete_only);
  return batch;
}

std::int64_t TrajectoryStore::first_needed(const Episode& e, std::size_t c) const noexcept {
  // Rows [r_min, ...) can still be read: the unemitted steps and what their
  // views look back at.
  const std::int64_t r_min = std::max<std::int64_t>(0, e.emitted - lookback_[c]);
  return e.g0 + (obs_index_[c] >= 0 ? std::max<std::int64_t>(r_min - 1, 0) : r_min);
}

void TrajectoryStore::realign_slots() {
  const std::int64_t top = *std::max_element(pos_.begin(), pos_.end());
  for (std::size_t s = 0; s < slots_.size(); ++s) {
    if (pos_[s] == top) continue;
    Episode* e = slots_[s].get();
    if (e && steps_[s] > 0) {
      // Move the rows this slot still needs forward in its own lane (its
      // positions from pos_[s] on are unwritten), last row first.
      const std::int64_t d = top - pos_[s];
      for (std::size_t c = 0; c < columns_.size(); ++c) {
        BlockStream& stream = streams_[c];
        const std::size_t rb = stream.row_bytes();
        if (rb == 0) continue;
        const std::int64_t from = std::max(first_needed(*e, c), stream.base());
        for (std::int64_t p = pos_[s] - 1; p >= from; --p)
          std::memcpy(stream.position_for_write(p + d) + s * rb, stream.at(p, static_cast<std::int64_t>(s)), rb);
      }
      e->g0 += d;
    } else if (e) {
      e->g0 = top;
    }
    pos_[s] = top;
  }
  aligned_pos_ = top;
}

void TrajectoryStore::release_storage(bool compact) {
  // A slot that fell behind (it stopped stepping while others went on) would
  // pin every later position of every slot: bring it level first.
  realign_slots();
  const std::int64_t end = aligned_pos_;
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    std::int64_t need = end;
    for (const auto& e : slots_) {
      if (e) need = std::min(need, first_needed(*e, c));
    }
    for (const auto& e : finished_) need = std::min(need, e->g0);
    if (compact) streams_[c].compact(need, end);
    else streams_[c].release_before(need);
  }
  // An ongoing episode's row 0 (kept outside the streams) once no view can
  // read it: every row before emitted - lookback is out of reach, padding
  // "reset" included (it reads row 0 only for t < lookback).
  for (auto& e : slots_) {
    if (!e) continue;
    for (std::size_t k = 0; k < obs_columns_.size(); ++k) {
      auto& row0 = e->first_obs[k];
      if (row0.empty() || e->emitted - lookback_[obs_columns_[k]] < 1) continue;
      episode_bytes_ -= row0.size();
      std::vector<std::byte>().swap(row0);
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

std::size_t TrajectoryStore::nbytes() const noexcept {
  std::size_t n = 0;
  for (const auto& p : pools_) n += p.allocated_chunks() * p.chunk_bytes();
  return n + episode_bytes_;
}

std::size_t TrajectoryStore::held_nbytes() const noexcept {
  std::size_t n = episode_bytes_;
  const std::int64_t end = pos_.empty() ? 0 : *std::max_element(pos_.begin(), pos_.end());
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    std::int64_t first = end;
    for (const auto& e : slots_)
      if (e) first = std::min(first, first_needed(*e, c));
    for (const auto& e : finished_) first = std::min(first, first_needed(*e, c));
    first = std::max(first, streams_[c].base());
    if (end > first) n += static_cast<std::size_t>(end - first) * streams_[c].stride();
  }
  return n;
}

std::vector<std::int64_t> TrajectoryStore::slot_eps_ids() const {
  return slot_eps_;
}

std::vector<std::int64_t> TrajectoryStore::slot_lengths() const {
  return steps_;
}

}  // namespace trajview
