// The time of a collective as a function of the bytes it moves, from measured samples
// (deepcompile.txt §4.2's T_c(V), lins.txt §IV-A's alpha-beta model): an alpha-beta line
// fitted by least squares, and the samples themselves as a table. Inside the measured range a
// prediction interpolates linearly between the two nearest samples; outside it, the line is used.
// Torch-free.
#pragma once

#include <cstdint>
#include <vector>

namespace loom {

struct CollectiveSample {
  int64_t bytes = 0;
  double ms = 0;
};

struct AlphaBeta {
  double alpha_ms = 0;           // latency: the time of an empty collective
  double beta_ms_per_byte = 0;   // inverse bandwidth
};

// Moving fewer bytes never takes longer: each sample (sorted by bytes) is lowered to the
// smallest time of the samples at or above its size. A small collective measured while the
// machine was busy elsewhere (a spike of the median of several runs, seen on a shared VM)
// otherwise sets the time of every message of about its size.
void drop_spikes(std::vector<CollectiveSample>& samples);

// Least-squares fit of ms = alpha + beta * bytes. Needs two samples of different sizes;
// alpha and beta are clamped at zero (a negative latency or bandwidth means noise).
AlphaBeta fit_alpha_beta(const std::vector<CollectiveSample>& samples);

// The predicted time of moving `bytes`: table interpolation inside the sampled range, the
// alpha-beta line above it, and below it the line capped at the smallest sample's time.
// `samples` must be sorted by bytes.
double predict_ms(const std::vector<CollectiveSample>& samples, const AlphaBeta& fit, int64_t bytes);

}  // namespace loom
