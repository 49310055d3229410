// The collective half of the profiler (issue #4 §3): every collective the runtime uses is timed
// on every process-group role of the run (and a pipeline's transfers), over a sweep of sizes, and
// fitted (alpha-beta and a table: backend/cost/collective_cost.h). Each sample is the maximum over
// the world's ranks, so every rank holds the same figures.
#pragma once

#include <vector>

#include <torch/types.h>

#include "backend/cost/profile.h"
#include "backend/comm/mesh_groups.h"
#include "backend/comm/shard_groups.h"

namespace loom {

struct CollectiveSweep {
  std::vector<int64_t> bytes{256, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20};
  int repeats = 15;  // timed runs per size, after one untimed; their mean counts
  // On CPU, also time them while a thread per rank computes (BusyCore): the regime of a
  // collective that overlaps the ranks' compute (profile.h). The idle regime is always timed.
  bool beside_compute = true;
};

// Every world rank calls this with the same groups (made by make_shard_groups for the run's
// factors and make_mesh_groups for its mesh; pass null for those the run does not have), in the
// same order. Under a pipeline the sends and receives between stages are timed too.
std::vector<CollectiveProfile> profile_collectives(comm::Group& world, const ShardGroups* groups, const MeshGroups* mesh,
                                                   torch::Device device, const CollectiveSweep& sweep = {});

}  // namespace loom
