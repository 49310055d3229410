// loom::nn drop-ins for the common layers: Linear, Embedding, LayerNorm, RMSNorm,
// Dropout, Activation and List. Parameter names and layouts follow torch.nn.
#pragma once

#include <string>
#include <vector>

#include "models/nn/module.h"

namespace loom::nn {

// y = x W^T + b, with W of shape (out, in) as in torch.nn.Linear. A defined
// `tied_weight` is registered as the weight (shared with e.g. an embedding).
class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in, int64_t out, bool bias = true, double init_std = 0.02, torch::Tensor tied_weight = {});
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight, bias;
};
LOOM_MODULE(Linear);

class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(int64_t count, int64_t dim, double init_std = 0.02);
  torch::Tensor forward(const torch::Tensor& ids);
  torch::Tensor weight;
};
LOOM_MODULE(Embedding);

class LayerNormImpl : public torch::nn::Module {
 public:
  explicit LayerNormImpl(int64_t dim, double eps = 1e-5);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight, bias;
  double eps;
};
LOOM_MODULE(LayerNorm);

// x / rms(x) * weight (LLaMA's normalisation, no bias, no centring).
class RMSNormImpl : public torch::nn::Module {
 public:
  explicit RMSNormImpl(int64_t dim, double eps = 1e-6);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
  double eps;
};
LOOM_MODULE(RMSNorm);

class DropoutImpl : public torch::nn::Module {
 public:
  explicit DropoutImpl(double p = 0.0);
  torch::Tensor forward(const torch::Tensor& x);
  double p;
};
LOOM_MODULE(Dropout);

// A parameter-free activation: "gelu_new" (tanh GELU), "gelu" or "silu".
class ActivationImpl : public torch::nn::Module {
 public:
  explicit ActivationImpl(std::string kind);
  torch::Tensor forward(const torch::Tensor& x);
  std::string kind;
};
LOOM_MODULE(Activation);

// A list of sibling modules registered as "0", "1", ...; its type name is ModuleList,
// as in torch.nn, so that schedules can split pipelines between entries.
template <class Holder>
class List : public torch::nn::Module {
 public:
  List() : torch::nn::Module("ModuleList") {}
  void push_back(Holder m) {
    register_module(std::to_string(items_.size()), m.ptr());
    items_.push_back(std::move(m));
  }
  Holder& operator[](size_t i) { return items_[i]; }
  size_t size() const { return items_.size(); }
  auto begin() { return items_.begin(); }
  auto end() { return items_.end(); }

 private:
  std::vector<Holder> items_;
};

}  // namespace loom::nn
