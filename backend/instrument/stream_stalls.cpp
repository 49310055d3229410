#include "backend/instrument/stream_stalls.h"

namespace loom::instrument {

void StreamStalls::before_wait() {
  if (!recording_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  pending_[std::this_thread::get_id()] = compat::cuda_record_event();
}

void StreamStalls::after_wait() {
  if (!recording_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pending_.find(std::this_thread::get_id());
  if (it == pending_.end()) return;
  stalls_.push_back({it->first, it->second, compat::cuda_record_event()});
  pending_.erase(it);
}

size_t StreamStalls::count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stalls_.size();
}

double StreamStalls::stalled_ms(std::thread::id thread, size_t from, size_t to) const {
  std::lock_guard<std::mutex> lock(mutex_);
  double ms = 0;
  for (size_t i = from; i < to && i < stalls_.size(); ++i)
    if (stalls_[i].thread == thread) ms += compat::cuda_elapsed_ms(stalls_[i].before, stalls_[i].after);
  return ms;
}

void StreamStalls::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  stalls_.clear();
  pending_.clear();
}

}  // namespace loom::instrument
