// The collective half of the profiler (issue #4 §3): at start-up, every collective the sharded
// runtime uses is timed on every process-group role of the run, over a sweep of sizes, and
// fitted (alpha-beta and a table: backend/cost/collective_cost.h). Each sample is the maximum over
// the world's ranks, so every rank holds the same figures.
#pragma once

#include <vector>

#include <torch/types.h>

#include "backend/cost/profile.h"
#include "backend/comm/shard_groups.h"

namespace loom {

struct CollectiveSweep {
  std::vector<int64_t> bytes{256, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20};
  int repeats = 15;  // timed runs per size, after one untimed; their mean counts
  bool beside_compute = true;  // on CPU, time them while a thread per rank computes (BusyCore)
};

// Every world rank calls this with the same groups (made by make_shard_groups for the run's
// factors; pass only `world` for data parallelism), in the same order.
std::vector<CollectiveProfile> profile_collectives(comm::Group& world, const ShardGroups* groups, torch::Device device,
                                                   const CollectiveSweep& sweep = {});

}  // namespace loom
