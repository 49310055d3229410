// A signal's handler for as long as an object lives, the one before it back afterwards: the
// launcher's Ctrl-C and SIGTERM, the tuner's Ctrl-C, verify's ignoring Ctrl-C while it waits,
// run inside a caller (a Python interpreter's loom.train or loom.tune) that has handlers of its
// own. The live ones are kept in a list, so that a child forked meanwhile starts with the
// handlers from before them (become_program, loom_executable.h). Torch-free.
#pragma once

#include <signal.h>

#include <algorithm>
#include <mutex>
#include <vector>

namespace loom {

class ScopedSignalHandler {
 public:
  ScopedSignalHandler(int signal, void (*handler)(int)) : signal_(signal) {
    struct sigaction sa {};
    sa.sa_handler = handler;
    std::lock_guard<std::mutex> lock(live_mutex());
    sigaction(signal_, &sa, &previous_);
    live().push_back(this);
  }
  ~ScopedSignalHandler() {
    std::lock_guard<std::mutex> lock(live_mutex());
    restore();
    if (auto it = std::find(live().begin(), live().end(), this); it != live().end()) live().erase(it);
  }
  // In a child just forked: the handlers from before every one alive at the fork, as a program
  // exec'd there would start with (the newest put back first, so that the oldest one's
  // predecessor is what stays); the child forgets them, being the parent's to end. It takes no
  // lock: a thread of the parent that held it is not in the child.
  static void restore_all_in_child() {
    for (auto it = live().rbegin(); it != live().rend(); ++it) (*it)->restore();
    live().clear();
  }
  ScopedSignalHandler(const ScopedSignalHandler&) = delete;
  ScopedSignalHandler& operator=(const ScopedSignalHandler&) = delete;

 private:
  void restore() const { sigaction(signal_, &previous_, nullptr); }
  // Every one alive in this process, oldest first.
  static std::vector<const ScopedSignalHandler*>& live() {
    static std::vector<const ScopedSignalHandler*> handlers;
    return handlers;
  }
  static std::mutex& live_mutex() {
    static std::mutex mutex;
    return mutex;
  }

  int signal_;
  struct sigaction previous_ {};
};

}  // namespace loom
