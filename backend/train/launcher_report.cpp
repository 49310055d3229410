#include "backend/train/launcher_report.h"

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "backend/train/launcher.h"

namespace loom {

std::string elastic_error_file_json(const std::string& said, int64_t unix_seconds) {
  // The form whose message torchrun prints as is (a string, with the time beside it), rather
  // than the Python traceback record its own ErrorHandler writes.
  return nlohmann::json{{"message", said}, {"timestamp", unix_seconds}}.dump() + "\n";
}

void report_to_launcher(const RankFailure& failure) {
  const char* loom_launcher = std::getenv(kLaunchedByLoom);
  if (loom_launcher && std::string(loom_launcher) == "1") return;
  if (const char* error_file = std::getenv("TORCHELASTIC_ERROR_FILE"); error_file && *error_file)
    std::ofstream(error_file) << elastic_error_file_json(failure.said, static_cast<int64_t>(std::time(nullptr)));
  if (failure.consequence) std::this_thread::sleep_for(kConsequenceExitDelay);
}

}  // namespace loom
