// The insert_parameter_broadcast pass: updated parameters spread inside the optimizer-state group
// (lins.txt §IV-C.2): when s_os > s_p, each rank updates 1/s_os of the parameters, and s_os/s_p
// broadcasts give every rank of a parameter group its shard again.
#pragma once

#include "backend/passes/pass.h"

namespace loom::passes {

bool insert_parameter_broadcast(ir::Program& program, const PassInputs& inputs);

}  // namespace loom::passes
