// Attention helpers shared by the reference models: causal scaled dot-product and rotary embeddings.
#pragma once

#include "models/nn/module.h"

namespace loom::nn {

// softmax(q k^T / sqrt(d) [+ causal mask]) v over (batch, heads, seq, head_dim) tensors.
torch::Tensor scaled_dot_product_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                           bool causal, double dropout_p, bool training);

// (B, T, H*D) -> (B, H, T, D) and back. H is whatever x holds: all heads, or a
// tensor-parallel rank's share when the projection is split along its outputs.
torch::Tensor split_heads(const torch::Tensor& x, int64_t head_dim);
torch::Tensor merge_heads(const torch::Tensor& x);

// Rotary position embeddings (LLaMA): holds the inverse frequencies as a buffer.
class RotaryEmbeddingImpl : public torch::nn::Module {
 public:
  RotaryEmbeddingImpl(int64_t head_dim, double theta);
  // Rotates q or k of shape (B, H, T, D) by their positions 0..T-1.
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor inv_freq;
};
LOOM_MODULE(RotaryEmbedding);

}  // namespace loom::nn
