#include "backend/instrument/op_profiler.h"

#include <torch/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>
#include <unordered_map>

#include "backend/cost/sample_statistics.h"
#include "backend/instrument/gradient_hooks.h"
#include "backend/instrument/memory_counter.h"
#include "backend/instrument/stream_stalls.h"
#include "backend/instrument/unpack_timer.h"
#include "backend/torch_compat.h"
#include "models/zoo_torch.h"

namespace loom {

struct OpProfiler::State {
  struct Samples {
    std::vector<double> forward_ms, backward_ms;
    std::vector<double> forward_host_ms, backward_host_ms;  // on a GPU: the host's part (wall clock)
    int64_t memory_before = 0, forward_peak = 0, backward_before = 0, backward_peak = 0;
  };
  // A point in time: the wall clock, and on GPU a CUDA event too (read when the step is done,
  // so the device is not synchronized between ops): the event times the op's kernels, the wall
  // clock the host's dispatch of them, which bounds a step whose kernels are short.
  struct Mark {
    double wall_ms = 0;
    // comm::blocked_ms() plus instrument::unpacked_ms() then: waiting for collectives and the
    // waits' unpacking are not the ops' time. Counted per thread: on a GPU autograd runs
    // backward on a thread of its own.
    double excluded_ms = 0;
    std::thread::id thread = std::this_thread::get_id();
    double blocked_all_threads_ms = 0;  // comm::blocked_ms_all_threads() then
    size_t stalls = 0;                  // on GPU: StreamStalls::count() then
    std::shared_ptr<compat::CudaEvent> event;
  };
  struct Interval {
    int op;
    bool backward;
    Mark start, end;
    double between_ms = 0;  // the work between ops that counts toward this one (CPU)
    double host_between_ms = 0;  // the host's, likewise (GPU)
  };
  // Where the time between ops is measured from: a wall time, and the time by then spent
  // waiting for collectives or recomputing, which is not the ops' (on the thread it was read on).
  struct Clock {
    double wall_ms = -1;
    double excluded_ms = 0, recomputing_ms = 0;
    std::thread::id thread;
    double blocked_all_threads_ms = 0;
  };
  // A backward in progress: from the output marker to the last input marker.
  struct OpenBackward {
    int op = -1;
    int inputs_left = 0;
    Mark start;
    int64_t window = 0;
    int64_t peak_at_hook = -1;  // the window's peak when the first gradient hook began (-1: none yet)
    double between_ms = 0, host_between_ms = 0;
  };

  const ir::OpTrace* trace = nullptr;
  nn::CallInterceptor* inner = nullptr;
  int cuda_device = -1;
  std::unordered_map<const torch::nn::Module*, std::string> path_of;
  std::map<std::string, std::vector<int>> ops_of_path;  // the op indices of each module, in forward order
  std::vector<Samples> samples;
  bool measured = false;
  bool in_backward = false;
  std::map<std::string, int> calls_this_forward;   // per module: calls seen in this forward
  std::vector<bool> backward_started;              // per op, this micro-batch
  OpenBackward open;
  int depth = 0;                      // op calls in progress (an op inside an op is timed, not a gap)
  double recomputing_ms = 0;          // time in ops rerun by a checkpoint() recomputation
  long last_forward = -1;             // the unread interval of the forward op the coming gap follows
  Clock last_forward_end, backward_gap_from;
  // Where the host's op-free work is measured from: the end of the profiler's own work after an
  // op, so that its bookkeeping (events, memory statistics, markers) is not counted as the host's.
  Clock host_gap_from;
  std::vector<double> optimizer_step_ms, grad_norm_ms, step_ms;
  int64_t optimizer_elements = 0;  // what this rank's update changes
  // The waits' unpacking in measured micro-batches and the step tails after them: from the
  // start of a measured micro-batch's forward to the next forward (or the profile's reading).
  struct Unpacking {
    double ms = 0;
    int64_t bytes = 0;
  };
  Unpacking unpacked, unpack_from;
  bool unpack_window_open = false;
  void close_unpack_window() {
    if (!unpack_window_open) return;
    unpacked.ms += instrument::unpacked_ms_all_threads() - unpack_from.ms;
    unpacked.bytes += instrument::unpacked_bytes_all_threads() - unpack_from.bytes;
    unpack_window_open = false;
  }
  void open_unpack_window() {
    unpack_from = {instrument::unpacked_ms_all_threads(), instrument::unpacked_bytes_all_threads()};
    unpack_window_open = true;
  }

