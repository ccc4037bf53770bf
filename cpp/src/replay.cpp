#include "trajview/replay.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

namespace trajview {
namespace {


/// Copies one row; small fixed sizes avoid a library call per row.
inline void copy_row(std::byte* dst, const std::byte* src, std::size_t n) noexcept {
  switch (n) {
    case 1: *dst = *src; return;
    case 2: std::memcpy(dst, src, 2); return;
    case 4: std::memcpy(dst, src, 4); return;
    case 8: std::memcpy(dst, src, 8); return;
    case 16: std::memcpy(dst, src, 16); return;
    default: std::memcpy(dst, src, n); return;
  }
}

constexpr std::int64_t kZero = -1;  // a position that reads zeros

}  // namespace

std::int64_t ReplayTrajectory::tail_g() const noexcept {
  if (pieces.empty() || !pieces.back().tail) return -1;
  return pieces.back().g0 + pieces.back().n;
}

ReplayStore::ReplayStore(std::int64_t capacity, std::vector<ColumnSpec> columns)
    : capacity_(capacity), columns_(std::move(columns)) {
  if (capacity_ < 1) throw std::invalid_argument("capacity must be >= 1, got " + std::to_string(capacity_));
  if (columns_.empty()) throw std::invalid_argument("a replay buffer needs at least one column, got none");
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    const auto& col = columns_[c];
    if (col.name.empty()) throw std::invalid_argument("column names must not be empty");
    for (std::size_t d = 0; d < c; ++d) {
      if (columns_[d].name == col.name) throw std::invalid_argument("column '" + col.name + "' is declared twice");
    }
    for (auto dim : col.shape) {
      if (dim < 0)
        throw std::invalid_argument("column '" + col.name + "': shape must have dims >= 0, got " + shape_str(col.shape));
    }
    const std::size_t rb = col.row_bytes();
    if (rb > 0 && static_cast<std::size_t>(capacity_) > std::numeric_limits<std::size_t>::max() / rb)
      throw std::invalid_argument("capacity " + std::to_string(capacity_) + " times the row bytes of column '" +
                                  col.name + "' overflows");
    data_.push_back(allocate_aligned(static_cast<std::size_t>(capacity_) * rb));
  }
}

std::int64_t ReplayStore::column_index(const std::string& name) const noexcept {
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    if (columns_[c].name == name) return static_cast<std::int64_t>(c);
  }
  return -1;
}

const ReplayTrajectory* ReplayStore::find(std::int64_t uid) const noexcept {
  if (trajs_.empty() || uid < trajs_.front().uid || uid > trajs_.back().uid) return nullptr;
  return &trajs_[static_cast<std::size_t>(uid - trajs_.front().uid)];
}

std::int64_t ReplayStore::step_g(const ReplayTrajectory& t, std::int64_t j) noexcept {
  // Pieces are few (one per add that touched the trajectory): binary search by step0.
  auto it = std::upper_bound(t.pieces.begin(), t.pieces.end(), j,
                             [](std::int64_t v, const ReplayPiece& p) { return v < p.step0; });
  const ReplayPiece& p = *(it - 1);
  return p.g0 + (j - p.step0);
}

