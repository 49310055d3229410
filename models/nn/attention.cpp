#include "models/nn/attention.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "lang/diagnostics.h"
#include "models/nn/memory_efficient_attention.h"

namespace loom::nn {

torch::Tensor scaled_dot_product_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                           bool causal, double dropout_p, bool training) {
  torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  if (causal) {
    int64_t t = q.size(-2);
    torch::Tensor mask = torch::ones({t, t}, torch::TensorOptions().dtype(torch::kBool).device(q.device())).triu(1);
    scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  }
  torch::Tensor p = torch::softmax(scores, -1);
  if (dropout_p > 0 && training) p = torch::dropout(p, dropout_p, true);
  return torch::matmul(p, v);
}

torch::Tensor AttentionKernelChoice::attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal,
                                            double dropout_p, bool training) const {
  switch (attention_kernel) {
    case AttentionKernel::Eager: break;
    case AttentionKernel::HeadChunks: {
      constexpr int64_t heads_per_chunk = 2;
      std::vector<torch::Tensor> parts;
      for (int64_t h = 0; h < q.size(1); h += heads_per_chunk) {
        int64_t n = std::min(heads_per_chunk, q.size(1) - h);
        parts.push_back(scaled_dot_product_attention(q.narrow(1, h, n), k.narrow(1, h, n), v.narrow(1, h, n), causal, dropout_p, training));
      }
      return torch::cat(parts, 1);
    }
    case AttentionKernel::MemoryEfficient:
      if (dropout_p > 0 && training) {
        std::ostringstream p;
        p << dropout_p;
        throw UserError(SourceRange{}, "replace(\"memory_efficient_attention\") applies no attention dropout, and this model drops "
                                       "attention probabilities with p = " + p.str(),
                        "keep the eager attention for this model, or build it with attention dropout 0");
      }
      return memory_efficient_attention(q, k, v, causal);
  }
  return scaled_dot_product_attention(q, k, v, causal, dropout_p, training);
}

torch::Tensor split_heads(const torch::Tensor& x, int64_t head_dim) {
  return x.view({x.size(0), x.size(1), x.size(2) / head_dim, head_dim}).transpose(1, 2);
}

torch::Tensor merge_heads(const torch::Tensor& x) {
  return x.transpose(1, 2).contiguous().view({x.size(0), x.size(2), x.size(1) * x.size(3)});
}

RotaryEmbeddingImpl::RotaryEmbeddingImpl(int64_t head_dim, double theta) : torch::nn::Module("RotaryEmbedding") {
  inv_freq = register_buffer("inv_freq", new_buffer({head_dim / 2}, [head_dim, theta](torch::Tensor& t, c10::optional<at::Generator>) {
                                 torch::Tensor idx = torch::arange(0, head_dim, 2, torch::kFloat32);
                                 t.copy_(1.0 / torch::pow(theta, idx / static_cast<double>(head_dim)));
                               }));
}

torch::Tensor RotaryEmbeddingImpl::forward(const torch::Tensor& x) {
  int64_t t = x.size(2);
  torch::Tensor pos = torch::arange(t, torch::TensorOptions().dtype(torch::kFloat32).device(x.device()));
  torch::Tensor freqs = torch::outer(pos, inv_freq);
  torch::Tensor emb = torch::cat({freqs, freqs}, -1);
  torch::Tensor cos = emb.cos().to(x.dtype()), sin = emb.sin().to(x.dtype());
  int64_t half = x.size(-1) / 2;
  torch::Tensor rotated = torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

}  // namespace loom::nn
