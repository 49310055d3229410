// The one translation unit that sees ANTLR: runs the generated lexer and
// parser and converts the parse tree into loom::ast. ANTLR's console error
// listeners are removed; every problem becomes a located loom::UserError.
#include <algorithm>
#include <charconv>
#include <cmath>

#include "LoomLexer.h"
#include "LoomParser.h"
#include "antlr4-runtime.h"
#include "grammar/parse.h"
#include "lang/diagnostics.h"
#include "lang/value.h"

namespace loom {
namespace {

using loom_grammar::LoomLexer;
using loom_grammar::LoomParser;

constexpr int kMaxNesting = 100;      // brackets and unary operators
constexpr int kMaxExprDepth = 2000;   // left-deep operator chains

// Reports the first byte that is not valid UTF-8 (ANTLR would throw range_error).
void check_utf8(const SourceFile& file) {
  const std::string& s = file.text;
  int line = 1, column = 1;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 0x2;
    if (ok && len == 2) ok = c >= 0xC2;  // overlong
    if (ok && len == 3) {
      unsigned cp = ((c & 0xF) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
      ok = cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF);
    }
    if (ok && len == 4) {
      unsigned cp = ((c & 0x7) << 18) | ((s[i + 1] & 0x3F) << 12) | ((s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
      ok = cp >= 0x10000 && cp <= 0x10FFFF;
    }
    if (!ok) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", c);
      throw UserError(SourceRange{file.name, {line, column}, {line, column + 1}},
                      std::string("invalid UTF-8 byte ") + hex,
                      "save the file as UTF-8; schedules are UTF-8 text");
    }
    if (c == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
    i += len;
  }
}

// Converts ANTLR positions (0-based code-point column) to Loom ranges.
class Ranges {
 public:
  Ranges(std::string file, int line_offset, int column_offset)
      : file_(std::move(file)), line_offset_(line_offset), column_offset_(column_offset) {}

  SourcePos pos(size_t line, size_t column0) const {
    int l = static_cast<int>(line) + line_offset_;
    int c = static_cast<int>(column0) + 1 + (line == 1 ? column_offset_ : 0);
    return {l, c};
  }
  SourceRange of(const antlr4::Token* t) const {
    SourcePos b = pos(t->getLine(), t->getCharPositionInLine());
    int len = t->getType() == antlr4::Token::EOF ? 1 : static_cast<int>(t->getStopIndex() - t->getStartIndex() + 1);
    return {file_, b, {b.line, b.column + std::max(len, 1)}};
  }
  SourceRange of(antlr4::ParserRuleContext* ctx) const {
    SourceRange r = of(ctx->getStart());
    const antlr4::Token* stop = ctx->getStop();
    if (stop && stop->getTokenIndex() >= ctx->getStart()->getTokenIndex()) r.end = of(stop).end;
    return r;
  }
  SourceRange span(const SourceRange& a, const SourceRange& b) const { return {file_, a.begin, b.end}; }
  const std::string& file() const { return file_; }
  int column_offset() const { return column_offset_; }
  int line_offset() const { return line_offset_; }

 private:
  std::string file_;
  int line_offset_;
  int column_offset_;
};

std::string describe_token(const antlr4::Token* t) {
  switch (t->getType()) {
    case antlr4::Token::EOF: return "end of file";
    case LoomLexer::NEWLINE: return "end of line";
    case LoomLexer::NAME: return "name '" + t->getText() + "'";
    case LoomLexer::STRING: return "string " + t->getText();
    case LoomLexer::INT:
    case LoomLexer::FLOAT:
    case LoomLexer::BYTES: return "number " + t->getText();
    default: return "'" + t->getText() + "'";
  }
}

std::string describe_expected(const antlr4::misc::IntervalSet& set, const antlr4::dfa::Vocabulary& vocab) {
  std::vector<std::string> names;
  bool expression = false;
  for (size_t type : set.toList()) {
    if (type == LoomLexer::INT || type == LoomLexer::FLOAT || type == LoomLexer::STRING ||
        type == LoomLexer::BYTES || type == LoomLexer::NAME || type == LoomLexer::LBRACK) {
      expression = true;
      continue;
    }
    if (type == antlr4::Token::EOF) {
      names.push_back("end of file");
      continue;
    }
    if (type == LoomLexer::NEWLINE) {
      names.push_back("end of line");
      continue;
    }
    std::string literal = vocab.getLiteralName(type);
    if (literal.empty()) continue;
    if (type == LoomLexer::MINUS || type == LoomLexer::NOT || literal == "'true'" || literal == "'false'" ||
        literal == "'none'" || literal == "'auto'") {
      expression = true;
      continue;
    }
    names.push_back(literal);
  }
  if (expression) names.insert(names.begin(), "an expression");
  if (names.empty()) return "";
  if (names.size() > 6) names.resize(6), names.push_back("...");
  std::string out = "expected ";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? (i + 1 == names.size() ? " or " : ", ") : "") + names[i];
  return out;
}

// Turns the first syntax error into a UserError; later ones never happen.
class ThrowingErrorListener : public antlr4::BaseErrorListener {
 public:
  explicit ThrowingErrorListener(const Ranges& ranges) : ranges_(ranges) {}