void ReplayStore::add(std::int64_t n, std::span<const ArrayIn> inputs, std::span<const ArrayIn> next_obs,
                      const std::int64_t* keys, const std::int64_t* t, const std::uint8_t* done) {
  if (n < 0) throw std::invalid_argument("add: n must be >= 0, got " + std::to_string(n));
  if (inputs.size() != columns_.size())
    throw std::invalid_argument("add: expected " + std::to_string(columns_.size()) + " columns, got " +
                                std::to_string(inputs.size()));
  auto check = [&](const ColumnSpec& col, const ArrayIn& in, const char* what) {
    if (in.dtype != col.dtype)
      throw std::invalid_argument(std::string(what) + " '" + col.name + "': expected dtype " +
                                  std::string(dtype_name(col.dtype)) + ", got " + std::string(dtype_name(in.dtype)));
    std::vector<std::int64_t> want{n};
    want.insert(want.end(), col.shape.begin(), col.shape.end());
    if (!std::equal(want.begin(), want.end(), in.shape.begin(), in.shape.end()))
      throw std::invalid_argument(std::string(what) + " '" + col.name + "': expected shape " + shape_str(want) +
                                  ", got " + shape_str(in.shape));
    if (in.data == nullptr && n > 0 && col.row_bytes() > 0)
      throw std::invalid_argument(std::string(what) + " '" + col.name + "': data is null");
  };
  for (std::size_t c = 0; c < columns_.size(); ++c) check(columns_[c], inputs[c], "column");
  const bool with_next = !next_obs.empty();
  if (with_next) {
    if (next_obs.size() != columns_.size())
      throw std::invalid_argument("add: next_obs must be empty or hold one entry per column (" +
                                  std::to_string(columns_.size()) + "), got " + std::to_string(next_obs.size()));
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      if (columns_[c].kind == ColumnKind::Observation) {
        check(columns_[c], next_obs[c], "next observation of column");
      } else if (next_obs[c].data != nullptr) {
        throw std::invalid_argument("add: column '" + columns_[c].name +
                                    "' is not an observation column, so it takes no next observations");
      }
    }
  }
  if (n == 0) return;
  if (keys == nullptr || done == nullptr) throw std::invalid_argument("add: keys and done flags are required");

  // Pieces: maximal runs of one key, cut after each done row.
  std::vector<std::pair<std::int64_t, std::int64_t>> pieces;
  std::int64_t a = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto ui = static_cast<std::size_t>(i);
    if (i == n - 1 || keys[ui + 1] != keys[ui] || done[ui] != 0) {
      pieces.emplace_back(a, i + 1);
      a = i + 1;
    }
  }
  const std::int64_t total = n + (with_next ? static_cast<std::int64_t>(pieces.size()) : 0);
  if (total > capacity_)
    throw std::invalid_argument("add: " + std::to_string(n) + " steps" +
                                (with_next ? " plus " + std::to_string(pieces.size()) + " final-observation rows" : "") +
                                " exceed capacity " + std::to_string(capacity_));

  std::unique_lock lock(mu_);
  const std::int64_t final_head = head_ + total;
  for (const auto& [p0, p1] : pieces) {
    const auto u0 = static_cast<std::size_t>(p0);
    const auto u1 = static_cast<std::size_t>(p1 - 1);
    const std::int64_t key = keys[u0];
    ReplayTrajectory* tr = nullptr;
    bool starts = t == nullptr || t[u0] == 0;
    if (auto it = open_.find(key); it != open_.end()) {
      auto* old = const_cast<ReplayTrajectory*>(find(it->second));
      const bool continues = old != nullptr && old->open && (t == nullptr || t[u0] == old->last_t + 1);
      // Joining must not leave the trajectory partly overwritten by this add.
      if (continues && old->first_g >= final_head - capacity_) {
        tr = old;
      } else {
        if (old != nullptr) old->open = false;
        open_.erase(it);
        if (continues) starts = false;  // a continuation whose start is gone
      }
    }
    if (tr == nullptr) {
      ReplayTrajectory fresh;
      fresh.uid = next_uid_++;
      fresh.key = key;
      fresh.first_g = head_;
      fresh.steps = 0;
      fresh.starts_episode = starts;
      trajs_.push_back(std::move(fresh));
      tr = &trajs_.back();
    }
    const std::int64_t len = p1 - p0;
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      const std::size_t rb = columns_[c].row_bytes();
      if (rb == 0) continue;
      const auto* src = static_cast<const std::byte*>(inputs[c].data) + u0 * rb;
      std::byte* base = data_[c].get();
      // At most two contiguous runs (the ring wraps once per add piece at most).
      std::int64_t done_rows = 0;
      while (done_rows < len) {
        const std::int64_t r = (head_ + done_rows) % capacity_;
        const std::int64_t run = std::min(len - done_rows, capacity_ - r);
        std::memcpy(base + static_cast<std::size_t>(r) * rb, src + static_cast<std::size_t>(done_rows) * rb,
                    static_cast<std::size_t>(run) * rb);
        done_rows += run;
      }
      if (with_next) {
        std::byte* dst = base + static_cast<std::size_t>((head_ + len) % capacity_) * rb;
        if (columns_[c].kind == ColumnKind::Observation)
          std::memcpy(dst, static_cast<const std::byte*>(next_obs[c].data) + u1 * rb, rb);
        else
          std::memset(dst, 0, rb);
      }
    }
    tr->pieces.push_back(ReplayPiece{head_, len, tr->steps, with_next});
    tr->steps += len;
    live_steps_ += len;
    tr->last_t = t != nullptr ? t[u1] : tr->last_t + len;
    if (done[u1] != 0) {
      tr->open = false;
      open_.erase(key);
    } else {
      tr->open = true;
      open_[key] = tr->uid;
    }
    head_ += len + (with_next ? 1 : 0);
    drop_overwritten();
  }
}

