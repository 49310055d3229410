#include "backend/train/optimizer_checkpoint.h"

#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>
#include <torch/serialize.h>

#include "backend/train/output_paths.h"
#include "backend/torch_compat.h"
#include "lang/diagnostics.h"

namespace loom {

namespace fs = std::filesystem;

void save_optimizer_ranges(const fs::path& dir, int rank, const std::vector<OptimizedRange>& ranges,
                           torch::optim::AdamW& optimizer) {
  fs::create_directories(dir / "optim");
  torch::serialize::OutputArchive archive;
  nlohmann::json index = nlohmann::json::array();
  for (size_t i = 0; i < ranges.size(); ++i) {
    const OptimizedRange& r = ranges[i];
    auto& state = compat::adamw_state(optimizer, r.tensor);
    archive.write("exp_avg." + std::to_string(i), state.exp_avg().reshape({-1}));
    archive.write("exp_avg_sq." + std::to_string(i), state.exp_avg_sq().reshape({-1}));
    index.push_back({{"param", r.param}, {"numel", r.numel}, {"offset", r.offset}, {"length", r.tensor.numel()},
                     {"step", state.step()}});
  }
  std::string base = "rank-" + std::to_string(rank);
  CheckedFileWriter file((dir / "optim" / (base + ".pt")).string());
  archive.save_to(file.sink());
  file.finish();
  write_whole_file((dir / "optim" / (base + ".json")).string(), index.dump(1) + "\n");
}

namespace {

struct SavedRange {
  fs::path file;
  size_t index;
  int64_t offset, length, step;
};

}  // namespace

void load_optimizer_ranges(const fs::path& dir, const std::vector<OptimizedRange>& ranges, torch::optim::AdamW& optimizer) {
  std::map<std::string, std::vector<SavedRange>> saved;
  if (!fs::is_directory(dir / "optim"))
    throw UserError(SourceRange{}, "checkpoint '" + dir.string() + "' has no optimizer states (no optim/ folder)",
                    "it was written by an older loom or with the model only; start a new run from its model.pt instead");
  for (auto& entry : fs::directory_iterator(dir / "optim")) {
    if (entry.path().extension() != ".json") continue;
    auto index = nlohmann::json::parse(std::ifstream(entry.path()));
    fs::path pt = entry.path();
    pt.replace_extension(".pt");
    for (size_t i = 0; i < index.size(); ++i)
      saved[index[i].at("param").get<std::string>()].push_back(
          {pt, i, index[i].at("offset").get<int64_t>(), index[i].at("length").get<int64_t>(), index[i].at("step").get<int64_t>()});
  }
  std::map<fs::path, std::unique_ptr<torch::serialize::InputArchive>> archives;
  auto read = [&](const SavedRange& s, const std::string& what) {
    auto& a = archives[s.file];
    if (!a) {
      a = std::make_unique<torch::serialize::InputArchive>();
      a->load_from(s.file.string());
    }
    torch::Tensor t;
    a->read(what + "." + std::to_string(s.index), t);
    return t;
  };
  torch::NoGradGuard no_grad;
  for (const OptimizedRange& r : ranges) {
    auto it = saved.find(r.param);
    if (it == saved.end())
      throw UserError(SourceRange{}, "checkpoint '" + dir.string() + "' holds no optimizer state for parameter " + r.param,
                      "resume with the model the checkpoint was written for");
    auto& state = compat::adamw_state(optimizer, r.tensor);
    torch::Tensor avg = state.exp_avg().view({-1}), avg_sq = state.exp_avg_sq().view({-1});
    int64_t begin = r.offset, end = r.offset + r.tensor.numel(), covered = 0;
    for (const SavedRange& s : it->second) {
      // Only the parameter's real elements count; padding differs between shardings and stays zero.
      int64_t lo = std::max(begin, s.offset), hi = std::min({end, s.offset + s.length, r.numel});
      if (lo >= hi) continue;
      avg.narrow(0, lo - begin, hi - lo).copy_(read(s, "exp_avg").narrow(0, lo - s.offset, hi - lo));
      avg_sq.narrow(0, lo - begin, hi - lo).copy_(read(s, "exp_avg_sq").narrow(0, lo - s.offset, hi - lo));
      state.step(s.step);
      covered += hi - lo;
    }
    int64_t wanted = std::max<int64_t>(0, std::min(end, r.numel) - begin);
    if (covered < wanted)
      throw UserError(SourceRange{}, "checkpoint '" + dir.string() + "' covers " + std::to_string(covered) + " of the " +
                                         std::to_string(wanted) + " optimizer-state elements this rank needs for " + r.param,
                      "a rank file under optim/ is missing; copy the whole checkpoint folder");
  }
}

}  // namespace loom
