#include "lang/interpreter.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "grammar/parse.h"
#include "lang/builtin_functions.h"
#include "lang/printer.h"
#include "lang/schedule_file.h"

namespace loom {

namespace fs = std::filesystem;

namespace {
const std::set<std::string> kBuiltinNames = {"sch", "world", "local_world", "dp", "len", "range", "min",
                                             "max", "print", "tune", "constrain"};
}  // namespace

bool truthy(const Value& v) {
  switch (v.kind()) {
    case ValueKind::None: return false;
    case ValueKind::Bool: return v.as_bool();
    case ValueKind::Int:
    case ValueKind::Bytes: return v.as_int() != 0;
    case ValueKind::Float: return v.as_number() != 0;
    case ValueKind::String: return !v.as_string().empty();
    case ValueKind::List: return !v.as_list().empty();
    default: return true;
  }
}

Interpreter::Interpreter(Schedule& schedule, SourceManager& sources, InterpreterOptions options)
    : schedule_(schedule), sources_(sources), options_(std::move(options)) {
  // `sch` refers to the caller's schedule; the no-op deleter leaves ownership with them.
  sch_ = Value::selection(std::shared_ptr<const Selection>(&schedule_, [](const Selection*) {}));
  frames_.push_back(Frame{{Scope{}}});
}

void Interpreter::run_file(const std::string& path) { run_source(path, read_schedule_file(path)); }

void Interpreter::run_source(const std::string& name, const std::string& text) {
  const SourceFile& file = sources_.add(name, text);
  std::error_code ec;
  std::string key = fs::weakly_canonical(name, ec).string();
  imported_.insert(key);
  import_stack_.push_back(key);
  run_program(parse_program(file));
  import_stack_.pop_back();
}

void Interpreter::run_program(std::shared_ptr<const ast::Program> program) { exec_block(program->stmts, program); }

Interpreter::Flow Interpreter::exec_block(const std::vector<ast::StmtPtr>& stmts,
                                          const std::shared_ptr<const ast::Program>& program) {
  for (auto& s : stmts)
    if (exec(*s, program) == Flow::Return) return Flow::Return;
  return Flow::Normal;
}

Value* Interpreter::lookup(const std::string& name) {
  Frame& f = frames_.back();
  for (auto it = f.scopes.rbegin(); it != f.scopes.rend(); ++it) {
    auto v = it->find(name);
    if (v != it->end()) return &v->second;
  }
  if (frames_.size() > 1) {
    auto& globals = frames_.front().scopes.front();
    auto v = globals.find(name);
    if (v != globals.end()) return &v->second;
  }
  return nullptr;
}

void Interpreter::declare(const std::string& name, Value v, const SourceRange& where) {
  if (kBuiltinNames.count(name))
    throw UserError(where, "'" + name + "' is a built-in name and cannot be redefined", "choose another name");
  Scope& scope = frames_.back().scopes.back();
  if (scope.count(name))
    throw UserError(where, "'" + name + "' is already declared in this scope", "assign to it with " + name + " = ...");
  scope[name] = std::move(v);
}

namespace {
// A block's variables live until its closing brace.
struct ScopeGuard {
  std::vector<Interpreter::Scope>& scopes;
  explicit ScopeGuard(std::vector<Interpreter::Scope>& s) : scopes(s) { scopes.emplace_back(); }
  ~ScopeGuard() { scopes.pop_back(); }
};
}  // namespace

Interpreter::Flow Interpreter::exec(const ast::Stmt& s, const std::shared_ptr<const ast::Program>& program) {
  switch (s.kind) {
    case ast::StmtKind::Import:
      if (frames_.size() > 1 || frames_.back().scopes.size() > 1)
        throw UserError(s.range, "import is only allowed at the top level of a file", "move it to the top of the file");
      run_import(s);
      return Flow::Normal;
    case ast::StmtKind::Let:
      declare(s.name, eval(*s.expr), s.name_range);
      return Flow::Normal;
    case ast::StmtKind::Assign:
      exec_assign(s);
      return Flow::Normal;
    case ast::StmtKind::If: {
      ScopeGuard guard(frames_.back().scopes);
      if (truthy(eval(*s.expr))) return exec_block(s.body, program);
      if (s.has_else) return exec_block(s.else_body, program);
      return Flow::Normal;
    }
    case ast::StmtKind::For:
      return exec_for(s, program);
    case ast::StmtKind::Def:
      declare(s.name, Value::function(std::make_shared<FunctionValue>(FunctionValue{&s, program})), s.name_range);
      return Flow::Normal;
    case ast::StmtKind::Return:
      if (frames_.size() == 1) throw UserError(s.range, "return outside a function", "return may only appear inside def");
      return_value_ = s.expr ? eval(*s.expr) : Value::none();
      return Flow::Return;
    case ast::StmtKind::Expr:
      eval(*s.expr);
      return Flow::Normal;
  }
  return Flow::Normal;
}

void Interpreter::exec_assign(const ast::Stmt& s) {
  Value v = eval(*s.expr);
  Value* slot = lookup(s.name);
  if (!slot) {
    if (kBuiltinNames.count(s.name))
      throw UserError(s.name_range, "'" + s.name + "' is a built-in name and cannot be assigned", "choose another name");
    throw UserError(s.name_range, "assignment to undeclared variable '" + s.name + "'", "declare it first: let " + s.name + " = ...");
  }
  *slot = std::move(v);
}

Interpreter::Flow Interpreter::exec_for(const ast::Stmt& s, const std::shared_ptr<const ast::Program>& program) {
  Value iterable = eval(*s.expr);
  std::vector<Value> items;
  if (iterable.is(ValueKind::List)) {
    items = iterable.as_list();
  } else if (iterable.is(ValueKind::Selection)) {
    for (auto& e : iterable.as_selection()->elements()) items.push_back(Value::selection(std::make_shared<Selection>(e)));
  } else {
    throw UserError(s.expr->range, "cannot iterate over " + kind_with_article(iterable.kind()),
                    "loop over a list, range(...) or a module selection");
  }
  for (auto& item : items) {
    ScopeGuard guard(frames_.back().scopes);
    declare(s.name, item, s.name_range);
    if (exec_block(s.body, program) == Flow::Return) return Flow::Return;
  }
  return Flow::Normal;
}

std::string Interpreter::resolve_import(const std::string& path, const SourceRange& where) const {
  std::vector<fs::path> candidates;
  fs::path importer = fs::path(where.file).parent_path();
  candidates.push_back(importer / path);
  if (!options_.stdlib_dir.empty()) {
    fs::path p(path);
    auto first = p.begin();
    if (first != p.end() && *first == "stdlib") {
      fs::path rest;
      for (auto it = std::next(first); it != p.end(); ++it) rest /= *it;
      candidates.push_back(fs::path(options_.stdlib_dir) / rest);
    }
    candidates.push_back(fs::path(options_.stdlib_dir) / path);
  }
  for (auto& c : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(c, ec)) return c.lexically_normal().string();
  }
  std::string tried;
  for (auto& c : candidates) tried += (tried.empty() ? "" : ", ") + c.lexically_normal().string();
  throw UserError(where, "cannot find imported file " + quote_string(path), "looked in: " + tried);
}

