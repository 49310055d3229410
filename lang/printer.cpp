#include "lang/printer.h"

#include "lang/value.h"

namespace loom {
namespace {

int precedence(const ast::Expr& e) {
  switch (e.kind) {
    case ast::ExprKind::Binary:
      if (e.text == "or") return 1;
      if (e.text == "and") return 2;
      if (e.text == "*" || e.text == "/" || e.text == "//" || e.text == "%") return 6;
      if (e.text == "+" || e.text == "-") return 5;
      return 4;  // comparisons
    case ast::ExprKind::Unary: return e.text == "not" ? 3 : 7;
    case ast::ExprKind::Member:
    case ast::ExprKind::Call:
    case ast::ExprKind::Index: return 8;
    default: return 9;
  }
}

std::string escape_literal(const std::string& s) {
  std::string q = quote_string(s);
  return q.substr(1, q.size() - 2);
}

std::string expr_text(const ast::Expr& e);

std::string operand(const ast::Expr& child, int min_precedence) {
  std::string t = expr_text(child);
  return precedence(child) < min_precedence ? "(" + t + ")" : t;
}

std::string expr_text(const ast::Expr& e) {
  switch (e.kind) {
    case ast::ExprKind::Int: return std::to_string(e.int_value);
    case ast::ExprKind::Float: return format_float(e.float_value);
    case ast::ExprKind::Bytes: return e.text;
    case ast::ExprKind::Bool: return e.bool_value ? "true" : "false";
    case ast::ExprKind::None: return "none";
    case ast::ExprKind::Auto: return "auto";
    case ast::ExprKind::Name: return e.text;
    case ast::ExprKind::String: {
      std::string out = "\"";
      for (auto& p : e.parts) out += p.expr ? "{" + expr_text(*p.expr) + "}" : escape_literal(p.text);
      return out + "\"";
    }
    case ast::ExprKind::List: {
      std::string out = "[";
      for (size_t i = 0; i < e.operands.size(); ++i) out += (i ? ", " : "") + expr_text(*e.operands[i]);
      return out + "]";
    }
    case ast::ExprKind::Member: return operand(*e.operands[0], 8) + "." + e.text;
    case ast::ExprKind::Index: return operand(*e.operands[0], 8) + "[" + expr_text(*e.operands[1]) + "]";
    case ast::ExprKind::Call: {
      std::string out = operand(*e.operands[0], 8) + "(";
      for (size_t i = 0; i < e.args.size(); ++i)
        out += (i ? ", " : "") + (e.args[i].name.empty() ? "" : e.args[i].name + "=") + expr_text(*e.args[i].value);
      return out + ")";
    }
    case ast::ExprKind::Unary: {
      int p = precedence(e);
      return e.text == "not" ? "not " + operand(*e.operands[0], p) : "-" + operand(*e.operands[0], p);
    }
    case ast::ExprKind::Binary: {
      int p = precedence(e);
      // Left-associative: the right operand needs parentheses at equal precedence.
      return operand(*e.operands[0], p) + " " + e.text + " " + operand(*e.operands[1], p + 1);
    }
  }
  return "";
}

void format_block(const std::vector<ast::StmtPtr>& stmts, const std::vector<std::string>& end_comments, int indent,
                  std::string& out);

void format_stmt(const ast::Stmt& s, int indent, std::string& out) {
  std::string pad(indent * 4, ' ');
  for (auto& c : s.leading_comments) out += pad + c + "\n";
  out += pad;
  switch (s.kind) {
    case ast::StmtKind::Import: out += "import " + quote_string(s.name); break;
    case ast::StmtKind::Let: out += "let " + s.name + " = " + expr_text(*s.expr); break;
    case ast::StmtKind::Assign: out += s.name + " = " + expr_text(*s.expr); break;
    case ast::StmtKind::Return: out += s.expr ? "return " + expr_text(*s.expr) : "return"; break;
    case ast::StmtKind::Expr: out += expr_text(*s.expr); break;
    case ast::StmtKind::For:
      out += "for " + s.name + " in " + expr_text(*s.expr) + " {\n";
      format_block(s.body, s.body_end_comments, indent + 1, out);
      out += pad + "}";
      break;
    case ast::StmtKind::Def: {
      out += "def " + s.name + "(";
      for (size_t i = 0; i < s.params.size(); ++i) out += (i ? ", " : "") + s.params[i];
      out += ") {\n";
      format_block(s.body, s.body_end_comments, indent + 1, out);
      out += pad + "}";
      break;
    }
    case ast::StmtKind::If: {
      const ast::Stmt* clause = &s;
      while (true) {
        out += "if " + expr_text(*clause->expr) + " {\n";
        format_block(clause->body, clause->body_end_comments, indent + 1, out);
        out += pad + "}";
        if (!clause->has_else) break;
        if (clause->else_body.size() == 1 && clause->else_body[0]->kind == ast::StmtKind::If &&
            clause->else_body[0]->leading_comments.empty()) {
          out += " else ";
          clause = clause->else_body[0].get();
          continue;
        }
        out += " else {\n";
        format_block(clause->else_body, clause->else_end_comments, indent + 1, out);
        out += pad + "}";
        break;
      }
      break;
    }
  }
  if (!s.trailing_comment.empty()) out += "  " + s.trailing_comment;
  out += "\n";
}

void format_block(const std::vector<ast::StmtPtr>& stmts, const std::vector<std::string>& end_comments, int indent,
                  std::string& out) {
  int prev_end = -1;
  for (auto& s : stmts) {
    // Keep one blank line where the source had at least one.
    int first_line = s->range.begin.line - static_cast<int>(s->leading_comments.size());
    if (prev_end >= 0 && first_line - prev_end > 1) out += "\n";
    format_stmt(*s, indent, out);
    prev_end = s->range.end.line;
  }
  for (auto& c : end_comments) out += std::string(indent * 4, ' ') + c + "\n";
}

std::string range_text(const SourceRange& r) {
  return "[" + std::to_string(r.begin.line) + ":" + std::to_string(r.begin.column) + "-" + std::to_string(r.end.line) + ":" +
         std::to_string(r.end.column) + "]";
}

const char* expr_kind_name(ast::ExprKind k) {
  static const char* names[] = {"Int", "Float", "Bytes", "String", "Bool", "None", "Auto",
                                "Name", "List", "Member", "Call", "Index", "Unary", "Binary"};
  return names[static_cast<int>(k)];
}

void dump_expr(const ast::Expr& e, int depth, const std::string& label, std::string& out) {
  out += std::string(depth * 2, ' ') + label + expr_kind_name(e.kind);
  switch (e.kind) {
    case ast::ExprKind::Int: out += " " + std::to_string(e.int_value); break;
    case ast::ExprKind::Float: out += " " + format_float(e.float_value); break;
    case ast::ExprKind::Bytes: out += " " + e.text + " = " + std::to_string(e.int_value); break;
    case ast::ExprKind::Bool: out += e.bool_value ? " true" : " false"; break;
    case ast::ExprKind::Name:
    case ast::ExprKind::Member:
    case ast::ExprKind::Unary:
    case ast::ExprKind::Binary: out += " " + e.text; break;
    default: break;
  }
  out += " " + range_text(e.range) + "\n";
  for (auto& p : e.parts) {
    if (p.expr) dump_expr(*p.expr, depth + 1, "interp: ", out);
    else out += std::string((depth + 1) * 2, ' ') + "text " + quote_string(p.text) + "\n";
  }
  for (auto& o : e.operands) dump_expr(*o, depth + 1, "", out);
  for (auto& a : e.args) dump_expr(*a.value, depth + 1, a.name.empty() ? "arg: " : a.name + "= ", out);
}

const char* stmt_kind_name(ast::StmtKind k) {
  static const char* names[] = {"Import", "Let", "Assign", "If", "For", "Def", "Return", "Expr"};
  return names[static_cast<int>(k)];
}

void dump_stmts(const std::vector<ast::StmtPtr>& stmts, int depth, std::string& out) {
  for (auto& s : stmts) {
    out += std::string(depth * 2, ' ') + stmt_kind_name(s->kind);
    if (!s->name.empty()) out += " " + s->name;
    for (auto& p : s->params) out += " " + p;
    out += " " + range_text(s->range) + "\n";
    if (s->expr) dump_expr(*s->expr, depth + 1, "", out);
    if (!s->body.empty()) dump_stmts(s->body, depth + 1, out);
    if (s->has_else) {
      out += std::string((depth + 1) * 2, ' ') + "else\n";
      dump_stmts(s->else_body, depth + 2, out);
    }
  }
}

}  // namespace

std::string format_expr(const ast::Expr& e) { return expr_text(e); }

std::string format_program(const ast::Program& program) {
  std::string out;
  format_block(program.stmts, program.trailing_comments, 0, out);
  return out;
}

std::string dump_ast(const ast::Program& program) {
  std::string out;
  dump_stmts(program.stmts, 0, out);
  return out;
}

}  // namespace loom
