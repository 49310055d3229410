// libFuzzer target over the parser and interpreter: any input must either
// evaluate or raise a loom::UserError. A crash, a sanitizer report, an
// InternalError or any other exception is a bug. Built with -DLOOM_FUZZ=ON
// (clang); see docs/language.md "Fuzzing".
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "lang/interpreter.h"
#include "lang/schedule.h"

namespace {
std::shared_ptr<const loom::ModuleTree> gpt2_tree() {
  std::ifstream in(LOOM_SOURCE_DIR "/tests/golden/trees/gpt2.json");
  std::stringstream buf;
  buf << in.rdbuf();
  static auto tree = std::make_shared<const loom::ModuleTree>(loom::module_tree_from_json(buf.str()));
  return tree;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto tree = gpt2_tree();
  std::string text(reinterpret_cast<const char*>(data), size);
  loom::Schedule sch(tree, {8, 4});
  loom::SourceManager sources;
  std::ostringstream sink;
  loom::InterpreterOptions opts;
  opts.stdlib_dir = LOOM_SOURCE_DIR "/stdlib_schedules";
  opts.print_to = &sink;
  opts.max_range = 100000;  // keep each input fast; the limit itself is tested elsewhere
  try {
    loom::Interpreter(sch, sources, opts).run_source(LOOM_SOURCE_DIR "/tests/fuzz/input.sched", text);
  } catch (const loom::UserError& e) {
    // Expected for most inputs; rendering must not fail either.
    (void)loom::render(e.diagnostic(), &sources);
  }
  return 0;
}