void Interpreter::run_import(const ast::Stmt& s) {
  std::string path = resolve_import(s.name, s.name_range);
  std::error_code ec;
  std::string key = fs::weakly_canonical(path, ec).string();
  for (size_t i = 0; i < import_stack_.size(); ++i)
    if (import_stack_[i] == key) {
      std::string chain;
      for (size_t j = i; j < import_stack_.size(); ++j) chain += import_stack_[j] + " -> ";
      throw UserError(s.name_range, "import cycle: " + chain + key, "remove one of the imports in the cycle");
    }
  if (imported_.count(key)) return;  // each file is evaluated once
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(s.name_range, "cannot read imported file " + quote_string(path), "check its permissions");
  std::stringstream buf;
  buf << in.rdbuf();
  const SourceFile& file = sources_.add(path, buf.str());
  imported_.insert(key);
  import_stack_.push_back(key);
  auto program = parse_program(file);
  exec_block(program->stmts, program);
  import_stack_.pop_back();
}

Value Interpreter::lookup_or_builtin(const ast::Expr& e) {
  if (Value* v = lookup(e.text)) return *v;
  if (e.text == "sch") return sch_;
  if (e.text == "world") return Value::integer(schedule_.world());
  if (e.text == "local_world") return Value::integer(schedule_.local_world());
  if (e.text == "dp") return Value::integer(schedule_.read_dp(e.range));
  if (kBuiltinNames.count(e.text)) return Value::builtin(e.text);
  // Suggest from everything visible.
  std::vector<std::string> names(kBuiltinNames.begin(), kBuiltinNames.end());
  for (auto& f : frames_)
    for (auto& scope : f.scopes)
      for (auto& [n, v] : scope) names.push_back(n);
  auto near = closest(e.text, names, 1);
  throw UserError(e.range, "unknown name '" + e.text + "'",
                  near.empty() ? "declare it with let " + e.text + " = ..." : "did you mean '" + near[0] + "'?");
}

