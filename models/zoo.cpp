// The named reference configurations, model construction and module-tree extraction.
#include <map>
#include <mutex>
#include <unordered_map>

#include <ATen/CPUGeneratorImpl.h>

#include "lang/diagnostics.h"
#include "models/replacements.h"
#include "models/bert.h"
#include "models/gpt.h"
#include "models/llama.h"
#include "models/zoo.h"
#include "models/zoo_torch.h"

namespace loom {

namespace {

using models::BertConfig;
using models::GPTConfig;
using models::LlamaConfig;

GPTConfig gpt_tiny() { return {256, 256, 128, 4, 4, 0.0}; }

LlamaConfig llama(int64_t vocab, int64_t hidden, int64_t inter, int64_t layers, int64_t heads, int64_t kv, double theta) {
  LlamaConfig c;
  c.vocab_size = vocab, c.hidden_size = hidden, c.intermediate_size = inter, c.num_layers = layers;
  c.num_heads = heads, c.num_kv_heads = kv, c.rope_theta = theta;
  return c;
}

LlamaConfig mixtral(int64_t vocab, int64_t hidden, int64_t inter, int64_t layers, int64_t heads, int64_t kv, int64_t experts) {
  LlamaConfig c = llama(vocab, hidden, inter, layers, heads, kv, 1e6);
  c.num_experts = experts;
  c.rms_eps = 1e-5;
  return c;
}

BertConfig bert_tiny() {
  BertConfig c;
  c.vocab_size = 256, c.hidden_size = 128, c.num_layers = 2, c.num_heads = 4, c.intermediate_size = 512, c.max_positions = 256;
  return c;
}

// LLaMA 1 was trained on 2,048 positions; lins.txt §VI trains 7B, 13B and 30B on 4,096. Its
// positions are rotary, computed for any length (no table bounds them).
constexpr int64_t kLinsSeq = 4096;

template <class Holder>
BuiltModel wrap(Holder model, int64_t vocab, int64_t max_seq) {
  return language_model(model, vocab, max_seq);
}

struct Entry {
  ModelInfo info;
  std::function<BuiltModel()> build;
};

const std::vector<Entry>& entries() {
  // Published sizes: GPT-2 124M (HF gpt2), LLaMA 6.7B/13.0B/32.5B (Touvron et al. 2023, HF counts),
  // Llama 3 70.6B (Meta model card), BERT-large 336M (HF bert-large-uncased), Mixtral 46.7B (Mistral AI).
  static const std::vector<Entry> all = {
      {{"gpt:tiny", "GPT-2 style, 4 layers, 128 wide, byte vocabulary (tests and CPU runs)", 0},
       [] { return wrap(models::GPT2Model(gpt_tiny()), 256, 256); }},
      {{"gpt:50m", "GPT-2 style, 16 layers, 512 wide, byte vocabulary: 50.7M parameters, none dominant (memory tests, CPU benchmarks)", 0},
       [] { return wrap(models::GPT2Model(GPTConfig{256, 256, 512, 16, 8, 0.0}), 256, 256); }},
      {{"gpt2", "GPT-2 small: 12 layers, 768 wide, 50257 tokens", 124'439'808},
       [] { return wrap(models::GPT2Model(GPTConfig{}), 50257, 1024); }},
      {{"llama:tiny", "LLaMA style, 4 layers, 128 wide, grouped-query attention (4 heads, 2 kv)", 0},
       [] { return wrap(models::LlamaModel(llama(256, 128, 344, 4, 4, 2, 10000), "LlamaForCausalLM"), 256, 256); }},
      {{"llama-7b", "LLaMA 7B: 32 layers, 4096 wide", 6'738'415'616},
       [] { return wrap(models::LlamaModel(llama(32000, 4096, 11008, 32, 32, 32, 10000), "LlamaForCausalLM"), 32000, kLinsSeq); }},
      {{"llama-13b", "LLaMA 13B: 40 layers, 5120 wide", 13'015'864'320},
       [] { return wrap(models::LlamaModel(llama(32000, 5120, 13824, 40, 40, 40, 10000), "LlamaForCausalLM"), 32000, kLinsSeq); }},
      {{"llama-30b", "LLaMA 30B (32.5B): 60 layers, 6656 wide", 32'528'943'616},
       [] { return wrap(models::LlamaModel(llama(32000, 6656, 17920, 60, 52, 52, 10000), "LlamaForCausalLM"), 32000, kLinsSeq); }},
      {{"llama3-70b", "Llama 3 70B: 80 layers, 8192 wide, 8 kv heads, 128256 tokens", 70'553'706'496},
       [] { return wrap(models::LlamaModel(llama(128256, 8192, 28672, 80, 64, 8, 500000), "LlamaForCausalLM"), 128256, 8192); }},
      {{"bert:tiny", "BERT style encoder with MLM head, 2 layers, 128 wide", 0},
       [] { return wrap(models::BertForMaskedLM(bert_tiny()), 256, 256); }},
      {{"bert-large", "BERT-large with MLM head: 24 layers, 1024 wide", 336'000'000},
       [] { return wrap(models::BertForMaskedLM(BertConfig{}), 30522, 512); }},
      {{"mixtral:tiny", "Mixtral style, 2 layers, 128 wide, 4 experts, top-2 routing", 0},
       [] { return wrap(models::LlamaModel(mixtral(256, 128, 256, 2, 4, 2, 4), "MixtralForCausalLM"), 256, 256); }},
      {{"mixtral-8x7b", "Mixtral 8x7B: 32 layers, 4096 wide, 8 experts, top-2", 46'702'792'704},
       [] { return wrap(models::LlamaModel(mixtral(32000, 4096, 14336, 32, 32, 8, 8), "MixtralForCausalLM"), 32000, 32768); }},
  };
  return all;
}

// Models registered by their authors' own code (LOOM_REGISTER_MODEL), in registration order.
std::vector<Entry>& registered() {
  static std::vector<Entry> models;
  return models;
}

const Entry& entry(const std::string& name) {
  for (auto& e : entries())
    if (e.info.name == name) return e;
  for (auto& e : registered())
    if (e.info.name == name) return e;
  std::vector<std::string> names;
  for (auto& e : entries()) names.push_back(e.info.name);
  for (auto& e : registered()) names.push_back(e.info.name);
  auto near = closest(name, names, 1);
  std::string all;
  for (auto& n : names) all += (all.empty() ? "" : ", ") + n;
  throw UserError(SourceRange{}, "unknown model '" + name + "'",
                  (near.empty() ? "" : "did you mean '" + near[0] + "'? ") + "known models: " + all);
}

std::string dtype_name(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float: return "float32";
    case c10::ScalarType::Double: return "float64";
    case c10::ScalarType::Half: return "float16";
    case c10::ScalarType::BFloat16: return "bfloat16";
    case c10::ScalarType::Long: return "int64";
    case c10::ScalarType::Int: return "int32";
    case c10::ScalarType::Bool: return "bool";
    default: return c10::toString(t);
  }
}

}  // namespace

std::vector<ModelInfo> model_catalog() {
  std::vector<ModelInfo> out;
  for (auto& e : entries()) out.push_back(e.info);
  for (auto& e : registered()) out.push_back(e.info);
  return out;
}

bool register_model(const ModelInfo& info, std::function<BuiltModel()> build) {
  for (auto& e : entries())
    if (e.info.name == info.name) throw UserError(SourceRange{}, "a model named '" + info.name + "' is built in", "register yours under another name");
  for (auto& e : registered())
    if (e.info.name == info.name) throw UserError(SourceRange{}, "a model named '" + info.name + "' is registered twice", "register each model once, under its own name");
  registered().push_back({info, std::move(build)});
  return true;
}

BuiltModel build_model(const std::string& name, torch::Device device) {
  if (device.is_meta()) {
    register_model_replacements();
    nn::ConstructionDevice on(device);
    return entry(name).build();
  }
  BuiltModel m = build_model_without_memory(name);
  nn::materialize(*m.module, at::detail::getDefaultCPUGenerator().current_seed(), [](const std::string&) { return true; });
  if (device != torch::kCPU) m.module->to(device);
  return m;
}

BuiltModel build_model_without_memory(const std::string& name) {
  register_model_replacements();
  const Entry& e = entry(name);
  nn::DeferredInit deferred;
  return e.build();
}

ModuleTree extract_module_tree(const torch::nn::Module& root, const std::string& model_name) {
  ModuleTree tree(root.name());
  tree.set_model_name(model_name);
  std::unordered_map<const void*, std::string> owners;  // TensorImpl -> first full name
  auto add_tensors = [&](int node, const torch::nn::Module& m, const std::string& path) {
    for (auto& item : m.named_parameters(/*recurse=*/false)) {
      const torch::Tensor& t = item.value();
      std::string full = join_path(path, item.key());
      TensorInfo info{item.key(), t.sizes().vec(), dtype_name(t.scalar_type()), ""};
      auto [it, fresh] = owners.insert({t.unsafeGetTensorImpl(), full});
      if (!fresh) info.tied_to = it->second;
      tree.add_param(node, std::move(info));
    }
    for (auto& item : m.named_buffers(/*recurse=*/false))
      tree.add_buffer(node, {item.key(), item.value().sizes().vec(), dtype_name(item.value().scalar_type()), ""});
  };
  add_tensors(0, root, "");
  // named_children recursion gives named_modules() order (pre-order, registration order).
  std::function<void(const torch::nn::Module&, int)> walk = [&](const torch::nn::Module& m, int index) {
    for (auto& child : m.named_children()) {
      int c = tree.add(index, child.key(), child.value()->name());
      add_tensors(c, *child.value(), tree.node(c).path);
      walk(*child.value(), c);
    }
  };
  walk(root, 0);
  return tree;
}

std::vector<ModuleParameters> parameters_by_module(torch::nn::Module& root) {
  std::vector<ModuleParameters> out;
  std::unordered_map<const void*, std::string> owner;  // TensorImpl -> first full name
  for (auto& item : root.named_modules("", /*include_self=*/true)) {
    ModuleParameters m{item.value().get(), item.key(), {}, {}};
    for (auto& p : item.value()->named_parameters(/*recurse=*/false)) {
      std::string full = item.key().empty() ? p.key() : item.key() + "." + p.key();
      m.names.push_back(owner.insert({p.value().unsafeGetTensorImpl(), full}).first->second);
      m.tensors.push_back(p.value());
    }
    if (!m.names.empty()) out.push_back(std::move(m));
  }
  return out;
}

std::shared_ptr<const ModuleTree> module_tree_of(const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const ModuleTree>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache.find(name); it != cache.end()) return it->second;
  BuiltModel m = build_model(name, torch::kMeta);
  auto tree = std::make_shared<const ModuleTree>(extract_module_tree(*m.module, name));
  cache[name] = tree;
  return tree;
}

}  // namespace loom