void ReplayStore::drop_overwritten() {
  while (!trajs_.empty() && trajs_.front().first_g < head_ - capacity_) {
    const auto& f = trajs_.front();
    if (auto it = open_.find(f.key); it != open_.end() && it->second == f.uid) open_.erase(it);
    live_steps_ -= f.steps;
    trajs_.pop_front();
  }
}

void ReplayStore::check_views(std::span<const ViewSpec> views) const {
  for (const auto& v : views) {
    if (column_index(v.column) < 0) {
      std::string names;
      for (const auto& c : columns_) names += (names.empty() ? "" : ", ") + c.name;
      throw std::invalid_argument("view '" + v.name + "': no stored column '" + v.column + "'; stored: [" + names + "]");
    }
    if (v.shifts.empty()) throw std::invalid_argument("view '" + v.name + "': shifts must not be empty");
    if (v.batch_repeat != 1)
      throw std::invalid_argument("view '" + v.name + "': batch_repeat_value must be 1 for replay samples, got " +
                                  std::to_string(v.batch_repeat));
  }
}

namespace {
void check_request(const SliceRequest& req, std::size_t ncols) {
  if (req.num_slices < 1) throw std::invalid_argument("num_slices must be >= 1, got " + std::to_string(req.num_slices));
  if (req.slice_len < 1) throw std::invalid_argument("slice_len must be >= 1, got " + std::to_string(req.slice_len));
  const auto n = static_cast<std::int64_t>(ncols);
  if (req.truncated_column >= n || req.done_column >= n)
    throw std::invalid_argument("truncated/done column index out of range");
}
}  // namespace

ReplayBatch ReplayStore::sample(const SliceRequest& req, std::span<const ViewSpec> views) const {
  check_request(req, columns_.size());
  check_views(views);
  std::shared_lock lock(mu_);
  std::vector<std::size_t> eligible;
  eligible.reserve(trajs_.size());
  for (std::size_t i = 0; i < trajs_.size(); ++i) {
    const auto s = trajs_[i].steps;
    if (s > 0 && (!req.strict_length || s >= req.slice_len)) eligible.push_back(i);
  }
  if (eligible.empty()) {
    if (req.strict_length && live_steps_ > 0)
      throw std::invalid_argument("sample: no stored trajectory has slice_len=" + std::to_string(req.slice_len) +
                                  " steps or more (strict_length=True)");
    throw std::invalid_argument("sample: the replay buffer holds no steps");
  }
  std::mt19937_64 rng(req.seed);
  std::vector<SlicePick> picks;
  picks.reserve(static_cast<std::size_t>(req.num_slices));
  for (std::int64_t k = 0; k < req.num_slices; ++k) {
    std::uniform_int_distribution<std::size_t> pick_traj(0, eligible.size() - 1);
    const auto& tr = trajs_[eligible[pick_traj(rng)]];
    if (tr.steps >= req.slice_len) {
      std::uniform_int_distribution<std::int64_t> pick_start(0, tr.steps - req.slice_len);
      picks.push_back(SlicePick{tr.uid, pick_start(rng), req.slice_len});
    } else {
      picks.push_back(SlicePick{tr.uid, 0, tr.steps});
    }
  }
  return build(std::move(picks), req, views);
}

