#include "backend/train/loom_executable.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iterator>

#include "backend/build_info.h"
#include "backend/train/scoped_signal.h"

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

// `argv` as main() and exec take it: pointers to its strings, then a null one.
std::vector<char*> c_argv(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  return args;
}

// In a child forked when can_fork_program() said so: the registered main() on `argv`, its output
// flushed; exits with what it returns (an exception that escapes it, not unwound into the code
// that forked, is an internal error).
[[noreturn]] void run_program_in_fork(const std::vector<std::string>& argv) {
  std::vector<char*> args = c_argv(argv);
  int rc = kInternalError;
  try {
    rc = program_main()(static_cast<int>(argv.size()), args.data());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s%s\n", kInternalErrorPrefix, e.what());
  } catch (...) {
    std::fprintf(stderr, "%san exception escaped the program's main()\n", kInternalErrorPrefix);
  }
  std::fflush(nullptr);
  std::exit(rc);
}

}  // namespace

std::string loom_executable() { return named_executable().empty() ? "/proc/self/exe" : named_executable(); }

void set_loom_executable(const std::string& path) { named_executable() = path; }

void set_program_main(int (*main)(int argc, char** argv)) { program_main() = main; }

bool can_fork_program() {
  const char* no_fork = std::getenv("LOOM_NO_FORK");
  return program_main() && named_executable().empty() && !(no_fork && std::string(no_fork) == "1") && single_threaded();
}

void become_program(const std::vector<std::string>& argv, bool forked) {
  // Handlers set to ignore a signal would outlive an exec too: both kinds start as exec'd.
  ScopedSignalHandler::restore_all_in_child();
  if (forked) run_program_in_fork(argv);
  std::vector<char*> args = c_argv(argv);
  execv(args[0], args.data());
  std::fprintf(stderr, "cannot start %s: %s\n", args[0], std::strerror(errno));
  _exit(127);
}

pid_t start_program_logged(const std::vector<std::string>& argv, const std::string& log, bool own_process_group) {
  int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  bool forked = can_fork_program();
  std::fflush(nullptr);  // what this process has written, before a forked child could write it again
  pid_t pid = fork();
  if (pid != 0) {
    int fork_error = errno;
    close(fd);
    if (pid > 0 && own_process_group) setpgid(pid, pid);  // as the child does: whichever runs first
    errno = fork_error;
    return pid;
  }
  if (own_process_group) setpgid(0, 0);
  dup2(fd, STDOUT_FILENO);  // the copies do not close on exec
  dup2(fd, STDERR_FILENO);
  close(fd);
  become_program(argv, forked);
}

}  // namespace loom