  std::vector<Interval> unread;  // measured intervals whose times are not read yet
  instrument::StreamStalls stream_stalls;  // on GPU

  // `t` (doubles on the host) reduced element by element over the ranks of `world`, on the
  // device its process group needs, back on the host.
  torch::Tensor over_ranks(torch::Tensor t, comm::Group& world, comm::ReduceOp op) const {
    if (world.size() == 1) return t;
    torch::Tensor on_device = cuda_device >= 0 ? t.to(torch::Device(torch::kCUDA, cuda_device)) : t;
    comm::all_reduce(world, on_device, {op}).wait();
    return on_device.cpu();
  }

  Clock clock_at(const Mark& m) const { return {m.wall_ms, m.excluded_ms, recomputing_ms, m.thread, m.blocked_all_threads_ms}; }
  // The op-free work from `from` to `to` (CPU): 0 on GPU (events), where an op's time is its own.
  double between(const Clock& from, const Mark& to) const { return to.event ? 0 : wall_between(from, clock_at(to)); }
  // The wall time from `from` to `to` less the waits for collectives and the recomputing.
  static double wall_between(const Clock& from, const Clock& to) {
    if (from.wall_ms < 0) return 0;
    // From forward's thread to autograd's (a GPU's backward): the waits of any thread (a
    // pipeline stage's for the gradient it receives, before autograd's thread begins). Another
    // thread's wait at the same time would be taken out too: none such in a step, where forward's
    // thread waits for backward's end.
    double waited = from.thread == to.thread ? to.excluded_ms - from.excluded_ms
                                             : to.blocked_all_threads_ms - from.blocked_all_threads_ms;
    return std::max(0.0, to.wall_ms - from.wall_ms - waited - (to.recomputing_ms - from.recomputing_ms));
  }
  // The host's op-free work from the end of the profiler's work after the last op to now (the
  // profiler's work before the next op has not begun).
  // On a CPU 0: the host's work is the op's (between()).
  double host_gap() const { return cuda_device >= 0 ? wall_between(host_gap_from, host_clock()) : 0; }
  Clock host_clock() const { return clock_at(host_mark()); }
  // The profiler's work after an op (or at backward's start) is done: the host's gap begins.
  void host_gap_begins() {
    if (cuda_device >= 0) host_gap_from = host_clock();
  }
  // The last forward op takes the op-free work from its end to `to` (the attention scores after
  // c_attn; the loss after the head), and the host's gap measured before the profiler's work.
  void last_forward_takes_gap(const Mark& to, double host_gap_ms) {
    if (last_forward < 0) return;
    Interval& last = unread[static_cast<size_t>(last_forward)];
    last.between_ms += between(last_forward_end, to);
    last.host_between_ms += host_gap_ms;
  }

