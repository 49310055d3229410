// Which directive breaks equivalence: bisection over prefixes of the directive trace (the empty
// prefix is the plain model, which verifies; the whole trace does not). A prefix that cannot
// run on its own (a half-built schedule) is stepped over; when every prefix between two known
// ones is such, more than one directive stays suspect. Torch-free.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <vector>

namespace loom {

struct Bisection {
  bool done = false;
  size_t good = 0, bad = 0, total = 0;  // the first `good` directives verify, the first `bad` do not
  std::vector<size_t> unrunnable;       // prefixes that could not run
};

// `verifies(k)`: whether the first k of `total` directives verify; nullopt when that prefix
// cannot run. The suspects are directives good+1 .. bad (1-based).
Bisection bisect_directives(size_t total, const std::function<std::optional<bool>(size_t)>& verifies);

}  // namespace loom
