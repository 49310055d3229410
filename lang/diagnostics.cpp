#include "lang/diagnostics.h"

#include <nlohmann/json.hpp>

namespace loom {

UserError::UserError(Diagnostic d) : std::runtime_error(d.message), diagnostic_(std::move(d)) {}

UserError::UserError(SourceRange range, std::string message, std::string hint)
    : UserError(Diagnostic{Severity::Error, std::move(range), std::move(message), std::move(hint)}) {}

const char* severity_name(Severity s) {
  switch (s) {
    case Severity::Error: return "error";
    case Severity::Warning: return "warning";
    case Severity::Note: return "note";
  }
  return "error";
}

std::string render(const Diagnostic& d, const SourceManager* sources) {
  std::string out;
  if (d.range.known()) out += d.range.to_string() + ": ";
  out += std::string(severity_name(d.severity)) + ": " + d.message + "\n";
  const SourceFile* file = sources && d.range.known() ? sources->find(d.range.file) : nullptr;
  if (file && d.range.begin.line > 0) {
    std::string line = file->line_text(d.range.begin.line);
    out += "  " + line + "\n  ";
    int begin = std::max(1, d.range.begin.column);
    int end = d.range.end.line == d.range.begin.line ? d.range.end.column
                                                     : static_cast<int>(line.size()) + 1;
    if (end <= begin) end = begin + 1;
    for (int c = 1; c < begin; ++c) out += (c - 1 < static_cast<int>(line.size()) && line[c - 1] == '\t') ? '\t' : ' ';
    out += '^';
    for (int c = begin + 1; c < end; ++c) out += '~';
    out += "\n";
  }
  if (!d.hint.empty()) out += "  hint: " + d.hint + "\n";
  return out;
}

Diagnostic self_contained(const Diagnostic& d, const SourceManager* sources) {
  Diagnostic bare = d;
  bare.hint.clear();
  std::string text = render(bare, sources);
  std::string excerpt = text.substr(text.find('\n') + 1);  // the lines after "file:l:c: error: message"
  Diagnostic out = d;
  if (!excerpt.empty()) out.message += "\n" + excerpt.substr(0, excerpt.size() - 1);
  return out;
}

std::string render_json(const Diagnostic& d) {
  nlohmann::json j;
  j["file"] = d.range.file;
  j["range"] = {{"start", {{"line", d.range.begin.line}, {"column", d.range.begin.column}}},
                {"end", {{"line", d.range.end.line}, {"column", d.range.end.column}}}};
  j["severity"] = severity_name(d.severity);
  j["message"] = d.message;
  if (!d.hint.empty()) j["hint"] = d.hint;
  return j.dump();
}

}  // namespace loom
