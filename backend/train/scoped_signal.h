// A signal's handler for as long as an object lives, the one before it back afterwards: the
// launcher's Ctrl-C and SIGTERM, the tuner's Ctrl-C, run inside a caller (a Python interpreter's
// loom.train or loom.tune) that has handlers of its own. Torch-free.
#pragma once

#include <signal.h>

namespace loom {

class ScopedSignalHandler {
 public:
  ScopedSignalHandler(int signal, void (*handler)(int)) : signal_(signal) {
    struct sigaction sa {};
    sa.sa_handler = handler;
    sigaction(signal_, &sa, &previous_);
  }
  ~ScopedSignalHandler() { restore(); }
  // The handler before this one, back (also in a child forked meanwhile, which the object's end
  // in the parent does not reach).
  void restore() const { sigaction(signal_, &previous_, nullptr); }
  ScopedSignalHandler(const ScopedSignalHandler&) = delete;
  ScopedSignalHandler& operator=(const ScopedSignalHandler&) = delete;

 private:
  int signal_;
  struct sigaction previous_ {};
};

}  // namespace loom
