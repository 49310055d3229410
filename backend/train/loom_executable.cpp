#include "backend/train/loom_executable.h"

namespace loom {
namespace {

std::string& named_executable() {
  static std::string path;
  return path;
}

}  // namespace

std::string loom_executable() { return named_executable().empty() ? "/proc/self/exe" : named_executable(); }

void set_loom_executable(const std::string& path) { named_executable() = path; }

bool loom_executable_is_this_program() { return named_executable().empty(); }

}  // namespace loom
