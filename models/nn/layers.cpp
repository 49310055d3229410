#include "models/nn/layers.h"

#include <cmath>

namespace loom::nn {

namespace {
Init normal(double std) {
  return [std](torch::Tensor& t, c10::optional<at::Generator> generator) { t.normal_(0.0, std, generator); };
}
Init constant(double v) {
  return [v](torch::Tensor& t, c10::optional<at::Generator>) { t.fill_(v); };
}
}  // namespace

LinearImpl::LinearImpl(int64_t in, int64_t out, bool with_bias, double init_std, torch::Tensor tied_weight)
    : torch::nn::Module("Linear") {
  weight = register_parameter("weight", tied_weight.defined() ? tied_weight : new_parameter({out, in}, normal(init_std)));
  if (with_bias) bias = register_parameter("bias", new_parameter({out}, constant(0)));
}
torch::Tensor LinearImpl::forward(const torch::Tensor& x) { return torch::linear(x, weight, bias); }

EmbeddingImpl::EmbeddingImpl(int64_t count, int64_t dim, double init_std) : torch::nn::Module("Embedding") {
  weight = register_parameter("weight", new_parameter({count, dim}, normal(init_std)));
}
torch::Tensor EmbeddingImpl::forward(const torch::Tensor& ids) {
  // LibTorch 1.13 has no meta kernel for embedding; structure-only (meta) runs need just the shape.
  if (weight.is_meta()) {
    auto shape = ids.sizes().vec();
    shape.push_back(weight.size(1));
    return torch::empty(shape, weight.options());
  }
  return torch::embedding(weight, ids);
}

LayerNormImpl::LayerNormImpl(int64_t dim, double e) : torch::nn::Module("LayerNorm"), eps(e) {
  weight = register_parameter("weight", new_parameter({dim}, constant(1)));
  bias = register_parameter("bias", new_parameter({dim}, constant(0)));
}
torch::Tensor LayerNormImpl::forward(const torch::Tensor& x) {
  if (x.is_meta()) return torch::empty_like(x);  // no meta kernel in LibTorch 1.13
  return torch::layer_norm(x, {weight.size(0)}, weight, bias, eps);
}

RMSNormImpl::RMSNormImpl(int64_t dim, double e) : torch::nn::Module("RMSNorm"), eps(e) {
  weight = register_parameter("weight", new_parameter({dim}, constant(1)));
}
torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  return x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps) * weight;
}

DropoutImpl::DropoutImpl(double prob) : torch::nn::Module("Dropout"), p(prob) {}
torch::Tensor DropoutImpl::forward(const torch::Tensor& x) {
  return p > 0 && is_training() ? torch::dropout(x, p, true) : x;
}

ActivationImpl::ActivationImpl(std::string k) : torch::nn::Module("Activation"), kind(std::move(k)) {}
torch::Tensor ActivationImpl::forward(const torch::Tensor& x) {
  if (kind == "silu") return torch::silu(x);
  if (kind == "gelu") return torch::gelu(x);
  return torch::gelu(x, "tanh");  // gelu_new, GPT-2's
}

}  // namespace loom::nn
