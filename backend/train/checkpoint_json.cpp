#include "backend/train/checkpoint_json.h"

#include <fstream>

namespace loom {

UserError damaged_checkpoint(const std::filesystem::path& file, const std::string& what) {
  return UserError(SourceRange{}, "checkpoint file " + file.string() + " is damaged: " + what,
                   "resume from another checkpoint (a --save directory keeps one per --save-every), or start afresh");
}

nlohmann::json read_checkpoint_json(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) throw damaged_checkpoint(file, "it is missing or cannot be read");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw damaged_checkpoint(file, "it is not JSON");
  return j;
}

}  // namespace loom
