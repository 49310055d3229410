#include "backend/passes/gradient_buckets.h"

#include <map>

#include "backend/ir/ir.h"

namespace loom {

std::vector<std::vector<size_t>> plan_gradient_buckets(const std::vector<int64_t>& bytes, const std::vector<int>& declared,
                                                       int64_t bucket_bytes) {
  std::vector<std::vector<size_t>> buckets;
  std::map<int, size_t> declared_at;  // bucket() group -> its bucket
  int64_t filled = 0;
  bool open = false;  // whether the last bucket still takes gradients by size
  for (size_t k = 0; k < bytes.size(); ++k) {
    int group = k < declared.size() ? declared[k] : -1;
    if (group >= 0) {
      auto [it, fresh] = declared_at.emplace(group, buckets.size());
      if (fresh) buckets.emplace_back();
      buckets[it->second].push_back(k);
      open = false;
      continue;
    }
    if (!open || (filled > 0 && filled + bytes[k] > bucket_bytes)) {
      buckets.emplace_back();
      filled = 0;
      open = true;
    }
    buckets.back().push_back(k);
    filled += bytes[k];
  }
  return buckets;
}

int bucket_module_of(const std::string& param, const std::vector<std::string>& modules) {
  for (size_t m = 0; m < modules.size(); ++m)
    if (ir::within(param, modules[m])) return static_cast<int>(m);
  return -1;
}

}  // namespace loom
