#include "verifier/differential/mesh_record_merge.h"

#include <algorithm>
#include <deque>
#include <map>
#include <string>

#include <torch/types.h>

#include "backend/lower/mesh_layout.h"

namespace loom {

namespace {

// The axis along which `tp` parts of `part`'s shape concatenate into `whole`'s shape, or -1
// (also when the shapes are equal: the part is a copy).
int64_t split_axis(const torch::Tensor& part, const torch::Tensor& whole, int tp) {
  if (part.dim() != whole.dim()) return -1;
  int64_t axis = -1;
  for (int64_t a = 0; a < part.dim(); ++a) {
    if (part.size(a) == whole.size(a)) continue;
    if (axis >= 0 || part.size(a) * tp != whole.size(a)) return -1;
    axis = a;
  }
  return axis;
}

// The reduced gradients replica `replica` holds at one stage and tensor-parallel rank, each
// whole and shaped as the rank's slice: with sharded optimizer states each dp rank recorded
// ranges of the flat, padded slice (at their offsets; the ranks of one optimizer block cover
// it), placed here side by side, the replica's own ranges last so that they are what it is
// judged by. Shapes come from the parameters recorded by the replica-0 rank.
std::map<std::string, torch::Tensor> whole_slice_gradients(const std::vector<std::vector<RecordEntry>>& ranks, const MeshLayout& mesh,
                                                           int stage, int tp_rank, int replica) {
  std::map<std::string, torch::Tensor> flat, out;
  std::vector<int> order;
  for (int d = 0; d < mesh.dp; ++d)
    if (d != replica) order.push_back(d);
  order.push_back(replica);
  for (int d : order)
    for (const RecordEntry& e : ranks[mesh.rank_at(stage, d, tp_rank)]) {
      if (e.kind != RecordKind::ParamGrad) continue;
      torch::Tensor part = e.value.reshape({-1});
      torch::Tensor& f = flat[e.name];
      int64_t end = e.index + part.numel();
      if (!f.defined() || f.numel() < end) {
        torch::Tensor grown = torch::zeros({end}, part.options());
        if (f.defined()) grown.narrow(0, 0, f.numel()).copy_(f);
        f = grown;
      }
      f.narrow(0, e.index, part.numel()).copy_(part);
    }
  for (const RecordEntry& e : ranks[mesh.rank_at(stage, 0, tp_rank)])
    if (e.kind == RecordKind::Param && flat.count(e.name))
      out[e.name] = flat[e.name].narrow(0, 0, e.value.numel()).view(e.value.sizes());  // padding dropped
  return out;
}

// A compression bound of the tp ranks' parts, for the whole parameter: the largest of their
// bounds [gradient, after the step], and their estimated entries, summed over the slices of a
// split parameter (the ranks of a whole one each estimated the same entries).
torch::Tensor merged_bound(const std::vector<torch::Tensor>& parts, bool split) {
  torch::Tensor b = parts[0].clone();
  for (size_t t = 1; t < parts.size(); ++t) {
    b[0] = std::max(b[0].item<double>(), parts[t][0].item<double>());
    b[1] = std::max(b[1].item<double>(), parts[t][1].item<double>());
    if (split) b[2] = b[2].item<double>() + parts[t][2].item<double>();
  }
  return b;
}

}  // namespace

std::vector<std::vector<RecordEntry>> merge_mesh_records(const std::vector<std::vector<RecordEntry>>& ranks, int tp, int pp,
                                                         const std::vector<std::vector<RecordEntry>>& plain) {
  int world = static_cast<int>(ranks.size());
  MeshLayout mesh = MeshLayout::of(world, 0, tp, pp);
  std::vector<std::vector<RecordEntry>> out;
  for (int d = 0; d < mesh.dp; ++d) {
    std::map<std::string, torch::Tensor> whole;
    if (d < static_cast<int>(plain.size()))
      for (const RecordEntry& e : plain[d]) whole[e.key()] = e.value;
    std::map<std::string, int> stage_of;  // the stage each quantity is taken from
    std::vector<RecordEntry> merged;
    for (int s = 0; s < pp; ++s) {
      std::map<std::string, std::vector<torch::Tensor>> parts;
      std::vector<const RecordEntry*> order;
      std::deque<RecordEntry> assembled;  // the whole gradients (order points into it)
      std::vector<std::map<std::string, torch::Tensor>> gradients;
      for (int t = 0; t < tp; ++t) gradients.push_back(whole_slice_gradients(ranks, mesh, s, t, d));
      for (int t = 0; t < tp; ++t)
        for (const RecordEntry& e : ranks[mesh.rank_at(s, d, t)]) {
          if (e.kind == RecordKind::ParamGrad) {  // one entry per gradient, whole, at offset 0
            if (!gradients[t].count(e.name)) continue;
            RecordEntry& whole_grad = assembled.emplace_back(e);
            whole_grad.index = 0;
            whole_grad.value = gradients[t].at(e.name);
            std::string key = whole_grad.key();
            if ((stage_of.count(key) && stage_of[key] != s) || static_cast<int>(parts[key].size()) > t) continue;
            stage_of[key] = s;
            if (parts[key].empty()) order.push_back(&whole_grad);
            parts[key].push_back(whole_grad.value);
            continue;
          }
          std::string key = e.key();
          if (stage_of.count(key) && stage_of[key] != s) continue;
          stage_of[key] = s;
          if (parts[key].empty()) order.push_back(&e);
          parts[key].push_back(e.value);
        }
      for (const RecordEntry* e : order) {
        RecordEntry m = *e;
        const std::vector<torch::Tensor>& p = parts[e->key()];
        m.value = p[0];
        auto w = whole.find(e->key());
        int64_t axis = w == whole.end() || static_cast<int>(p.size()) != tp ? -1 : split_axis(p[0], w->second, tp);
        if (axis >= 0) m.value = torch::cat(p, axis);
        if (m.kind == RecordKind::Bound) {
          auto grad = whole.find(RecordEntry{RecordKind::ParamGrad, m.name, 0, 0, {}}.key());
          bool split = grad != whole.end() && gradients[0].count(m.name) && split_axis(gradients[0].at(m.name), grad->second, tp) >= 0;
          m.value = merged_bound(p, split);
        }
        merged.push_back(std::move(m));
      }
    }
    out.push_back(std::move(merged));
  }
  return out;
}

}  // namespace loom
