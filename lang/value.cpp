#include "lang/value.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <limits>
#include <cstdio>
#include <cmath>

#include "lang/schedule.h"

namespace loom {

Value Value::boolean(bool b) { Value v(ValueKind::Bool); v.b_ = b; return v; }
Value Value::integer(int64_t i) { Value v(ValueKind::Int); v.i_ = i; return v; }
Value Value::floating(double f) { Value v(ValueKind::Float); v.f_ = f; return v; }
Value Value::bytes(int64_t n) { Value v(ValueKind::Bytes); v.i_ = n; return v; }
Value Value::string(std::string s) { Value v(ValueKind::String); v.s_ = std::move(s); return v; }
Value Value::list(std::vector<Value> items) {
  Value v(ValueKind::List);
  v.list_ = std::make_shared<const std::vector<Value>>(std::move(items));
  return v;
}
Value Value::selection(std::shared_ptr<const Selection> s) { Value v(ValueKind::Selection); v.selection_ = std::move(s); return v; }
Value Value::function(std::shared_ptr<const FunctionValue> f) { Value v(ValueKind::Function); v.function_ = std::move(f); return v; }
Value Value::builtin(std::string name) { Value v(ValueKind::Builtin); v.s_ = std::move(name); return v; }

double Value::as_number() const { return kind_ == ValueKind::Float ? f_ : static_cast<double>(i_); }

bool Value::is_data() const {
  switch (kind_) {
    case ValueKind::Selection:
    case ValueKind::Function:
    case ValueKind::Builtin: return false;
    case ValueKind::List:
      for (auto& v : *list_)
        if (!v.is_data()) return false;
      return true;
    default: return true;
  }
}

const char* kind_name(ValueKind k) {
  switch (k) {
    case ValueKind::None: return "none";
    case ValueKind::Auto: return "auto";
    case ValueKind::Bool: return "bool";
    case ValueKind::Int: return "int";
    case ValueKind::Float: return "float";
    case ValueKind::Bytes: return "bytes";
    case ValueKind::String: return "string";
    case ValueKind::List: return "list";
    case ValueKind::Selection: return "module selection";
    case ValueKind::Function: return "function";
    case ValueKind::Builtin: return "built-in function";
  }
  return "value";
}

std::string kind_with_article(ValueKind k) {
  if (k == ValueKind::None || k == ValueKind::Auto) return kind_name(k);  // "cannot index none"
  if (k == ValueKind::Bytes) return "a byte size";
  std::string name = kind_name(k);
  return (name[0] == 'i' ? "an " : "a ") + name;
}

std::string format_float(double f) {
  if (std::isinf(f)) return f > 0 ? "1e999" : "-1e999";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, f);
  std::string s(buf, end);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string format_bytes(int64_t n) {
  static const std::pair<const char*, int64_t> units[] = {
      {"TiB", int64_t(1) << 40}, {"GiB", int64_t(1) << 30}, {"MiB", int64_t(1) << 20}, {"KiB", int64_t(1) << 10},
      {"TB", 1000000000000LL}, {"GB", 1000000000LL}, {"MB", 1000000LL}, {"KB", 1000LL}};
  if (n != 0)
    for (auto& [name, size] : units)
      if (n % size == 0) return std::to_string(n / size) + name;
  return std::to_string(n) + "B";
}

SizeReading read_size(const std::string& text) {
  using Problem = SizeReading::Problem;
  size_t unit_at = text.find_first_not_of("0123456789.");
  std::string number = text.substr(0, unit_at), unit = unit_at == std::string::npos ? "" : text.substr(unit_at);
  size_t point = number.find('.');
  if (number.empty() || number == "." || (point != std::string::npos && number.find('.', point + 1) != std::string::npos))
    return {};
  static const std::vector<std::pair<std::string, int64_t>> units{
      {"", 1}, {"B", 1}, {"KiB", int64_t{1} << 10}, {"MiB", int64_t{1} << 20}, {"GiB", int64_t{1} << 30}, {"TiB", int64_t{1} << 40},
      {"KB", 1'000}, {"MB", 1'000'000}, {"GB", 1'000'000'000}, {"TB", 1'000'000'000'000}};
  auto known = std::find_if(units.begin(), units.end(), [&unit](const auto& u) { return u.first == unit; });
  if (known == units.end()) return {};
  std::string whole = number.substr(0, point), fraction = point == std::string::npos ? "" : number.substr(point + 1);
  whole.erase(0, std::min(whole.find_first_not_of('0'), whole.size()));
  if (whole.size() > 19) return {-1, Problem::TooLarge, false};
  // Integers throughout (a double would make 4.1MB 4,099,999 bytes). 18 digits of fraction decide
  // the bytes of any unit up to 2^40; the digits after them only whether a fraction was dropped.
  __int128 scale = known->second, bytes = (whole.empty() ? 0 : static_cast<__int128>(std::stoull(whole))) * scale;
  std::string exact = fraction.substr(0, 18);
  __int128 numerator = 0, denominator = 1;
  for (char digit : exact) numerator = numerator * 10 + (digit - '0'), denominator *= 10;
  bytes += numerator * scale / denominator;
  bool dropped = numerator * scale % denominator != 0 || fraction.find_first_not_of('0', exact.size()) != std::string::npos;
  if (bytes > std::numeric_limits<int64_t>::max()) return {-1, Problem::TooLarge, dropped};
  return {static_cast<int64_t>(bytes), bytes < 1 ? Problem::BelowOneByte : Problem::None, dropped};
}

int64_t parse_size(const std::string& text) {
  SizeReading size = read_size(text);
  return size.problem == SizeReading::Problem::None ? size.bytes : -1;
}

std::string size_problem_text(SizeReading::Problem problem) {
  switch (problem) {
    case SizeReading::Problem::None: return "";
    case SizeReading::Problem::NotASize: return "is not a size";
    case SizeReading::Problem::TooLarge: return "is too large";
    case SizeReading::Problem::BelowOneByte: return "is less than one byte";
  }
  return "";
}

std::string size_hint(SizeReading::Problem problem) {
  if (problem == SizeReading::Problem::TooLarge) return "sizes must fit in 64 bits";
  return "write a whole number of bytes, or a number with KiB, MiB, GiB, TiB (or KB, MB, GB, TB), e.g. 80GiB";
}

std::string format_size(int64_t b) {
  if (b < 0) return "-" + format_size(b == std::numeric_limits<int64_t>::min() ? std::numeric_limits<int64_t>::max() : -b);
  char buf[32];
  if (b >= (int64_t(1) << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(int64_t(1) << 30));
  else if (b >= (1 << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", b / double(1 << 20));
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(b));
  return buf;
}

std::string format_flops(double f) {
  static const char* units[] = {"FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP"};
  int u = 0;
  while (f >= 1000 && u < 5) f /= 1000, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", f, units[u]);
  return buf;
}

std::string quote_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '{': out += "\\{"; break;
      case '}': out += "\\}"; break;
      default: out += c;
    }
  }
  return out + "\"";
}

