// Collectives over real processes: world sizes 1-4, tensor sizes 0, 1, 7 and 1000,
// every operation checked against the value it must produce on every rank.
// Run without launcher variables, it launches itself as 1, 2, 3 and 4 ranks.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>
#include <utility>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "backend/comm/collective_log.h"
#include "backend/comm/communicator.h"
#include "backend/comm/mesh_groups.h"
#include "backend/comm/shard_groups.h"
#include "backend/exec/gradient_reducer.h"
#include "backend/instrument/memory_counter.h"
#include "backend/instrument/timeline.h"
#include "backend/train/launcher.h"
#include "backend/train/rank_env.h"

using namespace loom;

namespace {

int failures = 0;
int checks = 0;

void expect(bool ok, const std::string& what, int rank) {
  ++checks;
  if (!ok) {
    ++failures;
    std::cerr << "FAIL on rank " << rank << ": " << what << "\n";
  }
}

// The ranks of `group` (nullptr: this rank alone), as the sum of 2^rank over its members.
int members_of(comm::Group* group, int rank) {
  auto t = torch::full({1}, static_cast<float>(1 << rank));
  if (group) comm::all_reduce(*group, t).wait();
  return static_cast<int>(t.item<float>());
}

// World 4 as mesh(tp=2) x dp 2 (rank = dp_rank * 2 + tp_rank): ZeRO-3 runs inside each
// data-parallel pair ({0, 2}, {1, 3}); the norm's model group spans the optimizer block, here
// every rank; without sharded states it is the tensor-parallel pair.
void check_mesh_groups(comm::Group& world, int r) {
  ShardGroups zero3 = make_shard_groups(world, ir::Sharding{2, 2, 2, 2}, 2);
  int pair = r % 2 == 0 ? 0b0101 : 0b1010;
  expect(members_of(zero3.params.get(), r) == pair, "shard groups under tp 2: the parameter group is the dp pair", r);
  expect(members_of(zero3.optim_block.get(), r) == pair, "shard groups under tp 2: the optimizer block is the dp pair", r);
  expect(zero3.replicas == nullptr && zero3.optim_peers == nullptr, "shard groups under tp 2: no replicas, no optimizer peers", r);
  ShardGroups zero1 = make_shard_groups(world, ir::Sharding{2, 1, 1, 2}, 2);
  expect(members_of(zero1.replicas.get(), r) == pair && members_of(zero1.optim_peers.get(), r) == pair && !zero1.params,
         "ZeRO-1 groups under tp 2: the dp pair", r);
  MeshGroups sharded = make_mesh_groups(world, 2, 1, 2), plain = make_mesh_groups(world, 2, 1, 1);
  expect(members_of(sharded.model.get(), r) == 0b1111, "mesh groups: the model group spans the optimizer block", r);
  expect(members_of(plain.model.get(), r) == (r < 2 ? 0b0011 : 0b1100), "mesh groups: the model group is the replica", r);
  expect(members_of(plain.dp.get(), r) == pair && members_of(plain.tp.get(), r) == (r < 2 ? 0b0011 : 0b1100),
         "mesh groups: dp and tp pairs", r);
}

// Two all-gathers in flight allocate nothing beyond their outputs (the memory walk counts those
// alone): gloo's own all-gather would fill a flat buffer of the whole output on its worker thread.
void check_gather_memory(comm::Group& world, int r) {
  const int64_t n = 1 << 16;
  auto shard1 = torch::full({n}, static_cast<float>(r)), shard2 = shard1 + 1;
  auto out1 = torch::empty({n * world.size()}), out2 = torch::empty({n * world.size()});
  memory::reset_peak();
  int64_t before = memory::current_bytes();
  auto between = torch::full({3}, 1.0f);
  auto w1 = comm::all_gather(world, shard1, out1);
  auto w3 = comm::all_reduce(world, between);  // another collective's tags between the two
  auto w2 = comm::all_gather(world, shard2, out2);
  w1.wait(), w3.wait(), w2.wait();
  int64_t grew = memory::peak_bytes() - before;
  expect(grew < n * 4, "two all-gathers in flight allocated " + std::to_string(grew) + " bytes beyond their outputs", r);
  bool ok = torch::equal(between, torch::full({3}, static_cast<float>(world.size())));
  for (int q = 0; q < world.size(); ++q)
    ok = ok && torch::equal(out1.narrow(0, q * n, n), torch::full({n}, static_cast<float>(q))) &&
         torch::equal(out2.narrow(0, q * n, n), torch::full({n}, q + 1.0f));
  expect(ok, "two all-gathers and an all-reduce in flight: every value", r);
}

// With the timeline on (`loom run --trace`), a collective's span ends when its transfer
// completes on gloo, not at a wait that comes much later: each rank waits 500 ms after an
// all-reduce of 4 elements, so the span ends before the wait begins (it ended with the wait).
void check_trace_span(comm::Group& world, int r) {
  if (world.size() == 1) return;  // a group of one exchanges nothing
  comm::barrier(world);  // the ranks launch it together, however late a busy machine started one of them
  timeline::enable(r);
  auto t = torch::ones({4});
  comm::Work work = comm::all_reduce(world, t);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  work.wait();
  work.wait();  // a second wait of a finished work records nothing
  std::string path = "/tmp/loom_comm_trace_" + std::to_string(::getpid()) + ".jsonl";
  std::ofstream(path) << timeline::rank_events();
  double collective_end = -1, wait_start = -1;
  int spans = 0;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    auto e = nlohmann::json::parse(line);
    if (e.at("cat") == "collective") {
      collective_end = e.at("ts").get<double>() + e.at("dur").get<double>();
      ++spans;
    }
    if (e.at("cat") == "wait") wait_start = e.at("ts").get<double>();
  }
  std::remove(path.c_str());
  expect(spans == 1, "trace: one span for a work waited twice, not " + std::to_string(spans), r);
  expect(collective_end >= 0 && wait_start >= 0 && collective_end <= wait_start,
         "trace: the all-reduce's span ends at its transfer, before the wait (ends at " + std::to_string(collective_end) +
             " us, the wait begins at " + std::to_string(wait_start) + ")",
         r);
}

