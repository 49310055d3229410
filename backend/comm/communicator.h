// Process groups and the collectives Loom uses: one options struct and one free
// function per operation. Gloo on CPU, NCCL on GPU (c10d); the collectives gloo lacks in
// LibTorch 1.13 (reduce-scatter, flat all-gather) are built here from ones it has.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "backend/ir/role.h"
#include "backend/train/rank_env.h"

namespace loom::comm {

// A collective failed or timed out (a peer died, the network broke).
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class GroupImpl;

// A set of ranks that run collectives together. Ranks are numbered 0..size()-1 inside it.
class Group {
 public:
  explicit Group(std::unique_ptr<GroupImpl> impl);
  ~Group();
  int rank() const;
  int size() const;
  const std::vector<int>& global_ranks() const;  // members, as world ranks
  const std::string& name() const;
  ir::Role role() const;  // what the step uses it for (the world's: World)
  GroupImpl& impl() const { return *impl_; }

 private:
  std::unique_ptr<GroupImpl> impl_;
};

// A collective in flight; wait() blocks until it is done (or throws CommError; running out of
// memory in it is rethrown as it is: this rank's own failure, not a peer's).
class Work {
 public:
  Work() = default;
  // `transfer_timed`: the works' futures complete when their transfers do (gloo; NCCL's complete
  // when the collective is queued), so an `--trace` span ends there, not at the wait.
  // `what`: the operation and its group, as errors and the trace name it; `role`: the group's
  // role, which the collective log records.
  Work(c10::intrusive_ptr<c10d::Work> work, std::function<void()> finish, std::string what, ir::Role role,
       bool transfer_timed = false);
  // One operation made of several process-group works (gloo's all-gather: a broadcast per rank).
  Work(std::vector<c10::intrusive_ptr<c10d::Work>> works, std::function<void()> finish, std::string what, ir::Role role,
       bool transfer_timed = false);
  // Blocks until the operation is done and runs its local finish; idempotent: a second wait
  // does nothing (and records nothing in the trace).
  void wait();
  bool done() const { return works_.empty() && !finish_; }

 private:
  struct Transfer;  // when the works' transfers completed (communicator.cpp)
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  std::function<void()> finish_;  // local post-processing after the transfer (e.g. summing)
  std::string what_;
  double launched_us_ = 0;        // for the timeline
  std::shared_ptr<Transfer> transfer_;  // with --trace on gloo: when the works' transfers completed
  double timeline_end_us(double now_us) const;
};

// Milliseconds this thread has spent in Work::wait() so far (waiting, and the local work that
// completes a collective): what the op profiler takes out of the time between ops.
double blocked_ms();
// The same over every thread of the process: what a span that starts on one thread and ends on
// another (forward's, then autograd's on a GPU) takes out.
double blocked_ms_all_threads();

// Told of every Work::wait() of the process, on the thread that waits: before it blocks, and
// when the process group's waits return (on gloo the collective has completed and the stream
// waits for its copy back; NCCL only makes the stream wait), before the wait's local finish.
// The op profiler on a GPU marks the stream there: the device time a wait holds the stream for
// is the collective's.
class WaitListener {
 public:
  virtual ~WaitListener() = default;
  virtual void before_wait() = 0;
  virtual void after_wait() = 0;
};
// One listener at a time.
void set_wait_listener(WaitListener* listener);
// Removes `listener` if it is the one set.
void clear_wait_listener(WaitListener* listener);

enum class Backend {
  Gloo,  // CPU tensors
  Nccl,  // CUDA tensors (CUDA builds only)
};

struct WorldOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // store rendezvous and every collective
  Backend backend = Backend::Gloo;
};

// Joins the world: rendezvous through a TCPStore at master_addr:master_port (rank 0 serves it).
// Ranks that do not join within the timeout, or a store that cannot be reached, are a UserError
// naming the ranks, their nodes and what to check.
std::shared_ptr<Group> init_world(const RankEnv& env, const WorldOptions& options = {});
// A subgroup of world ranks, for `role`. Every world rank calls this with the same list, in
// the same order as other subgroup creations; ranks outside the list get nullptr.
std::shared_ptr<Group> new_subgroup(Group& world, const std::vector<int>& ranks, ir::Role role);

// BitwiseOr: integer tensors (gloo's BOR; NCCL, which has no OR, reduces uint8 bit planes with max).
enum class ReduceOp { Sum, Max, Min, BitwiseOr };

struct AllReduceOptions {
  ReduceOp op = ReduceOp::Sum;
};
// In place: every rank ends with the reduction of every rank's `tensor`.
Work all_reduce(Group& group, at::Tensor& tensor, const AllReduceOptions& options = {});

struct BroadcastOptions {
  int root = 0;  // group rank whose tensor everyone receives
};
Work broadcast(Group& group, at::Tensor& tensor, const BroadcastOptions& options = {});

// Point to point: `peer` is a group rank; a send and its recv carry the same tag. On gloo a
// CUDA tensor goes through a host copy (gloo's send and recv take host memory), which recv
// copies into `tensor` at its wait: wait for every recv before reading what it received.
struct PointToPointOptions {
  int tag = 0;
};
Work send(Group& group, const at::Tensor& tensor, int peer, const PointToPointOptions& options = {});
// `tensor` has the shape and type of what the peer sends; it receives it.
Work recv(Group& group, at::Tensor& tensor, int peer, const PointToPointOptions& options = {});

// Flat all-gather: `out` (size() * shard.numel() elements) receives every rank's shard in rank order.
// It allocates nothing beyond `out` on the device, as the memory walk counts (backend/sim/memory_walk.h):
// NCCL gathers into `out` itself; gloo with host tensors broadcasts each rank's chunk of `out` in
// place (gloo's own all-gather fills a flat buffer of the whole output on its worker thread and
// copies it out; the broadcasts move the same bytes in all as its ring, in more rounds beyond
// two ranks); gloo with CUDA tensors stages through host memory. `shard` may be `out`'s own chunk
// (rank() * shard.numel() on): an in-place gather, as NCCL allows it.
Work all_gather(Group& group, const at::Tensor& shard, at::Tensor& out);

struct ReduceScatterOptions {
  ReduceOp op = ReduceOp::Sum;
};
// Flat reduce-scatter: `input` has size() * out.numel() elements; rank r receives the
// reduction of every rank's chunk r. Built from alltoall plus a local reduction: the same
// bytes on the wire as a native reduce-scatter.
Work reduce_scatter(Group& group, const at::Tensor& input, at::Tensor& out, const ReduceScatterOptions& options = {});

void barrier(Group& group);

}  // namespace loom::comm
