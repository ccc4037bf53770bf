// The reference model of TrajectoryStore and the random driver that checks the
// store against it (store_model_test.cpp). The model is the obvious
// implementation: every row of every episode kept in vectors, views read by
// the rule in store.h. The driver runs random begin / step / end / batch /
// inference scripts on both and compares every output byte for byte.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "store_helpers.h"
#include "test_util.h"
#include "trajview/store.h"

namespace trajview::testing {

/// The obvious model: each episode keeps every row of every column in a
/// vector; a view at t reads row t + s, the pad row (or row 0 with reset
/// padding) before row 0, and zeros past the last row.
class Model {
 public:
  Model(std::int64_t num_slots, std::vector<ColumnSpec> columns, std::vector<ViewSpec> views)
      : columns_(std::move(columns)), views_(std::move(views)), slots_(static_cast<std::size_t>(num_slots)) {}

  struct Episode {
    std::int64_t eps_id = 0;
    std::int64_t slot = 0;
    std::int64_t steps = 0;
    std::int64_t emitted = 0;
    bool finished = false;
    std::vector<std::vector<std::vector<std::byte>>> rows;  // per column, per row
  };

  void begin(const I64& slots, const std::vector<std::vector<std::byte>>& first_obs_rows) {
    // first_obs_rows[k * n + i]: observation column k, slot i.
    const std::size_t n = slots.size();
    for (std::size_t i = 0; i < n; ++i) {
      auto e = std::make_shared<Episode>();
      e->eps_id = next_eps_++;
      e->slot = slots[i];
      e->rows.resize(columns_.size());
      std::size_t k = 0;
      for (std::size_t c = 0; c < columns_.size(); ++c) {
        if (columns_[c].kind == ColumnKind::Observation) e->rows[c].push_back(first_obs_rows[k++ * n + i]);
      }
      slots_[static_cast<std::size_t>(slots[i])] = e;
    }
  }

  void step(const I64& slots, const std::vector<std::vector<std::vector<std::byte>>>& rows) {
    for (std::size_t i = 0; i < slots.size(); ++i) {
      Episode& e = *slots_[static_cast<std::size_t>(slots[i])];
      for (std::size_t c = 0; c < columns_.size(); ++c) e.rows[c].push_back(rows[c][i]);
      ++e.steps;
    }
  }

  void end(const I64& slots) {
    for (auto s : slots) {
      auto e = std::move(slots_[static_cast<std::size_t>(s)]);
      e->finished = true;
      if (e->steps > e->emitted) finished_.push_back(e);
    }
  }

  std::vector<std::byte> row(const Episode& e, std::size_t c, std::int64_t r, Padding padding) const {
    const ColumnSpec& col = columns_[c];
    const auto& rows = e.rows[c];
    if (r < 0) {
      if (padding == Padding::Reset && !rows.empty()) return rows[0];
      if (!col.pad_row.empty()) return col.pad_row;
      return std::vector<std::byte>(col.row_bytes(), std::byte{0});
    }
    if (r >= static_cast<std::int64_t>(rows.size())) return std::vector<std::byte>(col.row_bytes(), std::byte{0});
    return rows[static_cast<std::size_t>(r)];
  }

  void append_view(const Episode& e, const ViewSpec& v, std::int64_t t, std::vector<std::byte>& out) const {
    const auto c = static_cast<std::size_t>(column(v.column));
    for (auto sh : v.shifts) {
      const auto r = row(e, c, t + sh, v.padding);
      out.insert(out.end(), r.begin(), r.end());
    }
  }

  std::int64_t column(const std::string& name) const {
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      if (columns_[c].name == name) return static_cast<std::int64_t>(c);
    }
    return -1;
  }

  /// Expected gather_inference output of view v for `slots`.
  std::vector<std::byte> inference(const ViewSpec& v, const I64& slots) const {
    std::vector<std::byte> out;
    for (auto s : slots) {
      const Episode& e = *slots_[static_cast<std::size_t>(s)];
      append_view(e, v, e.steps, out);
    }
    return out;
  }

  /// The step up to which a batch emits episode e: all its steps, less
  /// hold[slot] if it is ongoing and `hold` is not empty.
  static std::int64_t upto(const Episode& e, const I64& hold) {
    return e.finished || hold.empty() ? e.steps : e.steps - hold[static_cast<std::size_t>(e.slot)];
  }

