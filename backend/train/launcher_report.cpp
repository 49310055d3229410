#include "backend/train/launcher_report.h"

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <thread>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "backend/train/launcher.h"

namespace loom {
namespace {

bool under_another_launcher() {
  const char* loom_launcher = std::getenv(kLaunchedByLoom);
  return !(loom_launcher && std::string(loom_launcher) == "1");
}

}  // namespace

std::string elastic_error_file_json(const std::string& said, int64_t unix_seconds) {
  // The form whose message torchrun prints as is (a string, with the time beside it), rather
  // than the Python traceback record its own ErrorHandler writes. A path in the message may
  // hold bytes that are not UTF-8: replaced, not refused.
  return nlohmann::json{{"message", said}, {"timestamp", unix_seconds}}.dump(-1, ' ', false,
                                                                             nlohmann::json::error_handler_t::replace) +
         "\n";
}

void write_launcher_error_file(const RankFailure& failure) {
  const char* file = std::getenv("TORCHELASTIC_ERROR_FILE");
  if (!under_another_launcher() || !file || !*file) return;
  int64_t exits_at = static_cast<int64_t>(std::time(nullptr)) + (failure.consequence ? kConsequenceExitDelay.count() : 0);
  std::string staged = std::string(file) + "." + std::to_string(getpid()) + ".tmp";  // ranks started by hand may share the file
  bool written = false;
  {
    std::ofstream out(staged, std::ios::trunc);
    out << elastic_error_file_json(failure.said, exits_at);
    out.close();
    written = !out.fail();
  }
  if (!written || std::rename(staged.c_str(), file) != 0) std::remove(staged.c_str());
}

void delay_consequence_exit(const RankFailure& failure) {
  if (failure.consequence && under_another_launcher()) std::this_thread::sleep_for(kConsequenceExitDelay);
}

}  // namespace loom