namespace {
[[noreturn]] void type_error(const ast::Expr& e, const Value& a, const Value& b) {
  throw UserError(e.range,
                  std::string("operator ") + e.text + " does not apply to " + kind_name(a.kind()) + " and " + kind_name(b.kind()),
                  "convert the operands, or check the expression");
}

// <, <=, > and >= of two numbers (or sizes) or two strings.
Value compare(const ast::Expr& e, const Value& a, const Value& b) {
  const std::string& op = e.text;
  int cmp;
  if (a.is_number() && b.is_number()) {
    double x = a.as_number(), y = b.as_number();
    cmp = x < y ? -1 : x > y ? 1 : 0;
  } else if (a.is(ValueKind::String) && b.is(ValueKind::String)) {
    cmp = a.as_string().compare(b.as_string());
  } else {
    type_error(e, a, b);
  }
  if (op == "<") return Value::boolean(cmp < 0);
  if (op == "<=") return Value::boolean(cmp <= 0);
  if (op == ">") return Value::boolean(cmp > 0);
  return Value::boolean(cmp >= 0);
}

// An int or a size that does not fit in 64 bits is an error in the schedule, never a wrap-around:
// `what` (the operation) overflowed.
[[noreturn]] void overflow(const SourceRange& where, bool bytes, const std::string& what) {
  throw UserError(where, std::string(bytes ? "size" : "integer") + " overflow: " + what + " does not fit in 64 bits",
                  bytes ? "sizes must fit in 64 bits" : "ints are 64-bit (at most 9223372036854775807): compute it as a float, 1.0 * x");
}
[[noreturn]] void overflow(const ast::Expr& e, bool bytes, const Value& a, const Value& b) {
  overflow(e.range, bytes, a.to_source() + " " + e.text + " " + b.to_source());
}

// A size computed in floating point, truncated to whole bytes where it fits.
Value bytes_of(const ast::Expr& e, double d, const Value& a, const Value& b) {
  constexpr double kLimit = 9223372036854775808.0;  // 2^63
  if (!(d > -kLimit && d < kLimit)) overflow(e, true, a, b);  // NaN too
  return Value::bytes(static_cast<int64_t>(d));
}

// i op j for + - * of ints or sizes, checked.
int64_t exact(const ast::Expr& e, bool bytes, const Value& a, const Value& b) {
  int64_t i = a.as_int(), j = b.as_int(), r = 0;
  bool over = e.text == "+" ? __builtin_add_overflow(i, j, &r)
              : e.text == "-" ? __builtin_sub_overflow(i, j, &r)
                              : __builtin_mul_overflow(i, j, &r);
  if (over) overflow(e, bytes, a, b);
  return r;
}

// + - * / // % of two numbers: a size stays a size, ints stay ints but for /, floor division and
// modulo round as Python's do.
Value arithmetic(const ast::Expr& e, const Value& a, const Value& b) {
  const std::string& op = e.text;
  if (!a.is_number() || !b.is_number()) type_error(e, a, b);
  bool bytes = a.is(ValueKind::Bytes) || b.is(ValueKind::Bytes);
  bool ints = !a.is(ValueKind::Float) && !b.is(ValueKind::Float);
  auto make = [&](double d) -> Value { return bytes ? bytes_of(e, d, a, b) : Value::floating(d); };
  auto make_int = [&](int64_t i) -> Value { return bytes ? Value::bytes(i) : Value::integer(i); };
  double x = a.as_number(), y = b.as_number();
  if (op == "+" || op == "-" || op == "*") {
    if (ints) return make_int(exact(e, bytes, a, b));
    return make(op == "+" ? x + y : op == "-" ? x - y : x * y);
  }
  if (op != "/" && op != "//" && op != "%") type_error(e, a, b);
  if (y == 0) throw UserError(e.operands[1]->range, "division by zero", "check the divisor");
  if (op == "/") {
    if (a.is(ValueKind::Bytes) && b.is(ValueKind::Bytes)) return Value::floating(x / y);
    return make(x / y);
  }
  int64_t i = a.as_int(), j = b.as_int();
  if (ints && j == -1) {  // INT64_MIN / -1 does not fit, and INT64_MIN % -1 is undefined in C++
    if (op == "%") return make_int(0);
    if (i == std::numeric_limits<int64_t>::min()) overflow(e, bytes, a, b);
  }
  if (op == "//") {
    if (ints) {
      int64_t q = i / j;
      if ((i % j != 0) && ((i < 0) != (j < 0))) --q;  // floor, like Python
      return make_int(q);
    }
    return make(std::floor(x / y));
  }
  if (ints) {
    int64_t r = i % j;
    if (r != 0 && ((r < 0) != (j < 0))) r += j;
    return make_int(r);
  }
  return make(x - std::floor(x / y) * y);
}
}  // namespace

