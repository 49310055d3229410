// The program that rank processes run (`loom run` starting its ranks, verify's runs, the
// tuner's trials). Torch-free.
#pragma once

#include <string>

namespace loom {

// This process's own executable ("/proc/self/exe", for a process this one starts), unless
// set_loom_executable() named another: the Python module names the built `loom`, since its own
// process is python. std::filesystem::canonical() of it is a path another program can run.
std::string loom_executable();
void set_loom_executable(const std::string& path);
// Whether loom_executable() is this process's own program (no other was named).
bool loom_executable_is_this_program();

}  // namespace loom
