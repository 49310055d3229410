// The reference models: published sizes, HuggingFace names, trees, interception, training and saving.
#include "doctest_torch.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "backend/exec/activation_checkpoint.h"
#include "backend/instrument/unpack_timer.h"
#include "backend/ir/verifier.h"
#include "backend/instrument/model_trace.h"
#include "backend/lower/lower_schedule.h"
#include "backend/lower/lower_step.h"
#include "lang/interpreter.h"
#include "lang/schedule.h"
#include "lang/trace.h"
#include "lang/diagnostics.h"
#include "models/bert.h"
#include "models/gpt.h"
#include "models/llama.h"
#include "models/nn/memory_efficient_attention.h"
#include "models/nn/module.h"
#include "models/zoo.h"
#include "models/zoo_torch.h"

using namespace loom;

TEST_CASE("parameter counts match the published sizes within 1%") {
  for (auto& m : model_catalog()) {
    if (m.published_params == 0) continue;
    CAPTURE(m.name);
    int64_t count = module_tree_of(m.name)->parameter_count();
    double rel = std::abs(static_cast<double>(count - m.published_params)) / static_cast<double>(m.published_params);
    CHECK(rel < 0.01);
  }
  CHECK(module_tree_of("gpt2")->parameter_count() == 124'439'808);  // HF gpt2, tied head counted once
}

TEST_CASE("module names follow the HuggingFace conventions") {
  auto gpt = module_tree_of("gpt2");
  for (const char* p : {"wte", "wpe", "h.0.attn.c_attn", "h.11.mlp.c_fc", "h.3.ln_2", "ln_f", "lm_head"}) CHECK(gpt->find(p) >= 0);
  CHECK(gpt->node(gpt->find("h")).type == "ModuleList");
  auto llama = module_tree_of("llama3-70b");
  for (const char* p : {"embed_tokens", "layers.79.self_attn.k_proj", "layers.0.mlp.gate_proj", "layers.0.input_layernorm", "norm"})
    CHECK(llama->find(p) >= 0);
  // Grouped-query attention: 8 kv heads of 128 -> k_proj is (1024, 8192).
  CHECK((llama->node(llama->find("layers.0.self_attn.k_proj")).params[0].shape == std::vector<int64_t>{1024, 8192}));
  auto bert = module_tree_of("bert-large");
  for (const char* p : {"bert.embeddings.word_embeddings", "bert.encoder.layer.23.attention.self.query",
                        "bert.encoder.layer.0.output.LayerNorm", "cls.predictions.decoder"})
    CHECK(bert->find(p) >= 0);
  auto moe = module_tree_of("mixtral-8x7b");
  for (const char* p : {"layers.31.block_sparse_moe.gate", "layers.0.block_sparse_moe.experts.7.w3"}) CHECK(moe->find(p) >= 0);
}

TEST_CASE("tied weights are marked and counted once") {
  auto gpt = module_tree_of("gpt:tiny");
  const ModuleNode& head = gpt->node(gpt->find("lm_head"));
  REQUIRE(head.params.size() == 1);
  CHECK(head.params[0].tied_to == "wte.weight");
  auto bert = module_tree_of("bert:tiny");
  CHECK(bert->node(bert->find("cls.predictions.decoder")).params[0].tied_to == "bert.embeddings.word_embeddings.weight");
}

TEST_CASE("the core tests' tree fixtures are what the models produce") {
  for (const char* name : {"gpt2", "gpt:tiny", "llama-13b"}) {
    CAPTURE(name);
    std::string file = name;
    for (char& c : file)
      if (c == ':') c = '_';
    std::ifstream in(std::string(LOOM_SOURCE_DIR) + "/tests/golden/trees/" + file + ".json");
    std::stringstream buf;
    buf << in.rdbuf();
    CHECK(module_tree_to_json(*module_tree_of(name)) + "\n" == buf.str());
  }
}

