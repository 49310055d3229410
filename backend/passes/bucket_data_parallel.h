// Pass: under plain data parallelism (no sharded states), the per-parameter gradient
// all-reduces become DDP's buckets (backend/passes/gradient_buckets.h): each bucket's all-reduce is
// placed where its last gradient completes; a bucket() module's all-reduce is one of them.
#pragma once

#include "backend/passes/pass.h"

namespace loom::passes {

bool bucket_data_parallel(ir::Program& program, const PassInputs& inputs);

}  // namespace loom::passes
