#include "backend/exec/sharded_executor.h"

#include <torch/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "backend/exec/sharded_executor_state.h"
#include "backend/exec/sharded_grad_clip.h"
#include "backend/storage_release.h"
#include "lang/diagnostics.h"
#include "models/zoo_torch.h"

namespace loom {

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
    holder->executor->before_backward(holder->module);
    return {grads[0], torch::Tensor()};
  }
};

}  // namespace

ShardedExecutor::ShardedExecutor(torch::nn::Module& model, ir::Program program, ShardGroups groups, nn::CallInterceptor* inner,
                                 torch::Dtype reduce_dtype)
    : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.reduce_dtype = reduce_dtype;
  s.program = std::move(program);
  s.groups = std::move(groups);
  s.inner = inner;
  const ir::Sharding& f = s.groups.factors;
  if (f.optim < 2)
    throw InternalError("sharded executor: nothing is sharded (s_os = " + std::to_string(f.optim) + ")");
  s.s_p = f.params;
  s.m_g = f.grads / f.params;
  s.m_os = f.optim / f.params;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < s.program.params.size(); ++i) index[s.program.params[i].name] = i;
  s.params.resize(s.program.params.size());
  for (auto& m : parameters_by_module(model)) {
    // Another pipeline stage's module: none of its parameters is the program's, nor its calls.
    if (std::none_of(m.names.begin(), m.names.end(), [&](const std::string& name) { return index.count(name); })) continue;
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
  s.shard_index = s.groups.params ? s.groups.params->rank() : 0;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < s.params.size(); ++i) {
    State::Param& q = s.params[i];
    if (!q.full.defined()) throw InternalError("sharded executor: traced parameter " + s.program.params[i].name + " not found in the model");
    q.numel = q.full.numel();
    q.padded = (q.numel + f.optim - 1) / f.optim * f.optim;
    q.chunk = q.padded / s.s_p;
    torch::Tensor padded = torch::zeros({q.padded}, q.full.options().requires_grad(false));
    padded.narrow(0, 0, q.numel).copy_(q.full.detach().reshape({-1}));
    int64_t slice = q.chunk / s.m_os;
    if (s.s_p == 1) {
      // Replicated (ZeRO-1/2): the parameter becomes a view into its padded flat copy, so the
      // optimizer slice updates it in place and no second copy exists.
      q.shard = padded;
      q.full.set_(padded.storage(), 0, q.full.sizes(), q.full.strides());
      q.resident = true;
    } else {
      q.shard = padded.narrow(0, s.shard_index * q.chunk, q.chunk).clone();
      free_storage(q.full);
    }
    q.slice = q.shard.narrow(0, s.groups.optim_slot * slice, slice).requires_grad_(true);
    s.optimized.push_back(q.slice);
    State* state = s_.get();
    q.full.register_hook([state, i](torch::Tensor grad) {
      state->on_grad(i, grad);
      return grad;
    });
  }
  s.follow_program();
}

void ShardedExecutor::replace_program(ir::Program program) {
  State& s = *s_;
  const ir::Sharding &now = s.program.sharding, &then = program.sharding;
  bool same_sharding = now.dp == then.dp && now.params == then.params && now.grads == then.grads && now.optim == then.optim;
  bool same_params = program.params.size() == s.program.params.size() &&
                     std::equal(program.params.begin(), program.params.end(), s.program.params.begin(),
                                [](const ir::TracedParam& a, const ir::TracedParam& b) { return a.name == b.name && a.numel == b.numel; });
  if (!same_sharding || !same_params)
    throw InternalError("sharded executor: a replacing program must have the same parameters and sharding");
  bool idle = s.in_flight.empty() && s.replica_sums.empty() && std::none_of(s.params.begin(), s.params.end(), [&](const State::Param& q) {
                return q.gathering || (q.resident && s.s_p > 1);
              });
  if (!idle) throw InternalError("sharded executor: the program is replaced while a gather or reduction is under way");
  s.program = std::move(program);
  s.follow_program();
}

ShardedExecutor::~ShardedExecutor() = default;

const std::vector<torch::Tensor>& ShardedExecutor::optimized() const { return s_->optimized; }

const ShardGroups& ShardedExecutor::groups() const { return s_->groups; }

const std::vector<size_t>& ShardedExecutor::params_of(const torch::nn::Module* module) const {
  static const std::vector<size_t> none;
  auto it = s_->params_of.find(module);
  return it == s_->params_of.end() ? none : it->second;
}

