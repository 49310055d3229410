#include "backend/train/loom_executable.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iterator>

#include "backend/build_info.h"

namespace loom {
namespace {

std::string& named_executable() {
  static std::string path;
  return path;
}

int (*&program_main())(int, char**) {
  static int (*main)(int, char**) = nullptr;
  return main;
}

bool single_threaded() {
  std::error_code error;
  std::filesystem::directory_iterator task("/proc/self/task", error), end;
  return !error && std::distance(task, end) == 1;
}

}  // namespace

std::string loom_executable() { return named_executable().empty() ? "/proc/self/exe" : named_executable(); }

void set_loom_executable(const std::string& path) { named_executable() = path; }

void set_program_main(int (*main)(int argc, char** argv)) { program_main() = main; }

bool can_fork_program() {
  const char* no_fork = std::getenv("LOOM_NO_FORK");
  return program_main() && named_executable().empty() && !(no_fork && std::string(no_fork) == "1") && single_threaded();
}

void run_program_in_fork(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int rc = kInternalError;
  try {
    rc = program_main()(static_cast<int>(argv.size()), args.data());
  } catch (const std::exception& e) {  // not unwound into the code that forked
    std::fprintf(stderr, "%s%s\n", kInternalErrorPrefix, e.what());
  } catch (...) {
    std::fprintf(stderr, "%san exception escaped the program's main()\n", kInternalErrorPrefix);
  }
  std::fflush(nullptr);
  std::exit(rc);
}

}  // namespace loom
