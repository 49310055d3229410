// The program that rank processes run (`loom run` starting its ranks, verify's runs, the
// tuner's trials), and how to start it: as a fork of this process that calls its main() again,
// where that can be done, else exec'd anew. Torch-free.
#pragma once

#include <sys/types.h>

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
// In a child just forked: the program on `argv` (argv[0] its path, as exec passes it), run by the
// registered main() where `forked` (what can_fork_program() said before the fork), its output
// flushed and its exit code the child's (an exception that escapes it is an internal error);
// else exec'd (where exec fails: exits 127 after saying why on stderr). Either way it starts
// with the signal handlers from before every ScopedSignalHandler alive at the fork, as an
// exec'd program would.
[[noreturn]] void become_program(const std::vector<std::string>& argv, bool forked);

// Starts the program on `argv` (argv[0] its path) in a child whose standard output and error go
// to `log` (created, or emptied): forked or exec'd as become_program() says. Where
// `own_process_group`, the child leads a process group of its own, so that one kill reaches it
// and whatever it starts. Returns the child's pid, or -1 (errno saying why) where the log cannot
// be written or no process can be made.
pid_t start_program_logged(const std::vector<std::string>& argv, const std::string& log, bool own_process_group);

}  // namespace loom
