// loom fmt: print a .sched file in canonical form (comments kept).
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "backend/train/output_paths.h"
#include "cli/commands.h"
#include "grammar/parse.h"
#include "lang/diagnostics.h"
#include "lang/printer.h"

namespace loom::cli {
namespace {

// Replaces `file` with `text` through a file beside it, renamed over it once whole, so that a
// failed write (a full disk) leaves the schedule as it was; false, having said why, if it failed.
bool rewrite(const std::string& file, const std::string& text) {
  std::string beside = file + ".loom-fmt";
  std::error_code ignored;
  try {
    write_whole_file(beside, text);
    std::filesystem::permissions(beside, std::filesystem::status(file).permissions());  // the schedule's, not the default
    std::filesystem::rename(beside, file);
    return true;
  } catch (const WriteError& e) {
    std::cerr << "error: " << e.what() << "\n  hint: free space (or raise the file-size limit); " << file << " is unchanged\n";
  } catch (const std::filesystem::filesystem_error& e) {
    std::cerr << "error: cannot replace " << file << ": " << e.code().message() << "\n  hint: " << file << " is unchanged\n";
  }
  std::filesystem::remove(beside, ignored);
  return false;
}

}  // namespace

void add_fmt(CLI::App& app, std::function<int()>& run) {
  auto file = std::make_shared<std::string>();
  auto in_place = std::make_shared<bool>(false);
  auto check = std::make_shared<bool>(false);
  CLI::App* c = app.add_subcommand("fmt", "Print a .sched file in canonical form");
  c->add_option("file", *file, "the .sched file")->required();
  c->add_flag("-i,--in-place", *in_place, "rewrite the file instead of printing");
  c->add_flag("--check", *check, "exit 1 if the file is not in canonical form");
  c->callback([&run, file, in_place, check] {
    run = [file, in_place, check] {
      std::ifstream in(*file, std::ios::binary);
      if (!in) {
        std::cerr << "error: cannot read '" << *file << "'\n";
        return kUsageError;
      }
      std::stringstream buf;
      buf << in.rdbuf();
      SourceManager sources;
      const SourceFile& src = sources.add(*file, buf.str());
      try {
        std::string formatted = format_program(*parse_program(src));
        if (*check) return formatted == src.text ? kOk : kUserError;
        if (!*in_place) {
          std::cout << formatted;
          return kOk;
        }
        return rewrite(*file, formatted) ? kOk : kUserError;
      } catch (const UserError& e) {
        std::cerr << render(e.diagnostic(), &sources);
        return kUserError;
      }
    };
  });
}

}  // namespace loom::cli
