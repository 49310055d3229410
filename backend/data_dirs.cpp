#include "backend/data_dirs.h"

#include <filesystem>

#include "backend/train/loom_executable.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

// share/loom/<name> beside the running executable's bin/ when there is one (an installed
// package), else the source tree's `built`.
std::string data_dir(const std::string& built, const std::string& name) {
  std::error_code ignored;
  fs::path installed = fs::canonical(loom_executable(), ignored).parent_path().parent_path() / "share" / "loom" / name;
  return fs::is_directory(installed, ignored) ? installed.string() : built;
}

}  // namespace

std::string stdlib_dir() { return data_dir(LOOM_STDLIB_DIR, "stdlib_schedules"); }
std::string shipped_cluster_dir() { return data_dir(LOOM_CLUSTER_DIR, "clusters"); }

}  // namespace loom
