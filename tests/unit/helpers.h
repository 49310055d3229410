// Shared helpers of the language-core tests: fixture module trees and one-call evaluation.
#pragma once

#include <doctest/doctest.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "lang/interpreter.h"
#include "lang/module_tree.h"
#include "lang/schedule.h"

namespace loom::testing {

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

inline std::string source_path(const std::string& relative) { return std::string(LOOM_SOURCE_DIR) + "/" + relative; }

// A reference model's tree from tests/golden/trees (written by `loom tree --json`;
// tests/models checks they match the LibTorch models).
inline std::shared_ptr<const ModuleTree> fixture_tree(const std::string& model) {
  std::string file = model;
  for (char& c : file)
    if (c == ':') c = '_';
  return std::make_shared<const ModuleTree>(module_tree_from_json(read_file(source_path("tests/golden/trees/" + file + ".json"))));
}

// Evaluates schedule text against a model; the returned schedule holds the trace.
struct Evaluation {
  SourceManager sources;
  std::unique_ptr<Schedule> schedule;
  std::string printed;
};

inline std::unique_ptr<Evaluation> evaluate(const std::string& text, const std::string& model = "gpt2",
                                            ScheduleContext ctx = {}, const std::string& name = "test.sched") {
  auto e = std::make_unique<Evaluation>();
  e->schedule = std::make_unique<Schedule>(fixture_tree(model), ctx);
  std::ostringstream out;
  InterpreterOptions opts;
  opts.stdlib_dir = LOOM_STDLIB_DIR;
  opts.print_to = &out;
  Interpreter interp(*e->schedule, e->sources, opts);
  interp.run_source(name, text);
  e->printed = out.str();
  return e;
}

// The message of the UserError that evaluating `text` raises ("" if none).
inline std::string error_of(const std::string& text, const std::string& model = "gpt2", ScheduleContext ctx = {}) {
  try {
    evaluate(text, model, ctx);
  } catch (const UserError& e) {
    return e.diagnostic().range.to_string() + ": " + e.diagnostic().message;
  }
  return "";
}

// The message of the UserError `call` raises, whose hint must be `hint`; "accepted" if none.
template <class Call>
std::string refusal_of(Call&& call, const std::string& hint) {
  try {
    call();
  } catch (const UserError& e) {
    CHECK(e.diagnostic().hint == hint);
    return e.diagnostic().message;
  }
  return "accepted";
}

}  // namespace loom::testing
