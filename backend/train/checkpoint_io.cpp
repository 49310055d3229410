#include "backend/train/checkpoint_io.h"

#include <cstdio>
#include <fstream>
#include <mutex>
#include <utility>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>
#include <torch/serialize.h>

#include "backend/build_info.h"
#include "backend/train/checkpoint_json.h"
#include "backend/train/output_paths.h"
#include "lang/diagnostics.h"

namespace loom {

namespace fs = std::filesystem;

std::string checkpoint_step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%06lld", static_cast<long long>(step));
  return buf;
}

namespace {

// What `latest` in a --save directory names ("step-000010"); empty when there is none.
std::string latest_step_name(const fs::path& save_dir) {
  std::string name;
  std::ifstream(save_dir / "latest") >> name;
  return name;
}

// What `read` makes of one of a checkpoint's archives, LibTorch's errors in it (a missing or
// truncated file, a tensor it lacks) turned into damaged_checkpoint, as the JSON files' are
// (before, a damaged model.pt was reported as an internal error on every rank). Running out of
// memory while reading is no damage and passes through.
template <class Read>
auto read_checkpoint_archive(const fs::path& file, Read&& read) {
  try {
    return std::forward<Read>(read)();
  } catch (const c10::Error& e) {
    if (is_out_of_memory(e)) throw;  // not damage: said as running out of memory (escaped_error_report)
    throw damaged_checkpoint(file, e.what_without_backtrace());
  }
}

// Where a checkpoint is written before it is renamed into place.
fs::path staging_dir(const std::string& save_dir, int64_t step) {
  return fs::path(save_dir) / (".tmp-" + checkpoint_step_name(step));
}

// Per-rank state that does not reshard (TAGC's error-feedback accumulators): DIR/rank_state/rank-R.pt
// (the tensors) and rank-R.json (their names). Read back only at the same world size.
void save_rank_state(const fs::path& dir, int rank, const std::map<std::string, torch::Tensor>& state) {
  if (state.empty()) return;
  fs::create_directories(dir / "rank_state");
  std::vector<torch::Tensor> tensors;
  nlohmann::json names = nlohmann::json::array();
  for (auto& [name, t] : state) {
    names.push_back(name);
    tensors.push_back(t.cpu());
  }
  std::string base = (dir / "rank_state" / ("rank-" + std::to_string(rank))).string();
  CheckedFileWriter file(base + ".pt");
  torch::save(tensors, file.sink());
  file.finish();
  write_whole_file(base + ".json", names.dump() + "\n");
}

fs::path resolve_checkpoint(const std::string& path) {
  fs::path p(path);
  if (fs::exists(p / "trainer.json")) return p;
  std::string latest = latest_step_name(p);
  if (!latest.empty() && fs::exists(p / latest / "trainer.json")) return p / latest;
  throw UserError(SourceRange{}, "no checkpoint found at '" + path + "'",
                  "pass a directory written by --save (it holds 'latest') or one of its step-N folders");
}

// See write_checkpoint. The directory appears whole or not at all.
void write_checkpoint_files(const TrainOptions& o, comm::Group& world, int64_t steps_done, torch::nn::Module& model,
                            torch::optim::AdamW& opt, const std::vector<OptimizedRange>& ranges, bool writes_optimizer,
                            const CheckpointLayout& layout, const std::map<std::string, torch::Tensor>& rank_state) {
  std::string name = checkpoint_step_name(steps_done);
  fs::path tmp = staging_dir(o.save_dir, steps_done);
  fs::path final_dir = fs::path(o.save_dir) / name;
  bool lead = world.rank() == 0;
  if (lead) {
    fs::create_directories(o.save_dir);
    fs::remove_all(tmp);
    fs::create_directories(tmp);
  }
  comm::barrier(world);
  if (writes_optimizer) save_optimizer_ranges(tmp, world.rank(), ranges, opt);
  save_rank_state(tmp, world.rank(), rank_state);
  if (lead) {
    torch::serialize::OutputArchive archive;
    model.save(archive);
    CheckedFileWriter model_file((tmp / "model.pt").string());
    archive.save_to(model_file.sink());
    model_file.finish();
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    CheckedFileWriter rng_file((tmp / "rng.pt").string());
    torch::save(gen.get_state(), rng_file.sink());
    rng_file.finish();
  }
  comm::barrier(world);
  if (!lead) return;
  nlohmann::json meta{{"step", steps_done}, {"model", o.model}, {"world", world.size()}, {"tp", layout.tp}, {"pp", layout.pp},
                      {"seed", o.seed}, {"format", "loom-checkpoint-3"}};
  write_whole_file((tmp / "trainer.json").string(), meta.dump(2) + "\n");
  // Renames are atomic: a crash leaves either the previous checkpoint or this whole one.
  fs::remove_all(final_dir);
  fs::rename(tmp, final_dir);
  fs::path latest_tmp = fs::path(o.save_dir) / ".latest.tmp";
  write_whole_file(latest_tmp.string(), name + "\n");
  fs::rename(latest_tmp, fs::path(o.save_dir) / "latest");
}

}  // namespace

