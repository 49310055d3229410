#include "backend/saved_model_compare.h"

#include <torch/serialize.h>

#include "lang/diagnostics.h"
#include "models/zoo_torch.h"

namespace loom {
namespace {

BuiltModel load(const std::string& model, const std::string& path) {
  BuiltModel m = build_model(model);
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    m.module->load(archive);
  } catch (const c10::Error& e) {
    throw UserError(SourceRange{}, "cannot read " + path + " as the parameters of " + model + ": " + e.what_without_backtrace(),
                    "it must be a model.pt written by `loom run --save` for this model");
  }
  return m;
}

}  // namespace

std::vector<ParameterDifference> compare_saved_models(const std::string& model, const std::string& a_path,
                                                      const std::string& b_path) {
  BuiltModel a = load(model, a_path), b = load(model, b_path);
  auto pb = b.module->named_parameters();
  std::vector<ParameterDifference> out;
  torch::NoGradGuard no_grad;
  for (auto& p : a.module->named_parameters()) {
    torch::Tensor x = p.value(), y = pb[p.key()];
    out.push_back({p.key(), (x - y).abs().max().item<double>(), x.abs().max().item<double>()});
  }
  return out;
}

}  // namespace loom
