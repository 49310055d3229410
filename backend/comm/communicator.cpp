#include "backend/comm/communicator.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "backend/build_info.h"
#include "backend/comm/collective_log.h"
#include "backend/instrument/timeline.h"
#include "backend/storage_release.h"
#include "backend/torch_compat.h"
#include "lang/diagnostics.h"

namespace loom::comm {

class GroupImpl {
 public:
  ~GroupImpl() {
    if (backend == Backend::Nccl) compat::shutdown_group(pg);
  }
  c10::intrusive_ptr<compat::C10dGroup> pg;
  c10::intrusive_ptr<c10d::Store> store;
  std::shared_ptr<::gloo::transport::Device> device;
  std::chrono::milliseconds timeout;
  std::vector<int> ranks;
  int rank = 0;
  std::string name;
  ir::Role role = ir::Role::World;
  int subgroups_created = 0;
  Backend backend = Backend::Gloo;
};

Group::Group(std::unique_ptr<GroupImpl> impl) : impl_(std::move(impl)) {}
Group::~Group() = default;
int Group::rank() const { return impl_->rank; }
int Group::size() const { return static_cast<int>(impl_->ranks.size()); }
const std::vector<int>& Group::global_ranks() const { return impl_->ranks; }
const std::string& Group::name() const { return impl_->name; }
ir::Role Group::role() const { return impl_->role; }

// The transfers of one Work's process-group works: how many have not completed, and when the
// last completed (timeline microseconds), written by gloo's worker thread.
struct Work::Transfer {
  std::mutex mutex;
  size_t pending = 0;
  double completed_us = 0;
};

Work::Work(c10::intrusive_ptr<c10d::Work> work, std::function<void()> finish, std::string what, ir::Role role, bool transfer_timed)
    : Work(std::vector<c10::intrusive_ptr<c10d::Work>>{std::move(work)}, std::move(finish), std::move(what), role, transfer_timed) {}

Work::Work(std::vector<c10::intrusive_ptr<c10d::Work>> works, std::function<void()> finish, std::string what, ir::Role role,
           bool transfer_timed)
    : works_(std::move(works)), finish_(std::move(finish)), what_(std::move(what)),
      launched_us_(timeline::enabled() ? timeline::now_us() : 0) {
  works_.erase(std::remove(works_.begin(), works_.end(), nullptr), works_.end());  // nothing to wait for
  for (const auto& work : works_) CollectiveLog::note_launch(work, role);
  if (!transfer_timed || !timeline::enabled() || works_.empty()) return;
  transfer_ = std::make_shared<Transfer>();
  transfer_->pending = works_.size();
  for (const auto& work : works_) {
    // The callback holds the record, not the Work.
    bool timed = when_transferred(work, [transfer = transfer_] {
      std::lock_guard<std::mutex> lock(transfer->mutex);
      --transfer->pending;
      transfer->completed_us = std::max(transfer->completed_us, timeline::now_us());
    });
    if (!timed) throw InternalError("comm: " + what_ + " was to be timed by its transfer, but a work of it has no future");
  }
}

// Where the trace's span of the collective ends: when its last transfer completed. gloo runs a
// future's callbacks on its worker thread before it wakes the rank's wait, so after the wait
// they have run; the minimum only guards that.
double Work::timeline_end_us(double now_us) const {
  if (!transfer_) return now_us;
  std::lock_guard<std::mutex> lock(transfer_->mutex);
  return transfer_->pending == 0 ? std::min(now_us, transfer_->completed_us) : now_us;
}

namespace {
thread_local double blocked_ms_total = 0;
std::atomic<int64_t> blocked_ns_all_threads{0};

// Adds the life of the object to this thread's blocked time, and the process's.
struct BlockedClock {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  ~BlockedClock() {
    auto took = std::chrono::steady_clock::now() - start;
    blocked_ms_total += std::chrono::duration<double, std::milli>(took).count();
    blocked_ns_all_threads += std::chrono::duration_cast<std::chrono::nanoseconds>(took).count();
  }
};

std::atomic<WaitListener*> wait_listener{nullptr};
}  // namespace

double blocked_ms() { return blocked_ms_total; }

double blocked_ms_all_threads() { return static_cast<double>(blocked_ns_all_threads.load()) / 1e6; }

void set_wait_listener(WaitListener* listener) { wait_listener = listener; }

void clear_wait_listener(WaitListener* listener) { wait_listener.compare_exchange_strong(listener, nullptr); }

void Work::wait() {
  BlockedClock blocked;
  double waited_from = timeline::enabled() ? timeline::now_us() : 0;
  WaitListener* listener = works_.empty() ? nullptr : wait_listener.load();
  if (listener) listener->before_wait();
  try {
    for (auto& work : works_) work->wait();
  } catch (const std::exception& e) {
    // The works not waited for stay queued in the process group with their tensors; the run
    // ends on this error (a peer died or the network broke), so nothing reads them.
    works_.clear();
    finish_ = nullptr;
    if (is_out_of_memory(e)) throw;  // this rank's own failure (gloo's worker allocating), not a peer's
    throw CommError(what_ + " failed: " + exception_text(e, false));
  }
  if (listener) listener->after_wait();
  works_.clear();
  if (finish_) {
    auto f = std::move(finish_);
    finish_ = nullptr;
    f();
  }
  if (timeline::enabled() && !what_.empty()) {
    // The collective from launch to its transfer's completion (on gloo; else to now: a local
    // finish, reduce_scatter's sum, then lies in the wait), and the time compute stood still
    // for it (exposed).
    double now = timeline::now_us();
    timeline::record(what_, "collective", timeline::Track::Comm, launched_us_, timeline_end_us(now));
    timeline::record("wait for " + what_, "wait", timeline::Track::Compute, waited_from, now);
  }
  what_.clear();  // done: a second wait records nothing
}

namespace {

// Gloo collectives of one rank are skipped (nothing to exchange). NCCL ones still run, so a
// one-GPU run exercises NCCL itself.
bool trivial(const Group& group) { return group.size() == 1 && group.impl().backend == Backend::Gloo; }

// Whether the group's works mark their futures complete when their transfers complete (gloo;
// NCCL marks them when the collective is queued): Work's trace spans end there.
bool futures_mark_transfers(const Group& group) { return group.impl().backend == Backend::Gloo; }

std::shared_ptr<::gloo::transport::Device> make_device(const std::string& master_addr) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME")) return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  if (master_addr == "127.0.0.1" || master_addr == "localhost")
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

c10::intrusive_ptr<compat::C10dGroup> make_group(Backend backend, const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                 int size, const std::shared_ptr<::gloo::transport::Device>& device,
                                                 std::chrono::milliseconds timeout) {
  if (backend == Backend::Nccl) return compat::make_nccl_group(store, rank, size, timeout);
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(device);
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
}

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return c10d::ReduceOp::SUM;
    case ReduceOp::Max: return c10d::ReduceOp::MAX;
    case ReduceOp::Min: return c10d::ReduceOp::MIN;
    case ReduceOp::BitwiseOr: return c10d::ReduceOp::BOR;
  }
  return c10d::ReduceOp::SUM;
}

