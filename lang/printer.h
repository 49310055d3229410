// Printing the AST: canonical .sched text (`loom fmt`) and a structural dump for golden tests.
#pragma once

#include <string>

#include "lang/ast.h"

namespace loom {

// The program in canonical form: 4-space indents, one space around binary
// operators, minimal parentheses, comments kept.
std::string format_program(const ast::Program& program);
std::string format_expr(const ast::Expr& expr);
// One node per line with kind, payload and [line:col-line:col] range.
std::string dump_ast(const ast::Program& program);

}  // namespace loom
