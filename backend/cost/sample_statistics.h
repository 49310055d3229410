// The two statistics Loom takes of measured times (of steps, ops, collectives): the median, which
// a run's typical step is, and the mean, which a sum of parts (a simulated step) adds up. Torch-free.
#pragma once

#include <vector>

namespace loom {

// The middle value; of an even count, the mean of the two middle ones. 0 for none.
double median(std::vector<double> samples);
// 0 for none.
double mean(const std::vector<double>& samples);

}  // namespace loom
