#include "lang/source.h"

namespace loom {

std::string SourceRange::to_string() const {
  if (!known()) return "<unknown>";
  return file + ":" + std::to_string(begin.line) + ":" + std::to_string(begin.column);
}

std::string SourceFile::line_text(int line) const {
  if (line < 1) return "";
  size_t start = 0;
  for (int l = 1; l < line; ++l) {
    start = text.find('\n', start);
    if (start == std::string::npos) return "";
    ++start;
  }
  size_t end = text.find('\n', start);
  std::string out = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
  if (!out.empty() && out.back() == '\r') out.pop_back();
  return out;
}

const SourceFile& SourceManager::add(std::string name, std::string text) {
  for (auto& f : files_)
    if (f->name == name) {
      f->text = std::move(text);
      return *f;
    }
  files_.push_back(std::make_unique<SourceFile>(SourceFile{std::move(name), std::move(text)}));
  return *files_.back();
}

const SourceFile* SourceManager::find(const std::string& name) const {
  for (auto& f : files_)
    if (f->name == name) return f.get();
  return nullptr;
}

SourceRange CallSite::range() const {
  // C++ call sites have no column; column 1 keeps "file:line:col" well formed.
  return SourceRange{file ? file : "<c++>", {line, 1}, {line, 1}};
}

}  // namespace loom
