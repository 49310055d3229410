// Freeing a tensor's storage while the tensor itself lives on, and refilling it later: a
// gathered parameter between its release and its next gather (autograd's saved tensors keep
// their identity, ENVIRONMENT.md), an offloaded optimizer state between its offload and its
// reload, a collective's buffers at its wait while gloo's worker still holds the work. Through
// the storage's own allocator, so it works on any device and CPU memory stays counted
// (backend/instrument/memory_counter.h).
#pragma once

#include <torch/types.h>

namespace loom {

void free_storage(const torch::Tensor& t);
// Allocates the tensor's bytes again; the contents are undefined until written.
void refill_storage(const torch::Tensor& t);

}  // namespace loom