void require_contiguous(const at::Tensor& t, const char* what) {
  if (!t.is_contiguous()) throw InternalError(std::string(what) + ": tensors must be contiguous");
}

// What to check when ranks cannot meet: the usual causes of a multi-node start that hangs.
std::string rendezvous_hint(const RankEnv& env) {
  return "start every node with the same command, each with its own node rank (`loom run --node-rank`, or the "
         "launcher's own variables under torchrun, srun or mpirun); check that " + env.master_addr + " (--master-addr, "
         "MASTER_ADDR) is node 0's address and reachable from every node, that port " + std::to_string(env.master_port) +
         " (--master-port, MASTER_PORT) is open in the firewall, and raise --timeout if the nodes start far apart";
}

// The ranks that have not announced themselves, with their nodes ("1 (node 1), 3 (node 1)").
std::string missing_ranks(c10d::Store& store, const RankEnv& env, int* count) {
  std::string missing;
  *count = 0;
  for (int r = 0; r < env.world; ++r) {
    if (store.check({"loom/joined/" + std::to_string(r)})) continue;
    if (++*count <= 8) missing += (missing.empty() ? "" : ", ") + std::to_string(r) + " (node " + std::to_string(r / env.local_world) + ")";
  }
  if (*count > 8) missing += " and " + std::to_string(*count - 8) + " more";
  return missing;
}

