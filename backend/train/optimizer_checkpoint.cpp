#include "backend/train/optimizer_checkpoint.h"

#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>
#include <torch/serialize.h>

#include "backend/build_info.h"
#include "backend/train/checkpoint_json.h"
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
                     {"step", state.step()}, {"shape", r.shape}, {"axis", r.axis}, {"parts", r.parts}, {"part", r.part}});
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
  int64_t axis;
  int parts, part;
  std::vector<int64_t> shape;  // the whole parameter's (empty in checkpoints before tensor parallelism)
};

// The shape of one of `parts` slices of `whole` along `axis` (-1: the whole).
std::vector<int64_t> part_shape(std::vector<int64_t> whole, int64_t axis, int parts) {
  if (axis >= 0) whole[static_cast<size_t>(axis)] /= parts;
  return whole;
}

// Part `part` of `parts` of `whole` along `axis`, flat.
torch::Tensor flat_part(const torch::Tensor& whole, int64_t axis, int parts, int part) {
  return (axis >= 0 ? whole.chunk(parts, axis)[part] : whole).contiguous().view({-1});
}

// That a saved range describes a part of a parameter: `parts` slices along an axis it has.
void check_range(const SavedRange& r, const fs::path& file, size_t i) {
  bool ok = r.offset >= 0 && r.length >= 0 && r.parts >= 1 && r.part >= 0 && r.part < r.parts && r.axis >= -1 &&
            (r.shape.empty() ? r.axis == -1 : r.axis < static_cast<int64_t>(r.shape.size())) &&
            (r.axis >= 0 || r.parts == 1);
  if (!ok)
    throw damaged_checkpoint(file, "range " + std::to_string(i) + " (offset " + std::to_string(r.offset) + ", length " +
                                       std::to_string(r.length) + ", part " + std::to_string(r.part) + " of " +
                                       std::to_string(r.parts) + " along axis " + std::to_string(r.axis) + ") is not part of a parameter");
}

// The saved ranges of every parameter, from the index files under dir/optim.
std::map<std::string, std::vector<SavedRange>> saved_ranges(const fs::path& dir) {
  if (!fs::is_directory(dir / "optim"))
    throw UserError(SourceRange{}, "checkpoint '" + dir.string() + "' has no optimizer states (no optim/ folder)",
                    "it was written by an older loom or with the model only; start a new run from its model.pt instead");
  std::map<std::string, std::vector<SavedRange>> saved;
  for (auto& entry : fs::directory_iterator(dir / "optim")) {
    if (entry.path().extension() != ".json") continue;
    nlohmann::json index = read_checkpoint_json(entry.path());
    fs::path pt = entry.path();
    pt.replace_extension(".pt");
    for (size_t i = 0; i < index.size(); ++i) {
      auto [param, range] = read_checkpoint_fields(entry.path(), [&] {
        const nlohmann::json& e = index.at(i);
        return std::pair{e.at("param").get<std::string>(),
                         SavedRange{pt, i, e.at("offset").get<int64_t>(), e.at("length").get<int64_t>(), e.at("step").get<int64_t>(),
                                    e.value("axis", int64_t{-1}), e.value("parts", 1), e.value("part", 0),
                                    e.value("shape", std::vector<int64_t>{})}};
      });
      check_range(range, entry.path(), i);
      saved[param].push_back(std::move(range));
    }
  }
  return saved;
}

// Reads saved tensors, each archive opened once.
class StateReader {
 public:
  torch::Tensor read(const SavedRange& s, const std::string& what) {
    try {
      auto& a = archives_[s.file];
      if (!a) {
        a = std::make_unique<torch::serialize::InputArchive>();
        a->load_from(s.file.string(), torch::kCPU);  // whole_state assembles them on the host, whichever device saved them
      }
      torch::Tensor t;
      a->read(what + "." + std::to_string(s.index), t);
      if (t.dim() != 1 || t.numel() < s.length)
        throw damaged_checkpoint(s.file, what + "." + std::to_string(s.index) + " holds " + std::to_string(t.numel()) +
                                             " elements where its index says " + std::to_string(s.length));
      return t;
    } catch (const c10::Error& e) {  // a missing or truncated archive, a tensor it lacks
      archives_.erase(s.file);
      if (is_out_of_memory(e)) throw;  // not damage: said as running out of memory (escaped_error_report)
      throw damaged_checkpoint(s.file, e.what_without_backtrace());
    }
  }

