// loom verify's bisection over prefixes of the directive trace (verifier/differential/bisection.h),
// on synthetic verdicts: which prefixes verify, which cannot run.
#include <doctest/doctest.h>

#include <set>

#include "verifier/differential/bisection.h"

using namespace loom;

TEST_CASE("bisection names the directive whose addition breaks equivalence, in log2 runs") {
  // Directive 6 (1-based) of 9 breaks it: prefixes of 0..5 directives verify, 6..9 do not.
  int runs = 0;
  Bisection b = bisect_directives(9, [&](size_t k) -> std::optional<bool> {
    ++runs;
    return k < 6;
  });
  CHECK(b.done);
  CHECK(b.good == 5);
  CHECK(b.bad == 6);  // the suspect: directive 6, alone
  CHECK(b.unrunnable.empty());
  CHECK(runs <= 4);
  // The first directive breaks it; the last one does.
  CHECK(bisect_directives(9, [](size_t k) -> std::optional<bool> { return k < 1; }).bad == 1);
  Bisection last = bisect_directives(9, [](size_t k) -> std::optional<bool> { return k < 9; });
  CHECK(last.good == 8);
  CHECK(last.bad == 9);
}

TEST_CASE("bisection steps over prefixes that cannot run, and leaves several suspects when it must") {
  // Directive 5 breaks it; prefixes 3 and 4 cannot run on their own (a half-built schedule).
  std::set<size_t> cannot{3, 4};
  Bisection b = bisect_directives(8, [&](size_t k) -> std::optional<bool> {
    if (cannot.count(k)) return std::nullopt;
    return k < 5;
  });
  CHECK(b.bad == 5);
  CHECK(b.good == 2);  // directives 3, 4 and 5 stay suspect
  CHECK(std::set<size_t>(b.unrunnable.begin(), b.unrunnable.end()) == cannot);
  CHECK(b.unrunnable.size() == cannot.size());  // each tried once
  // Nothing between the plain model and the whole schedule runs: every directive is suspect.
  Bisection none = bisect_directives(4, [](size_t) -> std::optional<bool> { return std::nullopt; });
  CHECK(none.good == 0);
  CHECK(none.bad == 4);
  CHECK(none.unrunnable.size() == 3);
}
