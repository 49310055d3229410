// A GPT-2 style decoder with HuggingFace GPT-2 module names (wte, wpe, h.N.attn.c_attn, ...).
// Linear weights are (out, in), unlike HF's Conv1D, so shard axis 0 splits outputs. c_attn's
// outputs are head-major (head 0's q, k, v, then head 1's ...), as in Megatron-LM, not HF's
// q|k|v: splitting them along axis 0 over tp ranks gives each rank whole heads.
#pragma once

#include <array>

#include "models/nn/attention.h"
#include "models/nn/layers.h"

namespace loom::models {

struct GPTConfig {
  int64_t vocab_size = 50257;
  int64_t n_positions = 1024;
  int64_t n_embd = 768;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  double dropout = 0.0;
};

class GPT2AttentionImpl : public torch::nn::Module, public nn::AttentionKernelChoice {
 public:
  explicit GPT2AttentionImpl(const GPTConfig& c);
  torch::Tensor forward(const torch::Tensor& x);
  nn::Linear c_attn{nullptr}, c_proj{nullptr};
  nn::Dropout attn_dropout{nullptr}, resid_dropout{nullptr};
  int64_t n_head, head_dim;

 private:
  // q, k and v as (B, heads, T, D); heads is whatever c_attn's output holds (n_head, or
  // n_head / tp when c_attn is split along its outputs).
  std::array<torch::Tensor, 3> heads_qkv(const torch::Tensor& x);
};
LOOM_MODULE(GPT2Attention);

class GPT2MLPImpl : public torch::nn::Module {
 public:
  explicit GPT2MLPImpl(const GPTConfig& c);
  torch::Tensor forward(const torch::Tensor& x);
  nn::Linear c_fc{nullptr}, c_proj{nullptr};
  nn::Activation act{nullptr};
  nn::Dropout dropout{nullptr};
};
LOOM_MODULE(GPT2MLP);

class GPT2BlockImpl : public torch::nn::Module {
 public:
  explicit GPT2BlockImpl(const GPTConfig& c);
  torch::Tensor forward(const torch::Tensor& x);
  nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  GPT2Attention attn{nullptr};
  GPT2MLP mlp{nullptr};
};
LOOM_MODULE(GPT2Block);

// The language model: token ids (B, T) -> logits (B, T, vocab). lm_head shares wte's weight.
class GPT2ModelImpl : public torch::nn::Module {
 public:
  explicit GPT2ModelImpl(const GPTConfig& c);
  torch::Tensor forward(const torch::Tensor& ids);
  GPTConfig config;
  nn::Embedding wte{nullptr}, wpe{nullptr};
  nn::Dropout drop{nullptr};
  std::shared_ptr<nn::List<GPT2Block>> h;
  nn::LayerNorm ln_f{nullptr};
  nn::Linear lm_head{nullptr};
};
LOOM_MODULE(GPT2Model);

}  // namespace loom::models
