// The loom subcommands: each registers its options on a CLI11 app and returns an exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace loom::cli {

// Exit codes shared by all subcommands.
constexpr int kOk = 0;
constexpr int kUserError = 1;   // the schedule (or data) is wrong
constexpr int kUsageError = 2;  // the command line is wrong

// Adds a subcommand; `run` is set to the function to call when it is chosen.
void add_check(CLI::App& app, std::function<int()>& run);
void add_fmt(CLI::App& app, std::function<int()>& run);
void add_tree(CLI::App& app, std::function<int()>& run);
void add_models(CLI::App& app, std::function<int()>& run);
void add_primitives(CLI::App& app, std::function<int()>& run);
void add_run(CLI::App& app, std::function<int()>& run);
void add_data(CLI::App& app, std::function<int()>& run);
void add_explain(CLI::App& app, std::function<int()>& run);

// The command-line arguments after the program name (a launcher re-runs them in each rank).
const std::vector<std::string>& original_arguments();

}  // namespace loom::cli