Value Interpreter::eval_binary(const ast::Expr& e) {
  const std::string& op = e.text;
  if (op == "and") {
    if (!truthy(eval(*e.operands[0]))) return Value::boolean(false);
    return Value::boolean(truthy(eval(*e.operands[1])));
  }
  if (op == "or") {
    if (truthy(eval(*e.operands[0]))) return Value::boolean(true);
    return Value::boolean(truthy(eval(*e.operands[1])));
  }
  Value a = eval(*e.operands[0]);
  Value b = eval(*e.operands[1]);
  if (op == "==") return Value::boolean(a == b);
  if (op == "!=") return Value::boolean(a != b);
  if (op == "<" || op == "<=" || op == ">" || op == ">=") return compare(e, a, b);
  if (op == "+" && a.is(ValueKind::String) && b.is(ValueKind::String)) return Value::string(a.as_string() + b.as_string());
  if (op == "+" && a.is(ValueKind::List) && b.is(ValueKind::List)) {
    auto items = a.as_list();
    items.insert(items.end(), b.as_list().begin(), b.as_list().end());
    return Value::list(std::move(items));
  }
  return arithmetic(e, a, b);
}

Value Interpreter::eval(const ast::Expr& e) {
  switch (e.kind) {
    case ast::ExprKind::Int: return Value::integer(e.int_value);
    case ast::ExprKind::Float: return Value::floating(e.float_value);
    case ast::ExprKind::Bytes: return Value::bytes(e.int_value);
    case ast::ExprKind::Bool: return Value::boolean(e.bool_value);
    case ast::ExprKind::None: return Value::none();
    case ast::ExprKind::Auto: return Value::auto_();
    case ast::ExprKind::String: {
      std::string out;
      for (auto& p : e.parts) out += p.expr ? eval(*p.expr).to_display() : p.text;
      return Value::string(std::move(out));
    }
    case ast::ExprKind::Name: return lookup_or_builtin(e);
    case ast::ExprKind::List: {
      std::vector<Value> items;
      for (auto& o : e.operands) items.push_back(eval(*o));
      return Value::list(std::move(items));
    }
    case ast::ExprKind::Member:
      throw UserError(e.range, "'." + e.text + "' must be called", "write ." + e.text + "(...)");
    case ast::ExprKind::Index: return eval_index(e);
    case ast::ExprKind::Unary: return eval_unary(e);
    case ast::ExprKind::Binary: return eval_binary(e);
    case ast::ExprKind::Call: return eval_call(e);
  }
  throw InternalError("unknown expression kind");
}

