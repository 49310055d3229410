// The language's pure built-in functions, len(), range(), min() and max(): values in, a value
// out, each argument's source range kept for its errors. The built-ins that act on the schedule
// or the run (print, tune, constrain) are the interpreter's (interpreter.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lang/schedule.h"
#include "lang/value.h"

namespace loom {

// One call of a built-in: its name, where it was written, and its positional arguments.
struct BuiltinCall {
  std::string name;
  SourceRange range;
  const std::vector<ArgValue>& args;

  // Throws unless the call has between lo and hi arguments; `signature` goes in the hint.
  void need(size_t lo, size_t hi, const char* signature) const;
  // The argument as an int, or a UserError pointing at it.
  int64_t want_int(const ArgValue& a) const;
};

// len(list | string | selection).
Value builtin_len(const BuiltinCall& call);
// range(stop) | range(start, stop) | range(start, stop, step): a list of at most max_elements ints.
Value builtin_range(const BuiltinCall& call, int64_t max_elements);
// min(a, b, ...) | min(list), and max() alike: the smallest (largest) number or size.
Value builtin_min_max(const BuiltinCall& call);

}  // namespace loom
