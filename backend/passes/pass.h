// What every pass receives besides the program: the schedule's requests, resolved.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/ir/ir.h"

namespace loom::passes {

struct PrefetchRequest {
  std::string module;  // the prefetch directive's target (a block, e.g. "h.3")
  int64_t budget = 0;  // bytes gathered ahead; 0 means auto (one block ahead)
};

struct CompressedModule {
  std::string module;  // the compress directive's target
  double ratio = 10;   // the count sketch's compression ratio
};

struct PassInputs {
  std::vector<PrefetchRequest> prefetch;
  std::vector<std::string> buckets;  // bucket() targets: module paths
  std::vector<std::string> unshard;  // unshard(true) targets: module paths
  std::vector<CompressedModule> compress;
  int64_t data_parallel_bucket_bytes = 1 << 20;  // DDP's bucket size (the run's bucket_bytes)
};

// A pass rewrites the program and says whether it changed anything.
using Pass = bool (*)(ir::Program& program, const PassInputs& inputs);

}  // namespace loom::passes
