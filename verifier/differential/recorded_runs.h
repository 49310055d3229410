// loom verify's runs: one step of the plain model, of the whole schedule, or of a prefix of its
// directive trace, each a `loom run` of loom_executable() (launcher.h) in a process of its own, recording the
// step (step_record.h) under a scratch folder. The plain run holds the replicas of a mesh(tp, pp)
// schedule: nproc / (tp * pp) ranks, the same batch per replica.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/train/trainer.h"
#include "verifier/differential/step_record.h"

namespace loom {

class RecordedRuns {
 public:
  // `train`: the run's options (schedule, model, batch, seed, ...); the scheduled runs start
  // `nproc` ranks and the plain one `plain_ranks`; records and logs go under `dir`.
  RecordedRuns(const TrainOptions& train, int nproc, int plain_ranks, std::filesystem::path dir);

  // Runs one side (`prefix` >= 0: only that many of the schedule's directives); false, with
  // the failure and the log's last lines in `error`, when it did not run.
  bool run(const std::string& name, bool scheduled, int64_t prefix, std::string& error);

  // The ranks' records of a run; given the plain run's, those of a mesh(tp, pp) run are
  // reassembled, per replica, into the plain run's shapes (mesh_record_merge.h).
  std::vector<std::vector<RecordEntry>> records(const std::string& name,
                                                const std::vector<std::vector<RecordEntry>>* plain = nullptr) const;
  // The step's loss as the run's metrics wrote it.
  double loss(const std::string& name) const;
  // How many runs were started.
  int count() const { return count_; }

 private:
  const TrainOptions& train_;
  int nproc_, plain_ranks_;
  std::filesystem::path dir_;
  std::vector<std::string> common_;
  std::vector<std::string> knobs_;  // --set name=value, for the schedule's tune() knobs
  int count_ = 0;
};

}  // namespace loom