  // The host's clocks now.
  static Mark host_mark() {
    Mark m;
    m.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
    m.excluded_ms = comm::blocked_ms() + instrument::unpacked_ms();
    m.blocked_all_threads_ms = comm::blocked_ms_all_threads();
    return m;
  }
  // The host's clocks and, on GPU, an event on the device's stream.
  Mark now() const {
    Mark m = host_mark();
    if (cuda_device >= 0) {
      m.event = compat::cuda_record_event();
      m.stalls = stream_stalls.count();
    }
    return m;
  }
  // Reads the times of the intervals measured so far (on GPU, waits for their events).
  void read_intervals() {
    for (const Interval& i : unread) {
      double host = i.end.wall_ms - i.start.wall_ms - (i.end.excluded_ms - i.start.excluded_ms);
      double own = host;
      if (i.start.event) {
        double stalled = stream_stalls.stalled_ms(i.start.thread, i.start.stalls, i.end.stalls);
        own = std::max(0.0, compat::cuda_elapsed_ms(i.start.event, i.end.event) - stalled);
      }
      Samples& s = samples[i.op];
      (i.backward ? s.backward_ms : s.forward_ms).push_back(own + i.between_ms);
      // A GPU's last backward op closes on forward's thread, when backward has returned: the
      // host's part of it is not seen.
      if (i.start.event && i.start.thread == i.end.thread)
        (i.backward ? s.backward_host_ms : s.forward_host_ms).push_back(host + i.host_between_ms);
    }
    unread.clear();
  }
  int64_t memory_now() const { return cuda_device >= 0 ? compat::cuda_current_bytes(cuda_device) : memory::current_bytes(); }
  int64_t begin_window() const {
    if (cuda_device < 0) return memory::begin_window();
    compat::cuda_reset_peak(cuda_device);  // profiling steps report no step peaks, so nothing is lost
    return 0;
  }
  int64_t end_window(int64_t token) const {
    return cuda_device >= 0 ? compat::cuda_peak_bytes(cuda_device) : memory::end_window(token);
  }
  int64_t window_peak_so_far() const { return cuda_device >= 0 ? compat::cuda_peak_bytes(cuda_device) : memory::peak_bytes(); }

  // An executor's gradient hook begins inside the open backward (instrument/gradient_hooks.h):
  // what it allocates is not the op's, so the op's peak is what the window held until now.
  void gradient_hook_begins() {
    if (open.op >= 0 && open.peak_at_hook < 0) open.peak_at_hook = window_peak_so_far();
  }

  // The op a call of `path` is: its k-th call in this forward, or in backward (a checkpoint()
  // recomputation) the first of its ops whose backward has not started.
  int op_of_call(const std::string& path) {
    auto it = ops_of_path.find(path);
    if (it == ops_of_path.end()) return -1;
    if (!in_backward) {
      int k = calls_this_forward[path]++;
      return k < static_cast<int>(it->second.size()) ? it->second[k] : -1;
    }
    for (int op : it->second)
      if (!backward_started[op]) return op;
    return -1;
  }

  void close_backward() {
    if (open.op < 0) return;
    Samples& s = samples[open.op];
    Mark end = now();
    unread.push_back({open.op, true, open.start, end, open.between_ms, open.host_between_ms});
    int64_t peak = end_window(open.window);  // ends the window whatever the hooks did: the step's peak stays whole
    s.backward_peak = std::max(s.backward_peak, open.peak_at_hook >= 0 ? open.peak_at_hook : peak);
    open = OpenBackward{};
    backward_gap_from = clock_at(end);
    host_gap_begins();
  }

  void backward_started_for(int op, int inputs) {
    // Where the op before is still open (closed only here, below), it takes all the time until now.
    double host_gap_ms = open.op >= 0 ? 0 : host_gap();
    close_backward();
    backward_started[op] = true;
    Samples& s = samples[op];
    s.backward_before = std::max(s.backward_before, memory_now());
    open.op = op;
    open.inputs_left = inputs;
    open.window = begin_window();
    open.start = now();
    open.between_ms = between(backward_gap_from, open.start);  // the op-free backward work before it
    open.host_between_ms = host_gap_ms;
  }

