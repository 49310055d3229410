// Attention that keeps no score matrix for backward: FlashAttention's recomputation
// (Dao et al., the kernel Slapo swaps in with .replace, slapo.txt §2 ②, and Lins runs,
// lins.txt §VI-A). Forward saves q, k, v, the output and each query row's log-sum-exp of its
// scores; backward recomputes the probabilities from them. Both passes work on blocks of query
// rows, so a block's scores are the largest transient, never the whole s x s matrix.
#pragma once

#include <torch/types.h>

namespace loom::nn {

// The query rows one block of scores holds (FlashAttention's tile height).
constexpr int64_t kAttentionQueryBlock = 256;

// softmax(q k^T / sqrt(d) [+ causal mask]) v over (batch, heads, seq, head_dim) tensors, with
// the memory of the eager computation's saved tensors cut to q, k, v, the output and one float
// per query row. The same numbers as the eager computation up to rounding; no dropout.
// Traced as one op, "loom::memory_efficient_attention" (backend/instrument/aten_op_cost.h).
torch::Tensor memory_efficient_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal);

}  // namespace loom::nn