ReplayBatch ReplayStore::gather(std::span<const SlicePick> picks, const SliceRequest& req,
                                std::span<const ViewSpec> views) const {
  check_request(req, columns_.size());
  check_views(views);
  std::shared_lock lock(mu_);
  for (const auto& p : picks) {
    const auto* tr = find(p.uid);
    if (tr == nullptr) throw std::invalid_argument("gather: no stored trajectory with uid " + std::to_string(p.uid));
    if (p.length < 1 || p.start < 0 || p.start + p.length > tr->steps || p.length > req.slice_len)
      throw std::invalid_argument("gather: slice [" + std::to_string(p.start) + ", " +
                                  std::to_string(p.start + p.length) + ") does not fit trajectory " +
                                  std::to_string(p.uid) + " of " + std::to_string(tr->steps) +
                                  " steps and slice_len " + std::to_string(req.slice_len));
  }
  return build(std::vector<SlicePick>(picks.begin(), picks.end()), req, views);
}

ReplayBatch ReplayStore::build(std::vector<SlicePick> picks, const SliceRequest& req,
                               std::span<const ViewSpec> views) const {
  // Caller holds the shared lock.
  ReplayBatch out;
  const std::size_t ns = picks.size();
  std::vector<std::int64_t> row_off(ns + 1, 0);
  for (std::size_t k = 0; k < ns; ++k)
    row_off[k + 1] = row_off[k] + (req.pad_output ? req.slice_len : picks[k].length);
  out.count = row_off[ns];

  std::int64_t lb = 0, la = 0;
  for (const auto& v : views) {
    for (auto s : v.shifts) {
      lb = std::max(lb, -s);
      la = std::max(la, s);
    }
  }
  // Per slice: absolute rows of steps [start - lb, start + length + la), kZero
  // where nothing is stored (the final observation's row at step == steps).
  std::vector<const ReplayTrajectory*> trs(ns);
  std::vector<std::int64_t> pos_off(ns + 1, 0), first_g(ns);
  for (std::size_t k = 0; k < ns; ++k) pos_off[k + 1] = pos_off[k] + picks[k].length + lb + la;
  std::vector<std::int64_t> pos(static_cast<std::size_t>(pos_off[ns]));
  for (std::size_t k = 0; k < ns; ++k) {
    const auto* tr = find(picks[k].uid);
    trs[k] = tr;
    first_g[k] = step_g(*tr, 0);
    const std::int64_t tail = tr->tail_g();
    std::int64_t* p = pos.data() + pos_off[k];
    const std::int64_t j0 = picks[k].start - lb, j1 = picks[k].start + picks[k].length + la;
    for (std::int64_t j = j0; j < j1; ++j) {
      if (j < 0 || j > tr->steps) p[j - j0] = kZero;
      else if (j == tr->steps) p[j - j0] = tail;
      else p[j - j0] = step_g(*tr, j);
    }
  }

  for (const auto& v : views) {
    const auto c = static_cast<std::size_t>(column_index(v.column));
    const auto& col = columns_[c];
    const std::size_t rb = col.row_bytes();
    const std::size_t nsh = v.shifts.size();
    const bool is_obs = col.kind == ColumnKind::Observation;
    BatchColumn bc;
    bc.name = v.name;
    bc.dtype = col.dtype;
    bc.shape.push_back(out.count);
    if (v.adds_axis) bc.shape.push_back(static_cast<std::int64_t>(nsh));
    bc.shape.insert(bc.shape.end(), col.shape.begin(), col.shape.end());
    bc.buffer = std::make_shared<Buffer>(static_cast<std::size_t>(out.count) * nsh * rb);
    std::byte* dst = bc.buffer->data();
    const std::byte* base = data_[c].get();
    for (std::size_t k = 0; k < ns; ++k) {
      const auto& pk = picks[k];
      const std::int64_t steps = trs[k]->steps;
      const std::int64_t* p = pos.data() + pos_off[k];
      const std::int64_t rows = row_off[k + 1] - row_off[k];
      for (std::int64_t i = 0; i < rows; ++i) {
        const std::int64_t j = pk.start + std::min(i, pk.length - 1);  // padding repeats the last real step
        for (std::size_t si = 0; si < nsh; ++si, dst += rb) {
          const std::int64_t jj = j + v.shifts[si];
          std::int64_t g = p[jj - (pk.start - lb)];
          if (jj < 0 && v.padding == Padding::Reset) g = first_g[k];
          if (jj >= steps && !is_obs) g = kZero;
          if (g == kZero) std::memset(dst, 0, rb);
          else copy_row(dst, base + static_cast<std::size_t>(g % capacity_) * rb, rb);
        }
      }
    }
    out.columns.push_back(std::move(bc));
  }

  // TorchRL's truncated_key: each slice's last real step (and its padding) is marked.
  for (std::int64_t mark : {req.truncated_column, req.done_column}) {
    if (mark < 0) continue;
    const auto& name = columns_[static_cast<std::size_t>(mark)].name;
    for (std::size_t vi = 0; vi < views.size(); ++vi) {
      const auto& v = views[vi];
      if (v.column != name || v.shifts.size() != 1 || v.shifts[0] != 0 || v.adds_axis) continue;
      auto& bc = out.columns[vi];
      if (bc.dtype != DType::Bool)
        throw std::invalid_argument("column '" + name + "' marks slice ends, so it must be bool, got " +
                                    std::string(dtype_name(bc.dtype)));
      const std::size_t re = columns_[static_cast<std::size_t>(mark)].row_elems();
      auto* b = reinterpret_cast<bool*>(bc.buffer->data());
      for (std::size_t k = 0; k < ns; ++k) {
        for (std::int64_t i = row_off[k] + picks[k].length - 1; i < row_off[k + 1]; ++i)
          std::fill_n(b + static_cast<std::size_t>(i) * re, re, true);
      }
    }
  }

  BatchColumn init{"is_init", DType::Bool, {out.count}, false, std::make_shared<Buffer>(static_cast<std::size_t>(out.count))};
  auto* ib = reinterpret_cast<bool*>(init.buffer->data());
  BatchColumn mask{"mask", DType::Bool, {out.count}, false, nullptr};
  bool* mb = nullptr;
  if (req.pad_output) {
    mask.buffer = std::make_shared<Buffer>(static_cast<std::size_t>(out.count));
    mb = reinterpret_cast<bool*>(mask.buffer->data());
  }
  out.index.resize(static_cast<std::size_t>(out.count));
  for (std::size_t k = 0; k < ns; ++k) {
    const auto& pk = picks[k];
    for (std::int64_t r = row_off[k]; r < row_off[k + 1]; ++r) {
      const std::int64_t i = std::min(r - row_off[k], pk.length - 1);
      const std::int64_t j = pk.start + i;
      ib[r] = i == 0 || (j == 0 && trs[k]->starts_episode);
      if (mb != nullptr) mb[r] = r - row_off[k] < pk.length;
      out.index[static_cast<std::size_t>(r)] = pos[static_cast<std::size_t>(pos_off[k] + lb + i)];
    }
  }
  out.columns.push_back(std::move(init));
  if (req.pad_output) out.columns.push_back(std::move(mask));
  out.slices = std::move(picks);
  return out;
}

std::int64_t ReplayStore::num_steps() const {
  std::shared_lock lock(mu_);
  return live_steps_;
}

std::int64_t ReplayStore::rows_written() const {
  std::shared_lock lock(mu_);
  return head_;
}

std::int64_t ReplayStore::num_trajectories() const {
  std::shared_lock lock(mu_);
  return static_cast<std::int64_t>(trajs_.size());
}

std::size_t ReplayStore::nbytes() const noexcept {
  std::size_t n = 0;
  for (const auto& c : columns_) n += static_cast<std::size_t>(capacity_) * c.row_bytes();
  return n;
}

std::vector<ReplayTrajectory> ReplayStore::trajectories() const {
  std::shared_lock lock(mu_);
  return {trajs_.begin(), trajs_.end()};
}

}  // namespace trajview
