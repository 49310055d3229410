// pass.h's one function that needs the cost model's definition (pass.h only declares it).
#include "backend/passes/pass.h"

#include "backend/cost/instruction_cost.h"

namespace loom {

void MemoryPlanning::plan_with(std::shared_ptr<const InstructionCost> model) {
  cost = model;
  instruction_seconds = [model = std::move(model)](const ir::Program& p, const ir::Instr& in) { return model->seconds(p, in); };
}

}  // namespace loom
