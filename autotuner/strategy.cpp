#include "autotuner/strategy.h"

#include "lang/diagnostics.h"

namespace loom::tune {

Strategy strategy_named(const std::string& name) {
  if (name == "exhaustive") return exhaustive;
  if (name == "random") return random_search;
  if (name == "coordinate-descent") return coordinate_descent;
  throw UserError(SourceRange{}, "no search strategy named '" + name + "'", "use exhaustive, random or coordinate-descent");
}

}  // namespace loom::tune
