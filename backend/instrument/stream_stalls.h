// StreamStalls, a wait listener: where each Work::wait() of a measured step held a GPU's stream
// (the op profiler's, issue #15 §5): an event before the wait and one once its collective
// completed. An op whose call waits for a collective (a tensor-parallel row's sum inside it) has
// that stall between its own events; it is the collective's time (the simulator's collective
// stream prices it), so the op's own time leaves it out.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/comm/communicator.h"
#include "backend/torch_compat.h"

namespace loom::instrument {

class StreamStalls : public comm::WaitListener {
 public:
  void before_wait() override;
  void after_wait() override;
  // How many stalls were recorded so far: a mark's position among them.
  size_t count() const;
  // The device time of the stalls that `thread` recorded from position `from` to `to` (waits
  // for their events).
  double stalled_ms(std::thread::id thread, size_t from, size_t to) const;
  // Forgets them (no mark refers to them any more).
  void clear();
  // Records the waits from now (measured micro-batches), or not.
  void set_recording(bool on) { recording_ = on; }

 private:
  std::atomic<bool> recording_{false};
  struct Stall {
    std::thread::id thread;
    std::shared_ptr<compat::CudaEvent> before, after;
  };
  mutable std::mutex mutex_;
  std::vector<Stall> stalls_;
  std::map<std::thread::id, std::shared_ptr<compat::CudaEvent>> pending_;  // waits begun, by thread
};

}  // namespace loom::instrument