TEST_CASE("every tiny model runs forward and backward with finite values") {
  for (std::string name : {"gpt:tiny", "llama:tiny", "bert:tiny", "mixtral:tiny"}) {
    CAPTURE(name);
    torch::manual_seed(0);
    BuiltModel m = build_model(name);
    torch::Tensor ids = torch::randint(m.vocab_size, {2, 16}, torch::kLong);
    torch::Tensor logits = m.forward(ids);
    CHECK(logits.sizes() == torch::IntArrayRef({2, 16, m.vocab_size}));
    // Next-token targets: with a tied head, predicting the input token itself would be easier than chance.
    torch::Tensor loss = torch::cross_entropy_loss(logits.narrow(1, 0, 15).reshape({-1, m.vocab_size}),
                                                   ids.narrow(1, 1, 15).reshape({-1}));
    loss.backward();
    CHECK(std::isfinite(loss.item<double>()));
    CHECK(std::abs(loss.item<double>() - std::log(static_cast<double>(m.vocab_size))) < 1.0);  // near uniform at init
    for (auto& p : m.module->named_parameters()) {
      CAPTURE(p.key());
      REQUIRE(p.value().grad().defined());
      CHECK(torch::isfinite(p.value().grad()).all().item<bool>());
    }
  }
}

TEST_CASE("a few optimizer steps on one batch lower the loss (the models are trainable)") {
  torch::manual_seed(0);
  BuiltModel m = build_model("gpt:tiny");
  torch::Tensor ids = torch::randint(m.vocab_size, {4, 32}, torch::kLong);
  torch::optim::AdamW opt(m.module->parameters(), torch::optim::AdamWOptions(3e-3));
  auto loss_of = [&] {
    torch::Tensor logits = m.forward(ids.narrow(1, 0, 31));
    return torch::cross_entropy_loss(logits.reshape({-1, m.vocab_size}), ids.narrow(1, 1, 31).reshape({-1}));
  };
  double first = loss_of().item<double>();
  for (int i = 0; i < 20; ++i) {
    opt.zero_grad();
    torch::Tensor loss = loss_of();
    loss.backward();
    opt.step();
  }
  CHECK(loss_of().item<double>() < first - 0.5);
}

namespace {
// Records the type of every module call, and optionally scales one module's output.
struct Recorder : nn::CallInterceptor {
  std::vector<std::string> calls;
  std::string scale_type;
  torch::Tensor intercept(torch::nn::Module& m, const std::vector<torch::Tensor>& in, const nn::Forward& f) override {
    calls.push_back(m.name());
    torch::Tensor out = f(in);
    return m.name() == scale_type ? out * 0 : out;
  }
};
}  // namespace

TEST_CASE("every module call goes through the interception point") {
  torch::manual_seed(0);
  BuiltModel m = build_model("gpt:tiny");
  torch::Tensor ids = torch::randint(m.vocab_size, {1, 8}, torch::kLong);
  torch::Tensor plain = m.forward(ids);
  Recorder rec;
  nn::set_call_interceptor(&rec);
  torch::Tensor seen = m.forward(ids);
  nn::set_call_interceptor(nullptr);
  // Root, wte, wpe, drop, 4 blocks x (block, ln_1, attn, c_attn, c_proj, resid_dropout, ln_2, mlp, c_fc, act, c_proj, dropout), ln_f, lm_head.
  CHECK(rec.calls.size() == 1 + 3 + 4 * 12 + 2);
  CHECK(rec.calls.front() == "GPT2Model");
  CHECK(torch::equal(plain, seen));
  // An interceptor changes what a module computes: zeroing every MLP changes the logits.
  Recorder zero;
  zero.scale_type = "GPT2MLP";
  nn::set_call_interceptor(&zero);
  torch::Tensor changed = m.forward(ids);
  nn::set_call_interceptor(nullptr);
  CHECK(!torch::allclose(plain, changed));
}

TEST_CASE("a checkpointed module's recomputation goes through the forward's interceptor, on whatever thread autograd runs it") {
  // On CUDA autograd runs the backward on the device's own thread, where the training thread's
  // interceptor (the sharded executor, tensor parallelism, the profiler) is not installed; a
  // backward called from another thread does the same on CPU.
  torch::manual_seed(0);
  BuiltModel m = build_model("gpt:tiny");
  torch::Tensor ids = torch::randint(m.vocab_size, {1, 8}, torch::kLong);
  struct Checkpointing : Recorder {
    torch::Tensor intercept(torch::nn::Module& module, const std::vector<torch::Tensor>& in, const nn::Forward& f) override {
      calls.push_back(module.name());
      return module.name() == "GPT2Block" ? checkpointed_call(f, in) : f(in);
    }
  } rec;
  nn::set_call_interceptor(&rec);
  torch::Tensor loss = m.forward(ids).sum();
  nn::set_call_interceptor(nullptr);
  auto count = [&](const std::string& type) { return std::count(rec.calls.begin(), rec.calls.end(), type); };
  REQUIRE(count("GPT2MLP") == 4);
  nn::CallInterceptor* left_on_backward_thread = &rec;
  std::thread([&] {
    loss.backward();
    left_on_backward_thread = nn::call_interceptor();
  }).join();
  CHECK(count("GPT2MLP") == 8);  // each block's MLP again, in its recomputation
  CHECK(left_on_backward_thread == nullptr);  // the recomputation's thread had its own hooks put back
}

