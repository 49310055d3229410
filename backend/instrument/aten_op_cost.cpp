#include "backend/instrument/aten_op_cost.h"

#include <cstring>
#include <string>
#include <unordered_map>

namespace loom {
namespace {

const at::Tensor* tensor_at(const std::vector<c10::IValue>& values, size_t i) {
  return i < values.size() && values[i].isTensor() && values[i].toTensor().defined() ? &values[i].toTensor() : nullptr;
}

bool requires_grad(const at::Tensor* t) { return t && t->requires_grad(); }

// What a derivative formula reads: a product's operands are kept for each other's gradient.
enum class Saves {
  CrossOperands,  // inputs a, b (at `first`, first + 1): a when b needs a gradient, b when a does
  Input,          // input `first`
  Output,         // output `first`
  LayerNorm,      // the input, and the mean and rstd outputs
  NllLoss,        // the log-probabilities, the targets and the total weight
  Everything,     // every input and output (a fused op that keeps what it was given and made)
};

struct Rule {
  Saves saves;
  size_t first = 0;
};

const std::unordered_map<std::string, Rule>& rules() {
  static const std::unordered_map<std::string, Rule> table = {
      {"aten::mm", {Saves::CrossOperands, 0}},       {"aten::addmm", {Saves::CrossOperands, 1}},
      {"aten::bmm", {Saves::CrossOperands, 0}},      {"aten::baddbmm", {Saves::CrossOperands, 1}},
      {"aten::mul", {Saves::CrossOperands, 0}},      {"aten::div", {Saves::CrossOperands, 0}},
      {"aten::gelu", {Saves::Input, 0}},             {"aten::silu", {Saves::Input, 0}},
      {"aten::pow", {Saves::Input, 0}},              {"aten::log", {Saves::Input, 0}},
      {"aten::sin", {Saves::Input, 0}},              {"aten::cos", {Saves::Input, 0}},
      {"aten::relu", {Saves::Output, 0}},            {"aten::tanh", {Saves::Output, 0}},
      {"aten::sigmoid", {Saves::Output, 0}},         {"aten::exp", {Saves::Output, 0}},
      {"aten::rsqrt", {Saves::Output, 0}},           {"aten::sqrt", {Saves::Output, 0}},
      {"aten::_softmax", {Saves::Output, 0}},        {"aten::_log_softmax", {Saves::Output, 0}},
      {"aten::native_dropout", {Saves::Output, 1}},  {"aten::embedding", {Saves::Input, 1}},
      {"aten::masked_fill", {Saves::Input, 1}},      {"aten::where", {Saves::Input, 0}},
      {"aten::index_select", {Saves::Input, 2}},     {"aten::gather", {Saves::Input, 2}},
      {"aten::index_add", {Saves::Input, 2}},        {"aten::topk", {Saves::Output, 1}},
      {"aten::native_layer_norm", {Saves::LayerNorm, 0}},
      {"aten::nll_loss_forward", {Saves::NllLoss, 0}},
      // q, k, v, the output and the row log-sum-exp (models/nn/memory_efficient_attention.h).
      {"loom::memory_efficient_attention", {Saves::Everything, 0}},
  };
  return table;
}

}  // namespace

double matmul_flops(const char* op, const std::vector<c10::IValue>& inputs) {
  if (!std::strcmp(op, "loom::memory_efficient_attention")) {
    // q k^T and p v: 2 x 2 b h s_q s_k d (its backward recomputes q k^T: not counted, as
    // Megatron-LM's MFU does not count recomputation).
    const at::Tensor *q = tensor_at(inputs, 0), *k = tensor_at(inputs, 1);
    if (!q || !k) return 0;
    return 4.0 * static_cast<double>(q->numel()) * static_cast<double>(k->size(-2));
  }
  bool mm = !std::strcmp(op, "aten::mm"), addmm = !std::strcmp(op, "aten::addmm");
  bool bmm = !std::strcmp(op, "aten::bmm"), baddbmm = !std::strcmp(op, "aten::baddbmm");
  if (!mm && !addmm && !bmm && !baddbmm) return 0;
  const at::Tensor* a = tensor_at(inputs, addmm || baddbmm ? 1 : 0);
  const at::Tensor* b = tensor_at(inputs, addmm || baddbmm ? 2 : 1);
  if (!a || !b) return 0;
  // a: [batch,] m x k; b: [batch,] k x n.
  double m = static_cast<double>(a->size(-2)), k = static_cast<double>(a->size(-1)), n = static_cast<double>(b->size(-1));
  double batch = bmm || baddbmm ? static_cast<double>(a->size(0)) : 1;
  return 2 * batch * m * k * n;
}

std::vector<at::Tensor> saved_for_backward(const char* op, const std::vector<c10::IValue>& inputs,
                                           const std::vector<c10::IValue>& outputs) {
  auto it = rules().find(op);
  if (it == rules().end()) return {};
  bool recorded = false;  // autograd records an op only when some input needs a gradient
  for (size_t k = 0; k < inputs.size(); ++k) recorded = recorded || requires_grad(tensor_at(inputs, k));
  if (!recorded) return {};
  std::vector<at::Tensor> saved;
  auto keep = [&](const at::Tensor* t) {
    if (t) saved.push_back(*t);
  };
  size_t i = it->second.first;
  switch (it->second.saves) {
    case Saves::CrossOperands: {
      const at::Tensor *a = tensor_at(inputs, i), *b = tensor_at(inputs, i + 1);
      if (requires_grad(b)) keep(a);
      if (requires_grad(a)) keep(b);
      break;
    }
    case Saves::Input: keep(tensor_at(inputs, i)); break;
    case Saves::Output: keep(tensor_at(outputs, i)); break;
    case Saves::LayerNorm:
      keep(tensor_at(inputs, 0));
      keep(tensor_at(outputs, 1));
      keep(tensor_at(outputs, 2));
      break;
    case Saves::NllLoss:
      keep(tensor_at(inputs, 0));
      keep(tensor_at(inputs, 1));
      keep(tensor_at(outputs, 1));
      break;
    case Saves::Everything:
      for (size_t k = 0; k < inputs.size(); ++k) keep(tensor_at(inputs, k));
      for (size_t k = 0; k < outputs.size(); ++k) keep(tensor_at(outputs, k));
      break;
  }
  return saved;
}

}  // namespace loom