// xs[k] (Python's negative indices count from the end) or sch["path"].
Value Interpreter::eval_index(const ast::Expr& e) {
  Value object = eval(*e.operands[0]);
  Value index = eval(*e.operands[1]);
  if (object.is(ValueKind::Selection)) {
    if (!index.is(ValueKind::String))
      throw UserError(e.operands[1]->range, "modules are selected by a path string, not " + kind_with_article(index.kind()),
                      "e.g. sch[\"h.{i}\"]");
    return Value::selection(std::make_shared<Selection>(object.as_selection()->select(index.as_string(), e.operands[1]->range)));
  }
  if (!object.is(ValueKind::List))
    throw UserError(e.operands[0]->range, "cannot index " + kind_with_article(object.kind()), "index lists or module selections");
  if (!index.is(ValueKind::Int)) throw UserError(e.operands[1]->range, "list index must be an int", "e.g. xs[0]");
  int64_t n = static_cast<int64_t>(object.as_list().size()), k = index.as_int();
  if (k < 0) k += n;
  if (k < 0 || k >= n)
    throw UserError(e.operands[1]->range, "index " + std::to_string(index.as_int()) + " is out of range for a list of " + std::to_string(n),
                    "valid indices are 0.." + std::to_string(n - 1));
  return object.as_list()[k];
}

Value Interpreter::eval_unary(const ast::Expr& e) {
  Value v = eval(*e.operands[0]);
  if (e.text == "not") return Value::boolean(!truthy(v));
  if (v.is(ValueKind::Float)) return Value::floating(-v.as_number());
  if (v.is(ValueKind::Int) || v.is(ValueKind::Bytes)) {
    bool bytes = v.is(ValueKind::Bytes);
    if (v.as_int() == std::numeric_limits<int64_t>::min()) overflow(e.range, bytes, "-(" + v.to_source() + ")");
    return bytes ? Value::bytes(-v.as_int()) : Value::integer(-v.as_int());
  }
  throw UserError(e.range, "cannot negate " + kind_with_article(v.kind()), "negate numbers only");
}

Value Interpreter::eval_call(const ast::Expr& e) {
  std::vector<ArgValue> args;
  std::vector<std::pair<std::string, ArgValue>> kwargs;
  const ast::Expr& callee = *e.operands[0];
  Value object;
  if (callee.kind == ast::ExprKind::Member) object = eval(*callee.operands[0]);
  for (auto& a : e.args) {
    ArgValue v{eval(*a.value), a.value->range};
    if (a.name.empty()) args.push_back(std::move(v));
    else kwargs.push_back({a.name, std::move(v)});
  }
  if (callee.kind == ast::ExprKind::Member) {
    if (!object.is(ValueKind::Selection))
      throw UserError(callee.range, kind_with_article(object.kind()) + " has no method '" + callee.text + "'",
                      "primitives are called on module selections: sch[\"path\"]." + callee.text + "(...)");
    CallArgs call{std::move(args), std::move(kwargs), e.range, SourceRange{callee.range.file, callee.range.end, callee.range.end}};
    // Underline the method name: it ends where the callee ends.
    call.name_range.begin.column = callee.range.end.column - static_cast<int>(callee.text.size());
    if (callee.text == "blocks") {
      if (!call.positional.empty() || !call.keyword.empty())
        throw UserError(e.range, "blocks() takes no arguments", "write sch.blocks() to select the model's repeated blocks");
      return Value::selection(std::make_shared<Selection>(object.as_selection()->blocks(call.name_range)));
    }
    object.as_selection()->apply(callee.text, call);
    return object;
  }
  Value f = eval(callee);
  if (f.is(ValueKind::Builtin)) return call_builtin(f.as_string(), e, args, kwargs);
  if (f.is(ValueKind::Function)) return call_function(*f.as_function(), e, args, kwargs);
  throw UserError(callee.range, kind_with_article(f.kind()) + " is not callable", "call functions defined with def, or built-ins");
}