TEST_CASE("the waits' unpacking is counted for its thread, and for all threads for a window over the step") {
  // An op excludes its own thread's unpacking; the profile's window over a step counts every
  // thread's, since on a GPU the backward's waits unpack on autograd's thread.
  int64_t mine = instrument::unpacked_bytes(), all = instrument::unpacked_bytes_all_threads();
  std::thread([] { instrument::UnpackTimer unpacking(1000); }).join();
  CHECK(instrument::unpacked_bytes() == mine);
  CHECK(instrument::unpacked_bytes_all_threads() == all + 1000);
}

TEST_CASE("Loom modules are ordinary torch modules: saved and loaded with torch::save/load") {
  torch::manual_seed(1);
  models::GPT2Model a(models::GPTConfig{256, 64, 32, 2, 2, 0.0});
  torch::manual_seed(2);
  models::GPT2Model b(models::GPTConfig{256, 64, 32, 2, 2, 0.0});
  std::stringstream stream;
  torch::save(a, stream);
  torch::load(b, stream);
  torch::Tensor ids = torch::randint(256, {1, 8}, torch::kLong);
  CHECK(torch::equal(a(ids), b(ids)));
}

namespace {

// The output and every gradient (the input's, then each parameter's) of one forward and backward
// of `attention` on `x`, with `kernel`.
template <class Attention>
std::vector<torch::Tensor> attention_results(Attention& attention, const torch::Tensor& x, nn::AttentionKernel kernel) {
  attention.attention_kernel = kernel;
  for (auto& p : attention.parameters()) p.mutable_grad() = torch::Tensor();
  torch::Tensor input = x.clone().requires_grad_(true);
  torch::Tensor y = attention.forward(input);
  (y * torch::linspace(-1, 1, y.numel()).view(y.sizes())).sum().backward();
  std::vector<torch::Tensor> out{y.detach(), input.grad()};
  for (auto& p : attention.parameters()) out.push_back(p.grad());
  return out;
}

template <class Attention>
void check_kernels_agree(Attention& attention, const torch::Tensor& x, std::vector<nn::AttentionKernel> kernels) {
  std::vector<torch::Tensor> eager = attention_results(attention, x, nn::AttentionKernel::Eager);
  for (nn::AttentionKernel kernel : kernels) {
    CAPTURE(static_cast<int>(kernel));
    std::vector<torch::Tensor> other = attention_results(attention, x, kernel);
    REQUIRE(other.size() == eager.size());
    for (size_t i = 0; i < eager.size(); ++i) {
      CAPTURE(i);
      CHECK(torch::allclose(other[i], eager[i], 1e-4, 1e-6));
    }
  }
}

}  // namespace

// 300 tokens: the memory-efficient kernel works on two blocks of query rows (256 and 44).
TEST_CASE("every attention kernel replace() can choose computes the eager attention's output and gradients") {
  torch::manual_seed(0);
  torch::Tensor x = torch::randn({2, 300, 32});
  models::GPT2AttentionImpl gpt(models::GPTConfig{256, 512, 32, 1, 4, 0.0});
  check_kernels_agree(gpt, x, {nn::AttentionKernel::HeadChunks, nn::AttentionKernel::MemoryEfficient});
  models::LlamaConfig lc;
  lc.hidden_size = 32, lc.num_heads = 4, lc.num_kv_heads = 2;  // grouped-query attention
  models::LlamaAttentionImpl llama(lc);
  check_kernels_agree(llama, x, {nn::AttentionKernel::MemoryEfficient});
  models::BertConfig bc;
  bc.hidden_size = 32, bc.num_heads = 4;
  models::BertSelfAttentionImpl bert(bc);  // not causal
  check_kernels_agree(bert, x, {nn::AttentionKernel::MemoryEfficient});
}