// Ranks started with different world sizes (two launchers, a WORLD_SIZE set by hand) cannot
// meet. The first to come records its world; a rank with another world says so in the store
// and releases the others, so no rank waits out the timeout. Empty when they agree.
std::string world_disagreement(c10d::Store& store, const RankEnv& env) {
  std::string mine = std::to_string(env.world);
  std::vector<uint8_t> first = store.compareSet("loom/world", {}, std::vector<uint8_t>(mine.begin(), mine.end()));
  if (std::string(first.begin(), first.end()) == mine) return "";
  return "rank " + std::to_string(env.rank) + " was started in a world of " + mine + " ranks, another rank in a world of " +
         std::string(first.begin(), first.end());
}

// Every rank announces itself; the last to come says so, and the others wait for that up to
// the timeout. Whoever never came is named with their node, where the store's own wait would
// only say "Socket Timeout".
void await_every_rank(c10d::Store& store, const RankEnv& env, std::chrono::milliseconds timeout) {
  std::string where = "the rendezvous at " + env.master_addr + ":" + std::to_string(env.master_port);
  std::string disagreement;
  bool released = false;
  try {
    store.set("loom/joined/" + std::to_string(env.rank), std::vector<uint8_t>{1});
    disagreement = world_disagreement(store, env);
    if (!disagreement.empty()) {
      store.set("loom/world_disagreement", std::vector<uint8_t>(disagreement.begin(), disagreement.end()));
      store.set("loom/all_joined", std::vector<uint8_t>{1});
    } else if (store.add("loom/joined", 1) == env.world) {
      store.set("loom/all_joined", std::vector<uint8_t>{1});
    }
    store.wait({"loom/all_joined"}, timeout);
    if (disagreement.empty() && store.check({"loom/world_disagreement"})) {
      std::vector<uint8_t> said = store.get("loom/world_disagreement");
      disagreement = std::string(said.begin(), said.end());
    }
    released = true;  // only now: rank 0 can say the disagreement and stop, store and all, before we read it
  } catch (const std::exception&) {
    // Timed out, or rank 0 (which serves the store) gave up first: say who is missing if we still can.
  }
  if (!disagreement.empty())
    throw UserError(SourceRange{}, "the ranks disagree on the world size: " + disagreement,
                    "start every rank with the same world size (torchrun --nnodes x --nproc_per_node, mpirun -np, "
                    "srun --ntasks, or WORLD_SIZE), and one launcher per run");
  if (released) return;
  int count = 0;
  std::string missing;
  try {
    missing = missing_ranks(store, env, &count);
  } catch (const std::exception&) {
    throw UserError(SourceRange{}, "rank " + std::to_string(env.rank) + " lost " + where + " while waiting for the other ranks to join",
                    "rank 0, which serves it, stopped (its own message says why); " + rendezvous_hint(env));
  }
  if (count == 0) return;  // the last rank came just as the wait ended
  throw UserError(SourceRange{}, std::string(count == 1 ? "rank " : "ranks ") + missing + " did not join the run within " +
                                     std::to_string(timeout.count() / 1000) + " s (" + where + ", world " +
                                     std::to_string(env.world) + ")",
                  rendezvous_hint(env));
}

