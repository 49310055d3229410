#include "models/nn/attention.h"

#include <cmath>

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