Value Interpreter::call_function(const FunctionValue& f, const ast::Expr& call, const std::vector<ArgValue>& args,
                                 const std::vector<std::pair<std::string, ArgValue>>& kwargs) {
  const ast::Stmt& def = *f.def;
  if (static_cast<int>(frames_.size()) > options_.max_call_depth)
    throw UserError(call.range, "calls nested more than " + std::to_string(options_.max_call_depth) + " deep (runaway recursion?)",
                    "check the recursion in " + def.name);
  std::string signature = def.name + "(";
  for (size_t i = 0; i < def.params.size(); ++i) signature += (i ? ", " : "") + def.params[i];
  signature += ")";
  if (args.size() > def.params.size())
    throw UserError(call.range, def.name + " takes " + std::to_string(def.params.size()) + (def.params.size() == 1 ? " argument" : " arguments") +
                                    " but " + std::to_string(args.size()) + " were given",
                    "its signature is " + signature);
  std::vector<const Value*> bound(def.params.size(), nullptr);
  for (size_t i = 0; i < args.size(); ++i) bound[i] = &args[i].value;
  for (auto& [name, a] : kwargs) {
    auto it = std::find(def.params.begin(), def.params.end(), name);
    if (it == def.params.end())
      throw UserError(a.range, def.name + " has no parameter '" + name + "'", "its signature is " + signature);
    bound[it - def.params.begin()] = &a.value;
  }
  Frame frame{{Scope{}}};
  for (size_t i = 0; i < def.params.size(); ++i) {
    if (!bound[i]) throw UserError(call.range, def.name + " is missing argument '" + def.params[i] + "'", "its signature is " + signature);
    frame.scopes.back()[def.params[i]] = *bound[i];
  }
  frames_.push_back(std::move(frame));
  return_value_ = Value::none();
  Flow flow;
  try {
    flow = exec_block(def.body, f.program);
  } catch (...) {
    frames_.pop_back();
    throw;
  }
  frames_.pop_back();
  Value result = flow == Flow::Return ? return_value_ : Value::none();
  return_value_ = Value::none();
  return result;
}

Value Interpreter::call_builtin(const std::string& name, const ast::Expr& call, const std::vector<ArgValue>& args,
                                const std::vector<std::pair<std::string, ArgValue>>& kwargs) {
  if (!kwargs.empty() && name != "tune")
    throw UserError(kwargs[0].second.range, name + "() takes no keyword arguments", "pass the arguments by position");
  BuiltinCall builtin{name, call.range, args};
  if (name == "len") return builtin_len(builtin);
  if (name == "range") return builtin_range(builtin, options_.max_range);
  if (name == "min" || name == "max") return builtin_min_max(builtin);
  if (name == "print") {
    std::string line;
    for (size_t i = 0; i < args.size(); ++i) line += (i ? " " : "") + args[i].value.to_display();
    if (options_.print_to) *options_.print_to << line << "\n";
    return Value::none();
  }
  if (name == "tune") {
    std::vector<ArgValue> all = args;
    for (auto& [n, a] : kwargs) {
      if (n != "name" && n != "values")
        throw UserError(a.range, "tune() has no parameter '" + n + "'", "usage: tune(\"name\", [values])");
      all.push_back(a);
    }
    if (all.size() != 2) throw UserError(call.range, "tune() takes a name and a list of values", "usage: tune(\"micro_batch\", [1, 2, 4])");
    if (!all[0].value.is(ValueKind::String)) throw UserError(all[0].range, "a knob's name must be a string", "usage: tune(\"name\", [values])");
    if (!all[1].value.is(ValueKind::List)) throw UserError(all[1].range, "a knob's domain must be a list", "usage: tune(\"name\", [values])");
    return schedule_.knobs().declare(all[0].value.as_string(), all[1].value.as_list(), call.range);
  }
  if (name == "constrain") {
    builtin.need(1, 1, "constrain(condition)");
    schedule_.knobs().constrain(truthy(args[0].value), format_expr(*call.args[0].value), call.range);
    return Value::none();
  }
  throw UserError(call.range, "'" + name + "' is not a function", "see docs/language.md for the built-ins");
}

}  // namespace loom