  void input_gradient_done(int op) {
    if (open.op != op) return;
    if (--open.inputs_left <= 0) close_backward();
  }
};

namespace {

struct MarkerHolder : torch::CustomClassHolder {
  OpProfiler::State* state = nullptr;
  int op = -1;
  bool on_output = false;  // on the op's output: its backward starts; on an input: that input's gradient is done
  int inputs = 0;          // on the output: how many input markers end this op's backward
};

// Identity; its backward marks a point of the op's backward for the profiler.
struct Marker : public torch::autograd::Function<Marker> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               c10::intrusive_ptr<MarkerHolder> holder) {
    ctx->saved_data["holder"] = c10::IValue::make_capsule(holder);
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    auto h = c10::static_intrusive_pointer_cast<MarkerHolder>(ctx->saved_data["holder"].toCapsule());
    if (h->on_output) h->state->backward_started_for(h->op, h->inputs);
    else h->state->input_gradient_done(h->op);
    return {grads[0], torch::Tensor()};
  }
};

torch::Tensor mark(const torch::Tensor& x, OpProfiler::State* state, int op, bool on_output, int inputs) {
  auto h = c10::make_intrusive<MarkerHolder>();
  h->state = state, h->op = op, h->on_output = on_output, h->inputs = inputs;
  return Marker::apply(x, h);
}

}  // namespace

OpProfiler::OpProfiler(torch::nn::Module& model, const ir::OpTrace& trace, nn::CallInterceptor* inner, int cuda_device)
    : s_(std::make_unique<State>()) {
  s_->trace = &trace;
  s_->inner = inner;
  s_->cuda_device = cuda_device;
  for (auto& m : parameters_by_module(model)) s_->path_of[m.module] = m.path;
  for (size_t i = 0; i < trace.forward.size(); ++i) s_->ops_of_path[trace.forward[i].module].push_back(static_cast<int>(i));
  s_->samples.resize(trace.forward.size());
  s_->backward_started.assign(trace.forward.size(), false);
  instrument::set_gradient_hook_listener(
      [](void* state) {
        if (state) static_cast<State*>(state)->gradient_hook_begins();
      },
      s_.get());
  if (cuda_device >= 0) comm::set_wait_listener(&s_->stream_stalls);
}

OpProfiler::~OpProfiler() {
  comm::clear_wait_listener(&s_->stream_stalls);
  instrument::clear_gradient_hook_listener(s_.get());
}

void OpProfiler::begin_forward(bool measured) {
  s_->read_intervals();
  s_->close_unpack_window();
  if (measured) s_->open_unpack_window();
  s_->measured = measured;
  s_->stream_stalls.set_recording(measured);
  s_->in_backward = false;
  s_->last_forward = -1;
  s_->last_forward_end = s_->backward_gap_from = s_->host_gap_from = State::Clock{};
  s_->calls_this_forward.clear();
  s_->backward_started.assign(s_->backward_started.size(), false);
}

void OpProfiler::begin_backward() {
  State& s = *s_;
  s.in_backward = true;
  if (!s.measured) return;
  double host_gap_ms = s.host_gap();
  State::Mark now = s.now();
  s.last_forward_takes_gap(now, host_gap_ms);  // the loss
  s.last_forward = -1;
  s.backward_gap_from = s.clock_at(now);
  s.host_gap_begins();
}

void OpProfiler::optimizer_step_took(double ms, int64_t elements) {
  if (!s_->measured) return;
  s_->optimizer_step_ms.push_back(ms);
  s_->optimizer_elements = elements;
}

void OpProfiler::grad_norm_took(double ms) {
  if (s_->measured) s_->grad_norm_ms.push_back(ms);
}

void OpProfiler::step_took(double ms) {
  if (s_->measured) s_->step_ms.push_back(ms);
}

void OpProfiler::end_backward() { s_->close_backward(); }

void OpProfiler::reset() {
  s_->read_intervals();
  s_->stream_stalls.clear();
  size_t ops = s_->samples.size();
  s_->samples.assign(ops, State::Samples{});
  s_->optimizer_step_ms.clear();
  s_->optimizer_elements = 0;
  s_->grad_norm_ms.clear();
  s_->step_ms.clear();
  s_->unpack_window_open = false;
  s_->unpacked = {};
}

