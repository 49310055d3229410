#include "models/gpt.h"

#include <cmath>

namespace loom::models {

GPT2AttentionImpl::GPT2AttentionImpl(const GPTConfig& c)
    : torch::nn::Module("GPT2Attention"), n_head(c.n_head), head_dim(c.n_embd / c.n_head) {
  // GPT-2 scales residual projections by 1/sqrt(2 * n_layer).
  double proj_std = 0.02 / std::sqrt(2.0 * c.n_layer);
  c_attn = register_module("c_attn", nn::Linear(c.n_embd, 3 * c.n_embd));
  c_proj = register_module("c_proj", nn::Linear(c.n_embd, c.n_embd, true, proj_std));
  attn_dropout = register_module("attn_dropout", nn::Dropout(c.dropout));
  resid_dropout = register_module("resid_dropout", nn::Dropout(c.dropout));
}

std::array<torch::Tensor, 3> GPT2AttentionImpl::heads_qkv(const torch::Tensor& x) {
  torch::Tensor qkv = c_attn(x);
  // (B, T, heads * 3 * D) -> (B, heads, T, 3, D): a tensor-parallel rank holds whole heads.
  qkv = qkv.view({qkv.size(0), qkv.size(1), qkv.size(2) / (3 * head_dim), 3, head_dim}).transpose(1, 2);
  return {qkv.select(3, 0), qkv.select(3, 1), qkv.select(3, 2)};
}

torch::Tensor GPT2AttentionImpl::forward(const torch::Tensor& x) {
  auto [q, k, v] = heads_qkv(x);
  auto y = attend(q, k, v, /*causal=*/true, attn_dropout->p, is_training());
  return resid_dropout(c_proj(nn::merge_heads(y)));
}

GPT2MLPImpl::GPT2MLPImpl(const GPTConfig& c) : torch::nn::Module("GPT2MLP") {
  c_fc = register_module("c_fc", nn::Linear(c.n_embd, 4 * c.n_embd));
  c_proj = register_module("c_proj", nn::Linear(4 * c.n_embd, c.n_embd, true, 0.02 / std::sqrt(2.0 * c.n_layer)));
  act = register_module("act", nn::Activation("gelu_new"));
  dropout = register_module("dropout", nn::Dropout(c.dropout));
}

torch::Tensor GPT2MLPImpl::forward(const torch::Tensor& x) { return dropout(c_proj(act(c_fc(x)))); }

GPT2BlockImpl::GPT2BlockImpl(const GPTConfig& c) : torch::nn::Module("GPT2Block") {
  ln_1 = register_module("ln_1", nn::LayerNorm(c.n_embd));
  attn = register_module("attn", GPT2Attention(c));
  ln_2 = register_module("ln_2", nn::LayerNorm(c.n_embd));
  mlp = register_module("mlp", GPT2MLP(c));
}

torch::Tensor GPT2BlockImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = x + attn(ln_1(x));
  return y + mlp(ln_2(y));
}

GPT2ModelImpl::GPT2ModelImpl(const GPTConfig& c) : torch::nn::Module("GPT2Model"), config(c) {
  wte = register_module("wte", nn::Embedding(c.vocab_size, c.n_embd));
  wpe = register_module("wpe", nn::Embedding(c.n_positions, c.n_embd, 0.01));
  drop = register_module("drop", nn::Dropout(c.dropout));
  h = register_module("h", std::make_shared<nn::List<GPT2Block>>());
  for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(GPT2Block(c));
  ln_f = register_module("ln_f", nn::LayerNorm(c.n_embd));
  // The output projection shares the token embedding's weight, as in GPT-2.
  lm_head = register_module("lm_head", nn::Linear(c.n_embd, c.vocab_size, /*bias=*/false, 0.02, wte->weight));
}

torch::Tensor GPT2ModelImpl::forward(const torch::Tensor& ids) {
  torch::Tensor pos = torch::arange(ids.size(1), torch::TensorOptions().dtype(torch::kLong).device(ids.device()));
  torch::Tensor x = drop(wte(ids) + wpe(pos));
  for (auto& block : *h) x = block(x);
  return lm_head(ln_f(x));
}

}  // namespace loom::models
