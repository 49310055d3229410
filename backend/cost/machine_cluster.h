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
// - its memory bandwidth is what the ops without FLOPs reached (saved bytes over time);
// - the link is the profile's fitted all-reduce on its largest group: bandwidth
//   2(n-1)/n over the fitted seconds per byte, latency the fitted empty time over 2(n-1) steps;
//   across nodes and to the host the same (one node; host and device share memory on a CPU).
// `program` is the profiled schedule's program (its compute instructions carry the FLOPs).
// Throws UserError when the profile times no op with FLOPs, none without, or no all-reduce.
Cluster machine_cluster(const Profile& profile, const ir::Program& program, int devices, int64_t memory_bytes,
                        const std::string& name);

// The cluster's JSON text, in the format parse_cluster reads.
std::string cluster_json(const Cluster& cluster);

}  // namespace loom