// A wait listener (the op profiler's on a GPU) hears each wait once, before it blocks and after
// its works return; a second wait of a finished work, and a work with nothing to wait for, it
// does not; clearing another listener leaves it set.
void check_wait_listener(comm::Group& world, int r) {
  struct Counting : comm::WaitListener {
    int before = 0, after = 0;
    void before_wait() override { ++before; }
    void after_wait() override { ++after; }
  } counting, other;
  comm::set_wait_listener(&counting);
  auto t = torch::ones({4});
  comm::Work work = comm::all_reduce(world, t);
  work.wait();
  work.wait();
  comm::Work().wait();
  comm::clear_wait_listener(&other);
  comm::all_reduce(world, t).wait();
  comm::clear_wait_listener(&counting);
  comm::all_reduce(world, t).wait();
  int waits = world.size() == 1 ? 0 : 2;  // a group of one issues nothing (gloo)
  expect(counting.before == waits && counting.after == waits,
         "wait listener: " + std::to_string(waits) + " waits heard, not " + std::to_string(counting.before) + " and " +
             std::to_string(counting.after),
         r);
}

// The data-parallel reducer with a parameter autograd hands no gradient (z: a pipeline stage's
// copy of an embedding another stage computes with). The program reduces it, as zeros, after
// the last backward compute, so its bucket launches once that compute's gradients are in (a,
// via `last_computed`), or where that compute has no parameters at backward_returned(); not
// as soon as the bucket before it (b's) has launched. loss = sum(2a * b) * (rank + 1): autograd
// hands b its gradient first, then a. Buckets in the program's order: b, z, a. Accumulating, the
// micro-batches before the last launch nothing.
void check_reducer_zero_gradient(comm::Group& world, int r) {
  if (world.size() == 1) return;  // the reducer runs where there are replicas
  // Two micro-batches a step (`accumulating`): the first reduces nothing and the second the sum.
  for (auto [last_has_params, accumulating] : {std::pair{true, false}, std::pair{false, false}, std::pair{true, true}}) {
    std::string tag = std::string(last_has_params ? " (the last compute's parameters say when" : " (backward_returned says when") +
                      (accumulating ? ", the second of two micro-batches)" : ")");
    torch::Tensor z = torch::full({7}, 5.0f).requires_grad_(), b = torch::full({3}, 3.0f).requires_grad_(),
                  a = torch::ones({3}).requires_grad_();
    int launched_before_a = -1;
    comm::CollectiveLog log;
    auto launched = [&] {
      int in_flight = 0;
      return static_cast<int>(log.spans(&in_flight).size()) + in_flight;
    };
    a.register_hook([&](torch::Tensor grad) {  // runs before the reducer's own hook on a
      launched_before_a = launched();
      return grad;
    });
    std::vector<size_t> last_computed;
    if (last_has_params) last_computed = {2};
    GradientReducer reducer({z, b, a}, {{1}, {0}, {2}}, {0, 1, 1}, last_computed, world);
    auto loss = [&] { return (a * 2 * b).sum() * static_cast<float>(r + 1); };
    if (accumulating) {
      reducer.prepare(/*sync=*/false);
      loss().backward();
      reducer.backward_returned();
      reducer.finish();
      expect(launched() == 0, "reducer: nothing launched in a micro-batch before the last" + tag, r);
    }
    reducer.prepare(/*sync=*/true);
    loss().backward();
    expect(launched_before_a == 1, "reducer: only b's bucket launched before a's gradient" + tag + ", not " +
                                       std::to_string(launched_before_a), r);
    int after_backward = launched();
    reducer.backward_returned();
    expect(after_backward == (last_has_params ? 3 : 1) && launched() == 3,
           "reducer: z's and a's buckets launched after a's gradient" + tag + " (" + std::to_string(after_backward) +
               " launched when backward returned, " + std::to_string(launched()) + " after)", r);
    reducer.finish();
    float mean = (world.size() + 1) / 2.0f * (accumulating ? 2 : 1);  // of the ranks' (rank + 1), summed over micro-batches
    expect(torch::equal(z.grad(), torch::zeros({7})) && torch::allclose(b.grad(), torch::full({3}, 2 * mean)) &&
               torch::allclose(a.grad(), torch::full({3}, 6 * mean)),
           "reducer: averaged gradients, z's zero" + tag, r);
  }
}

