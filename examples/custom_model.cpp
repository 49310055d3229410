// Writing your own model for Loom, registering it, and getting the whole command line for it.
//
// A Loom model is an ordinary LibTorch module whose submodules are declared with
// LOOM_MODULE (or are loom::nn drop-ins): every call then passes through Loom,
// which is where a schedule acts. LOOM_REGISTER_MODEL names it for every command, and a main()
// that returns loom::cli::command_line(...) makes this program the loom command line with it:
//   ./custom_model check stdlib_schedules/zero3.sched --model tiny-lm --world 2
//   ./custom_model run stdlib_schedules/zero3.sched --model tiny-lm --nproc 2 --steps 10
// Without arguments it schedules the model from C++ and prints the trace. The test suite builds
// it in-tree and against the installed package (tests/install/install_test.sh), and runs both.
#include <iostream>

#include "cli/entry.h"
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

// 3. A language model takes token ids (B, T) and returns logits (B, T, vocab).
class TinyLMImpl : public torch::nn::Module {
 public:
  TinyLMImpl(int64_t vocab, int64_t width, int64_t depth) : torch::nn::Module("TinyLM") {
    embed = register_module("embed", loom::nn::Embedding(vocab, width));
    blocks = register_module("blocks", std::make_shared<loom::nn::List<ResidualMLP>>());
    for (int64_t i = 0; i < depth; ++i) blocks->push_back(ResidualMLP(width));
    head = register_module("head", loom::nn::Linear(width, vocab));
  }
  torch::Tensor forward(const torch::Tensor& ids) {
    torch::Tensor h = embed(ids);
    for (auto& b : *blocks) h = b(h);
    return head(h);
  }
  loom::nn::Embedding embed{nullptr};
  std::shared_ptr<loom::nn::List<ResidualMLP>> blocks;
  loom::nn::Linear head{nullptr};
};
LOOM_MODULE(TinyLM);

// 4. Register it: its name, a description, its vocabulary and longest sequence, how to build it.
LOOM_REGISTER_MODEL("tiny-lm", "examples/custom_model.cpp: four residual MLP blocks over byte embeddings", 256, 256,
                    TinyLM(256, 64, 4));

int main(int argc, char** argv) {
  // 5. With arguments, this program is the loom command line, tiny-lm among its models.
  if (argc > 1) return loom::cli::command_line(argc, argv);

  TinyLM net(256, 64, 4);
  // It is a normal LibTorch module: it trains without Loom.
  torch::Tensor logits = net(torch::randint(256, {2, 16}));
  logits.sum().backward();

  // Schedule it from C++: the tree Loom sees comes from the module itself.
  auto tree = std::make_shared<const loom::ModuleTree>(loom::extract_module_tree(*net.ptr(), "tiny-lm"));
  loom::Schedule sch(tree, {/*world=*/4, /*local_world=*/4});
  sch.shard_states(/*params=*/4, /*grads=*/4, /*optim=*/4);
  sch["blocks.*"].prefetch();
  sch["blocks.0"].checkpoint();
  std::cout << loom::trace_to_sched(sch);
  return sch.trace().size() == 6 ? 0 : 1;
}
