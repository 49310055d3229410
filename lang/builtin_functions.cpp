#include "lang/builtin_functions.h"

#include "lang/diagnostics.h"

namespace loom {

void BuiltinCall::need(size_t lo, size_t hi, const char* signature) const {
  if (args.size() >= lo && args.size() <= hi) return;
  throw UserError(range, name + "() takes " + (lo == hi ? std::to_string(lo) : std::to_string(lo) + " to " + std::to_string(hi)) +
                             " argument" + (hi == 1 ? "" : "s") + ", got " + std::to_string(args.size()),
                  std::string("usage: ") + signature);
}

int64_t BuiltinCall::want_int(const ArgValue& a) const {
  if (!a.value.is(ValueKind::Int))
    throw UserError(a.range, name + "() needs an int here, got " + std::string(kind_name(a.value.kind())), "pass a whole number");
  return a.value.as_int();
}

Value builtin_len(const BuiltinCall& call) {
  call.need(1, 1, "len(list | string | selection)");
  const Value& v = call.args[0].value;
  if (v.is(ValueKind::List)) return Value::integer(static_cast<int64_t>(v.as_list().size()));
  if (v.is(ValueKind::String)) return Value::integer(static_cast<int64_t>(v.as_string().size()));
  if (v.is(ValueKind::Selection)) return Value::integer(static_cast<int64_t>(v.as_selection()->elements().size()));
  throw UserError(call.args[0].range, "len() of " + kind_with_article(v.kind()), "len takes a list, a string or a module selection");
}

Value builtin_range(const BuiltinCall& call, int64_t max_elements) {
  call.need(1, 3, "range(stop) | range(start, stop) | range(start, stop, step)");
  const std::vector<ArgValue>& args = call.args;
  int64_t start = 0, stop, step = 1;
  if (args.size() == 1) stop = call.want_int(args[0]);
  else start = call.want_int(args[0]), stop = call.want_int(args[1]);
  if (args.size() == 3) step = call.want_int(args[2]);
  if (step == 0) throw UserError(args[2].range, "range() step must not be zero", "use a positive or negative step");
  // In 128 bits: the span of two 64-bit ints, and a step of -2^63, do not fit in 64.
  __int128 span = static_cast<__int128>(stop) - start, by = step;
  __int128 count = by > 0 ? (span > 0 ? (span + by - 1) / by : 0) : (span < 0 ? (-span - by - 1) / -by : 0);
  if (count > max_elements)
    throw UserError(call.range, "range() of " + std::to_string(static_cast<uint64_t>(count)) + " elements is too large",
                    "ranges are limited to " + std::to_string(max_elements) + " elements");
  std::vector<Value> items;
  items.reserve(count);
  // Each element lies between start and stop, but k * step alone may not fit in 64 bits.
  for (int64_t k = 0; k < count; ++k) items.push_back(Value::integer(static_cast<int64_t>(start + static_cast<__int128>(k) * step)));
  return Value::list(std::move(items));
}

Value builtin_min_max(const BuiltinCall& call) {
  const std::vector<ArgValue>& args = call.args;
  if (args.empty()) call.need(1, 1000000, "min(a, b, ...) | min(list)");
  std::vector<ArgValue> items = args;
  if (args.size() == 1 && args[0].value.is(ValueKind::List)) {
    items.clear();
    for (auto& v : args[0].value.as_list()) items.push_back({v, args[0].range});
    if (items.empty()) throw UserError(args[0].range, call.name + "() of an empty list", "pass at least one value");
  }
  Value best = items[0].value;
  for (auto& a : items) {
    if (!a.value.is_number())
      throw UserError(a.range, call.name + "() compares numbers, got " + kind_with_article(a.value.kind()), "pass numbers or sizes");
    if (!best.is_number()) throw UserError(items[0].range, call.name + "() compares numbers", "pass numbers or sizes");
    bool better = call.name == "min" ? a.value.as_number() < best.as_number() : a.value.as_number() > best.as_number();
    if (better) best = a.value;
  }
  return best;
}

}  // namespace loom
