#include "backend/model_trace.h"

#include <torch/torch.h>

#include <unordered_map>
#include <unordered_set>

#include "models/nn/module.h"
#include "models/zoo_torch.h"

namespace loom {
namespace {

class Recorder : public nn::CallInterceptor {
 public:
  Recorder(torch::nn::Module& root, ir::OpTrace& trace) : trace_(trace) {
    for (auto& m : parameters_by_module(root)) {
      for (size_t i = 0; i < m.names.size(); ++i)
        numel_[m.names[i]] = m.tensors[i].numel(), bytes_[m.names[i]] = m.tensors[i].element_size();
      modules_[m.module] = {m.path, m.names};
    }
  }

  torch::Tensor intercept(torch::nn::Module& m, const std::vector<torch::Tensor>& inputs, const nn::Forward& forward) override {
    auto it = modules_.find(&m);
    if (it != modules_.end()) {
      trace_.forward.push_back({it->second.first, it->second.second});
      for (auto& name : it->second.second)
        if (seen_.insert(name).second) trace_.params.push_back({name, numel_[name], bytes_[name]});
    }
    return forward(inputs);
  }

 private:
  ir::OpTrace& trace_;
  std::unordered_map<std::string, int64_t> numel_, bytes_;
  std::unordered_map<const torch::nn::Module*, std::pair<std::string, std::vector<std::string>>> modules_;
  std::unordered_set<std::string> seen_;
};

}  // namespace

ir::OpTrace trace_model(const std::string& model_name) {
  BuiltModel model = build_model(model_name, torch::kMeta);
  ir::OpTrace trace;
  trace.model = model_name;
  Recorder recorder(*model.module, trace);
  torch::NoGradGuard no_grad;
  nn::CallInterceptor* previous = nn::set_call_interceptor(&recorder);
  torch::Tensor ids = torch::zeros({1, 8}, torch::TensorOptions().dtype(torch::kLong).device(torch::kMeta));
  try {
    model.forward(ids);
  } catch (...) {
    nn::set_call_interceptor(previous);
    throw;
  }
  nn::set_call_interceptor(previous);
  return trace;
}

}  // namespace loom