int worker(const RankEnv& env) {
  memory::install_counting_allocator();
  torch::set_num_threads(1);
  comm::WorldOptions wo;
  wo.timeout = std::chrono::seconds(60);
  auto world = comm::init_world(env, wo);
  int W = env.world, r = env.rank;
  double tri = W * (W + 1) / 2.0;
  for (int64_t n : {0, 1, 7, 1000}) {
    std::string tag = " (world " + std::to_string(W) + ", " + std::to_string(n) + " elements)";
    auto sum = torch::full({n}, static_cast<float>(r + 1));
    comm::all_reduce(*world, sum).wait();
    expect(torch::allclose(sum, torch::full({n}, static_cast<float>(tri))), "all_reduce sum" + tag, r);

    auto mx = torch::full({n}, static_cast<float>(r));
    comm::all_reduce(*world, mx, {comm::ReduceOp::Max}).wait();
    expect(torch::equal(mx, torch::full({n}, static_cast<float>(W - 1))), "all_reduce max" + tag, r);

    auto b = torch::full({n}, static_cast<float>(r));
    comm::broadcast(*world, b, {W - 1}).wait();
    expect(torch::equal(b, torch::full({n}, static_cast<float>(W - 1))), "broadcast" + tag, r);

    auto shard = torch::arange(n, torch::kFloat) + 1000.0f * r;
    auto gathered = torch::empty({n * W});
    comm::all_gather(*world, shard, gathered).wait();
    bool ok = true;
    for (int q = 0; q < W; ++q)
      ok = ok && torch::equal(gathered.narrow(0, q * n, n), torch::arange(n, torch::kFloat) + 1000.0f * q);
    expect(ok, "all_gather" + tag, r);

    // In place: the shard is this rank's own chunk of the output (how Lins' updated slices are
    // spread into a parameter shard).
    auto in_place = torch::full({n * W}, -1.0f);
    in_place.narrow(0, r * n, n).copy_(shard);
    comm::all_gather(*world, in_place.narrow(0, r * n, n), in_place).wait();
    expect(torch::equal(in_place, gathered), "all_gather in place" + tag, r);

    auto input = (torch::arange(n * W, torch::kFloat) + 1) * static_cast<float>(r + 1);
    auto out = torch::empty({n});
    comm::reduce_scatter(*world, input, out).wait();
    auto want = (torch::arange(n, torch::kFloat) + static_cast<float>(r * n) + 1) * static_cast<float>(tri);
    expect(torch::allclose(out, want), "reduce_scatter" + tag, r);

    // Two collectives in flight at once, waited in order.
    auto a1 = torch::full({n}, 1.0f), a2 = torch::full({n}, 2.0f);
    auto w1 = comm::all_reduce(*world, a1);
    auto w2 = comm::all_reduce(*world, a2);
    w1.wait();
    w2.wait();
    expect(torch::equal(a1, torch::full({n}, static_cast<float>(W))) && torch::equal(a2, torch::full({n}, 2.0f * W)),
           "two all_reduces in flight" + tag, r);

    // A ring of sends and recvs (a pipeline's neighbours), two tags apart: each rank receives its
    // left neighbour's values on tag 0 and their negation on tag 1.
    if (W > 1) {
      int right = (r + 1) % W, left = (r + W - 1) % W;
      auto out0 = torch::full({n}, static_cast<float>(r)), out1 = -out0;
      auto in0 = torch::empty({n}), in1 = torch::empty({n});
      auto s1 = comm::send(*world, out1, right, {1});
      auto s0 = comm::send(*world, out0, right, {0});
      auto r0 = comm::recv(*world, in0, left, {0});
      auto r1 = comm::recv(*world, in1, left, {1});
      s0.wait(), s1.wait(), r0.wait(), r1.wait();
      expect(torch::equal(in0, torch::full({n}, static_cast<float>(left))) && torch::equal(in1, -in0), "send and recv" + tag, r);
    }
  }
  // A subgroup of the first and last ranks; the others get none.
  std::vector<int> members{0};
  if (W > 1) members.push_back(W - 1);
  // (the role is the collective log's only: any serves here)
  auto sub = comm::new_subgroup(*world, members, ir::Role::Dp);
  bool member = r == 0 || r == W - 1;
  expect((sub != nullptr) == member, "subgroup membership", r);
  if (sub) {
    auto t = torch::full({5}, static_cast<float>(r));
    comm::all_reduce(*sub, t).wait();
    expect(torch::equal(t, torch::full({5}, static_cast<float>(W > 1 ? W - 1 : 0))), "subgroup all_reduce", r);
    expect(sub->size() == static_cast<int>(members.size()), "subgroup size", r);
  }
  if (W == 4) check_mesh_groups(*world, r);
  check_gather_memory(*world, r);
  check_trace_span(*world, r);
  check_wait_listener(*world, r);
  check_reducer_zero_gradient(*world, r);
  comm::barrier(*world);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (auto env = rank_env_from_process()) return worker(*env);
  int passed = 0, failed = 0;
  for (int world = 1; world <= 4; ++world) {
    LaunchSpec spec;
    spec.argv = {"/proc/self/exe"};
    spec.nproc = world;
    int rc = launch(spec, std::cerr);
    std::cout << "world " << world << ": " << (rc == 0 ? "passed" : "FAILED") << "\n";
    (rc == 0 ? passed : failed)++;
  }
  std::cout << passed << " passed, " << failed << " failed\n";
  return failed == 0 ? 0 : 1;
}
