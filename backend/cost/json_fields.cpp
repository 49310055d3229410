#include "backend/cost/json_fields.h"

namespace loom {
namespace {

constexpr size_t kShownStringChars = 60;
constexpr size_t kShownEntries = 8;

bool is_scalar(const nlohmann::json& v) { return !v.is_array() && !v.is_object(); }

std::string shown_scalar(const nlohmann::json& v) {
  if (!v.is_string() || v.get_ref<const std::string&>().size() <= kShownStringChars) return v.dump();
  return nlohmann::json(v.get_ref<const std::string&>().substr(0, kShownStringChars)).dump() + "...";
}

std::string counted(size_t n, const char* one, const char* many) { return std::to_string(n) + " " + (n == 1 ? one : many); }

}  // namespace

std::string shown_json(const nlohmann::json& v) {
  if (is_scalar(v)) return shown_scalar(v);
  bool small = v.size() <= kShownEntries;
  for (auto it = v.begin(); small && it != v.end(); ++it) small = is_scalar(*it);
  if (!small) return v.is_array() ? "a list of " + counted(v.size(), "entry", "entries") : "an object of " + counted(v.size(), "field", "fields");
  std::string text;
  for (auto it = v.begin(); it != v.end(); ++it)
    text += (text.empty() ? "" : ",") + (v.is_object() ? nlohmann::json(it.key()).dump() + ":" : std::string()) + shown_scalar(*it);
  return v.is_array() ? "[" + text + "]" : "{" + text + "}";
}

std::string json_error_text(const nlohmann::json::exception& e) {
  std::string text = e.what();
  if (text.rfind("[json.exception.", 0) == 0)
    if (size_t end = text.find("] "); end != std::string::npos) return text.substr(end + 2);
  return text;
}

}  // namespace loom
