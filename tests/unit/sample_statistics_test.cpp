// The median and mean every measured figure is summarised by (backend/cost/sample_statistics.h).
#include <doctest/doctest.h>

#include "backend/cost/sample_statistics.h"

using namespace loom;

TEST_CASE("the median is the middle value, of an even count the mean of the two middle ones, in any order") {
  CHECK(median({}) == 0);
  CHECK(median({7}) == 7);
  CHECK(median({9, 1, 5}) == 5);
  CHECK(median({10, 2, 8, 4}) == 6);  // (4 + 8) / 2
  CHECK(median({3, 3, 1, 100}) == 3);
  CHECK(median({70, 157, 92, 112, 95, 101}) == 98);  // (95 + 101) / 2: a long upper tail moves it little
}

TEST_CASE("the mean weighs every sample, so a long upper tail moves it") {
  CHECK(mean({}) == 0);
  CHECK(mean({4}) == 4);
  CHECK(mean({1, 2, 3, 10}) == 4);
  CHECK(mean({70, 157, 92, 112, 95, 101}) == doctest::Approx(104.5));
}