  std::vector<const Episode*> batch_order(bool complete_only, const I64& hold = {}) const {
    std::vector<const Episode*> order;
    for (const auto& e : finished_) order.push_back(e.get());
    if (!complete_only) {
      for (const auto& e : slots_) {
        if (e && upto(*e, hold) > e->emitted) order.push_back(e.get());
      }
    }
    return order;
  }

  void emitted(bool complete_only, const I64& hold = {}) {
    finished_.clear();
    if (!complete_only) {
      for (auto& e : slots_) {
        if (e) e->emitted = upto(*e, hold);
      }
    }
  }

  const std::vector<std::shared_ptr<Episode>>& slots() const { return slots_; }
  const std::vector<std::shared_ptr<Episode>>& finished() const { return finished_; }

 private:
  std::vector<ColumnSpec> columns_;
  std::vector<ViewSpec> views_;
  std::vector<std::shared_ptr<Episode>> slots_;
  std::vector<std::shared_ptr<Episode>> finished_;
  std::int64_t next_eps_ = 0;
};

/// Every column kind, dtype and view kind: two observation columns (one a
/// vector), a scalar int64, a vector with a pad row, a bool.
inline std::vector<ColumnSpec> model_columns() {
  ColumnSpec so = col("state_out_0", DType::Float32, {2});
  so.pad_row = bytes_of<float>({-1.0f, -2.0f});
  return {obs_col("obs"), col("pos", DType::Int32, {2}, ColumnKind::Observation), col("actions", DType::Int64), so,
          col("flag", DType::Bool)};
}

inline std::vector<ViewSpec> model_views(std::int64_t repeat) {
  ViewSpec far = training_only(view("far_obs", "obs", -5));
  return {view("obs", "obs", 0),
          view("new_obs", "obs", 1),
          view("stack", "obs", I64{-2, -1, 0}),
          reset(view("stack_reset", "obs", I64{-2, -1, 0})),
          view("pos", "pos", 0),
          view("new_pos", "pos", 1),
          view("pos_hist", "pos", I64{-3, -1}),
          view("actions", "actions", 0),
          view("prev_actions", "actions", -1),
          view("next_actions", "actions", 1),
          view("prev3", "actions", I64{-3, -2, -1}),
          reset(view("around_reset", "actions", I64{-1, 0, 1})),
          repeated(view("state_in_0", "state_out_0", -1), repeat),
          view("state_out_0", "state_out_0", 0),
          view("flag", "flag", 0),
          view("prev_flag", "flag", -1),
          far};
}

class Driver {
 public:
  /// `lazy_min_row_bytes`: the store's lazy threshold; `use_hold`: batches
  /// hold back a random number of each ongoing episode's newest steps.
  Driver(std::int64_t num_slots, std::int64_t chunk_rows, std::int64_t repeat, unsigned seed,
         std::size_t lazy_min_row_bytes = 0, bool use_hold = false)
      : num_slots_(num_slots),
        repeat_(repeat),
        lazy_(lazy_min_row_bytes),
        use_hold_(use_hold),
        store_(num_slots, model_columns(), model_views(repeat), lazy_opts(chunk_rows, lazy_min_row_bytes)),
        model_(num_slots, model_columns(), model_views(repeat)),
        rng_(seed) {}

  std::int64_t rand(std::int64_t n) { return static_cast<std::int64_t>(rng_() % static_cast<std::uint32_t>(n)); }

  I64 active() const {
    I64 out;
    for (std::int64_t s = 0; s < num_slots_; ++s) {
      if (model_.slots()[static_cast<std::size_t>(s)]) out.push_back(s);
    }
    return out;
  }
  I64 idle() const {
    I64 out;
    for (std::int64_t s = 0; s < num_slots_; ++s) {
      if (!model_.slots()[static_cast<std::size_t>(s)]) out.push_back(s);
    }
    return out;
  }
  /// A random non-empty subset of `from`, in random order.
  I64 subset(I64 from) {
    for (std::size_t i = from.size(); i > 1; --i) std::swap(from[i - 1], from[static_cast<std::size_t>(rand(static_cast<std::int64_t>(i)))]);
    from.resize(static_cast<std::size_t>(1 + rand(static_cast<std::int64_t>(from.size()))));
    return from;
  }

