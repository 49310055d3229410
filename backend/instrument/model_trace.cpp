#include "backend/instrument/model_trace.h"

#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/torch.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "backend/instrument/aten_op_cost.h"
#include "lang/diagnostics.h"
#include "models/nn/module.h"
#include "models/replacements.h"
#include "models/zoo_torch.h"

namespace loom {
namespace {

// Records the module calls, and charges each aten op to the traced op running it or, outside
// every traced op, to the one that ran last (the first one for work before any).
class Recorder : public nn::CallInterceptor {
 public:
  Recorder(torch::nn::Module& root, ir::OpTrace& trace) : trace_(trace) {
    for (auto& m : parameters_by_module(root)) {
      for (size_t i = 0; i < m.names.size(); ++i) {
        numel_[m.names[i]] = m.tensors[i].numel(), bytes_[m.names[i]] = m.tensors[i].element_size();
        counted_.insert(m.tensors[i].storage().unsafeGetStorageImpl());  // weights are not activations
      }
      modules_[m.module] = {m.path, m.names};
    }
  }

  torch::Tensor intercept(torch::nn::Module& m, const std::vector<torch::Tensor>& inputs, const nn::Forward& forward) override {
    auto it = modules_.find(&m);
    if (it == modules_.end()) return forward(inputs);
    int index = static_cast<int>(trace_.forward.size());
    trace_.forward.push_back({it->second.first, it->second.second});
    for (auto& name : it->second.second)
      if (seen_.insert(name).second) trace_.params.push_back({name, numel_[name], bytes_[name]});
    running_.push_back(index);
    torch::Tensor out = forward(inputs);
    if (!inputs.empty() && inputs[0].is_meta()) charge_meta_stand_in(m, inputs[0], out);
    if (!inputs.empty() && inputs[0].defined()) trace_.forward[index].input_bytes = inputs[0].numel() * inputs[0].element_size();
    if (out.defined()) trace_.forward[index].output_bytes = out.numel() * out.element_size();
    running_.pop_back();
    last_ = index;
    return out;
  }

  // LibTorch 1.13 has no meta kernels for embedding and layer_norm, so on meta those modules
  // return an empty tensor of the right shape (models/nn/layers.cpp): charge what the real
  // kernels save, through the same table, and let the output need a gradient as the real one
  // does, so the ops after it are recorded as they are on a real device.
  void charge_meta_stand_in(torch::nn::Module& m, const torch::Tensor& in, torch::Tensor& out) {
    auto own = m.named_parameters(/*recurse=*/false);
    torch::Tensor* weight = own.find("weight");
    if (!weight || (m.name() != "Embedding" && m.name() != "LayerNorm")) return;
    if (m.name() == "Embedding") {
      charge("aten::embedding", {*weight, in}, {out});
    } else {
      auto rows = in.sizes().vec();
      rows.back() = 1;
      torch::Tensor stats = torch::empty(rows, in.options().dtype(torch::kFloat));
      charge("aten::native_layer_norm", {in, c10::IValue(), *weight}, {out, stats, torch::empty_like(stats)});
    }
    if (!out.requires_grad() && weight->requires_grad()) out.requires_grad_(true);
  }

  void charge(const char* op, const std::vector<c10::IValue>& inputs, const std::vector<c10::IValue>& outputs) {
    double flops = matmul_flops(op, inputs);
    int64_t bytes = 0;
    for (const at::Tensor& t : saved_for_backward(op, inputs, outputs)) {
      // A tensor (or a view of one) saved twice is kept once.
      if (!t.has_storage() || !counted_.insert(t.storage().unsafeGetStorageImpl()).second) continue;
      kept_.push_back(t);  // so that no later tensor's storage reuses the address
      // Meta kernels do not always size their outputs' storage: the tensor's own bytes at least.
      bytes += std::max(static_cast<int64_t>(t.storage().nbytes()), static_cast<int64_t>(t.numel() * t.element_size()));
    }
    int at = running_.empty() ? last_ : running_.back();
    if (at < 0) {
      before_first_flops_ += flops, before_first_bytes_ += bytes;
      return;
    }
    trace_.forward[at].flops += flops;
    trace_.forward[at].activation_bytes += bytes;
  }

