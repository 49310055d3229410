// A listener told when the executors' work inside autograd's backward begins
// (gradient_hook_begins). That work: a parameter's gradient hook adds the gradient to its flat
// buffer, releases the gathered parameter (where the program releases it in this micro-batch)
// and launches the reductions whose gradients are complete. That work is the program's (the
// memory walk counts its buffers at their own instructions), not the op's whose backward
// autograd is running, so the executors say when it begins and the op profiler ends the op's
// memory window there. Torch-free.
#pragma once

namespace loom::instrument {

// Called at the start of every gradient hook's work; `context` is the listener's own.
using GradientHookListener = void (*)(void* context);

// One listener at a time (the op profiler, while it lives).
void set_gradient_hook_listener(GradientHookListener listener, void* context);
// Removes the listener if it is still `context`'s (a newer one stays).
void clear_gradient_hook_listener(void* context);

// An executor's gradient hook begins its work.
void gradient_hook_begins();

}  // namespace loom::instrument
