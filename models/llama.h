// LLaMA-style decoders with HuggingFace LLaMA/Mixtral module names: RMSNorm, SwiGLU,
// rotary embeddings, grouped-query attention, and (Mixtral) a top-2 mixture of experts.
#pragma once

#include "models/nn/attention.h"
#include "models/nn/layers.h"

namespace loom::models {

struct LlamaConfig {
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_layers = 32;
  int64_t num_heads = 32;
  int64_t num_kv_heads = 32;
  double rope_theta = 10000.0;
  double rms_eps = 1e-6;
  int64_t max_positions = 2048;
  int64_t num_experts = 0;       // > 0: Mixtral-style mixture of experts instead of one MLP
  int64_t experts_per_token = 2;
};

class LlamaAttentionImpl : public torch::nn::Module, public nn::AttentionKernelChoice {
 public:
  explicit LlamaAttentionImpl(const LlamaConfig& c);
  torch::Tensor forward(const torch::Tensor& x);
  nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  nn::RotaryEmbedding rotary_emb{nullptr};
  int64_t head_dim;
};
LOOM_MODULE(LlamaAttention);

// down(silu(gate(x)) * up(x))
class LlamaMLPImpl : public torch::nn::Module {
 public:
  explicit LlamaMLPImpl(const LlamaConfig& c);
  torch::Tensor forward(const torch::Tensor& x);
  nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  nn::Activation act_fn{nullptr};
};
LOOM_MODULE(LlamaMLP);

// One Mixtral expert: w2(silu(w1 x) * w3 x).
class MixtralExpertImpl : public torch::nn::Module {
 public:
  explicit MixtralExpertImpl(const LlamaConfig& c);
  torch::Tensor forward(const torch::Tensor& x);
  nn::Linear w1{nullptr}, w2{nullptr}, w3{nullptr};
};
LOOM_MODULE(MixtralExpert);

// Top-k routing over experts; each token's output is the weighted sum of its k experts.
class MixtralSparseMoeImpl : public torch::nn::Module {
 public:
  explicit MixtralSparseMoeImpl(const LlamaConfig& c);
  torch::Tensor forward(const torch::Tensor& x);
  nn::Linear gate{nullptr};
  std::shared_ptr<nn::List<MixtralExpert>> experts;
  int64_t top_k;
};
LOOM_MODULE(MixtralSparseMoe);

class LlamaDecoderLayerImpl : public torch::nn::Module {
 public:
  explicit LlamaDecoderLayerImpl(const LlamaConfig& c);
  torch::Tensor forward(const torch::Tensor& x);
  LlamaAttention self_attn{nullptr};
  LlamaMLP mlp{nullptr};
  MixtralSparseMoe block_sparse_moe{nullptr};
  nn::RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
};
LOOM_MODULE(LlamaDecoderLayer);

// Token ids (B, T) -> logits (B, T, vocab); lm_head is not tied.
class LlamaModelImpl : public torch::nn::Module {
 public:
  LlamaModelImpl(const LlamaConfig& c, const std::string& type_name);
  torch::Tensor forward(const torch::Tensor& ids);
  LlamaConfig config;
  nn::Embedding embed_tokens{nullptr};
  std::shared_ptr<nn::List<LlamaDecoderLayer>> layers;
  nn::RMSNorm norm{nullptr};
  nn::Linear lm_head{nullptr};
};
LOOM_MODULE(LlamaModel);

}  // namespace loom::models
