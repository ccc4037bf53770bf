// Private to the TrajectoryStore sources: the record of one episode, shared by
// store.cpp, store_gather.cpp, store_batch.cpp and store_memory.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "trajview/store.h"

namespace trajview {

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

}  // namespace trajview
