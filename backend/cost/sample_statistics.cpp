#include "backend/cost/sample_statistics.h"

#include <algorithm>
#include <cstddef>

namespace loom {

double median(std::vector<double> samples) {
  if (samples.empty()) return 0;
  size_t n = samples.size();
  auto upper = samples.begin() + static_cast<std::ptrdiff_t>(n / 2);
  std::nth_element(samples.begin(), upper, samples.end());
  if (n % 2) return *upper;
  return (*std::max_element(samples.begin(), upper) + *upper) / 2;  // the lower middle: the largest below
}

double mean(const std::vector<double>& samples) {
  if (samples.empty()) return 0;
  double sum = 0;
  for (double x : samples) sum += x;
  return sum / static_cast<double>(samples.size());
}

}  // namespace loom
