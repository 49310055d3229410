// CollectiveLog: while open, when each collective this process launches started and when its
// transfer completed, as gloo's worker thread marks it (a callback on the work's future; not when
// a rank waits for it): what `loom profile` measures a step's collectives by
// (backend/cost/in_step_collectives.h). gloo only: NCCL completes a work's future when the
// collective is queued. Works without a future (gloo's send and recv) are not logged.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include <torch/csrc/distributed/c10d/Work.hpp>

#include "backend/cost/in_step_collectives.h"

namespace loom::comm {

// Calls `callback` when the work's transfer completes: on gloo's worker thread as it marks the
// work's future complete, before it wakes the rank's wait (at once, here, if it is done already).
// False, and nothing is called, for a work without a future (gloo's send and recv).
bool when_transferred(const c10::intrusive_ptr<c10d::Work>& work, std::function<void()> callback);

class CollectiveLog {
 public:
  CollectiveLog();  // one open at a time in a process
  ~CollectiveLog();
  CollectiveLog(const CollectiveLog&) = delete;
  CollectiveLog& operator=(const CollectiveLog&) = delete;

  // While it lives, `log` (may be null) records nothing: work between measured steps (a checkpoint).
  class Pause {
   public:
    explicit Pause(CollectiveLog* log);
    ~Pause();

   private:
    CollectiveLog* log_;
  };

  // The collectives launched since it opened, in launch order, with their groups' roles, and how
  // many of them are still in flight (no completion time yet).
  std::vector<CollectiveSpan> spans(int* unknown) const;
  // A measured step begins now (in_step_scale tells the spans apart by step).
  void begin_step();
  // When each measured step began, on the spans' clock.
  std::vector<double> step_starts() const;

  // comm::Work calls it for each process-group work it launches (gloo's all-gather is one per
  // rank), on a group of `role`.
  static void note_launch(const c10::intrusive_ptr<c10d::Work>& work, ir::Role role);

 private:
  struct Entry;
  std::vector<std::shared_ptr<Entry>> entries_;  // guarded by the log's mutex (collective_log.cpp)
  std::vector<double> step_starts_;              // likewise
};

}  // namespace loom::comm
