// Writing your own model for Loom, and scheduling it from C++.
//
// A Loom model is an ordinary LibTorch module whose submodules are declared with
// LOOM_MODULE (or are loom::nn drop-ins): every call then passes through Loom,
// which is where a schedule acts. The test suite builds and runs this file.
#include <iostream>

#include "lang/schedule.h"
#include "lang/trace.h"
#include "models/nn/layers.h"
#include "models/zoo_torch.h"

// 1. Write the Impl class as for LibTorch, using loom::nn layers for submodules.
class ResidualMLPImpl : public torch::nn::Module {
 public:
  explicit ResidualMLPImpl(int64_t width) : torch::nn::Module("ResidualMLP") {
    norm = register_module("norm", loom::nn::LayerNorm(width));
    up = register_module("up", loom::nn::Linear(width, 4 * width));
    down = register_module("down", loom::nn::Linear(4 * width, width));
  }
  torch::Tensor forward(const torch::Tensor& x) { return x + down(torch::gelu(up(norm(x)))); }
  loom::nn::LayerNorm norm{nullptr};
  loom::nn::Linear up{nullptr}, down{nullptr};
};
// 2. Declare the holder with LOOM_MODULE instead of TORCH_MODULE.
LOOM_MODULE(ResidualMLP);

class TinyNetImpl : public torch::nn::Module {
 public:
  TinyNetImpl(int64_t width, int64_t depth) : torch::nn::Module("TinyNet") {
    blocks = register_module("blocks", std::make_shared<loom::nn::List<ResidualMLP>>());
    for (int64_t i = 0; i < depth; ++i) blocks->push_back(ResidualMLP(width));
    head = register_module("head", loom::nn::Linear(width, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = x;
    for (auto& b : *blocks) h = b(h);
    return head(h);
  }
  std::shared_ptr<loom::nn::List<ResidualMLP>> blocks;
  loom::nn::Linear head{nullptr};
};
LOOM_MODULE(TinyNet);

int main() {
  TinyNet net(64, 4);
  // It is a normal LibTorch module: it trains without Loom.
  torch::Tensor y = net(torch::randn({8, 64}));
  y.sum().backward();

  // 3. Schedule it: the tree Loom sees comes from the module itself.
  auto tree = std::make_shared<const loom::ModuleTree>(loom::extract_module_tree(*net.ptr(), "tiny-net"));
  loom::Schedule sch(tree, {/*world=*/4, /*local_world=*/4});
  sch.shard_states(/*params=*/4, /*grads=*/4, /*optim=*/4);
  sch["blocks.*"].prefetch();
  sch["blocks.0"].checkpoint();
  std::cout << loom::trace_to_sched(sch);
  return sch.trace().size() == 6 ? 0 : 1;
}
