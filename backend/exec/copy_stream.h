// The copy stream of a run: a background thread that runs host <-> device copies in the order
// they are submitted, while the step goes on (adaptive offloading's offload_states and
// reload_states; deepcompile.txt §4.4) on a CPU run, where it is what overlaps the copies with
// compute. A CUDA run copies on a side CUDA stream instead (backend/exec/state_copier.h).
#pragma once

#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <queue>
#include <thread>

namespace loom {

class CopyStream {
 public:
  CopyStream();
  ~CopyStream();  // finishes what was submitted
  CopyStream(const CopyStream&) = delete;
  CopyStream& operator=(const CopyStream&) = delete;

  // Queues `copy`; the future is ready once it ran (and rethrows what it threw).
  std::future<void> submit(std::function<void()> copy);

 private:
  void serve();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::queue<std::packaged_task<void()>> queue_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace loom
