#include "verifier/differential/step_record.h"

#include <fstream>

#include <nlohmann/json.hpp>
#include <torch/serialize.h>

#include "backend/train/output_paths.h"
#include "lang/diagnostics.h"

namespace loom {

namespace {
constexpr const char* kKindNames[] = {"output", "output gradient", "input gradient", "loss", "parameter gradient", "parameter",
                                     "error bound"};
}

const char* record_kind_name(RecordKind kind) { return kKindNames[static_cast<int>(kind)]; }

std::string RecordEntry::key() const {
  return std::string(record_kind_name(kind)) + " " + name + " #" + std::to_string(call) + " @" + std::to_string(index);
}

StepRecorder::StepRecorder(torch::nn::Module& root, nn::CallInterceptor* next) : next_(next) {
  for (auto& item : root.named_modules("", true)) path_of_[item.value().get()] = item.key().empty() ? "model" : item.key();
}

void StepRecorder::Sink::add(RecordEntry entry) {
  entry.value = entry.value.detach().to(torch::kCPU).clone();
  std::lock_guard<std::mutex> lock(mutex);
  entries.push_back(std::move(entry));
}

void StepRecorder::add(RecordKind kind, const std::string& name, int64_t call, int64_t index, const torch::Tensor& value) {
  sink_->add({kind, name, call, index, value});
}

torch::Tensor StepRecorder::intercept(torch::nn::Module& module, const std::vector<torch::Tensor>& inputs,
                                      const nn::Forward& forward) {
  auto run = [&](const std::vector<torch::Tensor>& xs) { return next_ ? next_->intercept(module, xs, forward) : forward(xs); };
  if (!recording_) return run(inputs);
  auto it = path_of_.find(&module);
  std::string path = it == path_of_.end() ? module.name() : it->second;
  int64_t call = calls_[path]++;
  bool grads = torch::GradMode::is_enabled();
  std::vector<torch::Tensor> xs = inputs;
  auto hook = [sink = sink_, path, call](RecordKind kind, int64_t index) {
    return [sink, path, call, kind, index](torch::Tensor grad) {
      sink->add({kind, path, call, index, grad});
      return grad;
    };
  };
  for (size_t i = 0; i < xs.size(); ++i)
    if (grads && xs[i].defined() && xs[i].requires_grad()) {
      xs[i] = xs[i].view_as(xs[i]);  // its own autograd node: the hook sees only this call's gradient
      xs[i].register_hook(hook(RecordKind::InputGrad, static_cast<int64_t>(i)));
    }
  torch::Tensor out = run(xs);
  add(RecordKind::Output, path, call, 0, out);
  if (grads && out.requires_grad()) out.register_hook(hook(RecordKind::OutputGrad, 0));
  return out;
}

void StepRecorder::write(const std::string& file) const {
  std::lock_guard<std::mutex> lock(sink_->mutex);
  std::vector<torch::Tensor> tensors;
  nlohmann::json index = nlohmann::json::array();
  for (const RecordEntry& e : sink_->entries) {
    tensors.push_back(e.value);
    index.push_back({{"kind", static_cast<int>(e.kind)}, {"name", e.name}, {"call", e.call}, {"index", e.index}});
  }
  CheckedFileWriter tensors_file(file);  // LibTorch's own file writer aborts on a failed write
  torch::save(tensors, tensors_file.sink());
  tensors_file.finish();
  write_whole_file(file + ".json", index.dump() + "\n");
}

std::vector<RecordEntry> read_step_record(const std::string& file) {
  std::vector<torch::Tensor> tensors;
  nlohmann::json index;
  try {
    torch::load(tensors, file);
    index = nlohmann::json::parse(std::ifstream(file + ".json"));
  } catch (const std::exception& e) {
    throw UserError(SourceRange{}, "cannot read the step record " + file + ": " + e.what(),
                    "it is written by a run with --record; run it again");
  }
  if (index.size() != tensors.size())
    throw UserError(SourceRange{}, "the step record " + file + " is incomplete", "run it again");
  std::vector<RecordEntry> out;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& j = index[i];
    out.push_back({static_cast<RecordKind>(j.at("kind").get<int>()), j.at("name").get<std::string>(), j.at("call").get<int64_t>(),
                   j.at("index").get<int64_t>(), tensors[i]});
  }
  return out;
}

}  // namespace loom
