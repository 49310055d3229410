// TAGC's pieces (tagc.txt Algorithm 1) on synthetic gradients: sparsification, the OR index,
// count sketches that add up across ranks, and peeling that is exact at Table 1's levels.
#include "doctest_torch.h"

#include "backend/exec/tagc.h"
#include "primitives/tagc_table1.h"

using namespace loom;

namespace {

// Log-normal magnitudes with random signs, like the transformer gradients of tagc.txt §3.2.
torch::Tensor gradient(int64_t n, int seed) {
  torch::manual_seed(seed);
  torch::Tensor sign = torch::randint(0, 2, {n}).mul(2).sub(1).to(torch::kFloat);
  return torch::randn({n}).mul(2).sub(9).exp().mul(sign);
}

}  // namespace

TEST_CASE("sparsify keeps the largest (1 - θ) magnitudes; what it drops is at most its threshold") {
  torch::Tensor g = gradient(4000, 1);
  tagc::Sparsified s = tagc::sparsify(g, 0.9875);
  CHECK(s.kept.ne(0).sum().item<int64_t>() == 50);  // ceil(0.0125 x 4000)
  CHECK(torch::equal(s.kept + s.dropped, g));
  CHECK(s.dropped.abs().max().item<double>() <= s.threshold);
  CHECK(s.kept.abs().masked_select(s.kept.ne(0)).min().item<double>() >= s.threshold);
}

TEST_CASE("the packed index round-trips, and OR of packed indices is the index of the union") {
  torch::Tensor a = torch::rand({1001}).lt(0.1), b = torch::rand({1001}).lt(0.1);
  CHECK(torch::equal(tagc::unpack_index(tagc::pack_index(a), 1001), a));
  CHECK(tagc::pack_index(a).numel() == 126);  // 1 bit per entry
  torch::Tensor either = tagc::pack_index(a).bitwise_or(tagc::pack_index(b));
  CHECK(torch::equal(tagc::unpack_index(either, 1001), a.logical_or(b)));
}

TEST_CASE("sketches are linear: the sum of two ranks' sketches peels to the sum of their kept values at Table 1's levels") {
  const int64_t n = 20000;
  for (double ratio : {2.0, 4.0, 10.0}) {
    CAPTURE(ratio);
    double theta = tagc_table1_sparsity(ratio);
    // One rank's kept values, as Table 1 assumes (the rows hold at least θ zeros).
    tagc::Sparsified a = tagc::sparsify(gradient(n, 2), theta);
    int64_t m = tagc::sketch_length(n, ratio, tagc::kept_count(n, theta));
    CHECK(m <= n / ratio + 3);  // large enough that the ratio decides
    tagc::Decoded d = tagc::peel(tagc::sketch(a.kept, m), a.kept.ne(0));
    CHECK(d.estimated == 0);
    CHECK(torch::allclose(d.values, a.kept, 1e-5, 1e-12));
  }
  // Two ranks at 10x: the summed sketch decodes to the summed kept values over the union index.
  tagc::Sparsified a = tagc::sparsify(gradient(n, 3), 0.9875), b = tagc::sparsify(gradient(n, 4), 0.9875);
  int64_t m = tagc::sketch_length(n, 10, 2 * tagc::kept_count(n, 0.9875));
  tagc::Decoded d = tagc::peel(tagc::sketch(a.kept, m) + tagc::sketch(b.kept, m), a.kept.ne(0).logical_or(b.kept.ne(0)));
  CHECK(d.estimated == 0);
  CHECK(torch::allclose(d.values, a.kept + b.kept, 1e-5, 1e-12));
}

TEST_CASE("too dense for the sketch: peeling stops, the rest is estimated and said to be") {
  const int64_t n = 20000;
  tagc::Sparsified a = tagc::sparsify(gradient(n, 5), 0.5);  // half the entries against 10x compression
  tagc::Decoded d = tagc::peel(tagc::sketch(a.kept, n / 10), a.kept.ne(0));
  CHECK(d.estimated > 0);
  CHECK(!torch::allclose(d.values, a.kept, 1e-5, 1e-12));
}

TEST_CASE("a small shard's sketch gets 2 buckets per possible non-zero plus 72, so peeling holds there too") {
  CHECK(tagc::sketch_length(256, 10, 14) == 102);     // 2 x 14 + 72, rounded up to a multiple of 3
  CHECK(tagc::sketch_length(327680, 10, 4096) == 32769);  // the ratio decides (32768, rounded up to a multiple of 3)
  CHECK(tagc::sketch_length(100, 10, 1000) == 12);    // too dense to peel: the ratio as asked
  int failures = 0;
  for (int seed = 0; seed < 50; ++seed) {
    tagc::Sparsified a = tagc::sparsify(gradient(512, 100 + seed), 0.9875), b = tagc::sparsify(gradient(512, 200 + seed), 0.9875);
    int64_t m = tagc::sketch_length(512, 10, 2 * tagc::kept_count(512, 0.9875));
    failures += tagc::peel(tagc::sketch(a.kept, m) + tagc::sketch(b.kept, m), a.kept.ne(0).logical_or(b.kept.ne(0))).estimated > 0;
  }
  MESSAGE(failures << " of 50 small two-rank sketches needed estimation");
  CHECK(failures <= 2);
}