  void syntaxError(antlr4::Recognizer* recognizer, antlr4::Token* offending, size_t line, size_t column,
                   const std::string&, std::exception_ptr) override {
    auto* parser = dynamic_cast<antlr4::Parser*>(recognizer);
    SourceRange where = offending ? ranges_.of(offending)
                                  : SourceRange{ranges_.file(), ranges_.pos(line, column), ranges_.pos(line, column + 1)};
    std::string message = "unexpected " + (offending ? describe_token(offending) : std::string("input"));
    std::string hint;
    if (parser) hint = describe_expected(parser->getExpectedTokens(), parser->getVocabulary());
    if (offending && offending->getType() == LoomLexer::NEWLINE)
      hint += std::string(hint.empty() ? "" : "; ") + "a statement ends at a newline unless inside (...) or [...]";
    throw UserError(where, message, hint);
  }

 private:
  const Ranges& ranges_;
};

// Checks the token stream before parsing: stray characters, unterminated strings,
// unbalanced brackets and nesting deep enough to exhaust the parser's stack.
void check_tokens(const std::vector<antlr4::Token*>& tokens, const Ranges& ranges) {
  struct Open {
    char bracket;
    const antlr4::Token* token;
  };
  std::vector<Open> open;
  int unary_run = 0;
  auto closer_of = [](char bracket) { return std::string(bracket == '(' ? ")" : bracket == '[' ? "]" : "}"); };
  for (const antlr4::Token* t : tokens) {
    if (t->getChannel() != antlr4::Token::DEFAULT_CHANNEL) continue;
    size_t type = t->getType();
    switch (type) {
      case LoomLexer::UNEXPECTED_CHAR:
        throw UserError(ranges.of(t), "unexpected character '" + t->getText() + "'",
                        "Loom's operators are + - * / // % < <= > >= == != and, or, not");
      case LoomLexer::UNTERMINATED_STRING:
        throw UserError(ranges.of(t), "unterminated string literal",
                        std::string("close the string with ") + t->getText()[0] + " on the same line");
      default: break;
    }
    unary_run = (type == LoomLexer::MINUS || type == LoomLexer::NOT) ? unary_run + 1 : 0;
    if (unary_run > kMaxNesting)
      throw UserError(ranges.of(t), "too many operators in a row", "simplify the expression");
    char opening = type == LoomLexer::LPAREN ? '(' : type == LoomLexer::LBRACK ? '[' : type == LoomLexer::LBRACE ? '{' : 0;
    char closing = type == LoomLexer::RPAREN ? '(' : type == LoomLexer::RBRACK ? '[' : type == LoomLexer::RBRACE ? '{' : 0;
    if (opening) {
      open.push_back({opening, t});
      if (static_cast<int>(open.size()) > kMaxNesting)
        throw UserError(ranges.of(t), "brackets nested more than " + std::to_string(kMaxNesting) + " deep",
                        "split the expression with let");
    } else if (closing) {
      std::string text = closer_of(closing);
      if (open.empty())
        throw UserError(ranges.of(t), "unexpected '" + text + "' with no matching opening bracket",
                        "remove it, or add the missing opening bracket before it");
      if (open.back().bracket != closing)
        throw UserError(ranges.of(t),
                        "'" + text + "' does not match the '" + std::string(1, open.back().bracket) + "' opened at " +
                            ranges.of(open.back().token).to_string(),
                        "insert '" + closer_of(open.back().bracket) + "' before it");
      open.pop_back();
    }
  }
  if (!open.empty()) {
    throw UserError(ranges.of(open.back().token), "'" + std::string(1, open.back().bracket) + "' is never closed",
                    "add the missing '" + closer_of(open.back().bracket) + "'");
  }
}

// Runs the parser with fast SLL prediction, falling back to full LL (and
// located errors) only when SLL fails.
template <class Rule>
auto run_parser(LoomParser& parser, antlr4::CommonTokenStream& tokens, ThrowingErrorListener& listener, Rule rule) {
  parser.removeErrorListeners();
  parser.getInterpreter<antlr4::atn::ParserATNSimulator>()->setPredictionMode(antlr4::atn::PredictionMode::SLL);
  parser.setErrorHandler(std::make_shared<antlr4::BailErrorStrategy>());
  try {
    return (parser.*rule)();
  } catch (const antlr4::ParseCancellationException&) {
  }
  tokens.seek(0);
  parser.reset();
  parser.addErrorListener(&listener);
  parser.getInterpreter<antlr4::atn::ParserATNSimulator>()->setPredictionMode(antlr4::atn::PredictionMode::LL);
  parser.setErrorHandler(std::make_shared<antlr4::DefaultErrorStrategy>());
  return (parser.*rule)();
}

int64_t parse_int(const std::string& digits, const SourceRange& where) {
  std::string clean;
  for (char c : digits)
    if (c != '_') clean += c;
  int64_t v = 0;
  auto [p, ec] = std::from_chars(clean.data(), clean.data() + clean.size(), v);
  if (ec != std::errc() || p != clean.data() + clean.size())
    throw UserError(where, "integer literal " + digits + " is too large", "integers are 64-bit");
  return v;
}

double parse_double(const std::string& text) {
  std::string clean;
  for (char c : text)
    if (c != '_') clean += c;
  return std::strtod(clean.c_str(), nullptr);
}

class AstBuilder {
 public:
  AstBuilder(const Ranges& ranges, const std::vector<antlr4::Token*>& tokens) : ranges_(ranges) {
    for (const antlr4::Token* t : tokens)
      if (t->getType() == LoomLexer::COMMENT) comments_.push_back(t);
  }