// The rendezvous store. Rank 0 serves it; under torchrun's static rendezvous the agent already
// serves one at the same address, and every rank joins that as a client, under the prefix of
// this restart, as torch's own _create_c10d_store does.
c10::intrusive_ptr<c10d::Store> open_store(const RankEnv& env, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<std::uint16_t>(env.master_port);
  store_options.isServer = env.rank == 0 && !env.agent_store;
  store_options.numWorkers = env.world;
  store_options.waitWorkers = false;  // await_every_rank waits, and names who is missing
  store_options.timeout = timeout;
  std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  try {
    auto store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, store_options);
    if (!env.agent_store) return store;
    return c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::to_string(env.restart_count), store);
  } catch (const std::exception& e) {
    std::string reason = exception_text(e, false);
    reason = reason.substr(0, reason.find('\n'));
    std::string rank = "rank " + std::to_string(env.rank);
    if (store_options.isServer && reason.find("ddress already in use") != std::string::npos)
      throw UserError(SourceRange{}, rank + " could not serve the rendezvous store: port " + std::to_string(env.master_port) +
                                         " is already in use on " + env.master_addr,
                      "another run, or a launcher that serves its own store, holds it: pick a free port with --master-port "
                      "or MASTER_PORT (under torchrun, let its agent serve the store: leave TORCHELASTIC_USE_AGENT_STORE as it sets it)");
    if (store_options.isServer)
      throw UserError(SourceRange{}, rank + " could not serve the rendezvous store at " + where + ": " + reason,
                      "check that " + env.master_addr + " (--master-addr, MASTER_ADDR) is this machine's address, or pick "
                      "another port (--master-port, MASTER_PORT)");
    if (env.agent_store)
      throw UserError(SourceRange{}, rank + " could not reach torchrun's store at " + where + " within " +
                                         std::to_string(timeout.count() / 1000) + " s: " + reason,
                      "torchrun's agent serves it (TORCHELASTIC_USE_AGENT_STORE=True): start the ranks with torchrun itself, "
                      "or unset TORCHELASTIC_USE_AGENT_STORE to let rank 0 serve the store");
    throw UserError(SourceRange{}, rank + " could not reach the rendezvous store at " + where + " within " +
                                       std::to_string(timeout.count() / 1000) + " s: " + reason,
                    rendezvous_hint(env));
  }
}

}  // namespace

std::shared_ptr<Group> init_world(const RankEnv& env, const WorldOptions& options) {
  auto impl = std::make_unique<GroupImpl>();
  impl->store = open_store(env, options.timeout);
  await_every_rank(*impl->store, env, options.timeout);
  impl->device = make_device(env.master_addr);
  impl->timeout = options.timeout;
  impl->rank = env.rank;
  for (int r = 0; r < env.world; ++r) impl->ranks.push_back(r);
  impl->name = "world";
  impl->backend = options.backend;
  impl->pg = make_group(options.backend, c10::make_intrusive<c10d::PrefixStore>("world", impl->store), env.rank, env.world,
                        impl->device, options.timeout);
  return std::make_shared<Group>(std::move(impl));
}

std::shared_ptr<Group> new_subgroup(Group& world, const std::vector<int>& ranks, ir::Role role) {
  GroupImpl& w = world.impl();
  std::string name = "group" + std::to_string(w.subgroups_created++);
  for (int r : ranks) name += "_" + std::to_string(r);
  auto it = std::find(ranks.begin(), ranks.end(), w.rank);
  if (it == ranks.end()) return nullptr;
  auto impl = std::make_unique<GroupImpl>();
  impl->store = w.store;
  impl->device = w.device;
  impl->timeout = w.timeout;
  impl->ranks = ranks;
  impl->rank = static_cast<int>(it - ranks.begin());
  impl->name = name;
  impl->role = role;
  impl->backend = w.backend;
  impl->pg = make_group(w.backend, c10::make_intrusive<c10d::PrefixStore>(name, w.store), impl->rank,
                        static_cast<int>(ranks.size()), w.device, w.timeout);
  return std::make_shared<Group>(std::move(impl));
}