// The kernel alone: in fp64 it agrees with the eager attention to rounding; in bf16 (scores and
// the sums over query blocks kept in fp32) with the fp32 eager attention to bf16's precision.
TEST_CASE("the memory-efficient kernel in fp64 and in bf16, against the eager attention") {
  torch::manual_seed(0);
  auto results = [](torch::Tensor q, torch::Tensor k, torch::Tensor v, bool efficient) {
    for (torch::Tensor* t : {&q, &k, &v}) *t = t->detach().clone().requires_grad_(true);
    torch::Tensor y = efficient ? nn::memory_efficient_attention(q, k, v, true) : nn::scaled_dot_product_attention(q, k, v, true, 0, false);
    (y.to(torch::kDouble) * torch::linspace(-1, 1, y.numel(), torch::kDouble).view(y.sizes())).sum().backward();
    return std::vector<torch::Tensor>{y.detach().to(torch::kDouble), q.grad().to(torch::kDouble), k.grad().to(torch::kDouble),
                                      v.grad().to(torch::kDouble)};
  };
  torch::Tensor q = torch::randn({1, 2, 300, 16}, torch::kDouble), k = torch::randn_like(q), v = torch::randn_like(q);
  std::vector<torch::Tensor> exact = results(q, k, v, false), fp64 = results(q, k, v, true);
  std::vector<torch::Tensor> bf16 = results(q.to(torch::kBFloat16), k.to(torch::kBFloat16), v.to(torch::kBFloat16), true);
  for (size_t i = 0; i < exact.size(); ++i) {
    CAPTURE(i);
    CHECK(torch::allclose(fp64[i], exact[i], 1e-10, 1e-12));
    double scale = exact[i].abs().max().item<double>();
    CHECK((bf16[i] - exact[i]).abs().max().item<double>() < 0.03 * scale);
  }
}

TEST_CASE("the memory-efficient attention refuses attention dropout in training, saying what to do") {
  models::GPT2AttentionImpl gpt(models::GPTConfig{256, 64, 32, 1, 4, 0.1});
  gpt.attention_kernel = nn::AttentionKernel::MemoryEfficient;
  gpt.eval();
  CHECK(gpt.forward(torch::randn({1, 8, 32})).sizes() == torch::IntArrayRef({1, 8, 32}));  // no dropout in eval
  gpt.train();
  try {
    gpt.forward(torch::randn({1, 8, 32}));
    FAIL("expected a UserError");
  } catch (const UserError& e) {
    CHECK(e.diagnostic().message ==
          "replace(\"memory_efficient_attention\") applies no attention dropout, and this model drops attention probabilities with p = 0.1");
    CHECK(e.diagnostic().hint == "keep the eager attention for this model, or build it with attention dropout 0");
  }
}

TEST_CASE("a schedule over a model built in C++: extract the tree, use the fluent API") {
  BuiltModel m = build_model("llama:tiny");
  auto tree = std::make_shared<const ModuleTree>(extract_module_tree(*m.module, "llama:tiny"));
  Schedule sch(tree, {4, 0});
  sch.fsdp();
  sch["layers.0"].prefetch();
  sch["layers.*.mlp"].bucket().checkpoint();
  CHECK(sch.trace().size() == 1 + 1 + 2 * 4);
  CHECK(trace_to_sched(sch).find("sch[\"layers.3.mlp\"].checkpoint()") != std::string::npos);
}

TEST_CASE("every reference model traces on the meta device and lowers to a verified step under ZeRO-3") {
  for (const char* name : {"gpt:tiny", "gpt2", "llama3-70b", "bert-large", "mixtral-8x7b"}) {
    CAPTURE(name);
    ir::OpTrace trace = trace_model(name);
    REQUIRE(!trace.forward.empty());
    Schedule sch(module_tree_of(name), {8, 0});
    sch.fsdp();
    ir::Program program = lower_step(lower_schedule(sch), trace, nullptr, {});
    CHECK(ir::verify_complete(program) == "");
    // Planning twice (as two ranks would) gives the same collectives.
    CHECK(ir::compare_collectives(program, lower_step(lower_schedule(sch), trace_model(name), nullptr, {})) == "");
    // Every unique parameter of the model is used by some op.
    CHECK(static_cast<int64_t>(trace.params.size()) > 0);
    int64_t traced = 0;
    for (auto& p : trace.params) traced += p.numel;
    CHECK(traced == module_tree_of(name)->parameter_count());  // on meta, every expert runs
  }
  // The tied head uses the embedding's tensor, under the embedding's name.
  ir::OpTrace gpt = trace_model("gpt:tiny");
  CHECK(gpt.forward.back().module == "lm_head");
  CHECK(gpt.forward.back().params == std::vector<std::string>{"wte.weight"});
}

