#include "backend/exec/gradient_reducer.h"

#include <algorithm>
#include <string>

#include "backend/instrument/gradient_hooks.h"
#include "backend/instrument/unpack_timer.h"
#include "lang/diagnostics.h"

namespace loom {

struct GradientReducer::State {
  static constexpr size_t kNone = static_cast<size_t>(-1);
  struct Bucket {
    std::vector<size_t> params;   // indices into State::params
    torch::Tensor flat;           // the reduction buffer
    size_t ready = 0;
    bool launched = false;
    comm::Work work;
  };
  comm::Group* group;
  std::vector<torch::Tensor> params;
  std::vector<int64_t> offset;    // of each parameter in its bucket
  std::vector<size_t> bucket_of;  // kNone: in no bucket (never reduced)
  std::vector<bool> reported;
  std::vector<int> deliveries;    // the gradients autograd hands each parameter per backward
  std::vector<int> arrived;       // those handed this backward
  std::vector<size_t> last_computed;  // the parameters of the program's last backward compute
  bool uncomputed_complete = false;   // the zero gradients are in their buckets this backward
  std::vector<Bucket> buckets;
  size_t next_launch = 0;         // buckets launch in index order on every rank
  bool sync = false;

  void copy_in(size_t p, const torch::Tensor& grad) {
    Bucket& b = buckets[bucket_of[p]];
    b.flat.narrow(0, offset[p], params[p].numel()).copy_(grad.reshape({-1}));
  }

  void launch_ready() {
    while (next_launch < buckets.size() && buckets[next_launch].ready == buckets[next_launch].params.size()) {
      Bucket& b = buckets[next_launch++];
      b.launched = true;
      b.work = comm::all_reduce(*group, b.flat);
    }
  }

  void report(size_t p) {
    if (reported[p]) return;
    reported[p] = true;
    ++buckets[bucket_of[p]].ready;
  }

  // The parameters autograd hands no gradient: zeros, in their buckets once the last backward
  // compute's gradients are in, where the program reduces them.
  void complete_uncomputed() {
    if (uncomputed_complete) return;
    uncomputed_complete = true;
    for (size_t p = 0; p < params.size(); ++p) {
      if (deliveries[p] > 0 || bucket_of[p] == kNone) continue;
      buckets[bucket_of[p]].flat.narrow(0, offset[p], params[p].numel()).zero_();
      report(p);
    }
  }

  bool last_compute_done() const {
    return !last_computed.empty() && std::all_of(last_computed.begin(), last_computed.end(), [&](size_t p) { return reported[p]; });
  }

  void on_grad(size_t p, const torch::Tensor& incoming) {
    instrument::gradient_hook_begins();
    if (!sync) return;
    // The gradient this step: what was accumulated before plus what arrives now.
    const torch::Tensor& acc = params[p].grad();
    torch::Tensor full = acc.defined() ? acc + incoming : incoming;
    Bucket& b = buckets[bucket_of[p]];
    if (b.launched)
      throw InternalError("gradient reducer: a parameter received gradient " + std::to_string(arrived[p] + 1) +
                          " of a backward whose program hands it " + std::to_string(deliveries[p]) +
                          ", after its bucket's all-reduce started");
    copy_in(p, full);
    if (++arrived[p] < deliveries[p]) return;  // a recomputation still hands it more
    report(p);
    if (last_compute_done()) complete_uncomputed();
    launch_ready();
  }
};

GradientReducer::GradientReducer(const std::vector<torch::Tensor>& params, const std::vector<std::vector<size_t>>& buckets,
                                 std::vector<int> deliveries, std::vector<size_t> last_computed, comm::Group& group,
                                 torch::Dtype reduce_dtype)
    : s_(std::make_unique<State>()) {
  s_->group = &group;
  s_->params = params;
  size_t n = params.size();
  if (deliveries.size() != n) throw InternalError("gradient reducer: deliveries for " + std::to_string(deliveries.size()) +
                                                  " of " + std::to_string(n) + " parameters");
  s_->deliveries = std::move(deliveries);
  s_->last_computed = std::move(last_computed);
  s_->arrived.assign(n, 0);
  s_->offset.assign(n, 0);
  s_->bucket_of.assign(n, State::kNone);
  s_->reported.assign(n, false);
  for (const std::vector<size_t>& members : buckets) {
    State::Bucket b;
    b.params = members;
    int64_t total = 0;
    for (size_t p : members) {
      s_->bucket_of[p] = s_->buckets.size();
      s_->offset[p] = total;
      total += params[p].numel();
    }
    b.flat = torch::zeros({total}, params[members.at(0)].options().dtype(reduce_dtype).requires_grad(false));
    s_->buckets.push_back(std::move(b));
  }
  for (size_t k = 0; k < n; ++k) {
    if (s_->bucket_of[k] == State::kNone || !params[k].requires_grad()) continue;  // in no bucket: never reduced (the header says why)
    State* state = s_.get();
    s_->params[k].register_hook([state, k](torch::Tensor grad) {
      state->on_grad(k, grad);
      return grad;
    });
  }
}

GradientReducer::~GradientReducer() = default;

size_t GradientReducer::bucket_count() const { return s_->buckets.size(); }

void GradientReducer::prepare(bool sync) {
  s_->sync = sync;
  s_->next_launch = 0;
  std::fill(s_->reported.begin(), s_->reported.end(), false);
  std::fill(s_->arrived.begin(), s_->arrived.end(), 0);
  for (auto& b : s_->buckets) {
    b.ready = 0;
    b.launched = false;
  }
  s_->uncomputed_complete = false;
}

void GradientReducer::backward_returned() {
  if (!s_->sync) return;
  s_->complete_uncomputed();
  s_->launch_ready();
}

void GradientReducer::finish() {
  if (!s_->sync) return;
  State& s = *s_;
  // Parameters that got no gradient this step (unused experts, say) contribute what they hold.
  for (size_t p = 0; p < s.params.size(); ++p) {
    if (s.reported[p] || s.bucket_of[p] == State::kNone) continue;
    auto& b = s.buckets[s.bucket_of[p]];
    if (b.launched) continue;
    const torch::Tensor& g = s.params[p].grad();
    if (g.defined()) s.copy_in(p, g);
    else b.flat.narrow(0, s.offset[p], s.params[p].numel()).zero_();
    s.report(p);
  }
  s.launch_ready();
  // Each bucket's wait unpacks it (the program's wait, passes/mark_unpacks.h): the average of
  // every member, written into its gradient in one pass.
  double scale = 1.0 / s.group->size();
  torch::NoGradGuard no_grad;
  for (auto& b : s.buckets) {
    b.work.wait();
    int64_t bytes = 0;
    for (size_t p : b.params) bytes += s.params[p].numel() * s.params[p].element_size();
    instrument::UnpackTimer unpacking(bytes);
    torch::Tensor factor = torch::scalar_tensor(scale, b.flat.options());
    for (size_t p : b.params) {
      torch::Tensor summed = b.flat.narrow(0, s.offset[p], s.params[p].numel()).view(s.params[p].sizes());
      torch::Tensor& grad = s.params[p].mutable_grad();
      if (grad.defined() && grad.scalar_type() == summed.scalar_type()) {
        at::mul_out(grad, summed, factor);
        continue;
      }
      torch::Tensor average = summed.to(s.params[p].scalar_type()) * scale;  // from the reduction's dtype
      if (grad.defined()) grad.copy_(average);
      else grad = average;
    }
  }
}

}  // namespace loom
