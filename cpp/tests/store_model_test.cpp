// TrajectoryStore against the reference model (store_model.h): random scripts,
// eager and with lazy columns and held-back steps.
#include "trajview/store.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "store_helpers.h"
#include "store_model.h"
#include "test_util.h"

namespace trajview {
namespace {

using testing::Driver;

TEST(StoreModel, RandomScriptsMatchTheModel) {
  struct Config {
    std::int64_t slots, chunk_rows, repeat;
  };
  const Config configs[] = {{1, 1, 1}, {1, 4, 3}, {3, 1, 1}, {3, 2, 4}, {4, 5, 1}, {2, 64, 2}, {5, 3, 3}};
  unsigned seed = 1;
  for (const Config& c : configs) {
    for (int rep = 0; rep < 3; ++rep, ++seed) {
      SCOPED_TRACE("slots " + std::to_string(c.slots) + " chunk_rows " + std::to_string(c.chunk_rows) + " repeat " +
                   std::to_string(c.repeat) + " seed " + std::to_string(seed));
      Driver d(c.slots, c.chunk_rows, c.repeat, seed);
      d.run(1000);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(StoreModel, RandomScriptsWithLazyColumnsAndHoldMatchTheModel) {
  struct Config {
    std::int64_t slots, chunk_rows, repeat;
  };
  const Config configs[] = {{1, 1, 1}, {1, 4, 3}, {3, 1, 1}, {3, 2, 4}, {4, 5, 1}, {2, 64, 2}, {5, 3, 3}};
  // 0: eager (hold only); 1: every training view with batch_repeat 1 is lazy;
  // 8: pos, actions and state_out_0 lazy, obs (4 bytes) and flag (1) eager.
  const std::size_t thresholds[] = {0, 1, 8};
  unsigned seed = 100;
  for (std::size_t lazy : thresholds) {
    for (const Config& c : configs) {
      for (int rep = 0; rep < 2; ++rep, ++seed) {
        SCOPED_TRACE("lazy_min_row_bytes " + std::to_string(lazy) + " slots " + std::to_string(c.slots) +
                     " chunk_rows " + std::to_string(c.chunk_rows) + " repeat " + std::to_string(c.repeat) +
                     " seed " + std::to_string(seed));
        Driver d(c.slots, c.chunk_rows, c.repeat, seed, lazy, /*use_hold=*/true);
        d.run(1000);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

}  // namespace
}  // namespace trajview
