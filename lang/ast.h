// Loom's own syntax tree for .sched files. Every node carries its SourceRange;
// no ANTLR type appears here (grammar/parse_tree_to_ast.cpp builds it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lang/source.h"

namespace loom::ast {

struct Expr;
struct Stmt;
using ExprPtr = std::shared_ptr<Expr>;
using StmtPtr = std::shared_ptr<Stmt>;

enum class ExprKind { Int, Float, Bytes, String, Bool, None, Auto, Name, List, Member, Call, Index, Unary, Binary };

// A piece of a string literal: literal text, or an interpolated `{expr}`.
struct StringPart {
  std::string text;  // the literal text (escapes resolved), when expr is null
  ExprPtr expr;
};

// One call argument: positional when `name` is empty.
struct Arg {
  std::string name;
  SourceRange name_range;
  ExprPtr value;
};

struct Expr {
  ExprKind kind;
  SourceRange range;
  int64_t int_value = 0;     // Int; Bytes (the byte count)
  double float_value = 0;    // Float
  bool bool_value = false;   // Bool
  std::string text;          // Name, Member: the identifier; Unary/Binary: the operator; Bytes: the literal
  std::vector<StringPart> parts;  // String
  // Operands: List items; Member {object}; Index {object, index}; Unary {operand};
  // Binary {lhs, rhs}; Call {callee}.
  std::vector<ExprPtr> operands;
  std::vector<Arg> args;     // Call
};

enum class StmtKind { Import, Let, Assign, If, For, Def, Return, Expr };

struct Stmt {
  StmtKind kind;
  SourceRange range;
  std::string name;                 // Let/Assign/For: variable; Def: function; Import: path
  SourceRange name_range;
  std::vector<std::string> params;  // Def
  ExprPtr expr;                     // Let/Assign value, If condition, For iterable, Return value, Expr
  std::vector<StmtPtr> body;        // If (then), For, Def
  std::vector<StmtPtr> else_body;   // If; an `else if` is one If statement here
  bool has_else = false;
  std::vector<std::string> leading_comments;  // comment lines just above the statement
  std::string trailing_comment;               // a comment on the statement's last line
  std::vector<std::string> body_end_comments;  // comments before the body's closing '}'
  std::vector<std::string> else_end_comments;  // comments before the else block's closing '}'
};

// A parsed file.
struct Program {
  std::string file;
  std::vector<StmtPtr> stmts;
  std::vector<std::string> trailing_comments;  // comments after the last statement
};

}  // namespace loom::ast
