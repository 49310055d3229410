#include "backend/sharded_executor.h"

#include <ATen/native/Resize.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <map>
#include <unordered_set>

#include "lang/diagnostics.h"
#include "models/zoo_torch.h"

namespace loom {

namespace {

// A gathered parameter's storage is freed after its last use and refilled before the next
// (ENVIRONMENT.md: autograd's saved tensors keep their identity, so gradients are unchanged).
void free_storage(const torch::Tensor& t) {
  at::native::resize_bytes_cpu(t.unsafeGetTensorImpl()->storage().unsafeGetStorageImpl(), 0);
}
void refill_storage(const torch::Tensor& t) {
  at::native::resize_bytes_cpu(t.unsafeGetTensorImpl()->storage().unsafeGetStorageImpl(),
                               static_cast<size_t>(t.numel() * t.element_size()));
}

}  // namespace

struct ShardedExecutor::State {
  struct Param {
    torch::Tensor full;       // the module's parameter; storage present only while gathered
    int64_t numel = 0;
    int64_t chunk = 0;        // shard length (numel padded to a multiple of k, divided by k)
    torch::Tensor shard;      // this rank's shard: a leaf the optimizer updates
    bool resident = false;
    bool gathering = false;
    comm::Work gather_work;
    torch::Tensor gather_buffer;
    // Gradient reduction of the current backward.
    bool grad_ready = false;
    torch::Tensor grad_flat;  // padded full gradient, input of the reduce-scatter
    torch::Tensor grad_shard; // its output
    comm::Work reduce_work;
  };

  ir::Program program;
  std::shared_ptr<comm::Group> shard_group;
  std::shared_ptr<comm::Group> replicas;
  int dp;
  int k;
  std::vector<Param> params;
  std::vector<torch::Tensor> shards;
  std::unordered_map<const torch::nn::Module*, std::vector<size_t>> params_of;
  std::unordered_map<const torch::nn::Module*, std::string> path_of;
  std::vector<size_t> forward_instrs;  // indices of the program's forward instructions
  size_t cursor = 0;                   // next forward instruction to execute
  std::vector<size_t> reduce_order;    // parameters in the order their gradients are reduced
  size_t next_reduce = 0;
  std::vector<size_t> launched_order;

  void launch_gather(size_t p) {
    Param& q = params[p];
    if (q.resident || q.gathering) return;
    q.gather_buffer = torch::empty({q.chunk * k}, q.shard.options().requires_grad(false));
    q.gather_work = comm::all_gather(*shard_group, q.shard.detach(), q.gather_buffer);
    q.gathering = true;
  }

  void finish_gather(size_t p) {
    Param& q = params[p];
    if (q.resident) return;
    if (!q.gathering) launch_gather(p);
    q.gather_work.wait();
    q.gathering = false;
    refill_storage(q.full);
    torch::NoGradGuard no_grad;
    q.full.data().view({-1}).copy_(q.gather_buffer.narrow(0, 0, q.numel));
    q.gather_buffer = torch::Tensor();
    q.resident = true;
  }

  void release(size_t p) {
    Param& q = params[p];
    if (!q.resident) return;
    free_storage(q.full);
    q.resident = false;
  }

  // Executes forward instructions up to and including the compute of `module` ("" = to the end).
  void run_forward_until(const std::string& module) {
    while (cursor < forward_instrs.size()) {
      const ir::Instr& in = program.instrs[forward_instrs[cursor++]];
      switch (in.kind) {
        case ir::OpKind::AllGather:
          for (int p : in.params) launch_gather(p);
          break;
        case ir::OpKind::Wait:
          wait_handle(in.handle);
          break;
        case ir::OpKind::Release:
          for (int p : in.params) release(p);
          break;
        case ir::OpKind::Compute:
          if (in.module == module) return;
          if (!module.empty())
            throw InternalError("sharded executor: module `" + module + "` ran where the traced step expects `" + in.module +
                                "`; this model's call order is data dependent, which the sharded runtime does not support yet");
          break;
        default: break;
      }
    }
    if (!module.empty()) throw InternalError("sharded executor: `" + module + "` is not in the traced forward");
  }

