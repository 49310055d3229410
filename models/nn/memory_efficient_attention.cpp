// Compiled with NDEBUG (CMakeLists.txt): at::RecordFunction has a member only without it, and
// LibTorch is built with it.
#include "models/nn/memory_efficient_attention.h"

#include <ATen/record_function.h>
#include <torch/autograd.h>

#include <cmath>
#include <limits>

namespace loom::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// True where key j lies after query row i (rows row0.. of a square causal mask).
torch::Tensor future_keys(int64_t row0, int64_t rows, int64_t keys, const torch::Device& device) {
  auto options = torch::TensorOptions().dtype(torch::kLong).device(device);
  return torch::arange(keys, options).unsqueeze(0) > torch::arange(row0, row0 + rows, options).unsqueeze(1);
}

// The dtype scores, probabilities and the sums over blocks are kept in: at least fp32.
torch::ScalarType accumulation_dtype(const torch::Tensor& t) { return c10::promoteTypes(t.scalar_type(), torch::kFloat); }

// The keys rows row0..row0+rows-1 see: every key, or under a causal mask those up to the last row.
int64_t visible_keys(int64_t row0, int64_t rows, int64_t keys, bool causal) { return causal ? std::min(keys, row0 + rows) : keys; }

// One block of query rows' scores q_blk k^T / sqrt(d), masked.
torch::Tensor block_scores(const torch::Tensor& q_blk, const torch::Tensor& k, int64_t row0, bool causal, double scale) {
  torch::Tensor s = torch::matmul(q_blk, k.transpose(-2, -1)) * scale;
  if (causal) s.masked_fill_(future_keys(row0, q_blk.size(-2), k.size(-2), s.device()), -std::numeric_limits<float>::infinity());
  return s;
}

struct MemoryEfficientAttention : torch::autograd::Function<MemoryEfficientAttention> {
  // Returns the output and the row log-sum-exp ((B, H, T), in the accumulation dtype).
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               bool causal) {
    double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
    int64_t rows = q.size(-2);
    torch::Tensor out = torch::empty_like(q);
    torch::Tensor lse = torch::empty({q.size(0), q.size(1), rows}, q.options().dtype(accumulation_dtype(q)));
    if (!q.is_meta()) {  // on meta only the shapes are wanted (LibTorch 1.13 lacks some meta kernels)
      for (int64_t r0 = 0; r0 < rows; r0 += kAttentionQueryBlock) {
        int64_t n = std::min(kAttentionQueryBlock, rows - r0), keys = visible_keys(r0, n, k.size(-2), causal);
        torch::Tensor s = block_scores(q.narrow(-2, r0, n), k.narrow(-2, 0, keys), r0, causal, scale).to(lse.scalar_type());
        torch::Tensor m = torch::logsumexp(s, -1, /*keepdim=*/true);
        lse.narrow(-1, r0, n).copy_(m.squeeze(-1));
        out.narrow(-2, r0, n).copy_(torch::matmul((s - m).exp_().to(q.scalar_type()), v.narrow(-2, 0, keys)));
      }
    }
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["causal"] = causal;
    ctx->mark_non_differentiable({lse});
    return {out, lse};
  }

  // dV = P^T dO, dS = P * (dO V^T - rowsum(dO * O)), dQ = dS K / sqrt(d), dK = dS^T Q / sqrt(d),
  // with P recomputed from the saved log-sum-exp, one block of query rows at a time; dK and dV
  // summed over the blocks in the accumulation dtype.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    bool causal = ctx->saved_data["causal"].toBool();
    torch::ScalarType acc = lse.scalar_type(), dtype = q.scalar_type();
    torch::Tensor d_out = grads[0].contiguous();
    double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
    int64_t rows = q.size(-2);
    torch::Tensor row_dot = (d_out.to(acc) * out.to(acc)).sum(-1, /*keepdim=*/true);
    torch::Tensor dq = torch::empty_like(q), dk = torch::zeros_like(k, k.options().dtype(acc)), dv = torch::zeros_like(v, v.options().dtype(acc));
    for (int64_t r0 = 0; r0 < rows; r0 += kAttentionQueryBlock) {
      int64_t n = std::min(kAttentionQueryBlock, rows - r0), keys = visible_keys(r0, n, k.size(-2), causal);
      torch::Tensor q_blk = q.narrow(-2, r0, n), d_out_blk = d_out.narrow(-2, r0, n);
      torch::Tensor k_vis = k.narrow(-2, 0, keys), v_vis = v.narrow(-2, 0, keys);
      torch::Tensor p = (block_scores(q_blk, k_vis, r0, causal, scale).to(acc) - lse.narrow(-1, r0, n).unsqueeze(-1)).exp_();
      dv.narrow(-2, 0, keys) += torch::matmul(p.transpose(-2, -1), d_out_blk.to(acc));
      torch::Tensor dp = torch::matmul(d_out_blk, v_vis.transpose(-2, -1)).to(acc);
      torch::Tensor ds = p * (dp - row_dot.narrow(-2, r0, n));
      dq.narrow(-2, r0, n).copy_(torch::matmul(ds.to(dtype), k_vis) * scale);
      dk.narrow(-2, 0, keys) += torch::matmul(ds.transpose(-2, -1), q_blk.to(acc)) * scale;
    }
    return {dq, dk.to(dtype), dv.to(dtype), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor memory_efficient_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal) {
  TORCH_CHECK(!causal || q.size(-2) == k.size(-2), "causal attention needs as many queries as keys");
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(), "q, k and v must have one dtype");
  // One op to the tracer and the profilers: its inputs, and what its forward keeps.
  std::vector<c10::IValue> inputs;
  for (const torch::Tensor* t : {&q, &k, &v}) inputs.emplace_back(*t);
  at::RecordFunction record(at::RecordScope::FUNCTION);
  if (record.isActive()) record.before("loom::memory_efficient_attention", &inputs);
  variable_list outs = MemoryEfficientAttention::apply(q, k, v, causal);
  if (record.isActive()) {
    std::vector<c10::IValue> outputs;
    for (const torch::Tensor& t : outs) outputs.emplace_back(t);
    record.setOutputs(std::move(outputs));
  }
  return outs[0];
}

}  // namespace loom::nn
