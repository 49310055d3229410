// One rank's record of one training step, for differential testing (loom verify): every
// module call's output, in the order calls complete; the gradient at each call's output and
// at each of its inputs, in the order backward produces them; the loss; each parameter's
// reduced gradient (the part this rank's optimizer holds); every parameter after the step; the
// error bounds of compressed parameters.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <torch/types.h>

#include "models/nn/module.h"

namespace loom {

// Bound: not a quantity but a lossy primitive's stated error bound for a parameter (compress():
// value = [gradient bound, bound after the step, entries TAGC estimated]), used instead of the
// tolerance for that parameter's gradient and updated value.
enum class RecordKind { Output, OutputGrad, InputGrad, Loss, ParamGrad, Param, Bound };
const char* record_kind_name(RecordKind kind);  // "output", "output gradient", ...

struct RecordEntry {
  RecordKind kind;
  std::string name;     // module path ("model" for the root), "loss", or a parameter name
  int64_t call = 0;     // the module's n-th call in the step; the micro-batch for the loss
  int64_t index = 0;    // input_grad: which input; param_grad: offset of this part in the flat parameter
  torch::Tensor value;  // on the CPU, detached

  // What identifies the same quantity in two runs.
  std::string key() const;
};

// Records module calls while installed as the call interceptor (it runs `next` for each call).
// Module calls are recorded only between begin_forward() and end_forward(): a checkpoint()
// recomputation in backward is not a second call. Inputs that need a gradient pass through an
// identity view whose hook sees the gradient this call alone produces.
class StepRecorder : public nn::CallInterceptor {
 public:
  StepRecorder(torch::nn::Module& root, nn::CallInterceptor* next);

  void begin_forward() { recording_ = true; }
  void end_forward() { recording_ = false; }
  // Adds a tensor (copied to the CPU).
  void add(RecordKind kind, const std::string& name, int64_t call, int64_t index, const torch::Tensor& value);
  // Writes FILE (the tensors) and FILE.json (the index).
  void write(const std::string& file) const;

  torch::Tensor intercept(torch::nn::Module& module, const std::vector<torch::Tensor>& inputs,
                          const nn::Forward& forward) override;

 private:
  nn::CallInterceptor* next_;
  std::unordered_map<const torch::nn::Module*, std::string> path_of_;
  std::unordered_map<std::string, int64_t> calls_;
  bool recording_ = false;
  // Shared with the gradient hooks, which may run on autograd's threads.
  struct Sink {
    std::mutex mutex;
    std::vector<RecordEntry> entries;
    void add(RecordEntry entry);
  };
  std::shared_ptr<Sink> sink_ = std::make_shared<Sink>();
};

// Reads what StepRecorder::write wrote; throws UserError when it cannot.
std::vector<RecordEntry> read_step_record(const std::string& file);

}  // namespace loom
