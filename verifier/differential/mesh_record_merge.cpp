#include "verifier/differential/mesh_record_merge.h"

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
      for (int t = 0; t < tp; ++t)
        for (const RecordEntry& e : ranks[mesh.rank_at(s, d, t)]) {
          std::string key = e.key();
          if (stage_of.count(key) && stage_of[key] != s) continue;
          stage_of[key] = s;
          if (parts[key].empty()) order.push_back(&e);
          parts[key].push_back(e.value);
        }
      for (const RecordEntry* e : order) {
        RecordEntry m = *e;
        const std::vector<torch::Tensor>& p = parts[e->key()];
        auto w = whole.find(e->key());
        int64_t axis = w == whole.end() || static_cast<int>(p.size()) != tp ? -1 : split_axis(p[0], w->second, tp);
        if (axis >= 0) m.value = torch::cat(p, axis);
        merged.push_back(std::move(m));
      }
    }
    out.push_back(std::move(merged));
  }
  return out;
}

}  // namespace loom
