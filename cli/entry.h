// Loom's command line as one call. A program of your own whose main() returns
// loom::cli::command_line(argc, argv) is the whole `loom` command line (check, run, verify,
// explain, simulate, ...), and the models it registers with LOOM_REGISTER_MODEL
// (models/zoo_torch.h) are known to every command: `./my_model run --model my-lm --nproc 2`.
// The `loom` executable is exactly that (cli/loom_main.cpp). A run's ranks are this same
// program: forks of it that call command_line again (backend/train/loom_executable.h), or,
// where the process cannot be forked, the program exec'd again. So what your main() does after
// command_line returns runs in the launcher only, not in the ranks.
#pragma once

namespace loom::cli {

int command_line(int argc, char** argv);

}  // namespace loom::cli
