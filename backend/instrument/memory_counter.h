// Peak-memory accounting on CPU: a counting allocator installed as LibTorch's CPU
// allocator. It sees every CPU tensor allocated after install(), autograd's saved
// tensors included (not from_blob memory, nor BLAS scratch).
#pragma once

#include <cstdint>

namespace loom::memory {

// Installs the counting allocator (idempotent). Call before building the model.
void install_counting_allocator();
bool counting_installed();
int64_t current_bytes();
int64_t peak_bytes();
// Starts a new peak window at the current usage.
void reset_peak();

// A nested peak window (the profiler's per-op peaks): begin_window() starts measuring from
// the current usage and returns a token; end_window(token) returns the window's peak and
// restores the enclosing peak, so step peaks stay exact.
int64_t begin_window();
int64_t end_window(int64_t token);

// This process's peak resident size (Linux's VmHWM; getrusage's maxrss where /proc is missing,
// which survives exec and so counts a launcher's memory). A rank `loom run` forked counts the
// launcher's library (file-backed) pages only once it touches them.
int64_t peak_resident_bytes();

}  // namespace loom::memory
