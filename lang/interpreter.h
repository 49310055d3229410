// The .sched interpreter: evaluates a parsed program against a Schedule through
// the same fluent API that C++ users call.
#pragma once

#include <deque>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "lang/ast.h"
#include "lang/schedule.h"
#include "lang/source.h"

namespace loom {

// A `def` function: its statement, kept alive with the program that holds it.
struct FunctionValue {
  const ast::Stmt* def;
  std::shared_ptr<const ast::Program> program;
};

struct InterpreterOptions {
  std::string stdlib_dir;              // where `import "stdlib/x.sched"` looks after the importing file's folder
  std::ostream* print_to = &std::cout; // print(...) output; null: print() is silent
  int max_call_depth = 200;
  int64_t max_range = 10'000'000;
};

class Interpreter {
 public:
  Interpreter(Schedule& schedule, SourceManager& sources, InterpreterOptions options = {});

  // Reads, parses and evaluates a file. Throws UserError on any mistake in it.
  void run_file(const std::string& path);
  // Parses and evaluates text as if read from a file named `name`.
  void run_source(const std::string& name, const std::string& text);
  // Evaluates an already parsed program.
  void run_program(std::shared_ptr<const ast::Program> program);

 public:
  using Scope = std::unordered_map<std::string, Value>;

 private:
  enum class Flow { Normal, Return };
  struct Frame {
    std::vector<Scope> scopes;
  };

  Flow exec_block(const std::vector<ast::StmtPtr>& stmts, const std::shared_ptr<const ast::Program>& program);
  Flow exec(const ast::Stmt& s, const std::shared_ptr<const ast::Program>& program);
  void exec_assign(const ast::Stmt& s);
  Flow exec_for(const ast::Stmt& s, const std::shared_ptr<const ast::Program>& program);
  void run_import(const ast::Stmt& s);
  Value eval(const ast::Expr& e);
  Value eval_call(const ast::Expr& e);
  Value eval_binary(const ast::Expr& e);
  Value eval_index(const ast::Expr& e);
  Value eval_unary(const ast::Expr& e);
  Value call_builtin(const std::string& name, const ast::Expr& call, const std::vector<ArgValue>& args,
                     const std::vector<std::pair<std::string, ArgValue>>& kwargs);
  Value call_function(const FunctionValue& f, const ast::Expr& call, const std::vector<ArgValue>& args,
                      const std::vector<std::pair<std::string, ArgValue>>& kwargs);

  Value* lookup(const std::string& name);
  Value lookup_or_builtin(const ast::Expr& name_expr);
  void declare(const std::string& name, Value v, const SourceRange& where);
  std::string resolve_import(const std::string& path, const SourceRange& where) const;

  Schedule& schedule_;
  SourceManager& sources_;
  InterpreterOptions options_;
  Value sch_;
  std::deque<Frame> frames_;  // a deque: block scopes hold references across calls; frames_[0] is the top level; scopes[0] there holds the globals
  std::vector<std::string> import_stack_;
  std::set<std::string> imported_;
  Value return_value_;
};

// Truthiness used by if/and/or/not: false, 0, 0.0, "", [] and none are false.
bool truthy(const Value& v);

}  // namespace loom