void ShardedExecutor::before_backward(const torch::nn::Module* module) {
  auto it = s_->path_of.find(module);
  if (it != s_->path_of.end()) s_->run_backward_until(it->second);
  for (size_t p : params_of(module)) s_->finish_gather(p);
}

void ShardedExecutor::gather_all() {
  for (size_t p = 0; p < s_->params.size(); ++p) s_->finish_gather(p);
}

void ShardedExecutor::release_all() {
  for (size_t p = 0; p < s_->params.size(); ++p) s_->release(p);
}

void ShardedExecutor::attach_state_copier(StateCopier* copier) { s_->copier = copier; }

bool ShardedExecutor::moves_optimizer_states() const { return !s_->copy_handles.empty(); }

void ShardedExecutor::begin_forward(int64_t micro_batch, int64_t micro_batches) {
  s_->micro_batch = micro_batch;
  s_->micro_batches = micro_batches;
  s_->last_micro_batch = micro_batch == micro_batches - 1;
  s_->cursor = 0;
  s_->backward_cursor = 0;
  s_->next_reduce = 0;
  s_->in_backward = false;
  for (auto& q : s_->params) {
    q.grad_ready = q.reduce_launched = false;
    q.arrived = 0;
    q.grad_flat = torch::Tensor();
  }
}

void ShardedExecutor::finish_forward() {
  s_->run_forward_until("");
  s_->in_backward = true;
}

torch::Tensor ShardedExecutor::intercept(torch::nn::Module& module, const std::vector<torch::Tensor>& inputs,
                                         const nn::Forward& forward) {
  auto run = [&] { return s_->inner ? s_->inner->intercept(module, inputs, forward) : forward(inputs); };
  auto it = s_->path_of.find(&module);
  if (it == s_->path_of.end()) return run();
  // In forward, the IR's instructions up to this op; in backward, a checkpoint() recomputation:
  // the IR's instructions up to its recompute (gathers at need past it, alike on every rank).
  if (!s_->in_backward) s_->run_forward_until(it->second);
  else s_->run_backward_to_recompute(it->second);
  for (size_t p : s_->params_of[&module]) s_->finish_gather(p);  // the IR waited already; a no-op then
  torch::Tensor out = run();
  if (!torch::GradMode::is_enabled() || !out.requires_grad()) return out;
  auto holder = c10::make_intrusive<RegatherHolder>();
  holder->executor = this;
  holder->module = &module;
  return RegatherBeforeBackward::apply(out, holder);
}

void ShardedExecutor::run_backward_to_send() {
  State& s = *s_;
  for (size_t k = s.backward_cursor; k < s.backward_instrs.size(); ++k) {
    if (s.program.instrs[s.backward_instrs[k]].kind != ir::OpKind::Send) continue;
    s.autograd_returned();
    if (k > 0) s.run_backward_through(k - 1);
    return;
  }
}

void ShardedExecutor::finish_backward() {
  State& s = *s_;
  s.autograd_returned();
  // The backward ops after the last one that ran did not run here: their zeros, in IR order.
  if (!s.backward_instrs.empty()) s.run_backward_through(s.backward_instrs.size() - 1);
  // Parameters that received no gradient contribute zeros, in the same order on every rank.
  for (const auto& unit : s.reduce_units)
    for (size_t p : unit) s.complete_gradient(p);
  s.launch_reductions();
  s.complete_reductions();
  while (!s.replica_sums.empty()) s.finish_replica_sum(s.replica_sums.begin()->first, /*at_wait=*/false);
  // A gather the IR launched for an op whose backward did not run completes before its buffer
  // goes. The program has released every parameter by its end but those it keeps gathered
  // into the next micro-batch (keep_gathered); a parameter gathered at need after the program
  // released it goes too.
  for (size_t p = 0; p < s.params.size(); ++p) {
    if (s.params[p].gathering) s.finish_gather(p);
    if (s.last_micro_batch || !s.kept_into_next_micro_batch(p)) s.release(p);
  }
}

void ShardedExecutor::average_gradients() {
  State& s = *s_;
  torch::NoGradGuard no_grad;
  for (auto& q : s.params) {
    if (!q.slice_grad.defined()) q.slice_grad = torch::zeros({q.slice.numel()}, q.shard.options());
    q.slice.mutable_grad() = q.slice_grad.div_(static_cast<double>(s.groups.factors.dp));
    q.slice_grad = torch::Tensor();
  }
}

double ShardedExecutor::clip_gradients(double max_norm) {
  // The s_os ranks of one optimizer block hold every element once.
  return clip_sharded_grad_norm(s_->optimized, s_->groups.optim_block.get(), max_norm);
}

