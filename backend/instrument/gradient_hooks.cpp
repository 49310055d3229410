#include "backend/instrument/gradient_hooks.h"

#include <atomic>

namespace loom::instrument {
namespace {
// Set on the rank's thread, read from autograd's (on a GPU the engine runs backward on a thread
// of its own).
std::atomic<GradientHookListener> listener{nullptr};
std::atomic<void*> listener_context{nullptr};
}  // namespace

void set_gradient_hook_listener(GradientHookListener l, void* context) {
  listener_context = context;
  listener = l;
}

void clear_gradient_hook_listener(void* context) {
  void* expected = context;
  if (listener_context.compare_exchange_strong(expected, nullptr)) listener = nullptr;
}

void gradient_hook_begins() {
  if (GradientHookListener l = listener.load()) l(listener_context.load());
}

}  // namespace loom::instrument
