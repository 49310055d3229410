// What `loom tune` prints: a progress line per trial, the table of the best points (and, with
// sim+run, the real runs that confirmed the simulator's best with the regret), or the same as JSON.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "autotuner/confirm.h"
#include "autotuner/tuner.h"

namespace loom::cli {

struct TuneReport {
  std::string file, model, strategy, evaluator;
  int nproc = 1;
  const tune::TuneResult* search = nullptr;           // the strategy's trials (the simulator's, under sim+run)
  const tune::Confirmation* confirmation = nullptr;   // sim+run: the real runs of its best points
  const tune::Trial* best = nullptr;                  // what the sweep chose (sim+run: the measured best)
};

// One line on stderr per trial: "loom tune: trial 3 of 18  micro_batch=8  1271508 tok/s/rank  (best ...)".
void print_tune_progress(const tune::TuneProgress& p);
void print_tune_table(const TuneReport& r);
// {"space_size", "pruned", "evaluations", "budget_spent", "best", "trials"}, and under sim+run
// "confirmed" and "regret".
nlohmann::json tune_json(const TuneReport& r);

}  // namespace loom::cli