TEST_CASE("every standard schedule fits every reference model family") {
  // blocks() finds each family's repeated blocks whatever their name; the runtime plan accepts them.
  const std::pair<const char*, const char*> families[] = {
      {"gpt:tiny", "h"}, {"llama:tiny", "layers"}, {"bert:tiny", "bert.encoder.layer"}, {"mixtral:tiny", "layers"}};
  for (const auto& entry : std::filesystem::directory_iterator(std::string(LOOM_SOURCE_DIR) + "/stdlib_schedules")) {
    for (auto [model, blocks] : families) {
      for (int world : {1, 2, 4}) {
        CAPTURE(entry.path().string());
        CAPTURE(model);
        CAPTURE(world);
        Schedule sch(module_tree_of(model), ScheduleContext{world, 0});
        SourceManager sources;
        InterpreterOptions options;
        options.print_to = nullptr;
        Interpreter(sch, sources, options).run_file(entry.path().string());
        CHECK_NOTHROW(lower_schedule(sch));
        int list = sch.tree().find(blocks);
        REQUIRE(list >= 0);
        for (const Directive& d : sch.trace())
          if (d.primitive == "checkpoint" || d.primitive == "prefetch")
            CHECK(sch.tree().node(sch.tree().find(d.target)).parent == list);
        if (entry.path().filename() == "checkpoint_all.sched")
          CHECK(sch.trace().size() == sch.tree().node(list).children.size());
      }
    }
  }
}

TEST_CASE("a model built without memory materializes only what a rank wants, with the values of the whole build") {
  torch::manual_seed(1234);
  BuiltModel whole = build_model("llama:tiny");
  BuiltModel part = build_model_without_memory("llama:tiny");
  for (auto& p : part.module->named_parameters()) CHECK(p.value().numel() == 0);  // placeholders
  // One layer, alone, and the rotary buffers: the values every rank would compute for them.
  auto wanted = [](const std::string& name) { return name.rfind("layers.1.", 0) == 0; };
  nn::materialize(*part.module, 1234, wanted);
  auto all = whole.module->named_parameters();
  int materialized = 0;
  for (auto& p : part.module->named_parameters()) {
    if (!wanted(p.key())) {
      CHECK(p.value().numel() == 0);
      continue;
    }
    ++materialized;
    CHECK(torch::equal(p.value(), all[p.key()]));
  }
  CHECK(materialized > 0);
  for (auto& b : part.module->named_buffers())
    if (wanted(b.key())) CHECK(torch::equal(b.value(), whole.module->named_buffers()[b.key()]));
  // Each tensor has its own generator: different names, different values; another seed, others.
  CHECK(!torch::equal(all["layers.0.mlp.up_proj.weight"], all["layers.1.mlp.up_proj.weight"]));
  torch::manual_seed(99);
  CHECK(!torch::equal(build_model("llama:tiny").module->named_parameters()["layers.1.mlp.up_proj.weight"],
                      all["layers.1.mlp.up_proj.weight"]));
  // A tied weight materializes once, under its first name, and stays tied.
  BuiltModel gpt = build_model_without_memory("gpt:tiny");
  nn::materialize(*gpt.module, 7, [](const std::string&) { return true; });
  auto named = gpt.module->named_parameters();
  CHECK(named["wte.weight"].numel() > 0);
  CHECK(named["wte.weight"].unsafeGetTensorImpl() == named["lm_head.weight"].unsafeGetTensorImpl());
}

TEST_CASE("a model registered under a taken name is a UserError that says what to do") {
  auto tiny = [] { return build_model_without_memory("gpt:tiny"); };
  CHECK(register_model({"test:registered-once", "gpt:tiny under another name", 0}, tiny));
  CHECK(module_tree_of("test:registered-once")->parameter_count() == module_tree_of("gpt:tiny")->parameter_count());
  try {
    register_model({"test:registered-once", "again", 0}, tiny);
    FAIL("a second registration of a name was accepted");
  } catch (const UserError& e) {
    CHECK(render(e.diagnostic(), nullptr) ==
          "error: a model named 'test:registered-once' is registered twice\n  hint: register each model once, under its own name\n");
  }
  try {
    register_model({"gpt2", "mine", 0}, tiny);
    FAIL("a reference model's name was accepted");
  } catch (const UserError& e) {
    CHECK(render(e.diagnostic(), nullptr) == "error: a model named 'gpt2' is built in\n  hint: register yours under another name\n");
  }
}
