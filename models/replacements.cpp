#include "models/replacements.h"

#include <mutex>

#include "lang/diagnostics.h"
#include "models/nn/attention.h"

namespace loom {
namespace {

struct Implementation {
  Replacement entry;
  nn::AttentionKernel kernel;
};

const std::vector<Implementation>& implementations() {
  static const std::vector<Implementation> all = {
      {{"memory_efficient_attention",
        {"GPT2Attention", "LlamaAttention", "BertSelfAttention"},
        "attention that keeps no s x s scores for backward (FlashAttention's recomputation; no attention dropout)"},
       nn::AttentionKernel::MemoryEfficient},
      {{"gpt2_attention_chunked", {"GPT2Attention"}, "GPT-2 attention computed two heads at a time (less transient score memory)"},
       nn::AttentionKernel::HeadChunks},
  };
  return all;
}

}  // namespace

void register_model_replacements() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const Implementation& i : implementations()) ReplacementRegistry::global().add(i.entry);
  });
}

void apply_replacements(torch::nn::Module& root, const std::vector<ModuleReplacement>& replacements) {
  if (replacements.empty()) return;
  auto modules = root.named_modules("", /*include_self=*/true);
  for (const ModuleReplacement& r : replacements) {
    const Implementation* impl = nullptr;
    for (const Implementation& i : implementations())
      if (i.entry.name == r.impl) impl = &i;
    std::shared_ptr<torch::nn::Module>* module = modules.find(r.module);
    auto* choice = module ? dynamic_cast<nn::AttentionKernelChoice*>(module->get()) : nullptr;
    if (!impl || !choice) throw InternalError("replace(\"" + r.impl + "\") cannot act on module `" + r.module + "`");
    choice->attention_kernel = impl->kernel;
  }
}

}  // namespace loom
