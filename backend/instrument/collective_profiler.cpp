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

// The run's process groups by the profile's role names, each once: a role whose group has the
// same members as an earlier one's (e.g. s_p = dp) is a copy of it, not timed again.
struct Roles {
  std::vector<std::pair<const char*, comm::Group*>> timed;
  std::vector<std::pair<const char*, const char*>> copies;  // (role, the earlier role with the same members)
};

Roles roles_of(comm::Group& world, const ShardGroups* groups, const MeshGroups* mesh) {
  std::vector<std::pair<const char*, comm::Group*>> all;
  if (world.size() > 1) all.push_back({"world", &world});
  if (groups)
    for (auto [role, group] : {std::pair{"params", groups->params}, {"replicas", groups->replicas}, {"grad_peers", groups->grad_peers},
                               {"optim_peers", groups->optim_peers}, {"optim_block", groups->optim_block}})
      if (group) all.push_back({role, group.get()});
  if (mesh)
    for (auto [role, group] : {std::pair{"tp", mesh->tp}, {"dp", mesh->dp}, {"model", mesh->model}, {"pipeline", mesh->pipeline}})
      if (group) all.push_back({role, group.get()});
  Roles roles;
  for (size_t k = 0; k < all.size(); ++k) {
    size_t same = 0;
    while (same < k && all[same].second->global_ranks() != all[k].second->global_ranks()) ++same;
    if (same < k) roles.copies.push_back({all[k].first, all[same].first});
    else roles.timed.push_back(all[k]);
  }
  return roles;
}

// The mean, not the median: a step pays for a sum of collectives, and their times have a heavy
// tail on CPU (a collective whose threads wait for a busy core takes 10x the median).
double mean_of_runs(const CollectiveSweep& sweep, const std::function<double()>& time_once) {
  time_once();  // untimed: connections and buffers warm up
  double total = 0;
  for (int r = 0; r < sweep.repeats; ++r) total += time_once();
  return total / sweep.repeats;
}

// Each collective over a sweep of sizes on one group; `local` gets every sample in order.
void sweep_group(const char* role, comm::Group& group, const CollectiveSweep& sweep, torch::Device device, bool beside_compute,
                 std::vector<CollectiveProfile>& out, std::vector<double>& local) {
  bool cuda = device.is_cuda();
  for (const Collective& c : collectives()) {
    CollectiveProfile p;
    p.collective = c.name;
    p.group = role;
    p.group_size = group.size();
    p.beside_compute = beside_compute;
    for (int64_t bytes : sweep.bytes) {
      int64_t part_numel = std::max<int64_t>(1, bytes / 4 / group.size());
      at::Tensor whole = at::ones({part_numel * group.size()}, at::TensorOptions().dtype(at::kFloat).device(device));
      at::Tensor part = at::ones({part_numel}, whole.options());
      comm::barrier(group);
      double ms = mean_of_runs(sweep, [&] { return time_once(group, c, whole, part, cuda); });
      p.samples.push_back({whole.numel() * 4, ms});
      local.push_back(ms);
    }
    out.push_back(std::move(p));
  }
}

// A pipeline's transfers between neighbouring stages (the `stage_pair` role): every stage but
// the first receives from the previous while every stage but the last sends to the next, over
// the sweep of sizes; a transfer takes the longest of its two ends (the maximum over ranks),
// profiled as both "send" and "recv".
void sweep_stage_pairs(comm::Group& world, const MeshGroups& mesh, const CollectiveSweep& sweep, torch::Device device,
                       bool beside_compute, std::vector<CollectiveProfile>& out, std::vector<double>& local) {
  bool cuda = device.is_cuda();
  CollectiveProfile p;
  p.collective = "send";
  p.group = "stage_pair";
  p.group_size = 2;
  p.beside_compute = beside_compute;
  for (int64_t bytes : sweep.bytes) {
    at::Tensor sent = at::ones({std::max<int64_t>(1, bytes / 4)}, at::TensorOptions().dtype(at::kFloat).device(device));
    at::Tensor received = at::empty_like(sent);
    comm::barrier(world);
    double ms = mean_of_runs(sweep, [&] {
      auto start = std::chrono::steady_clock::now();
      std::optional<comm::Work> in, on;
      if (mesh.previous) in = comm::recv(*mesh.previous, received, 0);
      if (mesh.next) on = comm::send(*mesh.next, sent, 1);
      if (in) in->wait();
      if (on) on->wait();
      if (cuda) compat::cuda_synchronize();
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    });
    p.samples.push_back({sent.numel() * 4, ms});
    local.push_back(ms);
  }
  out.push_back(p);
  p.collective = "recv";
  out.push_back(std::move(p));  // its samples are the send's (reduce_over_ranks)
}

// Every timed group's sweep, and a pipeline's transfers, in one regime.
void sweep_every_group(comm::Group& world, const Roles& roles, const MeshGroups* mesh, const CollectiveSweep& sweep,
                       torch::Device device, bool beside_compute, std::vector<CollectiveProfile>& out, std::vector<double>& local) {
  for (auto [role, group] : roles.timed) sweep_group(role, *group, sweep, device, beside_compute, out, local);
  if (mesh && (mesh->previous || mesh->next)) sweep_stage_pairs(world, *mesh, sweep, device, beside_compute, out, local);
}

// Every sample the maximum over the world's ranks; a stage pair's receive gets its send's.
void reduce_over_ranks(comm::Group& world, torch::Device device, std::vector<CollectiveProfile>& out, const std::vector<double>& local) {
  at::Tensor t = at::tensor(local, at::kDouble).to(device);
  if (world.size() > 1) comm::all_reduce(world, t, {comm::ReduceOp::Max}).wait();
  t = t.cpu();
  size_t i = 0;
  for (auto& p : out) {
    if (p.collective == "recv" && p.group == "stage_pair") i -= p.samples.size();
    for (auto& sample : p.samples) sample.ms = t[static_cast<int64_t>(i++)].item<double>();
  }
}

}  // namespace

std::vector<CollectiveProfile> profile_collectives(comm::Group& world, const ShardGroups* groups, const MeshGroups* mesh,
                                                   torch::Device device, const CollectiveSweep& sweep) {
  Roles roles = roles_of(world, groups, mesh);
  std::vector<CollectiveProfile> out;
  std::vector<double> local;  // every sample of this rank, in order, for the cross-rank maximum
  sweep_every_group(world, roles, mesh, sweep, device, false, out, local);
  if (!device.is_cuda() && sweep.beside_compute) {
    double cores = std::max(1u, std::thread::hardware_concurrency());
    BusyCore busy(std::min(1.0, cores / world.size()));  // one node: the world is its ranks
    sweep_every_group(world, roles, mesh, sweep, device, true, out, local);
  }
  if (out.empty()) return out;
  reduce_over_ranks(world, device, out, local);
  for (auto& p : out) {
    drop_spikes(p.samples);
    p.fit = fit_alpha_beta(p.samples);
  }
  for (auto& [role, source] : roles.copies)
    for (size_t i = 0, n = out.size(); i < n; ++i)
      if (out[i].group == source) {
        CollectiveProfile copy = out[i];
        copy.group = role;
        out.push_back(std::move(copy));
      }
  return out;
}

}  // namespace loom
