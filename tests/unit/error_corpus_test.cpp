// Runs tests/error/*.sched: each file states, inline, the run it is checked for
// ("# run: --model M --world N [--memory-limit BYTES] ..."), the error it must raise — from
// evaluation or from the whole-schedule rules (verifier/) —
// ("# expect-error: [FILE:]LINE:COL: message prefix") and optionally a hint fragment
// ("# expect-hint: text"). The message must start with the expected text.
#include <doctest/doctest.h>

#include <cctype>
#include <filesystem>

#include "helpers.h"
#include "lang/replacements.h"
#include "verifier/schedule_rules.h"

using namespace loom;
namespace fs = std::filesystem;

namespace {

struct Expectation {
  ScheduleContext ctx;
  std::string model = "gpt2";
  std::vector<std::pair<std::string, std::string>> sets;
  RuleOptions rules;
  std::string file;  // where the error points, when not the file itself (e.g. an import cycle)
  int line = 0, column = 0;
  std::string message, hint;
};

Expectation read_expectation(const std::string& text) {
  Expectation e;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# run:", 0) == 0) {
      std::istringstream args(line.substr(6));
      std::string flag, value;
      while (args >> flag >> value) {
        if (flag == "--model") e.model = value;
        else if (flag == "--world") e.ctx.world = std::stoi(value);
        else if (flag == "--local-world") e.ctx.local_world = std::stoi(value);
        else if (flag == "--memory-limit") e.rules.memory_limit = std::stoll(value);
        else if (flag == "--set") e.sets.push_back({value.substr(0, value.find('=')), value.substr(value.find('=') + 1)});
      }
    } else if (line.rfind("# expect-error: ", 0) == 0) {
      std::string rest = line.substr(16);
      if (!std::isdigit(static_cast<unsigned char>(rest[0]))) {
        e.file = rest.substr(0, rest.find(':'));
        rest = rest.substr(rest.find(':') + 1);
      }
      size_t colon1 = rest.find(':'), colon2 = rest.find(':', colon1 + 1);
      e.line = std::stoi(rest.substr(0, colon1));
      e.column = std::stoi(rest.substr(colon1 + 1, colon2 - colon1 - 1));
      e.message = rest.substr(colon2 + 2);
    } else if (line.rfind("# expect-hint: ", 0) == 0) {
      e.hint = line.substr(15);
    }
  }
  return e;
}

}  // namespace

TEST_CASE("every error test raises its stated error at its stated location") {
  ReplacementRegistry::global().add({"gpt2_attention_chunked", {"GPT2Attention"}, "test entry mirroring models/replacements.cpp"});
  ReplacementRegistry::global().add({"memory_efficient_attention", {"GPT2Attention", "LlamaAttention", "BertSelfAttention"},
                                     "test entry mirroring models/replacements.cpp"});
  std::vector<fs::path> files;
  for (auto& entry : fs::directory_iterator(testing::source_path("tests/error")))
    if (entry.path().extension() == ".sched") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 40);
  for (auto& path : files) {
    CAPTURE(path.filename().string());
    std::string text = testing::read_file(path.string());
    Expectation want = read_expectation(text);
    REQUIRE_MESSAGE(!want.message.empty(), "no '# expect-error:' line");
    Schedule sch(testing::fixture_tree(want.model), want.ctx);
    for (auto& [k, v] : want.sets) sch.knobs().set_override(k, v);
    SourceManager sources;
    std::ostringstream sink;
    InterpreterOptions opts;
    opts.stdlib_dir = LOOM_STDLIB_DIR;
    opts.print_to = &sink;
    std::optional<Diagnostic> got;
    try {
      Interpreter(sch, sources, opts).run_file(path.string());
      check_schedule_rules(sch, want.rules);
    } catch (const UserError& e) {
      got = e.diagnostic();
    }
    REQUIRE_MESSAGE(got.has_value(), "no error was raised");
    std::string want_file = want.file.empty() ? path.string() : (path.parent_path() / want.file).string();
    CHECK(fs::path(got->range.file).lexically_normal() == fs::path(want_file).lexically_normal());
    CHECK(got->range.begin.line == want.line);
    CHECK(got->range.begin.column == want.column);
    CHECK(got->message.substr(0, want.message.size()) == want.message);
    if (!want.hint.empty()) CHECK(got->hint.find(want.hint) != std::string::npos);
    CHECK(!got->hint.empty());
    // The rendered diagnostic quotes the line and underlines the span.
    std::string rendered = render(*got, &sources);
    CHECK(rendered.find(got->range.file + ":" + std::to_string(want.line) + ":" + std::to_string(want.column) + ": error: ") == 0);
    CHECK(rendered.find("^") != std::string::npos);
  }
}