  std::shared_ptr<ast::Program> program(LoomParser::ProgramContext* ctx) {
    auto prog = std::make_shared<ast::Program>();
    prog->file = ranges_.file();
    for (auto* s : ctx->stmt()) prog->stmts.push_back(stmt(s));
    while (next_comment_ < comments_.size()) prog->trailing_comments.push_back(comments_[next_comment_++]->getText());
    return prog;
  }

  ast::ExprPtr expr(LoomParser::ExprContext* ctx) {
    if (++depth_ > kMaxExprDepth)
      throw UserError(ranges_.of(ctx), "expression nested too deeply", "split it into several let statements");
    ast::ExprPtr e = build_expr(ctx);
    --depth_;
    return e;
  }

 private:
  std::vector<std::string> take_comments_before(size_t token_index) {
    std::vector<std::string> out;
    while (next_comment_ < comments_.size() && comments_[next_comment_]->getTokenIndex() < token_index)
      out.push_back(comments_[next_comment_++]->getText());
    return out;
  }

  std::string take_comment_on_line(size_t line) {
    if (next_comment_ < comments_.size() && comments_[next_comment_]->getLine() == line)
      return comments_[next_comment_++]->getText();
    return "";
  }

  std::vector<ast::StmtPtr> block(LoomParser::BlockContext* ctx, std::vector<std::string>* end_comments) {
    std::vector<ast::StmtPtr> out;
    for (auto* s : ctx->stmt()) out.push_back(stmt(s));
    auto rest = take_comments_before(ctx->getStop()->getTokenIndex());
    if (end_comments) end_comments->insert(end_comments->end(), rest.begin(), rest.end());
    return out;
  }

