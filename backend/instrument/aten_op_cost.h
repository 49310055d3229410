// What one aten op of a traced forward costs, from the shapes of its tensors: the FLOPs of
// the matrix products, and the tensors autograd saves for backward (derivatives.yaml), so
// that the IR's compute instructions carry both (issue #14 §2).
//
// A model of autograd, not a measurement: FLOPs count mm, addmm, bmm and baddbmm (2 per
// multiply-add, as Calculon and Megatron count them) and nothing elementwise; the saved
// tensors follow the derivative formulas of the ops Loom's models use, and an op outside the
// table saves nothing. tests/models/op_cost_test.cpp compares the saved bytes of a whole
// forward with what the counting allocator measures on CPU.
#pragma once

#include <ATen/core/ivalue.h>

#include <vector>

namespace loom {

// 2 * multiply-adds of a matrix product (mm, addmm, bmm, baddbmm, and both of the fused
// loom::memory_efficient_attention's); 0 for any other op.
double matmul_flops(const char* op, const std::vector<c10::IValue>& inputs);

// The tensors an op called under autograd keeps for its backward. `op` is the aten name
// ("aten::addmm"); inputs and outputs as the dispatcher saw them.
std::vector<at::Tensor> saved_for_backward(const char* op, const std::vector<c10::IValue>& inputs,
                                           const std::vector<c10::IValue>& outputs);

}  // namespace loom
