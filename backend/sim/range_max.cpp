#include "backend/sim/range_max.h"

#include <algorithm>
#include <limits>

namespace loom::memory {

// A segment tree with lazy adds: node 1 covers [0, n), node k's children 2k and 2k+1 its halves.
RangeMax::RangeMax(const std::vector<int64_t>& values)
    : n_(values.size()), max_(4 * std::max<size_t>(n_, 1), std::numeric_limits<int64_t>::min()), pending_(max_.size(), 0) {
  if (n_ == 0) return;
  struct Build {
    const std::vector<int64_t>& values;
    std::vector<int64_t>& max;
    void operator()(size_t node, size_t lo, size_t hi) {
      if (hi - lo == 1) {
        max[node] = values[lo];
        return;
      }
      size_t mid = lo + (hi - lo) / 2;
      (*this)(2 * node, lo, mid);
      (*this)(2 * node + 1, mid, hi);
      max[node] = std::max(max[2 * node], max[2 * node + 1]);
    }
  };
  Build{values, max_}(1, 0, n_);
}

void RangeMax::push_down(size_t node) {
  if (pending_[node] == 0) return;
  for (size_t child : {2 * node, 2 * node + 1}) {
    max_[child] += pending_[node];
    pending_[child] += pending_[node];
  }
  pending_[node] = 0;
}

void RangeMax::add(size_t begin, size_t end, int64_t bytes) {
  if (begin < end && bytes != 0) add(1, 0, n_, begin, std::min(end, n_), bytes);
}

void RangeMax::add(size_t node, size_t lo, size_t hi, size_t begin, size_t end, int64_t bytes) {
  if (end <= lo || hi <= begin) return;
  if (begin <= lo && hi <= end) {
    max_[node] += bytes;
    pending_[node] += bytes;
    return;
  }
  push_down(node);
  size_t mid = lo + (hi - lo) / 2;
  add(2 * node, lo, mid, begin, end, bytes);
  add(2 * node + 1, mid, hi, begin, end, bytes);
  max_[node] = std::max(max_[2 * node], max_[2 * node + 1]);
}

int64_t RangeMax::max(size_t begin, size_t end) {
  if (begin >= std::min(end, n_)) return std::numeric_limits<int64_t>::min();
  return max(1, 0, n_, begin, std::min(end, n_));
}

int64_t RangeMax::max(size_t node, size_t lo, size_t hi, size_t begin, size_t end) {
  if (end <= lo || hi <= begin) return std::numeric_limits<int64_t>::min();
  if (begin <= lo && hi <= end) return max_[node];
  push_down(node);
  size_t mid = lo + (hi - lo) / 2;
  return std::max(max(2 * node, lo, mid, begin, end), max(2 * node + 1, mid, hi, begin, end));
}

size_t RangeMax::last_above(size_t begin, size_t end, int64_t threshold) {
  size_t clipped = std::min(end, n_);
  if (begin >= clipped) return end;
  size_t found = last_above(1, 0, n_, begin, clipped, threshold);
  return found == n_ ? end : found;
}

// Right half first, so the first index found is the last; a node whose max is at most the
// threshold is skipped whole, so a search descends O(log n) paths.
size_t RangeMax::last_above(size_t node, size_t lo, size_t hi, size_t begin, size_t end, int64_t threshold) {
  if (end <= lo || hi <= begin || max_[node] <= threshold) return n_;
  if (hi - lo == 1) return lo;
  push_down(node);
  size_t mid = lo + (hi - lo) / 2;
  size_t right = last_above(2 * node + 1, mid, hi, begin, end, threshold);
  return right != n_ ? right : last_above(2 * node, lo, mid, begin, end, threshold);
}

std::vector<int64_t> RangeMax::values() {
  std::vector<int64_t> out;
  out.reserve(n_);
  if (n_ > 0) collect(1, 0, n_, out);
  return out;
}

void RangeMax::collect(size_t node, size_t lo, size_t hi, std::vector<int64_t>& out) {
  if (hi - lo == 1) {
    out.push_back(max_[node]);
    return;
  }
  push_down(node);
  size_t mid = lo + (hi - lo) / 2;
  collect(2 * node, lo, mid, out);
  collect(2 * node + 1, mid, hi, out);
}

}  // namespace loom::memory
