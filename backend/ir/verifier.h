// The IR verifier, run after every pass: what must hold for a step to be correct.
#pragma once

#include <string>

#include "backend/ir/ir.h"

namespace loom::ir {

// "" when the program is well formed, else the first violation, with the instruction index.
// Always: a parameter is not gathered twice, nor released when not gathered; every collective
// is waited exactly once, after it was issued; gathered bytes stay under the memory limit; no
// gradient is reduced before its parameter's last backward compute. Once gathers are placed:
// every parameter a compute op uses is gathered and waited and not released, and all are
// released by the end; under accumulation, in every micro-batch's run (a parameter gathered in
// the first micro-batch and released in the last is gathered in between). Once reductions are placed: with data parallelism, every gradient is
// reduced and waited before the gradient-norm all-reduce and the optimizer step.
std::string verify(const Program& program);
// verify(), and every guarantee established: what the pipeline's result must satisfy.
std::string verify_complete(const Program& program);

// "" when two programs (e.g. of two ranks) issue the same collectives in the same order.
std::string compare_collectives(const Program& a, const Program& b);

}  // namespace loom::ir
