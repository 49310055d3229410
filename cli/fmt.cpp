// loom fmt: print a .sched file in canonical form (comments kept).
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "grammar/parse.h"
#include "lang/diagnostics.h"
#include "lang/printer.h"

namespace loom::cli {

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
        if (*in_place) std::ofstream(*file, std::ios::binary) << formatted;
        else std::cout << formatted;
        return kOk;
      } catch (const UserError& e) {
        std::cerr << render(e.diagnostic(), &sources);
        return kUserError;
      }
    };
  });
}

}  // namespace loom::cli
