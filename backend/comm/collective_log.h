// While open, when each collective this process launches started and when its transfer
// completed, as its collective thread marks it (not when a rank waits for it): what `loom
// profile` measures a step's collectives by (backend/cost/in_step_collectives.h).
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include <torch/csrc/distributed/c10d/Work.hpp>

#include "backend/cost/in_step_collectives.h"

namespace loom::comm {

class CollectiveLog {
 public:
  CollectiveLog();  // one open at a time in a process
  ~CollectiveLog();
  CollectiveLog(const CollectiveLog&) = delete;
  CollectiveLog& operator=(const CollectiveLog&) = delete;

  // The collectives launched since it opened, in launch order, and how many of them have no
  // completion time (still in flight, or a backend whose work has no future).
  std::vector<CollectiveSpan> spans(int* unknown) const;

  // comm::Work calls it for each collective it launches.
  static void note_launch(const c10::intrusive_ptr<c10d::Work>& work);

 private:
  struct Entry;
  mutable std::mutex mutex_;
  std::vector<std::shared_ptr<Entry>> entries_;
};

}  // namespace loom::comm