  ast::StmtPtr stmt(LoomParser::StmtContext* ctx) {
    auto s = std::make_shared<ast::Stmt>();
    s->range = ranges_.of(ctx);
    s->leading_comments = take_comments_before(ctx->getStart()->getTokenIndex());
    std::vector<std::string> inner;  // comments left at the end of a block: keep them above the next statement
    // Casts are tried most common first: a failed dynamic_cast is the costly case.
    if (auto* c = dynamic_cast<LoomParser::ExprStmtContext*>(ctx)) {
      s->kind = ast::StmtKind::Expr;
      s->expr = expr(c->expr());
    } else if (auto* c = dynamic_cast<LoomParser::ImportStmtContext*>(ctx)) {
      s->kind = ast::StmtKind::Import;
      s->name_range = ranges_.of(c->STRING()->getSymbol());
      ast::ExprPtr path = string_literal(c->STRING()->getSymbol());
      for (auto& part : path->parts) {
        if (part.expr) throw UserError(s->name_range, "an import path cannot interpolate values", "write the path literally");
        s->name += part.text;
      }
    } else if (auto* c = dynamic_cast<LoomParser::LetStmtContext*>(ctx)) {
      s->kind = ast::StmtKind::Let;
      s->name = c->NAME()->getText();
      s->name_range = ranges_.of(c->NAME()->getSymbol());
      s->expr = expr(c->expr());
    } else if (auto* c = dynamic_cast<LoomParser::AssignStmtContext*>(ctx)) {
      s->kind = ast::StmtKind::Assign;
      s->name = c->NAME()->getText();
      s->name_range = ranges_.of(c->NAME()->getSymbol());
      s->expr = expr(c->expr());
    } else if (auto* c = dynamic_cast<LoomParser::IfStmtContext*>(ctx)) {
      if_clause(c->ifClause(), *s, inner);
    } else if (auto* c = dynamic_cast<LoomParser::ForStmtContext*>(ctx)) {
      s->kind = ast::StmtKind::For;
      s->name = c->NAME()->getText();
      s->name_range = ranges_.of(c->NAME()->getSymbol());
      s->expr = expr(c->expr());
      s->body = block(c->block(), &inner);
    } else if (auto* c = dynamic_cast<LoomParser::DefStmtContext*>(ctx)) {
      s->kind = ast::StmtKind::Def;
      auto names = c->NAME();
      s->name = names[0]->getText();
      s->name_range = ranges_.of(names[0]->getSymbol());
      for (size_t i = 1; i < names.size(); ++i) {
        std::string p = names[i]->getText();
        if (std::find(s->params.begin(), s->params.end(), p) != s->params.end())
          throw UserError(ranges_.of(names[i]->getSymbol()), "parameter '" + p + "' appears twice in def " + s->name,
                          "give each parameter its own name");
        s->params.push_back(p);
      }
      s->body = block(c->block(), &inner);
    } else if (auto* c = dynamic_cast<LoomParser::ReturnStmtContext*>(ctx)) {
      s->kind = ast::StmtKind::Return;
      if (c->expr()) s->expr = expr(c->expr());
    } else {
      throw InternalError("parse tree has a statement kind the AST builder does not know");
    }
    // Comments just before a closing '}' stay inside that block.
    if (!inner.empty()) s->body_end_comments = inner;
    s->trailing_comment = take_comment_on_line(ctx->getStop()->getLine());
    return s;
  }