 private:
  std::map<fs::path, std::unique_ptr<torch::serialize::InputArchive>> archives_;
};

// One AdamW state of a whole parameter shaped `shape`, put together from its saved ranges (the
// parts' real elements; padding differs between shardings and is dropped); `seen`, when given,
// marks the elements some range covered.
torch::Tensor whole_state(const std::vector<SavedRange>& saved, const std::vector<int64_t>& shape, StateReader& reader,
                          const std::string& what, torch::Tensor* seen = nullptr) {
  int64_t axis = saved[0].axis;
  int parts = saved[0].parts;
  std::vector<int64_t> piece = part_shape(shape, axis, parts);
  int64_t numel = 1;
  for (int64_t n : piece) numel *= n;
  std::vector<torch::Tensor> pieces, covered;
  for (int k = 0; k < parts; ++k) {
    torch::Tensor flat = torch::zeros({numel}), mask = torch::zeros({numel}, torch::kBool);
    for (const SavedRange& s : saved) {
      int64_t n = std::min(s.offset + s.length, numel) - s.offset;
      if (s.part != k || n <= 0) continue;
      flat.narrow(0, s.offset, n).copy_(reader.read(s, what).narrow(0, 0, n));
      mask.narrow(0, s.offset, n).fill_(true);
    }
    pieces.push_back(flat.view(piece));
    covered.push_back(mask.view(piece));
  }
  if (seen) *seen = parts == 1 ? covered[0] : torch::cat(covered, axis);
  return parts == 1 ? pieces[0] : torch::cat(pieces, axis);
}

}  // namespace

void load_optimizer_ranges(const fs::path& dir, const std::vector<OptimizedRange>& ranges, torch::optim::AdamW& optimizer) {
  std::map<std::string, std::vector<SavedRange>> saved = saved_ranges(dir);
  StateReader reader;
  torch::NoGradGuard no_grad;
  for (const OptimizedRange& r : ranges) {
    auto it = saved.find(r.param);
    if (it == saved.end())
      throw UserError(SourceRange{}, "checkpoint '" + dir.string() + "' holds no optimizer state for parameter " + r.param,
                      "resume with the model the checkpoint was written for");
    for (const SavedRange& s : it->second)
      if (s.axis != it->second[0].axis || s.parts != it->second[0].parts)
        throw damaged_checkpoint(s.file, "the ranges of " + r.param + " disagree on the parts it was saved in");
    if (!it->second[0].shape.empty() && it->second[0].shape != r.shape)
      throw UserError(SourceRange{}, "checkpoint '" + dir.string() + "' holds " + r.param + " with another shape than this model's",
                      "resume with the model the checkpoint was written for");
    auto& state = compat::adamw_state(optimizer, r.tensor);
    torch::Tensor seen;
    torch::Tensor avg = whole_state(it->second, r.shape, reader, "exp_avg", &seen);
    torch::Tensor avg_sq = whole_state(it->second, r.shape, reader, "exp_avg_sq");
    // This rank's range of its part (a range may lie wholly in the padding: nothing to load).
    int64_t begin = std::min(r.offset, r.numel);
    int64_t n = std::min(r.offset + r.tensor.numel(), r.numel) - begin;
    state.exp_avg().view({-1}).narrow(0, 0, n).copy_(flat_part(avg, r.axis, r.parts, r.part).narrow(0, begin, n));
    state.exp_avg_sq().view({-1}).narrow(0, 0, n).copy_(flat_part(avg_sq, r.axis, r.parts, r.part).narrow(0, begin, n));
    state.step(it->second[0].step);
    int64_t covered = flat_part(seen, r.axis, r.parts, r.part).narrow(0, begin, n).sum().item<int64_t>();
    if (covered < n)
      throw UserError(SourceRange{}, "checkpoint '" + dir.string() + "' covers " + std::to_string(covered) + " of the " +
                                         std::to_string(n) + " optimizer-state elements this rank needs for " + r.param,
                      "a rank file under optim/ is missing; copy the whole checkpoint folder");
  }
}

}  // namespace loom
