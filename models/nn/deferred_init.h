// Building a model without its memory. Inside a DeferredInit scope, new_parameter() and
// new_buffer() create empty placeholders and remember each tensor's shape and initialisation;
// materialize() later gives the tensors a rank wants their memory, each initialised from a
// generator seeded by the run's seed and the tensor's name. So a rank initialises only what it
// holds (a pipeline stage its own parameters), alone, and every rank, and every run with that
// seed, gets the same values whatever the schedule.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Generator.h>
#include <torch/nn/module.h>
#include <torch/types.h>

namespace loom::nn {

// How a tensor is filled: from `generator`, or the default one when it is nullopt.
using Init = std::function<void(torch::Tensor&, c10::optional<at::Generator>)>;

// While one lives on this thread, parameters and buffers are deferred placeholders.
class DeferredInit {
 public:
  DeferredInit();
  ~DeferredInit();

 private:
  bool previous_;
};
bool deferring();

// Remembers how to materialize `placeholder` (a zero-element tensor).
void defer(const torch::Tensor& placeholder, std::vector<int64_t> shape, Init init);

// Gives each deferred parameter and buffer of `root` whose (first) name `wanted` accepts its
// memory and values; the others stay zero-element placeholders.
void materialize(torch::nn::Module& root, uint64_t seed, const std::function<bool(const std::string&)>& wanted);

}  // namespace loom::nn
