#include "backend/cost/json_fields.h"

#include <algorithm>

namespace loom {
namespace {

constexpr size_t kShownEntries = 8;
constexpr size_t kShownErrorChars = 300;

bool is_scalar(const nlohmann::json& v) {
  return v.is_null() || v.is_boolean() || v.is_number() || v.is_string();
}

// JSON text of a string, never throwing: dump() throws on invalid UTF-8, which the parser and
// cut_point keep out, and an error message is no place to find one.
std::string quoted(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Where a text cut after `limit` bytes ends: at `limit`, moved back to a UTF-8 character's start.
size_t cut_point(const std::string& text, size_t limit) {
  size_t cut = std::min(limit, text.size());
  while (cut > 0 && cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return cut;
}

std::string shown_scalar(const nlohmann::json& v) {
  if (!v.is_string()) return v.dump();
  const std::string& text = v.get_ref<const std::string&>();
  if (text.size() <= kShownStringChars) return quoted(text);
  return quoted(text.substr(0, cut_point(text, kShownStringChars))) + "...";
}

std::string counted(size_t n, const char* one, const char* many) { return std::to_string(n) + " " + (n == 1 ? one : many); }

}  // namespace

std::string shown_name(const std::string& text) {
  return text.size() <= kShownStringChars ? text : text.substr(0, cut_point(text, kShownStringChars)) + "...";
}

std::string shown_json(const nlohmann::json& v) {
  if (is_scalar(v)) return shown_scalar(v);
  if (!v.is_array() && !v.is_object()) return v.type_name();  // binary, discarded: no parse of a file makes them
  bool small = v.size() <= kShownEntries;
  for (auto it = v.begin(); small && it != v.end(); ++it) small = is_scalar(*it);
  if (!small) return v.is_array() ? "a list of " + counted(v.size(), "entry", "entries") : "an object of " + counted(v.size(), "field", "fields");
  std::string text;
  for (auto it = v.begin(); it != v.end(); ++it)
    text += (text.empty() ? "" : ",") + (v.is_object() ? shown_scalar(nlohmann::json(it.key())) + ":" : std::string()) + shown_scalar(*it);
  return v.is_array() ? "[" + text + "]" : "{" + text + "}";
}

std::string json_error_text(const nlohmann::json::exception& e) {
  std::string text = e.what();
  if (text.rfind("[json.exception.", 0) == 0)
    if (size_t end = text.find("] "); end != std::string::npos) text = text.substr(end + 2);
  // Its "last read: '...'" quotes the token it stopped in, which may be megabytes long.
  if (text.size() > kShownErrorChars) text = text.substr(0, cut_point(text, kShownErrorChars)) + "... (cut)";
  return text;
}

}  // namespace loom