torch::Tensor OpProfiler::intercept(torch::nn::Module& module, const std::vector<torch::Tensor>& inputs,
                                    const nn::Forward& forward) {
  State& s = *s_;
  auto run = [&](const std::vector<torch::Tensor>& xs) { return s.inner ? s.inner->intercept(module, xs, forward) : forward(xs); };
  auto path = s.path_of.find(&module);
  int op = path == s.path_of.end() || !s.measured ? -1 : s.op_of_call(path->second);
  if (op < 0 && s.in_backward && s.measured && s.depth == 0) {
    // In backward a module runs only to recompute a checkpoint()ed block: its whole run, op-free
    // work included, is the recompute instruction's, not time between ops.
    auto start = std::chrono::steady_clock::now();
    ++s.depth;
    torch::Tensor out = run(inputs);
    --s.depth;
    s.recomputing_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    return out;
  }
  if (op < 0) return run(inputs);

  bool outermost = s.depth == 0;
  double host_gap_ms = outermost && !s.in_backward ? s.host_gap() : 0;
  bool marks = torch::GradMode::is_enabled();
  std::vector<torch::Tensor> xs = inputs;
  int marked_inputs = 0;
  if (marks) {
    for (auto& x : xs)
      if (x.defined() && x.requires_grad()) {
        x = mark(x, &s, op, /*on_output=*/false, 0);
        ++marked_inputs;
      }
  }
  torch::Tensor out;
  ++s.depth;
  if (!s.in_backward) {
    State::Samples& sample = s.samples[op];
    sample.memory_before = std::max(sample.memory_before, s.memory_now());
    int64_t window = s.begin_window();
    State::Mark start = s.now();
    if (outermost) s.last_forward_takes_gap(start, host_gap_ms);
    out = run(xs);
    State::Mark end = s.now();
    s.unread.push_back({op, false, start, end});
    if (outermost) s.last_forward = static_cast<long>(s.unread.size()) - 1, s.last_forward_end = s.clock_at(end);
    sample.forward_peak = std::max(sample.forward_peak, s.end_window(window));
  } else {
    // A recomputation: part of the enclosing checkpoint's backward, not a forward, and priced
    // as the recompute instruction, so not part of the time between ops either.
    auto start = std::chrono::steady_clock::now();
    out = run(xs);
    if (outermost) s.recomputing_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }
  --s.depth;
  if (marks && out.requires_grad()) out = mark(out, &s, op, /*on_output=*/true, marked_inputs);
  if (outermost && !s.in_backward) s.host_gap_begins();
  return out;
}

std::vector<OpProfile> OpProfiler::result(comm::Group& world) const {
  s_->read_intervals();
  const State& s = *s_;
  constexpr int kFields = 8;
  int64_t n = static_cast<int64_t>(s.samples.size());
  torch::Tensor t = torch::zeros({n, kFields}, torch::kDouble);
  auto a = t.accessor<double, 2>();
  for (int64_t i = 0; i < n; ++i) {
    const State::Samples& x = s.samples[i];
    a[i][0] = mean(x.forward_ms);
    a[i][1] = mean(x.backward_ms);
    a[i][2] = static_cast<double>(x.memory_before);
    a[i][3] = static_cast<double>(x.forward_peak);
    a[i][4] = static_cast<double>(x.backward_before);
    a[i][5] = static_cast<double>(x.backward_peak);
    a[i][6] = x.forward_host_ms.empty() ? -1 : mean(x.forward_host_ms);
    a[i][7] = x.backward_host_ms.empty() ? -1 : mean(x.backward_host_ms);
  }
  t = s.over_ranks(t, world, comm::ReduceOp::Max);
  a = t.accessor<double, 2>();
  std::vector<OpProfile> out;
  for (int64_t i = 0; i < n; ++i) {
    out.push_back({s.trace->forward[i].module, a[i][0], a[i][1], static_cast<int64_t>(a[i][2]), static_cast<int64_t>(a[i][3]),
                   static_cast<int64_t>(a[i][4]), static_cast<int64_t>(a[i][5]), {}, {}});
    out.back().forward_host_ms = a[i][6];
    out.back().backward_host_ms = a[i][7];
  }
  if (world.size() > 1) add_rank_times(world, out);
  return out;
}

