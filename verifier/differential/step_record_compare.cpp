#include "verifier/differential/step_record_compare.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

namespace loom {

Tolerance default_tolerance(const std::string& dtype) {
  if (dtype == "bf16") return {dtype, 1e-2, 5e-2};
  if (dtype == "fp16") return {dtype, 1e-3, 1e-2};
  return {"fp32", 1e-5, 1e-4};
}

namespace {

constexpr RecordKind kKinds[] = {RecordKind::Output, RecordKind::Loss, RecordKind::OutputGrad, RecordKind::InputGrad,
                                 RecordKind::ParamGrad, RecordKind::Param};

std::string owner_of(const RecordEntry& e) {
  if (e.kind != RecordKind::ParamGrad && e.kind != RecordKind::Param) return e.name;
  size_t dot = e.name.rfind('.');
  return dot == std::string::npos ? std::string("model") : e.name.substr(0, dot);
}

QuantityDifference difference(const RecordEntry& plain, const torch::Tensor& expected, const torch::Tensor& got, int rank,
                              const Tolerance& tol) {
  QuantityDifference d{plain.kind, plain.name, owner_of(plain), plain.call, plain.index, rank};
  torch::Tensor a = expected.to(torch::kDouble), b = got.to(torch::kDouble);
  double scale = a.numel() ? a.abs().max().item<double>() : 0.0;
  d.allowed = tol.atol + tol.rtol * scale;
  if (a.sizes() != b.sizes()) {
    d.max_abs = std::numeric_limits<double>::infinity();
    d.note = "shapes differ";
  } else if (a.numel()) {
    d.max_abs = (a - b).abs().max().item<double>();
    if (std::isnan(d.max_abs)) d.max_abs = std::numeric_limits<double>::infinity();
  }
  return d;
}

// Stated error bounds (compress()): [gradient, after the step, estimated entries] per parameter.
using Bounds = std::map<std::string, std::array<double, 3>>;

Bounds stated_bounds(const std::vector<RecordEntry>& scheduled) {
  Bounds bound;
  for (const RecordEntry& s : scheduled)
    if (s.kind == RecordKind::Bound) {
      torch::Tensor v = s.value.to(torch::kDouble).reshape({-1});
      bound[s.name] = {v[0].item<double>(), v[1].item<double>(), v[2].item<double>()};
    }
  return bound;
}

// A parameter's value after the step, where its plain gradient `grad` has elements the comparison
// cannot tell from zero: there AdamW's step may go either way, so those elements are allowed its
// bound of 2 lr on top. Counts the elements only that allowance keeps within.
void allow_unresolved_updates(QuantityDifference& d, const torch::Tensor& expected, const torch::Tensor& got, const torch::Tensor& grad,
                              const Tolerance& tol, int64_t& unresolved_updates) {
  torch::Tensor g = grad.to(torch::kDouble).reshape(expected.sizes()).abs();
  torch::Tensor unresolved = g <= tol.atol + tol.rtol * g.max().item<double>();
  torch::Tensor diff = (expected.to(torch::kDouble) - got.to(torch::kDouble)).abs();
  double resolved_max = diff.masked_fill(unresolved, 0).max().item<double>();
  double unresolved_max = diff.masked_fill(unresolved.logical_not(), 0).max().item<double>();
  unresolved_updates += (diff.gt(d.allowed) & unresolved).sum().item<int64_t>();
  if (unresolved_max > d.allowed + 2 * tol.step_lr) {
    d.max_abs = unresolved_max;
    d.allowed += 2 * tol.step_lr;
    d.note = "beyond AdamW's 2 lr where the gradient is within the tolerance of zero";
  } else {
    d.max_abs = resolved_max;
  }
}

// A compress()ed parameter's gradient or value: lossy by design, so checked against the
// compression's own bound on top of the tolerance.
void allow_compression(QuantityDifference& d, const std::array<double, 3>& bound, bool grad, bool first_rank, BoundedSummary& compressed) {
  double extra = grad ? bound[0] : bound[1];
  d.allowed += extra;
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", extra);
  d.note = std::string("compressed: ") + (grad ? "TAGC's bound " : "one AdamW step's bound ") + text;
  if (grad && bound[2] > 0) d.note += ", but peeling left " + std::to_string(static_cast<int64_t>(bound[2])) + " entries to estimation";
  ++compressed.compared;
  if (grad) compressed.largest_gradient_bound = std::max(compressed.largest_gradient_bound, extra);
  if (grad && first_rank) compressed.estimated += static_cast<int64_t>(bound[2]);
}

}  // namespace

RecordComparison compare_step_records(const std::vector<std::vector<RecordEntry>>& plain,
                                      const std::vector<std::vector<RecordEntry>>& scheduled, const Tolerance& tol) {
  RecordComparison out;
  for (RecordKind k : kKinds) out.kinds.push_back({k});
  auto summary = [&](RecordKind k) -> KindSummary& {
    for (auto& s : out.kinds)
      if (s.kind == k) return s;
    return out.kinds.front();
  };
  size_t first_position = std::numeric_limits<size_t>::max();
  for (size_t r = 0; r < plain.size() && r < scheduled.size(); ++r) {
    // Where each quantity stands in the plain run's step order: the earliest divergence is the first.
    std::map<std::string, size_t> position;
    std::map<std::string, size_t> full_grad;  // the plain run holds whole gradients
    for (size_t i = 0; i < plain[r].size(); ++i) {
      position[plain[r][i].key()] = i;
      if (plain[r][i].kind == RecordKind::ParamGrad) full_grad[plain[r][i].name] = i;
    }
    int64_t matched = 0;  // quantities other than reduced gradients found in both runs
    Bounds bound = stated_bounds(scheduled[r]);
    for (const RecordEntry& s : scheduled[r]) {
      if (s.kind == RecordKind::Bound) continue;
      size_t at = 0;
      torch::Tensor expected, got = s.value;
      if (s.kind == RecordKind::ParamGrad) {
        // This rank's part of the gradient, at its offset in the flat parameter (padding dropped).
        auto it = full_grad.find(s.name);
        if (it == full_grad.end()) continue;
        at = it->second;
        torch::Tensor flat = plain[r][at].value.reshape({-1});
        int64_t from = std::min(s.index, flat.numel());
        int64_t n = std::min(s.value.numel(), flat.numel() - from);
        expected = flat.narrow(0, from, n);
        got = s.value.reshape({-1}).narrow(0, 0, n);
      } else {
        auto it = position.find(s.key());
        if (it == position.end()) {
          ++out.recorded_by_one_run;
          continue;
        }
        at = it->second;
        expected = plain[r][at].value;
        ++matched;
      }
      QuantityDifference d = difference(plain[r][at], expected, got, static_cast<int>(r), tol);
      d.index = s.index;
      auto grad = full_grad.find(s.name);
      if (s.kind == RecordKind::Param && tol.step_lr > 0 && !d.within() && grad != full_grad.end() &&
          plain[r][grad->second].value.numel() == expected.numel() && expected.sizes() == got.sizes())
        allow_unresolved_updates(d, expected, got, plain[r][grad->second].value, tol, out.unresolved_updates);
      auto b = bound.find(s.name);
      if (b != bound.end() && (s.kind == RecordKind::ParamGrad || s.kind == RecordKind::Param))
        allow_compression(d, b->second, s.kind == RecordKind::ParamGrad, r == 0, out.compressed);
      KindSummary& ks = summary(s.kind);
      ++ks.compared;
      if (!ks.largest || d.max_abs > ks.largest->max_abs) ks.largest = d;
      // Ranks are visited in order, so a tie goes to the lowest rank.
      if (!d.within() && at < first_position) {
        first_position = at;
        out.first_divergence = d;
      }
    }
    // What the plain run recorded and the scheduled one did not.
    out.recorded_by_one_run += static_cast<int64_t>(plain[r].size() - full_grad.size()) - matched;
  }
  return out;
}

}  // namespace loom
