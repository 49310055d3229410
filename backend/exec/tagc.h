// TAGC gradient compression (tagc.txt Algorithm 1), the pieces the sharded executor runs for
// a compress()ed parameter in place of its reduce-scatter:
//   1. add the error-feedback accumulator, sparsify to the sparsity θ (the dropped values are
//      the next accumulator: §3.2's local gradient accumulation);
//   2. all-reduce the index of non-zeros (a bitwise OR: gloo's BOR; a max where OR is missing);
//   3. per shard, a count sketch of the kept values (ratio R: chunk / R buckets, three hashes);
//      the sketches are reduced to each shard's owner (one reduce-scatter = s_p Reduces);
//   4. the owner peels the summed sketch with the index. Peeling is exact: the owner gets the
//      sum of the ranks' kept values. Entries peeling cannot resolve are estimated (noisy).
// The error against the exact reduction is then the ranks' dropped values: elementwise at
// most the sum of their thresholds, the bound loom verify checks.
#pragma once

#include <cstdint>

#include <torch/types.h>

namespace loom::tagc {

struct Config {
  double ratio = 10;        // sketch compression: chunk / ratio buckets
  int index_bits = 1;       // as written in the schedule (the OR bitmap travels as 1 bit per entry)
  double sparsity = 0.9875; // fraction of values zeroed before compression
};

struct Sparsified {
  torch::Tensor kept;     // the values kept (others zero)
  torch::Tensor dropped;  // the values zeroed: the next error-feedback accumulator
  double threshold = 0;   // every dropped value has |v| <= threshold
};
// How many of n values sparsify keeps (ties aside): ceil((1 - sparsity) * n), at least 1.
int64_t kept_count(int64_t n, double sparsity);
// Keeps the kept_count largest magnitudes (ties kept); zeros are never kept.
Sparsified sparsify(const torch::Tensor& grad, double sparsity);

// The index: which entries are non-zero, packed 8 per byte (for an OR all-reduce), and back.
torch::Tensor pack_index(const torch::Tensor& nonzero);
torch::Tensor unpack_index(const torch::Tensor& packed, int64_t n);

// Buckets of the count sketch of a shard of `chunk` entries holding at most `max_nonzero`
// non-zeros: chunk / ratio. Three hashes peel up to 0.81 non-zeros per bucket in a large
// sketch, but a small one fails early (simulated: 14 non-zeros in 27 buckets fail 16% of the
// time, in 84 0.5%), so where the ratio leaves room for peeling (1.23 buckets per non-zero) the
// sketch gets at least 2 per non-zero plus 72. A multiple of 3.
int64_t sketch_length(int64_t chunk, double ratio, int64_t max_nonzero);
// The count sketch of `values` (one shard): each entry added to its three buckets.
torch::Tensor sketch(const torch::Tensor& values, int64_t length);

struct Decoded {
  torch::Tensor values;   // the shard's entries
  int64_t estimated = 0;  // entries peeling could not resolve (estimated, not exact)
};
// Peels `summed` (the sketches of every rank, summed) given the shard's index of non-zeros.
Decoded peel(const torch::Tensor& summed, const torch::Tensor& index);

}  // namespace loom::tagc
