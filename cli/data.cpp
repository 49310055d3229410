// loom data prepare: turn text files into a token file for `loom run --data`.
#include <iostream>

#include "backend/train/output_paths.h"
#include "backend/train/token_data.h"
#include "cli/commands.h"
#include "lang/diagnostics.h"

namespace loom::cli {

void add_data(CLI::App& app, std::function<int()>& run) {
  auto inputs = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>();
  CLI::App* data = app.add_subcommand("data", "Prepare training data");
  data->require_subcommand(1);
  CLI::App* prep = data->add_subcommand("prepare", "Write text files as byte-level tokens (vocabulary 256)");
  prep->add_option("text", *inputs, "text files")->required();
  prep->add_option("--out", *out, "the token file to write")->required();
  prep->callback([&run, inputs, out] {
    run = [inputs, out] {
      try {
        check_output_file(*out, "--out");
        TokenFileHeader h = prepare_token_file(*inputs, *out);
        std::cout << "wrote " << *out << ": " << h.count << " tokens, vocabulary " << h.vocab_size << "\n";
        return kOk;
      } catch (const UserError& e) {
        std::cerr << render(e.diagnostic(), nullptr);
        return kUserError;
      }
    };
  });
}

}  // namespace loom::cli