  void finish() {
    if (trace_.forward.empty()) return;
    trace_.forward[0].flops += before_first_flops_;
    trace_.forward[0].activation_bytes += before_first_bytes_;
  }

 private:
  ir::OpTrace& trace_;
  std::unordered_map<std::string, int64_t> numel_, bytes_;
  std::unordered_map<const torch::nn::Module*, std::pair<std::string, std::vector<std::string>>> modules_;
  std::unordered_set<std::string> seen_;
  std::unordered_set<const c10::StorageImpl*> counted_;
  std::vector<at::Tensor> kept_;  // every counted tensor (meta: no memory)
  std::vector<int> running_;  // traced ops on the call stack, innermost last
  int last_ = -1;
  double before_first_flops_ = 0;
  int64_t before_first_bytes_ = 0;
};

thread_local Recorder* recording = nullptr;

struct OpInputs : at::ObserverContext {
  std::vector<c10::IValue> inputs;
};

// Ops that autograd records: not those a kernel calls below autograd, where nothing is saved.
bool autograd_level() {
  return c10::GradMode::is_enabled() &&
         !c10::impl::tls_local_dispatch_key_set().excluded_.has(c10::DispatchKey::AutogradFunctionality);
}

std::unique_ptr<at::ObserverContext> on_op_start(const at::RecordFunction& fn) {
  if (!recording || !autograd_level()) return nullptr;
  auto context = std::make_unique<OpInputs>();
  context->inputs.assign(fn.inputs().begin(), fn.inputs().end());
  return context;
}

void on_op_end(const at::RecordFunction& fn, at::ObserverContext* context) {
  if (recording && context) recording->charge(fn.name(), static_cast<OpInputs*>(context)->inputs, fn.outputs());
}

}  // namespace

void check_seq_within_context(const std::string& model_name, int64_t max_seq, int64_t seq) {
  if (seq > max_seq)
    throw UserError(SourceRange{}, "--seq " + std::to_string(seq) + " is longer than model " + model_name + "'s context of " +
                                       std::to_string(max_seq) + " tokens",
                    "use --seq " + std::to_string(max_seq) + " or less");
}

ir::OpTrace trace_model(const std::string& model_name, ir::TraceShape shape, const std::vector<ModuleReplacement>& replacements) {
  BuiltModel model = build_model(model_name, torch::kMeta);
  check_seq_within_context(model_name, model.max_seq, shape.seq);
  apply_replacements(*model.module, replacements);
  ir::OpTrace trace;
  trace.model = model_name;
  trace.shape = shape;
  Recorder recorder(*model.module, trace);
  nn::CallInterceptor* previous = nn::set_call_interceptor(&recorder);
  recording = &recorder;
  at::CallbackHandle ops = at::addThreadLocalCallback(
      at::RecordFunctionCallback(on_op_start, on_op_end).needsInputs(true).needsOutputs(true).scopes({at::RecordScope::FUNCTION}));
  auto restore = [&] {
    at::removeCallback(ops);
    recording = nullptr;
    nn::set_call_interceptor(previous);
  };
  try {
    auto ids = torch::TensorOptions().dtype(torch::kLong).device(torch::kMeta);
    torch::Tensor x = torch::zeros({shape.micro_batch, shape.seq}, ids), y = torch::zeros({shape.micro_batch * shape.seq}, ids);
    // The loss as the trainer computes it (fp32), so its saved log-probabilities count too.
    torch::Tensor logits = model.forward(x);
    torch::cross_entropy_loss(logits.to(torch::kFloat).reshape({-1, model.vocab_size}), y);
  } catch (...) {
    restore();
    throw;
  }
  restore();
  recorder.finish();
  return trace;
}

}  // namespace loom
