// "This machine" as a cluster (issue #15 §1): a cluster file derived from a profile measured
// here (`loom profile`), so that `loom plan` and `loom simulate --cluster` can price plans for
// the machine the profile was taken on. Torch-free.
#pragma once

#include <cstdint>
#include <string>

#include "backend/cost/cluster.h"
#include "backend/cost/profile.h"
#include "backend/ir/ir.h"

namespace loom {

// One node of `devices` ranks (the profiled run's world), each with `memory_bytes`:
// - the device computes at the FLOP/s the profiled forward ops with FLOPs reached (their FLOPs
//   over their measured time; efficiency 1 at every size, since that is measured, not peak),
//   in either precision;
// - its memory prices each piece of memory-bound work at the rate its kind reached: the
//   forward ops without FLOPs (saved bytes over time: small pieces, compute-bound on a CPU) and
//   the step's tail (the optimizer step and the gradient norm, the bytes the cost model prices
//   them by for the profile's optimizer_elements: large pieces, streamed) — the bandwidth the
//   faster, an efficiency step by size between them; one rate over both where their sizes
//   overlap, and the ops' alone where the profile did not record the elements;
// - the host link copies at half the rate of the largest pieces (each byte read and written);
// - the link comes from the profile's fitted collectives on its all-reduce's largest group on
//   idle cores: each reached its ring factor over its fitted seconds per byte; the bandwidth is
//   the fastest's, each collective at its share of it (efficiency for the all-reduce,
//   collective_efficiency for the others); the latency the all-reduce's fitted empty time over
//   its 2(n-1) steps. Across nodes the same (one node); beside compute
//   (intra_node_beside_compute) the same from the collectives timed beside the ranks' compute,
//   where the profile has an all-reduce there. Neither carries the profile's in-step scale,
//   which is the profiled schedule's own.
// `program` is the profiled schedule's program (its compute instructions carry the FLOPs).
// Throws UserError when the profile times no op with FLOPs, none without, or no all-reduce.
Cluster machine_cluster(const Profile& profile, const ir::Program& program, int devices, int64_t memory_bytes,
                        const std::string& name);

// The first group other than the world's on which a CPU profile timed collectives ("params",
// "tp", ...: a schedule that shards states or uses a mesh); empty for data parallelism's, and on
// a GPU. On a CPU that schedule's ops ran beside those collectives on the same cores (or split),
// so the rates machine_cluster derives from them come out low (measured: a cluster derived from
// gpt:tiny's ZeRO-3 priced data parallelism's step 1.34x its run).
std::string group_beside_the_ops(const Profile& profile);

// The cluster's JSON text, in the format parse_cluster reads.
std::string cluster_json(const Cluster& cluster);

}  // namespace loom
