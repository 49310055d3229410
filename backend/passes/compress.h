// compress(): TAGC (tagc.txt Algorithm 1) in place of a parameter's reduce-scatter. The pass
// turns the backward reduce-scatter of each parameter below a compressed module into a
// `compress` instruction on the same group, whose bytes are about what TAGC sends: the count
// sketch (1/ratio of the gradient; a small shard's sketch has a floor, backend/tagc.h) and the
// 1-bit index of non-zeros. The executor runs it
// (backend/tagc.h). Without sharded parameters there is no reduce-scatter to replace.
#pragma once

#include "backend/passes/pass.h"

namespace loom::passes {

bool compress(ir::Program& program, const PassInputs& inputs);

}  // namespace loom::passes
