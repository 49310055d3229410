// A checkpoint's JSON files (trainer.json, optim/rank-R.json, rank_state/rank-R.json) as a resume
// reads them: a file that is missing or not JSON, or a field that is missing or of another type,
// is a damaged checkpoint, a UserError that names the file and says what to do (before, a
// resume reported nlohmann's error as an internal one on every rank). Torch-free.
#pragma once

#include <filesystem>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "lang/diagnostics.h"

namespace loom {

// The UserError for a damaged checkpoint file: `file`: `what`, and to resume from another.
UserError damaged_checkpoint(const std::filesystem::path& file, const std::string& what);

// The file's JSON; damaged_checkpoint when it is missing or not JSON.
nlohmann::json read_checkpoint_json(const std::filesystem::path& file);

// What `read` makes of the file's JSON, with nlohmann's errors in it (a missing field, a field
// of another type) turned into damaged_checkpoint.
template <class Read>
auto read_checkpoint_fields(const std::filesystem::path& file, Read&& read) {
  try {
    return std::forward<Read>(read)();
  } catch (const nlohmann::json::exception& e) {
    throw damaged_checkpoint(file, e.what());
  }
}

}  // namespace loom
