// pass.h's one function that needs the cost model's definition (pass.h only declares it).
#include "backend/passes/pass.h"

#include "backend/cost/instruction_cost.h"

namespace loom {

void MemoryPlanning::plan_with(std::shared_ptr<const InstructionCost> model) {
  cost = model;
  // The passes place collectives to run beside compute (a gather prefetched, a bucket's gather
  // under the previous bucket's compute): priced so where the model tells the two apart.
  instruction_seconds = [model = std::move(model)](const ir::Program& p, const ir::Instr& in) {
    return ir::issued_collective(in) ? model->collective_seconds(p, in, /*beside_compute=*/true) : model->seconds(p, in);
  };
}

}  // namespace loom