  void begin(const I64& slots) {
    const auto n = static_cast<std::int64_t>(slots.size());
    F32 obs;
    std::vector<std::int32_t> pos;
    std::vector<std::vector<std::byte>> rows(2 * slots.size());
    for (std::size_t i = 0; i < slots.size(); ++i) {
      const float o = static_cast<float>(++counter_);
      const auto p = static_cast<std::int32_t>(counter_);
      obs.push_back(o);
      pos.push_back(p);
      pos.push_back(-p);
      rows[i] = bytes_of<float>({o});
      rows[slots.size() + i] = bytes_of<std::int32_t>({p, -p});
    }
    const std::vector<Array> a{make_array(obs), make_array<std::int32_t>({n, 2}, pos)};
    store_.begin_episodes(slots, ins(a));
    model_.begin(slots, rows);
  }

  void step(const I64& slots) {
    const std::size_t n = slots.empty() ? static_cast<std::size_t>(num_slots_) : slots.size();
    I64 model_slots = slots;
    if (slots.empty()) model_slots = active();
    F32 obs, state;
    std::vector<std::int32_t> pos;
    I64 act;
    std::vector<bool> flag;
    std::vector<std::vector<std::vector<std::byte>>> rows(5);
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t v = ++counter_;
      const auto f = static_cast<float>(v);
      const auto p = static_cast<std::int32_t>(v);
      obs.push_back(f);
      pos.push_back(p);
      pos.push_back(-p);
      act.push_back(v);
      state.push_back(f);
      state.push_back(-f);
      flag.push_back(v % 3 == 0);
      rows[0].push_back(bytes_of<float>({f}));
      rows[1].push_back(bytes_of<std::int32_t>({p, -p}));
      rows[2].push_back(bytes_of<std::int64_t>({v}));
      rows[3].push_back(bytes_of<float>({f, -f}));
      rows[4].push_back(bytes_of<std::uint8_t>({static_cast<std::uint8_t>(v % 3 == 0)}));
    }
    const auto nn = static_cast<std::int64_t>(n);
    const std::vector<Array> a{make_array(obs), make_array<std::int32_t>({nn, 2}, pos), make_array(act),
                               make_array<float>({nn, 2}, state), make_array(flag)};
    store_.add_step(slots, ins(a));
    model_.step(model_slots, rows);
  }

  void end(const I64& slots) {
    store_.end_episodes(slots);
    model_.end(slots);
  }

  void check_inference(const I64& slots) {
    const I64 model_slots = slots.empty() ? active() : slots;
    const Inference r = infer(store_, slots);
    for (std::size_t k = 0; k < store_.inference_views().size(); ++k) {
      const ViewSpec& v = store_.views()[store_.inference_views()[k]];
      ASSERT_TRUE(testing::same_bytes(r.out[k], model_.inference(v, model_slots), store_.view_row_bytes(
                                          store_.inference_views()[k])))
          << "inference view '" << v.name << "' at op " << op_;
    }
    I64 t, eps;
    for (auto s : model_slots) {
      t.push_back(model_.slots()[static_cast<std::size_t>(s)]->steps);
      eps.push_back(model_.slots()[static_cast<std::size_t>(s)]->eps_id);
    }
    ASSERT_EQ(r.t, t) << "op " << op_;
    ASSERT_EQ(r.eps, eps) << "op " << op_;
  }

  void check_batch(bool complete_only) {
    I64 hold;
    if (use_hold_) {
      for (const auto& e : model_.slots()) hold.push_back(e ? rand(e->steps - e->emitted + 1) : 0);
    }
    const auto order = model_.batch_order(complete_only, hold);
    const Batch b = store_.build_batch(complete_only, hold);
    ASSERT_EQ(b.segments.size(), order.size()) << "op " << op_;
    std::int64_t count = 0, seqs = 0;
    I64 eps, env, ts;
    std::vector<bool> init;
    std::vector<std::int32_t> seq_lens;
    for (std::size_t i = 0; i < order.size(); ++i) {
      const auto& e = *order[i];
      const Segment& g = b.segments[i];
      const std::int64_t end = Model::upto(e, hold);
      const std::int64_t len = end - e.emitted;
      ASSERT_EQ(g.eps_id, e.eps_id) << "op " << op_;
      ASSERT_EQ(g.env_id, e.slot);
      ASSERT_EQ(g.t_start, e.emitted);
      ASSERT_EQ(g.length, len);
      ASSERT_EQ(g.row_offset, count);
      ASSERT_EQ(g.finished, e.finished);
      for (std::int64_t t = e.emitted; t < end; ++t) {
        eps.push_back(e.eps_id);
        env.push_back(e.slot);
        ts.push_back(t);
        init.push_back(t == 0);
      }
      count += len;
      if (repeat_ > 1) {
        ASSERT_EQ(g.seq_offset, seqs);
        for (std::int64_t q = 0; q * repeat_ < len; ++q, ++seqs)
          seq_lens.push_back(static_cast<std::int32_t>(std::min(repeat_, len - q * repeat_)));
      }
    }
    ASSERT_EQ(b.count, count);
    EXPECT_EQ(values<std::int64_t>(b, "eps_id"), eps);
    EXPECT_EQ(values<std::int64_t>(b, "env_id"), env);
    EXPECT_EQ(values<std::int64_t>(b, "t"), ts);
    EXPECT_EQ(values<bool>(b, "is_init"), init);
    if (repeat_ > 1) {
      EXPECT_EQ(b.num_seqs, seqs);
      EXPECT_EQ(values<std::int32_t>(b, "seq_lens"), seq_lens);
    }
    for (std::size_t v : store_.training_views()) {
      const ViewSpec& view = store_.views()[v];
      std::vector<std::byte> want;
      for (const auto* e : order) {
        const std::int64_t end = Model::upto(*e, hold);
        if (view.batch_repeat > 1) {
          for (std::int64_t t = e->emitted; t < end; t += view.batch_repeat) model_.append_view(*e, view, t, want);
        } else {
          for (std::int64_t t = e->emitted; t < end; ++t) model_.append_view(*e, view, t, want);
        }
      }
      const BatchColumn* c = find_column(b, view.name);
      ASSERT_NE(c, nullptr) << view.name;
      ASSERT_EQ(testing::num_elems(c->shape) * itemsize(c->dtype), want.size()) << view.name << " at op " << op_;
      // A lazy column's value is base_rows[index].
      const std::vector<std::byte> got = testing::materialize(b, *c);
      ASSERT_TRUE(testing::same_bytes(got, want, store_.view_row_bytes(v)))
          << "batch view '" << view.name << "'" << (c->base >= 0 ? " (lazy)" : "") << " at op " << op_;
    }
    ASSERT_NO_FATAL_FAILURE(check_lazy_layout(store_, b, lazy_)) << "op " << op_;
    model_.emitted(complete_only, hold);
  }

  void check_counts() {
    std::int64_t steps = 0, complete = 0;
    I64 ids, lengths;
    for (const auto& e : model_.finished()) complete += e->steps - e->emitted;
    steps = complete;
    for (const auto& e : model_.slots()) {
      if (e) steps += e->steps - e->emitted;
      ids.push_back(e ? e->eps_id : -1);
      lengths.push_back(e ? e->steps : -1);
    }
    ASSERT_EQ(store_.num_steps(), steps) << "op " << op_;
    ASSERT_EQ(store_.num_complete_steps(), complete) << "op " << op_;
    ASSERT_EQ(store_.slot_eps_ids(), ids) << "op " << op_;
    ASSERT_EQ(store_.slot_lengths(), lengths) << "op " << op_;
  }

  void run(int num_ops) {
    for (op_ = 0; op_ < num_ops; ++op_) {
      const I64 act = active();
      const I64 idl = idle();
      const std::int64_t r = rand(100);
      if (!idl.empty() && (act.empty() || r < 10)) {
        begin(subset(idl));
      } else if (r < 40 && idl.empty()) {
        step({});
      } else if (r < 70) {
        step(subset(act));
      } else if (r < 76) {
        end(subset(act));
      } else if (r < 80) {
        ASSERT_NO_FATAL_FAILURE(check_batch(false));
      } else if (r < 82) {
        ASSERT_NO_FATAL_FAILURE(check_batch(true));
      } else if (idl.empty() && r < 91) {
        ASSERT_NO_FATAL_FAILURE(check_inference({}));
      } else {
        ASSERT_NO_FATAL_FAILURE(check_inference(subset(act)));
      }
      ASSERT_NO_FATAL_FAILURE(check_counts());
    }
    if (!active().empty()) end(active());
    ASSERT_NO_FATAL_FAILURE(check_batch(false));
    EXPECT_EQ(store_.num_steps(), 0);
  }

 private:
  std::int64_t num_slots_;
  std::int64_t repeat_;
  std::size_t lazy_;
  bool use_hold_;
  TrajectoryStore store_;
  Model model_;
  std::mt19937 rng_;
  std::int64_t counter_ = 0;
  int op_ = 0;
};

}  // namespace trajview::testing
