// The program that rank processes run (`loom run` starting its ranks, verify's runs, the
// tuner's trials), and how to start it: as a fork of this process that calls its main() again,
// where that can be done, else exec'd anew. Torch-free.
#pragma once

#include <string>
#include <vector>

namespace loom {

// This process's own executable ("/proc/self/exe", for a process this one starts), unless
// set_loom_executable() named another: the Python module names the built `loom`, since its own
// process is python. std::filesystem::canonical() of it is a path another program can run.
std::string loom_executable();
void set_loom_executable(const std::string& path);

// The program's main(), which a child forked from this process runs instead of exec'ing the
// program again, so that LibTorch (a second to load here) is loaded once. cli::command_line
// registers itself, except in a CUDA build (a CUDA context does not survive a fork).
void set_program_main(int (*main)(int argc, char** argv));
// Whether a child forked now can be the program: a main() was registered, no other executable was
// named, LOOM_NO_FORK is not 1, and this process has one thread (a fork keeps only the caller's).
bool can_fork_program();
// In a child forked when can_fork_program() said so: the registered main() on `argv` (argv[0] the
// program's path, as exec would pass it), its output flushed; exits with what it returns (an
// exception that escapes it is an internal error). The signal handlers are this process's: one
// that installed its own for the fork's time puts the earlier ones back in the child first.
[[noreturn]] void run_program_in_fork(const std::vector<std::string>& argv);

}  // namespace loom