Work all_reduce(Group& group, at::Tensor& tensor, const AllReduceOptions& options) {
  require_contiguous(tensor, "all_reduce");
  if (trivial(group) || tensor.numel() == 0) return Work();
  if (options.op == ReduceOp::BitwiseOr && group.impl().backend == Backend::Nccl) {
    // NCCL has no OR: each byte's 8 bits as 8 bytes, their max, packed again.
    at::Tensor weights = at::tensor({1, 2, 4, 8, 16, 32, 64, 128}, tensor.options().dtype(at::kInt));
    at::Tensor planes = tensor.to(at::kInt).unsqueeze(-1).bitwise_and(weights).ne(0).to(at::kByte).contiguous();
    Work w = all_reduce(group, planes, {ReduceOp::Max});
    w.wait();
    tensor.copy_((planes.to(at::kInt) * weights).sum(-1).to(tensor.scalar_type()));
    return Work();
  }
  std::vector<at::Tensor> ts{tensor};
  c10d::AllreduceOptions o;
  o.reduceOp = to_c10d(options.op);
  o.timeout = group.impl().timeout;
  return Work(group.impl().pg->allreduce(ts, o), nullptr,
              "all_reduce on " + group.name() + " (" + std::to_string(tensor.numel()) + " elements)", group.role(),
              futures_mark_transfers(group));
}

Work broadcast(Group& group, at::Tensor& tensor, const BroadcastOptions& options) {
  require_contiguous(tensor, "broadcast");
  if (trivial(group) || tensor.numel() == 0) return Work();
  std::vector<at::Tensor> ts{tensor};
  c10d::BroadcastOptions o;
  o.rootRank = options.root;
  o.timeout = group.impl().timeout;
  return Work(group.impl().pg->broadcast(ts, o), nullptr, "broadcast on " + group.name(), group.role(), futures_mark_transfers(group));
}

namespace {
// gloo's send and recv read and write the tensor's memory as host memory (its collectives stage
// device tensors themselves, its point-to-point does not): a CUDA tensor goes through a host copy.
bool staged_through_host(const Group& group, const at::Tensor& tensor) {
  return group.impl().backend == Backend::Gloo && !tensor.device().is_cpu();
}
}  // namespace

Work send(Group& group, const at::Tensor& tensor, int peer, const PointToPointOptions& options) {
  require_contiguous(tensor, "send");
  if (tensor.numel() == 0) return Work();
  // The process group's work holds the host copy until the send is done. Copying it out waits
  // for the device: the host is blocked on the send (not the ops' time, as in a wait).
  std::vector<at::Tensor> ts{tensor};
  if (staged_through_host(group, tensor)) {
    BlockedClock blocked;
    ts[0] = tensor.to(at::kCPU);
  }
  return Work(group.impl().pg->send(ts, peer, options.tag), nullptr, "send on " + group.name(), group.role());
}

Work recv(Group& group, at::Tensor& tensor, int peer, const PointToPointOptions& options) {
  require_contiguous(tensor, "recv");
  if (tensor.numel() == 0) return Work();
  if (!staged_through_host(group, tensor)) {
    std::vector<at::Tensor> ts{tensor};
    return Work(group.impl().pg->recv(ts, peer, options.tag), nullptr, "recv on " + group.name(), group.role());
  }
  std::vector<at::Tensor> ts{at::empty(tensor.sizes(), tensor.options().device(at::kCPU))};
  auto finish = [host = ts[0], device = tensor]() mutable { device.copy_(host); };
  return Work(group.impl().pg->recv(ts, peer, options.tag), std::move(finish), "recv on " + group.name(), group.role());
}

namespace {
// gloo's all-gather on host tensors, into `flat` itself: this rank's chunk is copied in at the
// launch, then each rank broadcasts its chunk, in rank order on every rank.
Work gather_by_broadcasts(Group& group, const at::Tensor& shard, at::Tensor& flat) {
  int64_t n = shard.numel();
  at::Tensor mine = flat.narrow(0, group.rank() * n, n);
  if (mine.data_ptr() != shard.data_ptr()) mine.copy_(shard.view({-1}));  // a shard already in its place stays
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (int root = 0; root < group.size(); ++root) {
    std::vector<at::Tensor> chunk{flat.narrow(0, root * n, n)};  // the work keeps it, and so `flat`, alive
    c10d::BroadcastOptions o;
    o.rootRank = root;
    o.timeout = group.impl().timeout;
    works.push_back(group.impl().pg->broadcast(chunk, o));
  }
  return Work(std::move(works), nullptr, "all_gather on " + group.name(), group.role(), futures_mark_transfers(group));
}
}  // namespace

