// What every pass receives besides the program: the schedule's requests, resolved. The
// lowering (backend/lower) fills them; the passes do not see the lowering.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/ir/ir.h"

namespace loom {

// compress(): TAGC on the gradient reduction of the module's parameters (tagc.txt).
struct CompressRequest {
  std::string module;
  double ratio = 10;
  int index_bits = 1;
  double sparsity = 0.9875;  // sparsity=auto resolved by Table 1
};

// prefetch(): gather the parameters of the blocks after `module` ahead of their use.
struct PrefetchRequest {
  std::string module;  // a block, e.g. "h.3"
  int64_t budget = 0;  // bytes gathered ahead; 0 means auto (one block ahead)
};

}  // namespace loom

namespace loom::passes {

struct PassInputs {
  std::vector<PrefetchRequest> prefetch;
  std::vector<std::string> buckets;  // bucket() targets: module paths
  std::vector<std::string> unshard;  // unshard(true) targets: module paths
  std::vector<CompressRequest> compress;
  int64_t data_parallel_bucket_bytes = 1 << 20;  // DDP's bucket size (the run's bucket_bytes)
  bool offload = false;        // offload("optimizer"): optimizer states on the host
  int64_t offload_budget = 0;  // bytes of states that may stay on the device
  int reductions_in_flight = 2;  // backward reduce-scatters overlapping compute (window_reductions; 0: as placed)
};

// A pass rewrites the program and says whether it changed anything.
using Pass = bool (*)(ir::Program& program, const PassInputs& inputs);

}  // namespace loom::passes
