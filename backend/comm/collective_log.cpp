#include "backend/comm/collective_log.h"

#include <atomic>
#include <chrono>
#include <mutex>

#include "lang/diagnostics.h"

namespace loom::comm {
namespace {

// The open log, and one lock for opening, closing, pausing and adding to it.
std::mutex log_mutex;
CollectiveLog* open_log = nullptr;
CollectiveLog* paused_log = nullptr;

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

struct CollectiveLog::Entry {
  double launched_ms = 0;
  ir::Role role = ir::Role::None;
  std::atomic<double> completed_ms{-1};  // set on the collective's thread
};

CollectiveLog::CollectiveLog() {
  std::lock_guard<std::mutex> lock(log_mutex);
  if (open_log || paused_log) throw InternalError("a collective log is open already");
  open_log = this;
}

CollectiveLog::~CollectiveLog() {
  std::lock_guard<std::mutex> lock(log_mutex);
  if (open_log == this) open_log = nullptr;
  if (paused_log == this) paused_log = nullptr;
}

CollectiveLog::Pause::Pause(CollectiveLog* log) : log_(log) {
  if (!log_) return;
  std::lock_guard<std::mutex> lock(log_mutex);
  if (open_log == log_) open_log = nullptr, paused_log = log_;
}

CollectiveLog::Pause::~Pause() {
  if (!log_) return;
  std::lock_guard<std::mutex> lock(log_mutex);
  if (paused_log == log_) open_log = log_, paused_log = nullptr;
}

std::vector<CollectiveSpan> CollectiveLog::spans(int* unknown) const {
  std::lock_guard<std::mutex> lock(log_mutex);
  std::vector<CollectiveSpan> out;
  *unknown = 0;
  for (const auto& e : entries_) {
    double completed = e->completed_ms.load();
    if (completed < 0) ++*unknown;
    else out.push_back({e->launched_ms, completed, e->role});
  }
  return out;
}

void CollectiveLog::begin_step() {
  std::lock_guard<std::mutex> lock(log_mutex);
  step_starts_.push_back(now_ms());
}

std::vector<double> CollectiveLog::step_starts() const {
  std::lock_guard<std::mutex> lock(log_mutex);
  return step_starts_;
}

void CollectiveLog::note_launch(const c10::intrusive_ptr<c10d::Work>& work, ir::Role role) {
  if (!work) return;
  std::lock_guard<std::mutex> lock(log_mutex);
  if (!open_log) return;
  auto entry = std::make_shared<Entry>();
  entry->launched_ms = now_ms();
  entry->role = role;
  // The callback holds the entry, not the log: it may run after the log has closed. It may also
  // run at once, here, if the collective is done already (it takes no lock). gloo's send and
  // recv have no future and are not logged (the simulator prices transfers apart).
  if (when_transferred(work, [entry] { entry->completed_ms = now_ms(); })) open_log->entries_.push_back(entry);
}

bool when_transferred(const c10::intrusive_ptr<c10d::Work>& work, std::function<void()> callback) {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  try {
    future = work->getFuture();
  } catch (const std::exception&) {
    return false;
  }
  future->addCallback([callback = std::move(callback)](c10::ivalue::Future&) { callback(); });
  return true;
}

}  // namespace loom::comm
