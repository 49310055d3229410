// Runtime values of the schedule language, and the subset that directive arguments may hold.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace loom {

class Selection;
struct FunctionValue;

enum class ValueKind { None, Auto, Bool, Int, Float, Bytes, String, List, Selection, Function, Builtin };

// A dynamically typed value. Lists, selections and functions are shared, so copies are cheap.
class Value {
 public:
  Value() = default;  // none
  static Value none() { return Value(); }
  static Value auto_() { return Value(ValueKind::Auto); }
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value floating(double f);
  static Value bytes(int64_t n);
  static Value string(std::string s);
  static Value list(std::vector<Value> items);
  static Value selection(std::shared_ptr<const Selection> s);
  static Value function(std::shared_ptr<const FunctionValue> f);
  static Value builtin(std::string name);

  ValueKind kind() const { return kind_; }
  bool is(ValueKind k) const { return kind_ == k; }
  bool is_number() const { return kind_ == ValueKind::Int || kind_ == ValueKind::Float || kind_ == ValueKind::Bytes; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }   // Int and Bytes
  double as_number() const;              // Int, Float, Bytes
  const std::string& as_string() const { return s_; }  // String; Builtin name
  const std::vector<Value>& as_list() const { return *list_; }
  const std::shared_ptr<const Selection>& as_selection() const { return selection_; }
  const std::shared_ptr<const FunctionValue>& as_function() const { return function_; }

  // Whether the value may be a directive argument (no selections or functions).
  bool is_data() const;

  // The canonical .sched spelling: 2GiB, 0.5, "text", [1, 2], none, auto.
  std::string to_source() const;
  // How print() and string interpolation show it: strings unquoted.
  std::string to_display() const;

  bool operator==(const Value& other) const;
  bool operator!=(const Value& other) const { return !(*this == other); }

 private:
  explicit Value(ValueKind k) : kind_(k) {}
  ValueKind kind_ = ValueKind::None;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;
  std::shared_ptr<const std::vector<Value>> list_;
  std::shared_ptr<const Selection> selection_;
  std::shared_ptr<const FunctionValue> function_;
};

// "int", "list", ... as used in messages.
const char* kind_name(ValueKind k);
// The kind with its article, as a sentence reads it: "an int", "a list", "none".
std::string kind_with_article(ValueKind k);

// Shortest decimal that reads back to the same double, always with a '.' or exponent.
std::string format_float(double f);
// Bytes in the largest binary (or decimal) unit that divides them exactly: 2GiB, 64KB, 17B.
std::string format_bytes(int64_t n);
// A size for people to read, rounded: 512 B, 1.5 KiB, 12.3 MiB, 2.05 GiB.
std::string format_size(int64_t bytes);
// A size as people write it, in the language's byte literals (which must be whole), on the
// command line and in cluster files (where a fraction of a byte is dropped): decimal digits with
// at most one point, then B, KiB..TiB or KB..TB, or nothing for bytes ("500000000", "512MiB",
// "9.2MiB"). Read exactly, in integers: 4.1MB is 4,100,000 bytes.
struct SizeReading {
  enum class Problem { None, NotASize, TooLarge, BelowOneByte };
  int64_t bytes = -1;  // rounded down; -1 unless None or BelowOneByte
  Problem problem = Problem::NotASize;
  bool fraction_dropped = false;  // the size was not a whole number of bytes
};
SizeReading read_size(const std::string& text);
// read_size's bytes, or -1 when it has a problem.
int64_t parse_size(const std::string& text);
// What is wrong, for a message ("is too large"), and what to do about it.
std::string size_problem_text(SizeReading::Problem problem);
std::string size_hint(SizeReading::Problem problem);
// FLOPs for people to read, rounded: 512 FLOP, 3.2 MFLOP, 1.5 TFLOP.
std::string format_flops(double flops);
// A string literal with quotes and escapes (braces escaped, since strings interpolate).
std::string quote_string(const std::string& s);

}  // namespace loom
