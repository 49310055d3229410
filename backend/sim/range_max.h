// RangeMax: a segment tree of values along a program (the memory around each instruction) with
// adding over a span, the largest in a span and the last index above a threshold, each O(log n).
// The memory-aware passes ask it where walking the span one instruction at a time cost O(n) a
// candidate, most of `loom plan --memory-passes auto`'s time at thousands of ranks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace loom::memory {

class RangeMax {
 public:
  explicit RangeMax(const std::vector<int64_t>& values);

  // Adds `bytes` to every value in [begin, end).
  void add(size_t begin, size_t end, int64_t bytes);
  // The largest value in [begin, end); INT64_MIN when the range is empty.
  int64_t max(size_t begin, size_t end);
  // The last index in [begin, end) whose value exceeds `threshold`, or `end` when none does.
  size_t last_above(size_t begin, size_t end, int64_t threshold);
  // Every value, in order.
  std::vector<int64_t> values();

 private:
  void push_down(size_t node);
  void add(size_t node, size_t lo, size_t hi, size_t begin, size_t end, int64_t bytes);
  int64_t max(size_t node, size_t lo, size_t hi, size_t begin, size_t end);
  size_t last_above(size_t node, size_t lo, size_t hi, size_t begin, size_t end, int64_t threshold);
  void collect(size_t node, size_t lo, size_t hi, std::vector<int64_t>& out);

  size_t n_;
  std::vector<int64_t> max_;      // the largest value under each node, its own pending add included
  std::vector<int64_t> pending_;  // what each node still owes its children
};

}  // namespace loom::memory
