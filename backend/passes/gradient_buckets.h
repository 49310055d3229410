// Data-parallel gradient buckets, as PyTorch DDP forms them: the gradients, in the order
// backward completes them, fill buckets of at most `bucket_bytes` (a larger one alone); a
// declared group (bucket()) is a bucket of its own, whatever its size. Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace loom {

// `bytes` and `declared` (the bucket() group of each gradient, -1 for none) are in completion
// order. Returns the buckets as indices into them, each in completion order, the buckets in the
// order they are created (which is the order they are launched).
std::vector<std::vector<size_t>> plan_gradient_buckets(const std::vector<int64_t>& bytes, const std::vector<int>& declared,
                                                       int64_t bucket_bytes);

// The index in `modules` (bucket() targets, module paths) of the first that the parameter
// `param` (a full name) lies below, or -1.
int bucket_module_of(const std::string& param, const std::vector<std::string>& modules);

}  // namespace loom
