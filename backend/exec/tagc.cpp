#include "backend/exec/tagc.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <vector>

namespace loom::tagc {
namespace {

constexpr int kHashes = 3;

// splitmix64's finaliser: neighbouring entries land in unrelated buckets (a linear hash
// sends entries equal modulo the table size to the same bucket under every hash).
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Bucket of entry `i` under hash j: the three hashes address disjoint thirds of the sketch,
// so an entry never meets itself.
int64_t bucket(int64_t i, int j, int64_t third) {
  return j * third + static_cast<int64_t>(mix(static_cast<uint64_t>(i) * kHashes + j) % static_cast<uint64_t>(third));
}

// The value of each bit of a byte, for packing 8 entries per byte and unpacking them.
torch::Tensor bit_values(const torch::Tensor& like) {
  return torch::tensor({1, 2, 4, 8, 16, 32, 64, 128}, like.options().dtype(torch::kInt32));
}

}  // namespace

int64_t kept_count(int64_t n, double sparsity) {
  return std::clamp<int64_t>(static_cast<int64_t>(std::ceil((1 - sparsity) * static_cast<double>(n))), 1, std::max<int64_t>(n, 1));
}

Sparsified sparsify(const torch::Tensor& grad, double sparsity) {
  torch::NoGradGuard no_grad;
  Sparsified s;
  int64_t n = grad.numel();
  int64_t keep = kept_count(n, sparsity);
  torch::Tensor magnitude = grad.abs();
  s.threshold = n ? std::get<0>(magnitude.reshape({-1}).topk(keep)).min().item<double>() : 0.0;
  torch::Tensor mask = magnitude.ge(s.threshold).logical_and(grad.ne(0));
  s.kept = grad * mask;
  s.dropped = grad - s.kept;
  // Every dropped value is below the threshold (ties were kept), or the gradient was all zeros.
  s.threshold = s.dropped.numel() ? s.dropped.abs().max().item<double>() : 0.0;
  return s;
}

torch::Tensor pack_index(const torch::Tensor& nonzero) {
  int64_t n = nonzero.numel();
  int64_t bytes = (n + 7) / 8;
  torch::Tensor bits = torch::zeros({bytes * 8}, nonzero.options().dtype(torch::kUInt8));
  bits.narrow(0, 0, n).copy_(nonzero.reshape({-1}).to(torch::kUInt8));
  return (bits.view({bytes, 8}).to(torch::kInt32) * bit_values(bits)).sum(1).to(torch::kUInt8);
}

torch::Tensor unpack_index(const torch::Tensor& packed, int64_t n) {
  torch::Tensor bits = packed.to(torch::kInt32).unsqueeze(1).bitwise_and(bit_values(packed)).ne(0);
  return bits.reshape({-1}).narrow(0, 0, n);
}

int64_t sketch_length(int64_t chunk, double ratio, int64_t max_nonzero) {
  int64_t m = static_cast<int64_t>(std::ceil(static_cast<double>(chunk) / ratio));
  int64_t nonzero = std::min(max_nonzero, chunk);
  // Peelable at this ratio in a large sketch: make sure a small one is too. Too dense: the
  // ratio is what was asked for; peeling will fail and the rest is estimated.
  if (m * 100 >= 123 * nonzero) m = std::max(m, 2 * nonzero + 72);
  return std::max<int64_t>(kHashes, (m + kHashes - 1) / kHashes * kHashes);
}

torch::Tensor sketch(const torch::Tensor& values, int64_t length) {
  torch::NoGradGuard no_grad;
  torch::Tensor flat = values.reshape({-1});
  torch::Tensor out = torch::zeros({length}, flat.options());
  torch::Tensor positions = flat.nonzero().reshape({-1});
  torch::Tensor picked = flat.index_select(0, positions);
  // The hashes run on the CPU over the (few) non-zeros.
  torch::Tensor cpu = positions.to(torch::kCPU).contiguous();
  const int64_t* at = cpu.data_ptr<int64_t>();
  for (int j = 0; j < kHashes; ++j) {
    std::vector<int64_t> b(static_cast<size_t>(cpu.numel()));
    for (size_t k = 0; k < b.size(); ++k) b[k] = bucket(at[k], j, length / kHashes);
    out.index_add_(0, torch::tensor(b, torch::kLong).to(flat.device()), picked);
  }
  return out;
}

Decoded peel(const torch::Tensor& summed, const torch::Tensor& index) {
  torch::NoGradGuard no_grad;
  const int64_t m = summed.numel(), third = m / kHashes, n = index.numel();
  torch::Tensor cpu_index = index.reshape({-1}).to(torch::kCPU).to(torch::kBool);
  std::vector<double> residual(m);
  {
    torch::Tensor s = summed.to(torch::kCPU).to(torch::kDouble).contiguous();
    std::copy(s.data_ptr<double>(), s.data_ptr<double>() + m, residual.begin());
  }
  // The unknowns (index set) and, per bucket, how many unresolved unknowns it holds and their sum of ids.
  std::vector<int64_t> unknowns;
  const bool* set = cpu_index.data_ptr<bool>();
  for (int64_t i = 0; i < n; ++i)
    if (set[i]) unknowns.push_back(i);
  std::vector<int64_t> count(m, 0), id_sum(m, 0);
  for (int64_t i : unknowns)
    for (int j = 0; j < kHashes; ++j) {
      int64_t b = bucket(i, j, third);
      ++count[b];
      id_sum[b] += i;
    }
  std::vector<double> value(n, 0.0);
  std::vector<char> resolved(n, 0);
  std::deque<int64_t> pure;
  for (int64_t b = 0; b < m; ++b)
    if (count[b] == 1) pure.push_back(b);
  while (!pure.empty()) {
    int64_t b = pure.front();
    pure.pop_front();
    if (count[b] != 1) continue;
    int64_t i = id_sum[b];  // the one unknown left in the bucket
    double v = residual[b];
    value[i] = v;
    resolved[i] = 1;
    for (int j = 0; j < kHashes; ++j) {
      int64_t c = bucket(i, j, third);
      residual[c] -= v;
      id_sum[c] -= i;
      if (--count[c] == 1) pure.push_back(c);
    }
  }
  Decoded d;
  // Left over (a 2-core of the hash graph): estimate from the least shared bucket.
  for (int64_t i : unknowns) {
    if (resolved[i]) continue;
    ++d.estimated;
    int64_t best = bucket(i, 0, third);
    for (int j = 1; j < kHashes; ++j) {
      int64_t c = bucket(i, j, third);
      if (count[c] < count[best]) best = c;
    }
    value[i] = residual[best] / static_cast<double>(std::max<int64_t>(count[best], 1));
  }
  d.values = torch::tensor(value, torch::TensorOptions().dtype(torch::kDouble)).to(summed.options());
  return d;
}

}  // namespace loom::tagc
