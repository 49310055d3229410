// Building the reference models as LibTorch modules, and extracting module trees from any module.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "lang/module_tree.h"
#include "models/zoo.h"

namespace loom {

// A built language model: its module and its forward from token ids (B, T) to logits (B, T, V).
struct BuiltModel {
  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor(const torch::Tensor& ids)> forward;
  int64_t vocab_size = 0;
  int64_t max_seq = 0;
};

// A language model from its module holder (a LOOM_MODULE holder whose forward takes token ids
// (B, T) and returns logits (B, T, vocab)), its vocabulary and longest sequence.
template <class Holder>
BuiltModel language_model(Holder model, int64_t vocab, int64_t max_seq) {
  return {model.ptr(), [model](const torch::Tensor& ids) mutable { return model(ids); }, vocab, max_seq};
}

// Adds a model of your own to the catalogue, so that every command (`loom check`, `run`,
// `verify`, `explain`, `simulate`, ...) builds it by name. Use LOOM_REGISTER_MODEL below; a
// name taken by a reference model or registered twice is a UserError.
bool register_model(const ModelInfo& info, std::function<BuiltModel()> build);

// Registers a language model at start-up, from the file that defines it:
//   LOOM_REGISTER_MODEL("tiny-lm", "my model", /*vocab=*/256, /*max_seq=*/128, TinyLM(256, 64, 4));
// The last argument constructs its holder; it is evaluated each time the model is built (on the
// meta device for its module tree, then on each rank).
#define LOOM_REGISTER_MODEL(NAME, DESCRIPTION, VOCAB, MAX_SEQ, ...)                         \
  static const bool LOOM_MODEL_CONCAT(loom_registered_model_, __LINE__) = ::loom::register_model( \
      ::loom::ModelInfo{NAME, DESCRIPTION, 0}, [] { return ::loom::language_model(__VA_ARGS__, VOCAB, MAX_SEQ); })
#define LOOM_MODEL_CONCAT(a, b) LOOM_MODEL_CONCAT_(a, b)
#define LOOM_MODEL_CONCAT_(a, b) a##b

// Builds a named model on `device` (torch::kMeta for structure only), each tensor initialised
// from the default CPU generator's seed and its name (nn::materialize). Throws UserError for
// unknown names.
BuiltModel build_model(const std::string& name, torch::Device device = torch::kCPU);
// The model with zero-element placeholders for its parameters and buffers: nn::materialize()
// gives a rank memory for what it holds (models/nn/deferred_init.h).
BuiltModel build_model_without_memory(const std::string& name);

// One module that owns parameters, with its parameters named by their first owner: a tied
// tensor (GPT's lm_head.weight) keeps one name ("wte.weight") and one tensor.
struct ModuleParameters {
  torch::nn::Module* module;
  std::string path;                   // "" for the root
  std::vector<std::string> names;     // full names, first owner's for tied tensors
  std::vector<torch::Tensor> tensors; // in the same order
};

// Every module owning parameters, in named_modules() order.
std::vector<ModuleParameters> parameters_by_module(torch::nn::Module& root);

// The torch-free module tree of any module: named_modules() order, type names,
// direct parameters and buffers, tied tensors marked.
ModuleTree extract_module_tree(const torch::nn::Module& root, const std::string& model_name);

}  // namespace loom