  void if_clause(LoomParser::IfClauseContext* c, ast::Stmt& s, std::vector<std::string>& inner) {
    s.kind = ast::StmtKind::If;
    s.range = ranges_.of(c);
    s.expr = expr(c->expr());
    auto blocks = c->block();
    s.body = block(blocks[0], &inner);
    if (!inner.empty()) {
      s.body_end_comments = inner;
      inner.clear();
    }
    if (c->ifClause()) {
      s.has_else = true;
      auto nested = std::make_shared<ast::Stmt>();
      std::vector<std::string> nested_inner;
      if_clause(c->ifClause(), *nested, nested_inner);
      s.else_body.push_back(nested);
    } else if (blocks.size() > 1) {
      s.has_else = true;
      s.else_body = block(blocks[1], &s.else_end_comments);
    }
  }

  ast::ExprPtr make(ast::ExprKind kind, SourceRange range) {
    auto e = std::make_shared<ast::Expr>();
    e->kind = kind;
    e->range = std::move(range);
    return e;
  }

  ast::ExprPtr build_expr(LoomParser::ExprContext* ctx) {
    if (auto* c = dynamic_cast<LoomParser::PrimaryExprContext*>(ctx)) return primary(c->primary());
    if (auto* c = dynamic_cast<LoomParser::MemberExprContext*>(ctx)) {
      auto e = make(ast::ExprKind::Member, ranges_.of(ctx));
      e->text = c->NAME()->getText();
      e->operands.push_back(expr(c->expr()));
      return e;
    }
    if (auto* c = dynamic_cast<LoomParser::CallExprContext*>(ctx)) {
      auto e = make(ast::ExprKind::Call, ranges_.of(ctx));
      e->operands.push_back(expr(c->expr()));
      bool seen_keyword = false;
      for (auto* a : c->arg()) {
        ast::Arg arg;
        if (a->NAME()) {
          arg.name = a->NAME()->getText();
          arg.name_range = ranges_.of(a->NAME()->getSymbol());
          for (auto& prev : e->args)
            if (prev.name == arg.name)
              throw UserError(arg.name_range, "argument '" + arg.name + "' is given twice", "remove one of them");
          seen_keyword = true;
        } else if (seen_keyword) {
          throw UserError(ranges_.of(a), "positional argument after a keyword argument",
                          "put positional arguments first, or name this one");
        }
        arg.value = expr(a->expr());
        if (!a->NAME()) arg.name_range = arg.value->range;
        e->args.push_back(std::move(arg));
      }
      return e;
    }
    if (auto* c = dynamic_cast<LoomParser::IndexExprContext*>(ctx)) {
      auto e = make(ast::ExprKind::Index, ranges_.of(ctx));
      e->operands.push_back(expr(c->expr(0)));
      e->operands.push_back(expr(c->expr(1)));
      return e;
    }
    if (auto* c = dynamic_cast<LoomParser::UnaryExprContext*>(ctx)) {
      auto e = make(ast::ExprKind::Unary, ranges_.of(ctx));
      e->text = c->op->getText();
      e->operands.push_back(expr(c->expr()));
      return e;
    }
    if (auto* c = dynamic_cast<LoomParser::BinaryExprContext*>(ctx)) {
      auto e = make(ast::ExprKind::Binary, ranges_.of(ctx));
      e->text = c->op->getText();
      e->operands.push_back(expr(c->expr(0)));
      e->operands.push_back(expr(c->expr(1)));
      return e;
    }
    throw InternalError("parse tree has an expression kind the AST builder does not know");
  }