// Each rank's own mean times of every op (the figures above are the slowest rank's): a
// simulation of each rank sees which rank is late where (backend/sim/simulator.h).
void OpProfiler::add_rank_times(comm::Group& world, std::vector<OpProfile>& ops) const {
  const State& s = *s_;
  int64_t n = static_cast<int64_t>(s.samples.size()), ranks = world.size();
  torch::Tensor t = torch::zeros({ranks, n, 2}, torch::kDouble);
  auto a = t.accessor<double, 3>();
  for (int64_t i = 0; i < n; ++i) {
    a[world.rank()][i][0] = mean(s.samples[i].forward_ms);
    a[world.rank()][i][1] = mean(s.samples[i].backward_ms);
  }
  t = s.over_ranks(t, world, comm::ReduceOp::Sum);  // each rank's row, the others' zeros
  a = t.accessor<double, 3>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < ranks; ++r) {
      ops[i].forward_ms_by_rank.push_back(a[r][i][0]);
      ops[i].backward_ms_by_rank.push_back(a[r][i][1]);
    }
}

double OpProfiler::optimizer_step_ms(comm::Group& world) const { return slowest_mean(s_->optimizer_step_ms, world); }

double OpProfiler::grad_norm_ms(comm::Group& world) const { return slowest_mean(s_->grad_norm_ms, world); }

void OpProfiler::fill(Profile& profile, comm::Group& world) const {
  profile.ops = result(world);
  profile.optimizer_step_ms = optimizer_step_ms(world);
  profile.optimizer_elements = static_cast<int64_t>(max_over_ranks(static_cast<double>(s_->optimizer_elements), world));
  profile.grad_norm_ms = grad_norm_ms(world);
  profile.measured_step_ms = slowest_median(s_->step_ms, world);
  UnpackRate unpacking = unpack_rate(world);
  profile.unpack_gb_per_s = unpacking.gb_per_s;
  profile.unpack_bytes_per_step = profile.measured_steps > 0 ? unpacking.bytes / profile.measured_steps : 0;
}

UnpackRate OpProfiler::unpack_rate(comm::Group& world) const {
  State& s = *s_;
  s.close_unpack_window();
  // The slowest rank's milliseconds per byte, and the most bytes any rank unpacked.
  double ms_per_byte = s.unpacked.bytes > 0 ? s.unpacked.ms / static_cast<double>(s.unpacked.bytes) : -1;
  torch::Tensor t = s.over_ranks(torch::tensor({ms_per_byte, static_cast<double>(s.unpacked.bytes)}, torch::kDouble), world,
                                 comm::ReduceOp::Max);
  UnpackRate rate;
  // On a GPU the host sees the copies' queueing only, and autograd's device thread may do some.
  if (s.cuda_device >= 0) return rate;
  rate.bytes = static_cast<int64_t>(t[1].item<double>());
  if (t[0].item<double>() > 0) rate.gb_per_s = 1 / (t[0].item<double>() * 1e6);
  return rate;
}

double OpProfiler::slowest_median(const std::vector<double>& samples, comm::Group& world) const {
  return max_over_ranks(samples.empty() ? -1.0 : median(samples), world);
}

double OpProfiler::slowest_mean(const std::vector<double>& samples, comm::Group& world) const {
  return max_over_ranks(samples.empty() ? -1.0 : mean(samples), world);
}

double OpProfiler::max_over_ranks(double value, comm::Group& world) const {
  return s_->over_ranks(torch::tensor({value}, torch::kDouble), world, comm::ReduceOp::Max).item<double>();
}

}  // namespace loom
