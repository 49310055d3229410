// loom: the command-line entry point. Subcommands live one per file in cli/.
#include <iostream>

#include "cli/commands.h"

namespace loom::cli {
namespace {
std::vector<std::string> arguments;
}
const std::vector<std::string>& original_arguments() { return arguments; }
}  // namespace loom::cli

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) loom::cli::arguments.push_back(argv[i]);
  CLI::App app{
      "Loom: a schedule language for distributed training of LibTorch models.\n"
      "A model is written once; how it is trained (sharded, tensor-parallel, pipelined,\n"
      "prefetched, offloaded, compressed, checkpointed) is written beside it in a .sched file.\n"
      "Docs: docs/language.md, docs/primitives.md, docs/architecture.md"};
  app.require_subcommand(1);
  std::function<int()> run;
  loom::cli::add_check(app, run);
  loom::cli::add_fmt(app, run);
  loom::cli::add_tree(app, run);
  loom::cli::add_models(app, run);
  loom::cli::add_primitives(app, run);
  loom::cli::add_run(app, run);
  loom::cli::add_data(app, run);
  loom::cli::add_explain(app, run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return loom::cli::kUsageError;
  }
  try {
    return run();
  } catch (const std::exception& e) {
    // User errors are handled by each command; anything reaching here is a Loom bug.
    std::cerr << "loom: internal error: " << e.what() << "\nplease report this with the command that caused it\n";
    return 70;
  }
}