  std::map<int, std::vector<int>> gathers_by_handle;
  void wait_handle(int handle) {
    auto it = gathers_by_handle.find(handle);
    if (it == gathers_by_handle.end()) return;
    for (int p : it->second) finish_gather(p);
  }

  void on_grad(size_t p, const torch::Tensor& grad) {
    Param& q = params[p];
    torch::NoGradGuard no_grad;
    q.grad_flat = torch::zeros({q.chunk * k}, grad.options());
    q.grad_flat.narrow(0, 0, q.numel).copy_(grad.reshape({-1}));
    q.grad_ready = true;
    // Its gradient is complete, so no backward op needs the gathered weight any more.
    release(p);
    launch_reductions();
  }

  // Reductions launch in one fixed order on every rank (collectives must match across ranks).
  void launch_reductions() {
    while (next_reduce < reduce_order.size() && params[reduce_order[next_reduce]].grad_ready) {
      Param& q = params[reduce_order[next_reduce++]];
      q.grad_shard = torch::empty({q.chunk}, q.grad_flat.options());
      q.reduce_work = comm::reduce_scatter(*shard_group, q.grad_flat, q.grad_shard);
    }
  }
};

namespace {

struct RegatherHolder : torch::CustomClassHolder {
  ShardedExecutor* executor;
  const torch::nn::Module* module;
};

// Identity in forward; in backward, re-gathers the module's parameters before its own backward runs.
struct RegatherBeforeBackward : public torch::autograd::Function<RegatherBeforeBackward> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& out,
                               c10::intrusive_ptr<RegatherHolder> holder) {
    ctx->saved_data["holder"] = c10::IValue::make_capsule(holder);
    return out.view_as(out);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto holder = c10::static_intrusive_pointer_cast<RegatherHolder>(ctx->saved_data["holder"].toCapsule());
    for (size_t p : holder->executor->params_of(holder->module)) holder->executor->ensure_resident(p);
    return {grads[0], torch::Tensor()};
  }
};

}  // namespace

ShardedExecutor::ShardedExecutor(torch::nn::Module& model, ir::Program program, std::shared_ptr<comm::Group> shard_group,
                                 std::shared_ptr<comm::Group> replicas, int dp)
    : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.program = std::move(program);
  s.shard_group = shard_group;
  s.replicas = std::move(replicas);
  s.dp = dp;
  s.k = shard_group->size();
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < s.program.params.size(); ++i) index[s.program.params[i].name] = i;
  s.params.resize(s.program.params.size());
  for (auto& m : parameters_by_module(model)) {
    std::vector<size_t> mine;
    for (size_t j = 0; j < m.names.size(); ++j) {
      auto it = index.find(m.names[j]);
      if (it == index.end()) throw InternalError("sharded executor: parameter " + m.names[j] + " is not in the traced step");
      if (!s.params[it->second].full.defined()) s.params[it->second].full = m.tensors[j];
      mine.push_back(it->second);
    }
    s.params_of[m.module] = mine;
    s.path_of[m.module] = m.path;
  }
  int r = shard_group->rank();
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < s.params.size(); ++i) {
    State::Param& q = s.params[i];
    if (!q.full.defined()) throw InternalError("sharded executor: traced parameter " + s.program.params[i].name + " not found in the model");
    q.numel = q.full.numel();
    q.chunk = (q.numel + s.k - 1) / s.k;
    torch::Tensor padded = torch::zeros({q.chunk * s.k}, q.full.options().requires_grad(false));
    padded.narrow(0, 0, q.numel).copy_(q.full.detach().reshape({-1}));
    q.shard = padded.narrow(0, r * q.chunk, q.chunk).clone().requires_grad_(true);
    s.shards.push_back(q.shard);
    free_storage(q.full);
    State* state = s_.get();
    q.full.register_hook([state, i](torch::Tensor grad) {
      state->on_grad(i, grad);
      return grad;
    });
  }
  for (size_t i = 0; i < s.program.instrs.size(); ++i) {
    const ir::Instr& in = s.program.instrs[i];
    if (in.phase == ir::Phase::Forward) s.forward_instrs.push_back(i);
    if (in.kind == ir::OpKind::AllGather) s.gathers_by_handle[in.handle] = in.params;
    if (in.phase == ir::Phase::Backward && in.kind == ir::OpKind::ReduceScatter)
      for (int p : in.params) s.reduce_order.push_back(p);
  }
  if (s.reduce_order.size() != s.params.size())
    throw InternalError("sharded executor: the step reduces " + std::to_string(s.reduce_order.size()) + " of " +
                        std::to_string(s.params.size()) + " gradients");
}