  ast::ExprPtr primary(LoomParser::PrimaryContext* ctx) {
    SourceRange r = ranges_.of(ctx);
    if (auto* c = dynamic_cast<LoomParser::NameRefContext*>(ctx)) {
      auto e = make(ast::ExprKind::Name, r);
      e->text = c->NAME()->getText();
      return e;
    }
    if (auto* c = dynamic_cast<LoomParser::StringLitContext*>(ctx)) return string_literal(c->STRING()->getSymbol());
    if (dynamic_cast<LoomParser::IntLitContext*>(ctx)) {
      auto e = make(ast::ExprKind::Int, r);
      e->int_value = parse_int(ctx->getText(), r);
      return e;
    }
    if (dynamic_cast<LoomParser::FloatLitContext*>(ctx)) {
      auto e = make(ast::ExprKind::Float, r);
      e->float_value = parse_double(ctx->getText());
      if (!std::isfinite(e->float_value)) throw UserError(r, "float literal out of range", "floats are 64-bit: at most about 1.8e308");
      return e;
    }
    if (dynamic_cast<LoomParser::BytesLitContext*>(ctx)) return bytes_literal(ctx->getText(), r);
    if (dynamic_cast<LoomParser::BoolLitContext*>(ctx)) {
      auto e = make(ast::ExprKind::Bool, r);
      e->bool_value = ctx->getText() == "true";
      return e;
    }
    if (dynamic_cast<LoomParser::NoneLitContext*>(ctx)) return make(ast::ExprKind::None, r);
    if (dynamic_cast<LoomParser::AutoLitContext*>(ctx)) return make(ast::ExprKind::Auto, r);
    if (auto* c = dynamic_cast<LoomParser::ListLitContext*>(ctx)) {
      auto e = make(ast::ExprKind::List, r);
      for (auto* item : c->expr()) e->operands.push_back(expr(item));
      return e;
    }
    if (auto* c = dynamic_cast<LoomParser::ParenExprContext*>(ctx)) {
      ast::ExprPtr inner = expr(c->expr());
      inner->range = r;  // keep the parentheses in the underline
      return inner;
    }
    throw InternalError("parse tree has a literal kind the AST builder does not know");
  }

  // The lexer's BYTES token (digits, '_' between them, a point, a unit), read as the command
  // line reads sizes, but whole: a byte literal is exact.
  ast::ExprPtr bytes_literal(const std::string& text, const SourceRange& r) {
    std::string digits;
    for (char c : text)
      if (c != '_') digits += c;
    SizeReading size = read_size(digits);
    if (size.problem == SizeReading::Problem::NotASize) throw InternalError("the lexer's byte size " + text + " is not a size");
    if (size.problem == SizeReading::Problem::TooLarge) throw UserError(r, "byte size " + text + " is too large", size_hint(size.problem));
    if (size.fraction_dropped) throw UserError(r, "byte size " + text + " is not a whole number of bytes", "use a smaller unit");
    auto e = make(ast::ExprKind::Bytes, r);
    e->int_value = size.bytes;  // 0B is 0
    e->text = text;
    return e;
  }

