// A directive: one recorded primitive application. Plain data; later stages act on it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "lang/source.h"
#include "lang/value.h"

namespace loom {

struct Directive {
  std::string primitive;  // registered primitive name
  std::string target;     // module path it applies to; "" is the whole model (sch)
  std::vector<std::pair<std::string, Value>> args;  // every parameter in declared order, defaults filled in
  SourceRange where;      // the call that recorded it (.sched location or C++ call site)

  const Value* arg(const std::string& name) const;
  // Canonical .sched text: sch["h.0.mlp"].compress(ratio=10.0, index_bits=1, sparsity=auto)
  std::string to_sched() const;
  // Equal primitive, target and arguments (locations ignored): what replay must reproduce.
  bool same_effect(const Directive& other) const;
};

}  // namespace loom
