#include "backend/instrument/collective_profiler.h"

#include <algorithm>
#include <chrono>
#include <atomic>
#include <functional>
#include <numeric>
#include <optional>
#include <thread>

#include "backend/torch_compat.h"

namespace loom {
namespace {

using Launch = std::function<comm::Work(comm::Group&, at::Tensor&, at::Tensor&)>;

struct Collective {
  const char* name;
  Launch launch;
  bool output_is_whole;  // whether the bytes counted are the output's (all-gather) or the input's
};

const std::vector<Collective>& collectives() {
  static const std::vector<Collective> list{
      {"all_gather", [](comm::Group& g, at::Tensor& whole, at::Tensor& part) { return comm::all_gather(g, part, whole); }, true},
      {"reduce_scatter", [](comm::Group& g, at::Tensor& whole, at::Tensor& part) { return comm::reduce_scatter(g, whole, part); }, false},
      {"all_reduce", [](comm::Group& g, at::Tensor& whole, at::Tensor&) { return comm::all_reduce(g, whole); }, false},
  };
  return list;
}

double time_once(comm::Group& group, const Collective& c, at::Tensor& whole, at::Tensor& part, bool cuda) {
  auto start = std::chrono::steady_clock::now();
  c.launch(group, whole, part).wait();
  if (cuda) compat::cuda_synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// A thread that computes (small matrix products) for `share` of every 10 ms while it lives: in a
// step on CPU each rank's compute runs beside its collectives, whose threads then wait for a
// core; timed on idle cores, collectives look faster than they run in a step. A rank's compute
// keeps a core busy, or its share of one when the node has more ranks than cores.
class BusyCore {
 public:
  explicit BusyCore(double share) : worker_([this, share] {
          using clock = std::chrono::steady_clock;
          at::Tensor a = at::ones({64, 64}), b = at::ones({64, 64});
          while (!stop_) {
            auto period = clock::now();
            while (!stop_ && clock::now() - period < std::chrono::duration<double, std::milli>(10 * share))
              a = at::mm(a, b).div_(64);
            std::this_thread::sleep_until(period + std::chrono::milliseconds(10));
          }
        }) {}
  ~BusyCore() {
    stop_ = true;
    worker_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread worker_;
};

}  // namespace

std::vector<CollectiveProfile> profile_collectives(comm::Group& world, const ShardGroups* groups, torch::Device device,
                                                   const CollectiveSweep& sweep) {
  std::vector<std::pair<const char*, comm::Group*>> roles;
  if (world.size() > 1) roles.push_back({"world", &world});
  if (groups) {
    if (groups->params) roles.push_back({"params", groups->params.get()});
    if (groups->replicas) roles.push_back({"replicas", groups->replicas.get()});
    if (groups->grad_peers) roles.push_back({"grad_peers", groups->grad_peers.get()});
    if (groups->optim_peers) roles.push_back({"optim_peers", groups->optim_peers.get()});
    if (groups->optim_block) roles.push_back({"optim_block", groups->optim_block.get()});
  }
  bool cuda = device.is_cuda();
  std::optional<BusyCore> beside_compute;
  if (!cuda && sweep.beside_compute) {
    double cores = std::max(1u, std::thread::hardware_concurrency());
    beside_compute.emplace(std::min(1.0, cores / world.size()));  // one node: the world is its ranks
  }
  std::vector<CollectiveProfile> out;
  std::vector<std::pair<const char*, const char*>> copies;  // (role, the earlier role with the same members)
  std::vector<double> local;  // every sample of this rank, in order, for the cross-rank maximum
  for (size_t k = 0; k < roles.size(); ++k) {
    auto [role, group] = roles[k];
    // A role whose group has the same members as an earlier one (e.g. s_p = dp) is not timed again.
    size_t same = 0;
    while (same < k && roles[same].second->global_ranks() != group->global_ranks()) ++same;
    if (same < k) {
      copies.push_back({role, roles[same].first});
      continue;
    }
    for (const Collective& c : collectives()) {
      CollectiveProfile p;
      p.collective = c.name;
      p.group = role;
      p.group_size = group->size();
      for (int64_t bytes : sweep.bytes) {
        int64_t part_numel = std::max<int64_t>(1, bytes / 4 / group->size());
        at::Tensor whole = at::ones({part_numel * group->size()}, at::TensorOptions().dtype(at::kFloat).device(device));
        at::Tensor part = at::ones({part_numel}, whole.options());
        comm::barrier(*group);
        time_once(*group, c, whole, part, cuda);  // untimed: connections and buffers warm up
        std::vector<double> times;
        for (int r = 0; r < sweep.repeats; ++r) times.push_back(time_once(*group, c, whole, part, cuda));
        // The mean, not the median: a step pays for a sum of collectives, and their times have a
        // heavy tail on CPU (a collective whose threads wait for a busy core takes 10x the median).
        double mean = std::accumulate(times.begin(), times.end(), 0.0) / static_cast<double>(times.size());
        p.samples.push_back({whole.numel() * 4, mean});
        local.push_back(mean);
      }
      out.push_back(std::move(p));
    }
  }
  if (world.size() > 1 && !local.empty()) {
    at::Tensor t = at::tensor(local, at::kDouble).to(device);
    comm::all_reduce(world, t, {comm::ReduceOp::Max}).wait();
    t = t.cpu();
    size_t i = 0;
    for (auto& p : out)
      for (auto& sample : p.samples) sample.ms = t[static_cast<int64_t>(i++)].item<double>();
  }
  for (auto& p : out) {
    drop_spikes(p.samples);
    p.fit = fit_alpha_beta(p.samples);
  }
  for (auto& [role, source] : copies)
    for (size_t i = 0, n = out.size(); i < n; ++i)
      if (out[i].group == source) {
        CollectiveProfile copy = out[i];
        copy.group = role;
        out.push_back(std::move(copy));
      }
  return out;
}

}  // namespace loom