Work all_gather(Group& group, const at::Tensor& shard, at::Tensor& out) {
  require_contiguous(shard, "all_gather");
  require_contiguous(out, "all_gather");
  int64_t n = shard.numel();
  if (out.numel() != n * group.size())
    throw InternalError("all_gather: output has " + std::to_string(out.numel()) + " elements, expected " +
                        std::to_string(n * group.size()));
  if (n == 0) return Work();
  if (group.size() == 1) {
    out.view({-1}).copy_(shard.view({-1}));
    return Work();
  }
  at::Tensor flat = out.view({-1});
  if (group.impl().backend == Backend::Nccl) {
    at::Tensor input = shard.view({-1});
    c10d::AllgatherOptions o;
    o.timeout = group.impl().timeout;
    return Work(group.impl().pg->_allgather_base(flat, input, o), nullptr, "all_gather on " + group.name(), group.role());
  }
  // Every rank takes the same branch (the tensors' device is the run's), so the process group's
  // collectives, and their tags, match.
  if (out.device().is_cpu()) return gather_by_broadcasts(group, shard, flat);
  // gloo with CUDA tensors: the list form, whose staging buffers are host memory.
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < group.size(); ++r) outputs[0].push_back(flat.narrow(0, r * n, n));
  std::vector<at::Tensor> inputs{shard.view({-1})};
  c10d::AllgatherOptions o;
  o.timeout = group.impl().timeout;
  return Work(group.impl().pg->allgather(outputs, inputs, o), nullptr, "all_gather on " + group.name(), group.role(), futures_mark_transfers(group));
}

Work reduce_scatter(Group& group, const at::Tensor& input, at::Tensor& out, const ReduceScatterOptions& options) {
  require_contiguous(input, "reduce_scatter");
  require_contiguous(out, "reduce_scatter");
  int64_t n = out.numel();
  int world = group.size();
  if (input.numel() != n * world)
    throw InternalError("reduce_scatter: input has " + std::to_string(input.numel()) + " elements, expected " +
                        std::to_string(n * world));
  if (n == 0) return Work();
  if (world == 1) {
    out.view({-1}).copy_(input.view({-1}));
    return Work();
  }
  // alltoall sends chunk r to rank r; the received chunks are then reduced locally.
  at::Tensor received = at::empty({world * n}, input.options());
  at::Tensor send = input.view({-1});
  std::vector<int64_t> splits;
  c10d::AllToAllOptions o;
  o.timeout = group.impl().timeout;
  auto work = group.impl().pg->alltoall_base(received, send, splits, splits, o);
  ReduceOp op = options.op;
  return Work(work,
              [received, out, world, n, op]() mutable {
                at::Tensor chunks = received.view({world, n});
                at::Tensor flat = out.view({-1});
                if (op == ReduceOp::Sum) at::sum_out(flat, chunks, {0});
                else if (op == ReduceOp::Max) flat.copy_(std::get<0>(chunks.max(0)));
                else flat.copy_(std::get<0>(chunks.min(0)));
                // gloo's worker keeps the work, and `received` with it, until it next takes its
                // lock: on busy cores milliseconds later. Free it here, at the wait, as the memory
                // walk does (measured: 4 MiB a reduce-scatter over gpt:50m's 1 Gbit link).
                free_storage(received);
              },
              "reduce_scatter on " + group.name(), group.role(), futures_mark_transfers(group));
}

void barrier(Group& group) {
  if (trivial(group)) return;
  c10d::BarrierOptions o;
  o.timeout = group.impl().timeout;
  Work(group.impl().pg->barrier(o), nullptr, "barrier on " + group.name(), group.role()).wait();
}

}  // namespace loom::comm
