#include "backend/comm/collective_log.h"

#include <atomic>
#include <chrono>

#include "lang/diagnostics.h"

namespace loom::comm {
namespace {

std::atomic<CollectiveLog*> open_log{nullptr};

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

struct CollectiveLog::Entry {
  double launched_ms = 0;
  std::atomic<double> completed_ms{-1};  // set on the collective's thread
};

CollectiveLog::CollectiveLog() {
  CollectiveLog* none = nullptr;
  if (!open_log.compare_exchange_strong(none, this)) throw InternalError("a collective log is open already");
}

CollectiveLog::~CollectiveLog() { open_log = nullptr; }

std::vector<CollectiveSpan> CollectiveLog::spans(int* unknown) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<CollectiveSpan> out;
  *unknown = 0;
  for (const auto& e : entries_) {
    double completed = e->completed_ms.load();
    if (completed < 0) ++*unknown;
    else out.push_back({e->launched_ms, completed});
  }
  return out;
}

void CollectiveLog::note_launch(const c10::intrusive_ptr<c10d::Work>& work) {
  CollectiveLog* log = open_log.load();
  if (!log || !work) return;
  auto entry = std::make_shared<Entry>();
  entry->launched_ms = now_ms();
  {
    std::lock_guard<std::mutex> lock(log->mutex_);
    log->entries_.push_back(entry);
  }
  try {
    // The callback holds the entry, not the log: it may run after the log has closed.
    work->getFuture()->addCallback([entry](c10::ivalue::Future&) { entry->completed_ms = now_ms(); });
  } catch (const std::exception&) {
    // A work without a future: its completion stays unknown, and the log says so.
  }
}

}  // namespace loom::comm