std::string Value::to_source() const {
  switch (kind_) {
    case ValueKind::None: return "none";
    case ValueKind::Auto: return "auto";
    case ValueKind::Bool: return b_ ? "true" : "false";
    case ValueKind::Int: return std::to_string(i_);
    case ValueKind::Float: return format_float(f_);
    case ValueKind::Bytes: return format_bytes(i_);
    case ValueKind::String: return quote_string(s_);
    case ValueKind::List: {
      std::string out = "[";
      for (size_t i = 0; i < list_->size(); ++i) out += (i ? ", " : "") + (*list_)[i].to_source();
      return out + "]";
    }
    case ValueKind::Selection: return selection_->describe();
    case ValueKind::Function: return "<function>";
    case ValueKind::Builtin: return "<built-in " + s_ + ">";
  }
  return "";
}

std::string Value::to_display() const {
  if (kind_ == ValueKind::String) return s_;
  if (kind_ == ValueKind::List) {
    std::string out = "[";
    for (size_t i = 0; i < list_->size(); ++i) out += (i ? ", " : "") + (*list_)[i].to_source();
    return out + "]";
  }
  return to_source();
}

bool Value::operator==(const Value& o) const {
  if (is_number() && o.is_number()) {
    if (kind_ == ValueKind::Float || o.kind_ == ValueKind::Float) return as_number() == o.as_number();
    return i_ == o.i_;
  }
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case ValueKind::None:
    case ValueKind::Auto: return true;
    case ValueKind::Bool: return b_ == o.b_;
    case ValueKind::String:
    case ValueKind::Builtin: return s_ == o.s_;
    case ValueKind::List: return *list_ == *o.list_;
    case ValueKind::Selection: return selection_->paths() == o.selection_->paths();
    case ValueKind::Function: return function_ == o.function_;
    default: return false;
  }
}

}  // namespace loom
