// One pipeline stage at runtime (slapo.txt §3.3.2): every stage runs the model's forward, but
// only its own entries of the split list, as its step program says (backend/lower/pipeline.cpp).
// Where the program receives (a forward `recv` names the entry it feeds) the stage takes the
// activation the previous stage sent, passing over the entries before it (they keep the
// activation's shape); where it sends (a forward `send` names the entry whose output it carries)
// the stage sends the activation on and ends its forward by throwing StageForwardDone. In
// backward the gradient travels back the same way, where the program's backward `recv` and
// `send` are. All are c10d point-to-point send and recv between neighbouring stages.
//
// The schedule is the simple one: one micro-batch crosses the stages at a time, so stages wait
// for each other (no GPipe or 1F1B overlap yet). Modules outside the list (embeddings, final
// norm, head) are held and run by every stage; their gradients are summed over the pipeline, so
// every stage applies the same update (Megatron-LM does this for tied embeddings).
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "backend/comm/mesh_groups.h"
#include "backend/ir/ir.h"
#include "models/nn/module.h"

namespace loom {

// Thrown by a stage other than the last when its part of the forward is done.
struct StageForwardDone : std::exception {
  const char* what() const noexcept override { return "pipeline stage forward done"; }
};

class PipelineStage : public nn::CallInterceptor {
 public:
  // `step`: this rank's program, whose send and recv instructions say where the stage exchanges.
  PipelineStage(torch::nn::Module& root, const ir::Program& step, const MeshGroups& groups, nn::CallInterceptor* next);

  // After a forward that ended with StageForwardDone: receives the gradient of the sent
  // activation from the next stage and runs this stage's backward.
  void backward_from_next_stage();
  // After this stage's backward: sends the gradient of the received activation back, where the
  // program does (every stage but the first).
  void send_gradient_to_previous_stage();
  // Sums the gradients of `shared` over the pipeline, in place, as one collective (zeros where a
  // stage did not use one): the parameters outside the list the program names, whole or
  // (sharded states) this rank's slices, which are the same on every stage of its pipeline group.
  void sum_shared_gradients(const std::vector<torch::Tensor>& shared);

  torch::Tensor intercept(torch::nn::Module& module, const std::vector<torch::Tensor>& inputs,
                          const nn::Forward& forward) override;

 private:
  std::shared_ptr<comm::Group> previous_, next_stage_, pipeline_;
  nn::CallInterceptor* next_;
  std::unordered_map<const torch::nn::Module*, int> entry_;  // the split list's entries
  int receive_at_ = -1;             // the entry the program's forward recv feeds (-1: none)
  int send_after_ = -1;             // the entry whose output its forward send carries (-1: none)
  bool returns_gradient_ = false;   // the program sends the received activation's gradient back
  torch::Tensor received_;  // this step's activation from the previous stage (a leaf)
  torch::Tensor sent_;      // this step's activation sent to the next stage (in the graph)
};

}  // namespace loom