std::map<std::string, torch::Tensor> load_rank_state(const fs::path& dir, int rank) {
  std::map<std::string, torch::Tensor> out;
  std::string base = (dir / "rank_state" / ("rank-" + std::to_string(rank))).string();
  if (!fs::exists(base + ".json")) return out;
  std::vector<torch::Tensor> tensors;
  read_checkpoint_archive(base + ".pt", [&] { torch::load(tensors, base + ".pt"); });
  nlohmann::json names = read_checkpoint_json(base + ".json");
  read_checkpoint_fields(base + ".json", [&] {
    for (size_t i = 0; i < names.size() && i < tensors.size(); ++i) out[names.at(i).get<std::string>()] = tensors[i];
  });
  return out;
}

// write_checkpoint_files, with a failed write (a full disk) as a user error that says the
// previous checkpoint is intact: `latest` moves only after the new directory is complete.
void write_checkpoint(const TrainOptions& o, comm::Group& world, int64_t steps_done, torch::nn::Module& model,
                      torch::optim::AdamW& opt, const std::vector<OptimizedRange>& ranges, bool writes_optimizer,
                      const CheckpointLayout& layout, const std::map<std::string, torch::Tensor>& rank_state) {
  std::string previous = latest_step_name(o.save_dir);  // `latest` moves only once the new checkpoint is whole
  if (previous == checkpoint_step_name(steps_done)) previous.clear();  // rewritten in place: not intact
  auto failed = [&](const std::string& reason) {
    std::error_code ignored;
    fs::remove_all(staging_dir(o.save_dir, steps_done), ignored);
    return UserError(SourceRange{}, "could not write the checkpoint of step " + std::to_string(steps_done) + " to " + o.save_dir +
                                        ": " + reason,
                    previous.empty() ? "no earlier checkpoint was written; free space (or choose another --save) and run again"
                                     : "the previous checkpoint " + (fs::path(o.save_dir) / previous).string() +
                                           " is intact: free space, then continue with --resume " + o.save_dir);
  };
  try {
    write_checkpoint_files(o, world, steps_done, model, opt, ranges, writes_optimizer, layout, rank_state);
  } catch (const WriteError& e) {
    throw failed(e.what());
  } catch (const fs::filesystem_error& e) {
    throw failed(e.code().message() + " (" + e.path1().string() + ")");
  }
}

std::pair<fs::path, int64_t> load_model_checkpoint(const TrainOptions& o, torch::nn::Module& model,
                                                   const std::vector<torch::Tensor>& params) {
  fs::path dir = resolve_checkpoint(o.resume);
  nlohmann::json meta = read_checkpoint_json(dir / "trainer.json");
  auto [model_name, step] = read_checkpoint_fields(dir / "trainer.json", [&] {
    return std::pair{meta.at("model").get<std::string>(), meta.at("step").get<int64_t>()};
  });
  if (model_name != o.model)
    throw UserError(SourceRange{}, "checkpoint '" + dir.string() + "' is of model " + model_name + ", not " + o.model,
                    "resume with --model " + model_name);
  {
    read_checkpoint_archive(dir / "model.pt", [&] {
      // Onto the parameters' device, whichever the saving run's was: a GPU run's checkpoint
      // resumes on a CPU (a build without CUDA cannot even read CUDA tensors), and a CPU run's on a GPU.
      torch::serialize::InputArchive archive;
      archive.load_from((dir / "model.pt").string(), params.empty() ? torch::Device(torch::kCPU) : params[0].device());
      model.load(archive);
    });
    // The loaded tensors' storage is not resizable, and the sharded executor frees and
    // refills parameter storage: give every parameter storage of its own.
    torch::NoGradGuard no_grad;
    for (auto p : params) p.set_(p.detach().clone());
  }
  {
    read_checkpoint_archive(dir / "rng.pt", [&] {
      torch::Tensor state;
      torch::load(state, (dir / "rng.pt").string());
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(state);  // a tensor that is no generator's state is damage too
    });
  }
  return {dir, step};
}

CheckpointLayout checkpoint_layout(const fs::path& dir) {
  nlohmann::json meta = read_checkpoint_json(dir / "trainer.json");
  CheckpointLayout layout = read_checkpoint_fields(dir / "trainer.json", [&] {
    return CheckpointLayout{meta.at("world").get<int>(), meta.value("tp", 1), meta.value("pp", 1)};
  });
  if (layout.world < 1 || layout.tp < 1 || layout.pp < 1)
    throw damaged_checkpoint(dir / "trainer.json", "its world, tp and pp must be at least 1, not " + layout.describe());
  return layout;
}

std::string CheckpointLayout::describe() const {
  return std::to_string(world) + " rank" + (world == 1 ? "" : "s") + " (tp " + std::to_string(tp) + ", pp " + std::to_string(pp) + ")";
}

}  // namespace loom