  // Unquotes a string token, resolving escapes and parsing each `{expr}`.
  ast::ExprPtr string_literal(const antlr4::Token* token) {
    SourceRange r = ranges_.of(token);
    auto e = make(ast::ExprKind::String, r);
    const std::string raw = token->getText();
    std::string literal;
    auto flush = [&] {
      if (!literal.empty()) e->parts.push_back({literal, nullptr});
      literal.clear();
    };
    // Columns count code points, as ANTLR does; track both.
    int column = r.begin.column + 1;
    for (size_t i = 1; i + 1 < raw.size();) {
      unsigned char c = raw[i];
      if (c == '\\') {
        char n = raw[i + 1];
        switch (n) {
          case 'n': literal += '\n'; break;
          case 't': literal += '\t'; break;
          case '\\': case '"': case '\'': case '{': case '}': literal += n; break;
          default:
            throw UserError(SourceRange{r.file, {r.begin.line, column}, {r.begin.line, column + 2}},
                            std::string("unknown escape sequence '\\") + n + "'",
                            "known escapes: \\n \\t \\\\ \\\" \\' \\{ \\}");
        }
        i += 2;
        column += 2;
        continue;
      }
      if (c == '{') {
        size_t close = raw.find('}', i + 1);
        if (close == std::string::npos || close + 1 >= raw.size() + 1 || close == raw.size() - 1)
          throw UserError(SourceRange{r.file, {r.begin.line, column}, {r.begin.line, column + 1}},
                          "'{' in a string is never closed", "close the interpolation with '}', or write \\{ for a brace");
        std::string inner = raw.substr(i + 1, close - i - 1);
        SourceRange inner_range{r.file, {r.begin.line, column}, {r.begin.line, column + 1}};
        if (inner.find_first_not_of(" \t") == std::string::npos)
          throw UserError(inner_range, "empty '{}' in a string", "put an expression inside, or write \\{\\} for braces");
        flush();
        e->parts.push_back({"", parse_interpolation(inner, r.begin.line, column)});
        column += count_code_points(raw.substr(i, close - i + 1));
        i = close + 1;
        continue;
      }
      if (c == '}')
        throw UserError(SourceRange{r.file, {r.begin.line, column}, {r.begin.line, column + 1}},
                        "'}' in a string without a matching '{'", "write \\} for a literal brace");
      size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : 4;
      literal += raw.substr(i, len);
      i += len;
      ++column;
    }
    flush();
    return e;
  }

  static int count_code_points(const std::string& s) {
    int n = 0;
    for (unsigned char c : s) n += (c >> 6) != 0x2;
    return n;
  }

  ast::ExprPtr parse_interpolation(const std::string& text, int line, int brace_column);

  const Ranges& ranges_;
  std::vector<const antlr4::Token*> comments_;
  size_t next_comment_ = 0;
  int depth_ = 0;
};

// Lexes, checks and parses `text` with `rule`, then hands the tree and tokens
// to `build` while the ANTLR objects that own them are still alive.
template <class Rule, class Build>
auto parse_with(const std::string& text, const Ranges& ranges, Rule rule, Build build) {
  antlr4::ANTLRInputStream input(text);
  LoomLexer lexer(&input);
  lexer.removeErrorListeners();
  antlr4::CommonTokenStream tokens(&lexer);
  tokens.fill();
  check_tokens(tokens.getTokens(), ranges);
  LoomParser parser(&tokens);
  ThrowingErrorListener listener(ranges);
  auto* tree = run_parser(parser, tokens, listener, rule);
  return build(tree, tokens.getTokens());
}

// Parses the expression inside `{...}`; columns continue from the brace.
ast::ExprPtr AstBuilder::parse_interpolation(const std::string& text, int line, int brace_column) {
  Ranges ranges(ranges_.file(), line - 1, brace_column);
  int depth = depth_;
  return parse_with(text, ranges, &LoomParser::exprOnly, [&](LoomParser::ExprOnlyContext* tree, const auto& tokens) {
    AstBuilder inner(ranges, tokens);
    inner.depth_ = depth;
    return inner.expr(tree->expr());
  });
}

}  // namespace

std::shared_ptr<ast::Program> parse_program(const SourceFile& file) {
  check_utf8(file);
  Ranges ranges(file.name, 0, 0);
  return parse_with(file.text, ranges, &LoomParser::program, [&](LoomParser::ProgramContext* tree, const auto& tokens) {
    return AstBuilder(ranges, tokens).program(tree);
  });
}

}  // namespace loom