ShardedExecutor::~ShardedExecutor() = default;

const std::vector<torch::Tensor>& ShardedExecutor::shards() const { return s_->shards; }

const std::vector<size_t>& ShardedExecutor::params_of(const torch::nn::Module* module) const {
  static const std::vector<size_t> none;
  auto it = s_->params_of.find(module);
  return it == s_->params_of.end() ? none : it->second;
}

void ShardedExecutor::ensure_resident(size_t p) { s_->finish_gather(p); }

void ShardedExecutor::gather_all() {
  for (size_t p = 0; p < s_->params.size(); ++p) s_->finish_gather(p);
}

void ShardedExecutor::release_all() {
  for (size_t p = 0; p < s_->params.size(); ++p) s_->release(p);
}

void ShardedExecutor::begin_forward() {
  s_->cursor = 0;
  s_->next_reduce = 0;
  for (auto& q : s_->params) q.grad_ready = false;
}

void ShardedExecutor::finish_forward() { s_->run_forward_until(""); }

torch::Tensor ShardedExecutor::intercept(torch::nn::Module& module, const std::vector<torch::Tensor>& inputs,
                                         const nn::Forward& forward) {
  auto it = s_->path_of.find(&module);
  if (it == s_->path_of.end()) return forward(inputs);
  s_->run_forward_until(it->second);
  for (size_t p : s_->params_of[&module]) s_->finish_gather(p);  // the IR waited already; a no-op then
  torch::Tensor out = forward(inputs);
  if (!torch::GradMode::is_enabled() || !out.requires_grad()) return out;
  auto holder = c10::make_intrusive<RegatherHolder>();
  holder->executor = this;
  holder->module = &module;
  return RegatherBeforeBackward::apply(out, holder);
}

void ShardedExecutor::finish_backward() {
  State& s = *s_;
  // Parameters that received no gradient contribute zeros, in the same order on every rank.
  for (size_t p : s.reduce_order) {
    State::Param& q = s.params[p];
    if (q.grad_ready) continue;
    q.grad_flat = torch::zeros({q.chunk * s.k}, q.shard.options().requires_grad(false));
    q.grad_ready = true;
  }
  s.launch_reductions();
  torch::NoGradGuard no_grad;
  for (size_t p : s.reduce_order) {
    State::Param& q = s.params[p];
    q.reduce_work.wait();
    if (q.shard.grad().defined()) q.shard.mutable_grad().add_(q.grad_shard);
    else q.shard.mutable_grad() = q.grad_shard.clone();
    q.grad_flat = torch::Tensor();
    q.grad_shard = torch::Tensor();
    q.full.mutable_grad() = torch::Tensor();  // the full gradient was only the reduction's input
    s.release(p);
  }
}

void ShardedExecutor::average_gradients() {
  State& s = *s_;
  torch::NoGradGuard no_grad;
  for (auto& q : s.params) {
    if (!q.shard.grad().defined()) q.shard.mutable_grad() = torch::zeros_like(q.shard);
    if (s.replicas) comm::all_reduce(*s.replicas, q.shard.mutable_grad()).wait();
    q.shard.mutable_grad().div_(static_cast<double>(s.dp));
  }
}

void ShardedExecutor::clip_gradients(double max_norm) {
  State& s = *s_;
  torch::NoGradGuard no_grad;
  torch::Tensor sq = torch::zeros({1}, torch::kDouble);
  for (auto& q : s.params) sq += q.shard.grad().to(torch::kDouble).pow(2).sum();
  comm::all_reduce(*s.shard_group, sq).wait();  // replicas hold the same shards: the shard group covers every element once
  double norm = std::sqrt(sq.item<double>());
  double coef = max_norm / (norm + 1e-6);
  if (coef < 1)
    for (auto& q : s.params) q.shard.mutable_grad().mul_(coef);
}

}  // namespace loom
