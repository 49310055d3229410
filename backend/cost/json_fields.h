// Reading the fields of a JSON file with errors that name the file and the field, and say what to
// do: "c.json: `intra_node.GBps` must be a positive number, not -3". The cluster and profile
// readers build on it. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "lang/diagnostics.h"

namespace loom {

class JsonFields {
 public:
  // `origin`: the file; `hint`: what to do about any error in it.
  JsonFields(std::string origin, std::string hint) : origin_(std::move(origin)), hint_(std::move(hint)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw UserError(SourceRange{}, origin_ + ": `" + field + "` " + what, hint_);
  }
  // `object`'s field `key`, at `path` in the file ("" at the top).
  const nlohmann::json& at(const nlohmann::json& object, const std::string& path, const std::string& key) const {
    if (!object.is_object()) fail(path, "must be a JSON object, not " + std::string(object.type_name()));
    if (!object.contains(key)) fail(join(path, key), "is missing");
    return object.at(key);
  }
  std::string text(const nlohmann::json& object, const std::string& path, const std::string& key) const {
    const nlohmann::json& v = at(object, path, key);
    if (!v.is_string()) fail(join(path, key), "must be a string, not " + v.dump());
    return v.get<std::string>();
  }
  // A whole number from `least` to 2^24.
  int count(const nlohmann::json& object, const std::string& path, const std::string& key, int least) const {
    const nlohmann::json& v = at(object, path, key);
    if (!v.is_number_integer() || v.get<int64_t>() < least || v.get<int64_t>() > (1 << 24))
      fail(join(path, key), "must be a whole number of at least " + std::to_string(least) + ", not " + v.dump());
    return v.get<int>();
  }
  static std::string join(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

 private:
  std::string origin_, hint_;
};

}  // namespace loom
