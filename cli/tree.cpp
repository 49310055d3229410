// loom tree / loom models: what a schedule can select from.
#include <iostream>

#include "cli/commands.h"
#include "lang/diagnostics.h"
#include "models/zoo.h"
#include "primitives/all.h"
#include "primitives/registry.h"

namespace loom::cli {

void add_tree(CLI::App& app, std::function<int()>& run) {
  auto model = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  CLI::App* c = app.add_subcommand("tree", "List a model's modules: paths, types, parameter shapes");
  c->add_option("--model", *model, "reference model (see `loom models`)")->required();
  c->add_flag("--json", *json, "print the tree as JSON");
  c->callback([&run, model, json] {
    run = [model, json] {
      try {
        auto tree = module_tree_of(*model);
        if (*json) {
          std::cout << module_tree_to_json(*tree) << "\n";
          return kOk;
        }
        for (int i = 0; i < tree->size(); ++i) {
          const ModuleNode& n = tree->node(i);
          std::cout << (n.path.empty() ? "(root)" : n.path) << "  " << n.type;
          for (auto& p : n.params) {
            std::cout << "  " << p.name << "[";
            for (size_t d = 0; d < p.shape.size(); ++d) std::cout << (d ? "," : "") << p.shape[d];
            std::cout << "]" << (p.tied_to.empty() ? "" : "=" + p.tied_to);
          }
          std::cout << "\n";
        }
        std::cout << tree->parameter_count() << " parameters\n";
        return kOk;
      } catch (const UserError& e) {
        std::cerr << render(e.diagnostic(), nullptr);
        return kUsageError;
      }
    };
  });
}

void add_primitives(CLI::App& app, std::function<int()>& run) {
  app.add_subcommand("primitives", "List the schedule primitives with their signatures")->callback([&run] {
    run = [] {
      register_builtin_primitives();
      const char* scopes[] = {"sch only", "any module", "below the root"};
      for (auto& spec : PrimitiveRegistry::global().all()) {
        std::cout << signature(spec) << "\n    " << spec.doc << " [" << scopes[static_cast<int>(spec.scope)] << "]\n";
        for (auto& p : spec.params) std::cout << "    " << p.name << ": " << p.doc << "\n";
      }
      return kOk;
    };
  });
}

void add_models(CLI::App& app, std::function<int()>& run) {
  app.add_subcommand("models", "List the reference models")->callback([&run] {
    run = [] {
      for (auto& m : model_catalog()) std::cout << m.name << "\t" << m.description << "\n";
      return kOk;
    };
  });
}

}  // namespace loom::cli
