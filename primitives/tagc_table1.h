// tagc.txt Table 1: the fraction of zeros a gradient needs for lossless compression at a
// ratio (2x: 80%, 4x: 90%, 10x: 98.75%). Shared by compress()'s check and the runtime's
// sparsity=auto. Torch-free.
#pragma once

namespace loom {

inline double tagc_table1_sparsity(double ratio) {
  if (ratio <= 2) return 0.80;
  if (ratio <= 4) return 0.90;
  return 0.9875;
}

}  // namespace loom
