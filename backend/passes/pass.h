// What every pass receives besides the program: the schedule's requests, resolved.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/ir/ir.h"
#include "backend/lower/runtime_plan.h"

namespace loom::passes {

struct PassInputs {
  std::vector<PrefetchRequest> prefetch;
  std::vector<std::string> buckets;  // bucket() targets: module paths
  std::vector<std::string> unshard;  // unshard(true) targets: module paths
  std::vector<CompressRequest> compress;
  int64_t data_parallel_bucket_bytes = 1 << 20;  // DDP's bucket size (the run's bucket_bytes)
  bool offload = false;        // offload("optimizer"): optimizer states on the host
  int64_t offload_budget = 0;  // bytes of states that may stay on the device
};

// A pass rewrites the program and says whether it changed anything.
using Pass = bool (*)(ir::Program& program, const PassInputs& inputs);

}  // namespace loom::passes