void ShardedExecutor::drop_gradients() {
  for (auto& q : s_->params) q.slice.mutable_grad() = torch::Tensor();
}

void ShardedExecutor::publish() {
  State& s = *s_;
  if (!s.groups.optim_peers) return;
  torch::NoGradGuard no_grad;
  // A shard is its optim_peers' slices in their ranks' order, this rank's slice a view of its
  // own place: each gathers into the shard itself, which needs no buffer and no copy beyond
  // what the program's broadcasts say.
  std::vector<comm::Work> works(s.params.size());
  for (size_t p = 0; p < s.params.size(); ++p)
    works[p] = comm::all_gather(*s.groups.optim_peers, s.params[p].slice.detach(), s.params[p].shard);
  for (comm::Work& work : works) work.wait();
}

void ShardedExecutor::inject_faults(const std::vector<std::string>& unreduced, const std::vector<std::string>& released_early) {
  State& s = *s_;
  for (size_t p = 0; p < s.params.size(); ++p)
    for (auto& name : unreduced)
      if (s.program.params[p].name == name) s.unreduced.insert(p);
  for (auto& [module, path] : s.path_of)
    for (auto& wanted : released_early)
      if (path == wanted)
        for (size_t p : s.params_of[module]) s.released_early.insert(p);
  s.plan_reductions();
}

void ShardedExecutor::compress(const std::map<std::string, tagc::Config>& wanted) {
  State& s = *s_;
  if (s.s_p == 1 && !wanted.empty())
    throw InternalError("sharded executor: compress() needs sharded parameters (s_p > 1)");
  for (size_t p = 0; p < s.params.size(); ++p) {
    auto it = wanted.find(s.program.params[p].name);
    if (it != wanted.end()) s.params[p].tagc = it->second;
  }
  // The IR's compress instructions and these settings must name the same parameters.
  for (const ir::Instr& in : s.program.instrs)
    if (in.kind == ir::OpKind::Compress)
      for (int p : in.params)
        if (!s.params[p].tagc)
          throw InternalError("sharded executor: the IR compresses " + s.program.params[p].name + ", which has no TAGC settings");
  for (size_t p = 0; p < s.params.size(); ++p)
    if (s.params[p].tagc && std::none_of(s.program.instrs.begin(), s.program.instrs.end(), [&](const ir::Instr& in) {
          return in.kind == ir::OpKind::Compress && in.params == std::vector<int>{static_cast<int>(p)};
        }))
      throw InternalError("sharded executor: " + s.program.params[p].name + " has TAGC settings, but the IR does not compress it");
  s.plan_reductions();
}

std::vector<ShardedExecutor::CompressionBound> ShardedExecutor::compression_bounds() const {
  std::vector<CompressionBound> out;
  for (size_t p = 0; p < s_->params.size(); ++p)
    if (s_->params[p].tagc) out.push_back({s_->program.params[p].name, s_->params[p].bound, s_->params[p].estimated});
  return out;
}

std::map<std::string, torch::Tensor> ShardedExecutor::compression_residuals() const {
  std::map<std::string, torch::Tensor> out;
  for (size_t p = 0; p < s_->params.size(); ++p)
    if (s_->params[p].tagc && s_->params[p].residual.defined()) out[s_->program.params[p].name] = s_->params[p].residual;
  return out;
}

void ShardedExecutor::restore_compression_residuals(const std::map<std::string, torch::Tensor>& residuals) {
  for (size_t p = 0; p < s_->params.size(); ++p) {
    auto it = residuals.find(s_->program.params[p].name);
    if (it == residuals.end() || !s_->params[p].tagc) continue;
    if (it->second.numel() != s_->params[p].padded)
      throw UserError(SourceRange{}, "the checkpoint's TAGC accumulator of " + it->first + " has " + std::to_string(it->second.numel()) +
                                         " entries, this run's " + std::to_string(s_->params[p].padded),
                      "resume with the sharding the checkpoint was written with");
    s_->params[p].residual = it->second.to(s_->params[p].shard.device());
  }
}

std::vector<OptimizedRange> ShardedExecutor::optimized_ranges() const {
  const State& s = *s_;
  std::vector<OptimizedRange> out;
  for (size_t i = 0; i < s.params.size(); ++i) {
    const State::Param& q = s.params[i];
    int64_t offset = s.shard_index * q.chunk + s.groups.optim_slot * q.slice.numel();
    out.push_back({s.program.params[i].name, q.numel, offset, q.slice});
  }
  return out;
}

}  // namespace loom
