#include "backend/exec/state_copier.h"

#include <cstdlib>

#include <torch/csrc/autograd/generated/variable_factories.h>

#include "backend/storage_release.h"
#include "lang/diagnostics.h"

namespace loom {
namespace {

// A host buffer shaped like `device`: pinned on a CUDA run, malloc'd on a CPU run (outside the
// counting allocator: it is the host's memory, not the device's).
torch::Tensor host_buffer_like(const torch::Tensor& device) {
  if (device.is_cuda()) return torch::empty(device.sizes(), device.options().device(torch::kCPU).pinned_memory(true));
  void* bytes = std::malloc(static_cast<size_t>(device.numel() * device.element_size()));
  if (!bytes) throw InternalError("adaptive offloading: out of host memory for an optimizer state");
  return torch::from_blob(bytes, device.sizes(), [](void* p) { std::free(p); }, device.options());
}

}  // namespace

StateCopier::StateCopier(StatesOf states_of) : states_of_(std::move(states_of)) {}

std::vector<torch::Tensor>& StateCopier::host_buffers(int q, const std::vector<torch::Tensor>& device) {
  auto it = host_.find(q);
  if (it != host_.end()) return it->second;
  std::vector<torch::Tensor> buffers;
  for (const torch::Tensor& t : device) buffers.push_back(host_buffer_like(t));
  return host_.emplace(q, std::move(buffers)).first->second;
}

void StateCopier::offload(int handle, const std::vector<int>& params) {
  Copy c;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> pairs;  // (to, from)
  for (int q : params) {
    if (on_host_[q]) throw InternalError("adaptive offloading: parameter " + std::to_string(q) + "'s states are offloaded twice");
    on_host_[q] = true;
    std::vector<torch::Tensor> device = states_of_(q);
    std::vector<torch::Tensor>& host = host_buffers(q, device);
    for (size_t k = 0; k < device.size(); ++k) pairs.emplace_back(host[k], device[k]);
    c.device.insert(c.device.end(), device.begin(), device.end());
  }
  start(handle, std::move(c), std::move(pairs));
}

void StateCopier::reload(int handle, const std::vector<int>& params) {
  Copy c;
  c.offload = false;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> pairs;
  for (int q : params) {
    auto host = host_.find(q);
    if (host == host_.end() || !on_host_[q])
      throw InternalError("adaptive offloading: parameter " + std::to_string(q) + "'s states are reloaded without being offloaded");
    on_host_[q] = false;
    std::vector<torch::Tensor> device = states_of_(q);
    for (size_t k = 0; k < device.size(); ++k) {
      refill_storage(device[k]);  // the device memory comes back here, at the reload's launch
      pairs.emplace_back(device[k], host->second[k]);
    }
    c.device.insert(c.device.end(), device.begin(), device.end());
  }
  start(handle, std::move(c), std::move(pairs));
}

void StateCopier::start(int handle, Copy c, std::vector<std::pair<torch::Tensor, torch::Tensor>> pairs) {
  if (!pairs.empty() && (pairs.front().first.is_cuda() || pairs.front().second.is_cuda())) {
    torch::NoGradGuard no_grad;
    c.cuda_done = compat::cuda_copy_on_side_stream(pairs);
  } else {
    c.done = stream_.submit([pairs = std::move(pairs)] {
      torch::NoGradGuard no_grad;
      for (const auto& [to, from] : pairs) to.copy_(from);
    });
  }
  if (!in_flight_.emplace(handle, std::move(c)).second)
    throw InternalError("adaptive offloading: copy %" + std::to_string(handle) + " started twice");
}

void StateCopier::wait(int handle) {
  auto it = in_flight_.find(handle);
  if (it == in_flight_.end()) throw InternalError("adaptive offloading: no copy %" + std::to_string(handle) + " in flight");
  if (it->second.cuda_done && it->second.offload) compat::cuda_host_wait(it->second.cuda_done);  // then free
  else if (it->second.cuda_done) compat::cuda_stream_wait(it->second.cuda_done);
  else it->second.done.get();
  if (it->second.offload)
    for (const torch::Tensor& t : it->second.device) free_storage(t);
  in_flight_.erase(it);
}

}  // namespace loom
