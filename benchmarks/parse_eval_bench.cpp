// Benchmark (not a test): parse and evaluate a generated 10,000-line schedule
// against llama3-70b's module tree (~1,100 modules). Target: under 200 ms.
// Prints the median of several runs for parse, evaluate and both.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <sstream>

#include "grammar/parse.h"
#include "lang/interpreter.h"
#include "models/zoo.h"

namespace {

// A schedule exercising every construct: lets, arithmetic, interpolation, ifs,
// function calls, exact and glob selections, and most primitives.
std::string generate(int lines) {
  std::ostringstream s;
  s << "# generated: " << lines << " lines\n";
  s << "sch.shard_states(params=8, grads=8, optim=64)\n";
  s << "def tag(i) {\n    return i % 80\n}\n";
  int written = 5;
  for (int k = 0; written < lines; ++k) {
    int layer = k % 80;
    switch (k % 6) {
      case 0: s << "let v" << k << " = " << k << " * 2 + tag(" << k << ")\n"; break;
      case 1: s << "sch[\"layers.{tag(" << k << ")}.mlp.gate_proj\"].compress(ratio=4, index_bits=1, sparsity=0.95)\n"; break;
      case 2: s << "sch[\"layers." << layer << "\"].prefetch(budget=64MiB)\n"; break;
      case 3: s << "if " << k << " % 3 == 0 { sch[\"layers." << layer << ".mlp\"].bucket() }\n"; break;
      case 4: s << "sch[\"layers." << layer << ".self_attn.*_proj\"].unshard(auto)\n"; break;
      case 5: s << "sch[\"layers." << layer << "\"].checkpoint()\n"; break;
    }
    ++written;
  }
  return s.str();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main() {
  using clock = std::chrono::steady_clock;
  auto ms = [](clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  auto tree = loom::module_tree_of("llama3-70b");
  std::string text = generate(10000);
  loom::SourceFile file{"generated.sched", text};
  std::vector<double> parse_ms, eval_ms, total_ms;
  size_t directives = 0;
  for (int run = 0; run < 7; ++run) {
    auto t0 = clock::now();
    auto program = loom::parse_program(file);
    auto t1 = clock::now();
    loom::Schedule sch(tree, {1024, 8});
    loom::SourceManager sources;
    std::ostringstream sink;
    loom::InterpreterOptions opts;
    opts.print_to = &sink;
    loom::Interpreter(sch, sources, opts).run_program(program);
    auto t2 = clock::now();
    parse_ms.push_back(ms(t1 - t0));
    eval_ms.push_back(ms(t2 - t1));
    total_ms.push_back(ms(t2 - t0));
    directives = sch.trace().size();
  }
  const char* allocator = dlsym(RTLD_DEFAULT, "tc_malloc") ? "tcmalloc" : "glibc malloc";
  std::cout << "parse+evaluate a 10,000-line schedule against llama3-70b (" << tree->size() << " modules, "
            << directives << " directives), allocator: " << allocator << "\n"
            << "  first run (cold process) " << total_ms.front() << " ms\n"
            << "  median of 7 runs:\n"
            << "  parse    " << median(parse_ms) << " ms\n"
            << "  evaluate " << median(eval_ms) << " ms\n"
            << "  total    " << median(total_ms) << " ms  (target < 200 ms: " << (median(total_ms) < 200 ? "met" : "NOT met")
            << ")\n";
  return 0;
}
