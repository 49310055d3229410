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

// How many characters of a string an error message shows (shown_name, shown_json).
constexpr size_t kShownStringChars = 60;
// `text` (a key, a module's name) as an error message shows it: cut after kShownStringChars
// characters, at a UTF-8 character's start, with "..." after.
std::string shown_name(const std::string& text);
// `v` as an error message shows it: a number, true, false or null as JSON; a string as JSON, cut as
// shown_name cuts it; a list or object of at most 8 such values as dump() writes it
// ("[4096,0.1]", its strings cut); any other by its kind and size ("a list of 100000 entries").
// A nested value is never printed whole: dump() recurses as deep as the file nests, and a
// hostile file nests deeper than the stack.
std::string shown_json(const nlohmann::json& v);
// A parse error as nlohmann words it, without its tag: "parse error at line 1, column 2: ...",
// not "[json.exception.parse_error.101] parse error at ..."; cut to 300 characters (it quotes
// the token it stopped in, which may be megabytes long).
std::string json_error_text(const nlohmann::json::exception& e);

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
    if (!v.is_string()) fail(join(path, key), "must be a string, not " + shown_json(v));
    return v.get<std::string>();
  }
  // A whole number from `least` to 2^24.
  int count(const nlohmann::json& object, const std::string& path, const std::string& key, int least) const {
    const nlohmann::json& v = at(object, path, key);
    bool integer = v.is_number_integer();
    if (integer && (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(kMostCount) : v.get<int64_t>() > kMostCount))
      fail(join(path, key), "must be at most " + std::to_string(kMostCount) + " (2^24), not " + shown_json(v));
    if (!integer || v.get<int64_t>() < least)
      fail(join(path, key), "must be a whole number of at least " + std::to_string(least) + ", not " + shown_json(v));
    return v.get<int>();
  }
  static constexpr int64_t kMostCount = int64_t{1} << 24;
  static std::string join(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

 private:
  std::string origin_, hint_;
};

}  // namespace loom
