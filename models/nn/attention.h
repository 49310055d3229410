// Attention helpers shared by the reference models: scaled dot-product attention and the
// kernels replace() chooses between, and rotary embeddings.
#pragma once

#include "models/nn/module.h"

namespace loom::nn {

// softmax(q k^T / sqrt(d) [+ causal mask]) v over (batch, heads, seq, head_dim) tensors, as
// separate ops (autograd keeps the scores and the probabilities: s x s per head).
torch::Tensor scaled_dot_product_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                           bool causal, double dropout_p, bool training);

// The computations an attention module can run for scaled dot-product attention; replace()
// picks one (models/replacements.h).
enum class AttentionKernel {
  Eager,            // scaled_dot_product_attention above
  HeadChunks,       // the same, two heads at a time: a smaller transient score matrix
  MemoryEfficient,  // memory_efficient_attention.h: keeps q, k, v, the output and a row log-sum-exp
};

// Mixed into an attention module whose kernel replace() can swap.
class AttentionKernelChoice {
 public:
  virtual ~AttentionKernelChoice() = default;
  AttentionKernel attention_kernel = AttentionKernel::Eager;

 protected:
  // Scaled dot-product attention with the chosen kernel. MemoryEfficient drops nothing: it
  // refuses attention dropout in training (a UserError).
  torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal, double dropout_p,
                       bool training) const;
};

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
