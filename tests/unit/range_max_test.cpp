// RangeMax, the spans the memory-aware passes raise and ask the largest of: a worked example, then
// random adds and queries against the same done one value at a time.
#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <random>

#include "backend/sim/range_max.h"

using loom::memory::RangeMax;

TEST_CASE("RangeMax adds over spans and finds the largest value and the last one above a threshold") {
  RangeMax r({5, 1, 7, 3, 2});
  CHECK(r.max(0, 5) == 7);
  CHECK(r.max(3, 5) == 3);
  CHECK(r.max(2, 2) == std::numeric_limits<int64_t>::min());  // an empty span
  CHECK(r.last_above(0, 5, 4) == 2);
  CHECK(r.last_above(0, 2, 4) == 0);
  CHECK(r.last_above(3, 5, 4) == 5);  // none above: the span's end
  CHECK(r.last_above(0, 9, 4) == 2);  // a span past the end stops at it
  CHECK(r.last_above(3, 9, 4) == 9);
  r.add(3, 5, 4);                     // {5, 1, 7, 7, 6}
  CHECK(r.max(3, 5) == 7);
  CHECK(r.last_above(0, 5, 5) == 4);
  CHECK(r.last_above(0, 5, 6) == 3);
  r.add(0, 2, -10);  // {-5, -9, 7, 7, 6}
  CHECK(r.values() == std::vector<int64_t>{-5, -9, 7, 7, 6});
  CHECK(RangeMax({}).values().empty());
  CHECK(RangeMax({}).last_above(0, 0, 0) == 0);
}

TEST_CASE("RangeMax agrees with walking every value, over random adds and queries") {
  std::mt19937 random(7);
  for (size_t n : {1, 2, 3, 17, 64, 300}) {
    std::vector<int64_t> plain(n);
    for (int64_t& v : plain) v = static_cast<int64_t>(random() % 1000);
    RangeMax r(plain);
    for (int round = 0; round < 400; ++round) {
      size_t a = random() % (n + 1), b = random() % (n + 1);
      size_t begin = std::min(a, b), end = std::max(a, b);
      int64_t threshold = static_cast<int64_t>(random() % 3000);
      if (round % 3 == 0) {
        int64_t bytes = static_cast<int64_t>(random() % 200) - 100;
        r.add(begin, end, bytes);
        for (size_t i = begin; i < end; ++i) plain[i] += bytes;
        continue;
      }
      int64_t want_max = std::numeric_limits<int64_t>::min();
      size_t want_last = end;
      for (size_t i = begin; i < end; ++i) {
        want_max = std::max(want_max, plain[i]);
        if (plain[i] > threshold) want_last = i;
      }
      CHECK(r.max(begin, end) == want_max);
      CHECK(r.last_above(begin, end, threshold) == want_last);
    }
    CHECK(r.values() == plain);
  }
}
