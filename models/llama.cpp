#include "models/llama.h"

namespace loom::models {

LlamaAttentionImpl::LlamaAttentionImpl(const LlamaConfig& c)
    : torch::nn::Module("LlamaAttention"), head_dim(c.hidden_size / c.num_heads) {
  int64_t d = head_dim;
  q_proj = register_module("q_proj", nn::Linear(c.hidden_size, c.num_heads * d, false));
  k_proj = register_module("k_proj", nn::Linear(c.hidden_size, c.num_kv_heads * d, false));
  v_proj = register_module("v_proj", nn::Linear(c.hidden_size, c.num_kv_heads * d, false));
  o_proj = register_module("o_proj", nn::Linear(c.num_heads * d, c.hidden_size, false));
  rotary_emb = register_module("rotary_emb", nn::RotaryEmbedding(d, c.rope_theta));
}

torch::Tensor LlamaAttentionImpl::forward(const torch::Tensor& x) {
  torch::Tensor q = rotary_emb(nn::split_heads(q_proj(x), head_dim));
  torch::Tensor k = rotary_emb(nn::split_heads(k_proj(x), head_dim));
  torch::Tensor v = nn::split_heads(v_proj(x), head_dim);
  int64_t heads = q.size(1), kv_heads = k.size(1);  // this rank's (all of them without tensor parallelism)
  if (kv_heads != heads) {  // grouped-query attention: each kv head serves heads/kv_heads query heads
    auto repeat = [&](const torch::Tensor& t) {  // (B, kv, T, D) -> (B, heads, T, D), like repeat_interleave
      return t.unsqueeze(2).expand({t.size(0), kv_heads, heads / kv_heads, t.size(2), t.size(3)})
          .reshape({t.size(0), heads, t.size(2), t.size(3)});
    };
    k = repeat(k);
    v = repeat(v);
  }
  return o_proj(nn::merge_heads(attend(q, k, v, /*causal=*/true, 0.0, false)));
}

LlamaMLPImpl::LlamaMLPImpl(const LlamaConfig& c) : torch::nn::Module("LlamaMLP") {
  gate_proj = register_module("gate_proj", nn::Linear(c.hidden_size, c.intermediate_size, false));
  up_proj = register_module("up_proj", nn::Linear(c.hidden_size, c.intermediate_size, false));
  down_proj = register_module("down_proj", nn::Linear(c.intermediate_size, c.hidden_size, false));
  act_fn = register_module("act_fn", nn::Activation("silu"));
}

torch::Tensor LlamaMLPImpl::forward(const torch::Tensor& x) { return down_proj(act_fn(gate_proj(x)) * up_proj(x)); }

MixtralExpertImpl::MixtralExpertImpl(const LlamaConfig& c) : torch::nn::Module("MixtralExpert") {
  w1 = register_module("w1", nn::Linear(c.hidden_size, c.intermediate_size, false));
  w2 = register_module("w2", nn::Linear(c.intermediate_size, c.hidden_size, false));
  w3 = register_module("w3", nn::Linear(c.hidden_size, c.intermediate_size, false));
}

torch::Tensor MixtralExpertImpl::forward(const torch::Tensor& x) { return w2(torch::silu(w1(x)) * w3(x)); }

MixtralSparseMoeImpl::MixtralSparseMoeImpl(const LlamaConfig& c) : torch::nn::Module("MixtralSparseMoe"), top_k(c.experts_per_token) {
  gate = register_module("gate", nn::Linear(c.hidden_size, c.num_experts, false));
  experts = register_module("experts", std::make_shared<nn::List<MixtralExpert>>());
  for (int64_t e = 0; e < c.num_experts; ++e) experts->push_back(MixtralExpert(c));
}

torch::Tensor MixtralSparseMoeImpl::forward(const torch::Tensor& x) {
  torch::Tensor flat = x.reshape({-1, x.size(-1)});
  if (flat.is_meta()) {
    // Routing depends on values, which meta tensors lack: a structure-only run calls every expert.
    torch::Tensor out = gate(flat).sum(-1, true) * flat;
    for (auto& expert : *experts) out = out + expert(flat);
    return out.view(x.sizes());
  }
  torch::Tensor probs = torch::softmax(gate(flat), -1);
  auto [weights, chosen] = probs.topk(top_k, -1);
  weights = weights / weights.sum(-1, true);
  torch::Tensor out = torch::zeros_like(flat);
  for (int64_t e = 0; e < static_cast<int64_t>(experts->size()); ++e) {
    torch::Tensor hit = (chosen == e);                       // (tokens, k)
    torch::Tensor rows = hit.any(-1).nonzero().squeeze(-1);  // tokens routed to expert e
    if (rows.numel() == 0) continue;
    torch::Tensor w = (weights * hit).sum(-1).index_select(0, rows).unsqueeze(-1);
    out.index_add_(0, rows, (*experts)[e](flat.index_select(0, rows)) * w);
  }
  return out.view(x.sizes());
}

LlamaDecoderLayerImpl::LlamaDecoderLayerImpl(const LlamaConfig& c) : torch::nn::Module(c.num_experts > 0 ? "MixtralDecoderLayer" : "LlamaDecoderLayer") {
  self_attn = register_module("self_attn", LlamaAttention(c));
  if (c.num_experts > 0) block_sparse_moe = register_module("block_sparse_moe", MixtralSparseMoe(c));
  else mlp = register_module("mlp", LlamaMLP(c));
  input_layernorm = register_module("input_layernorm", nn::RMSNorm(c.hidden_size, c.rms_eps));
  post_attention_layernorm = register_module("post_attention_layernorm", nn::RMSNorm(c.hidden_size, c.rms_eps));
}

torch::Tensor LlamaDecoderLayerImpl::forward(const torch::Tensor& x) {
  torch::Tensor h = x + self_attn(input_layernorm(x));
  torch::Tensor normed = post_attention_layernorm(h);
  return h + (mlp ? mlp(normed) : block_sparse_moe(normed));
}

LlamaModelImpl::LlamaModelImpl(const LlamaConfig& c, const std::string& type_name) : torch::nn::Module(type_name), config(c) {
  embed_tokens = register_module("embed_tokens", nn::Embedding(c.vocab_size, c.hidden_size));
  layers = register_module("layers", std::make_shared<nn::List<LlamaDecoderLayer>>());
  for (int64_t i = 0; i < c.num_layers; ++i) layers->push_back(LlamaDecoderLayer(c));
  norm = register_module("norm", nn::RMSNorm(c.hidden_size, c.rms_eps));
  lm_head = register_module("lm_head", nn::Linear(c.hidden_size, c.vocab_size, false));
}

torch::Tensor LlamaModelImpl::forward(const torch::Tensor& ids) {
  torch::Tensor x = embed_tokens(ids);
  for (auto& layer : *layers) x = layer(x);
  return lm_head(norm(x));
}

}  // namespace loom::models
