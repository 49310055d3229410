#include "models/nn/deferred_init.h"

#include <unordered_map>
#include <unordered_set>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/utils.h>

namespace loom::nn {
namespace {

struct Deferred {
  c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> placeholder;  // expired: the entry is stale
  std::vector<int64_t> shape;
  Init init;
};

thread_local bool deferring_now = false;
// Per thread, as the scope is: a model is built and materialized on one thread.
std::unordered_map<const c10::TensorImpl*, Deferred>& deferred() {
  thread_local std::unordered_map<const c10::TensorImpl*, Deferred> table;
  return table;
}

// A generator seed per tensor: the run's seed mixed with an FNV-1a hash of the name (splitmix64).
uint64_t seed_of(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ULL;
  uint64_t z = seed ^ h;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

DeferredInit::DeferredInit() : previous_(deferring_now) {
  deferring_now = true;
  auto& table = deferred();  // what earlier models left unmaterialized and dropped since
  for (auto it = table.begin(); it != table.end();) it = it->second.placeholder.expired() ? table.erase(it) : std::next(it);
}
DeferredInit::~DeferredInit() { deferring_now = previous_; }
bool deferring() { return deferring_now; }

void defer(const torch::Tensor& placeholder, std::vector<int64_t> shape, Init init) {
  deferred().insert_or_assign(placeholder.unsafeGetTensorImpl(),
                              Deferred{c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>(placeholder.getIntrusivePtr()),
                                       std::move(shape), std::move(init)});
}

void materialize(torch::nn::Module& root, uint64_t seed, const std::function<bool(const std::string&)>& wanted) {
  auto& table = deferred();
  std::unordered_set<const c10::TensorImpl*> seen;
  torch::NoGradGuard no_grad;
  auto fill = [&](const std::string& name, torch::Tensor t) {
    const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    if (!seen.insert(impl).second) return;  // a tied tensor, under its first name
    auto it = table.find(impl);
    if (it == table.end() || it->second.placeholder.expired() || !wanted(name)) return;
    // Filled on the CPU (the generator's device), then where the placeholder lives.
    torch::Tensor values = torch::empty(it->second.shape, t.options().device(torch::kCPU));
    it->second.init(values, at::make_generator<at::CPUGeneratorImpl>(seed_of(seed, name)));
    t.set_(values.to(t.device()));
    table.erase(it);
  };
  for (auto& p : root.named_parameters()) fill(p.key(), p.value());
  for (auto& b : root.named_buffers()) fill(b.key(), b.value());
}

}  // namespace loom::nn
