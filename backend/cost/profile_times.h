// A measured profile's time for any instruction of its model's programs: what the memory-aware
// passes plan with when a run re-plans from its own measurements (the two-level loop,
// deepcompile.txt §3, backend/train/replan.h) and what `loom explain --profile` plans with to
// show the program that loop settles on. Unlike ProfileCost, which prices the programs it was
// built with call by call, it prices the instructions passes make (merged and moved gathers):
// a compute at the mean of its module's measured calls in that phase, a recompute at its ops'
// forward times, a collective at its role's line as timed beside compute (else idle), the
// optimizer step at its measured time, the gradient norm at its own measured work plus its
// all-reduce, anything else (waits, releases, copies) at 0. Torch-free.
#pragma once

#include <functional>

#include "backend/cost/profile.h"
#include "backend/ir/ir.h"

namespace loom {

std::function<double(const ir::Program&, const ir::Instr&)> profile_instruction_seconds(const Profile& profile);

}  // namespace loom
