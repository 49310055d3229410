#include "backend/cost/collective_cost.h"

#include <algorithm>
#include <stdexcept>

namespace loom {

void drop_spikes(std::vector<CollectiveSample>& samples) {
  for (size_t i = samples.size(); i-- > 1;) samples[i - 1].ms = std::min(samples[i - 1].ms, samples[i].ms);
}

AlphaBeta fit_alpha_beta(const std::vector<CollectiveSample>& samples) {
  double n = static_cast<double>(samples.size()), sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (auto& s : samples) {
    double x = static_cast<double>(s.bytes);
    sx += x, sy += s.ms, sxx += x * x, sxy += x * s.ms;
  }
  double denominator = n * sxx - sx * sx;
  if (samples.size() < 2 || denominator <= 0)
    throw std::invalid_argument("fit_alpha_beta: needs samples of at least two different sizes");
  AlphaBeta fit;
  fit.beta_ms_per_byte = std::max(0.0, (n * sxy - sx * sy) / denominator);
  fit.alpha_ms = std::max(0.0, (sy - fit.beta_ms_per_byte * sx) / n);
  return fit;
}

double predict_ms(const std::vector<CollectiveSample>& samples, const AlphaBeta& fit, int64_t bytes) {
  auto line = [&] { return fit.alpha_ms + fit.beta_ms_per_byte * static_cast<double>(bytes); };
  // Below the sweep a collective is latency-bound: at most the smallest one measured (a line
  // fitted mostly to large sizes can put its intercept far above what small messages take).
  if (!samples.empty() && bytes < samples.front().bytes) return std::min(line(), samples.front().ms);
  if (samples.empty() || bytes > samples.back().bytes) return line();
  auto hi = std::lower_bound(samples.begin(), samples.end(), bytes,
                             [](const CollectiveSample& s, int64_t b) { return s.bytes < b; });
  if (hi->bytes == bytes || hi == samples.begin()) return hi->ms;
  auto lo = hi - 1;
  double t = static_cast<double>(bytes - lo->bytes) / static_cast<double>(hi->bytes - lo->bytes);
  return lo->ms + t * (hi->ms - lo->ms);
}

}  // namespace loom
