// The host work of a wait that unpacks (ir::Instr::unpack_bytes): an executor copying each
// member of a collective's flat buffer out into the tensor the step uses, once the collective
// is done. The executors time it here, so that the op profiler leaves it out of the ops' times
// (as it leaves out waiting for collectives) and a profile prices it by the bytes at each wait
// that unpacks. Per thread (the rank's), like comm::blocked_ms(); an `--trace` shows each as an
// "unpack" span. On a GPU the copies are queued on the device: the host times only the queueing.
// Torch-free.
#pragma once

#include <cstdint>

#include "backend/instrument/timeline.h"

namespace loom::instrument {

// Counts its scope as unpacking `bytes`.
class UnpackTimer {
 public:
  explicit UnpackTimer(int64_t bytes);
  ~UnpackTimer();
  UnpackTimer(const UnpackTimer&) = delete;
  UnpackTimer& operator=(const UnpackTimer&) = delete;

 private:
  int64_t bytes_;
  double start_ms_;
  timeline::Span span_;
};

// This thread's unpacking so far: milliseconds and bytes (what an op on this thread excludes).
double unpacked_ms();
int64_t unpacked_bytes();
// Every thread's so far: on a GPU autograd runs the backward, and so its waits' unpacking, on a
// thread of its own (what a window over the step counts).
double unpacked_ms_all_threads();
int64_t unpacked_bytes_all_threads();

}  // namespace loom::instrument
