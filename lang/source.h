// Source text and positions: every AST node and directive carries a SourceRange.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace loom {

// A 1-based line and column (columns count bytes).
struct SourcePos {
  int line = 0;
  int column = 0;
};

// A half-open span [begin, end) in one file. `file` is empty for a range that
// points at nothing (built-in values); `description` names a C++ call site.
struct SourceRange {
  std::string file;
  SourcePos begin;
  SourcePos end;

  bool known() const { return !file.empty(); }
  std::string to_string() const;  // "file:line:col"
};

// One loaded file: its name as the user gave it and its text.
struct SourceFile {
  std::string name;
  std::string text;

  // The text of line `line` (1-based) without its newline; empty if out of range.
  std::string line_text(int line) const;
};

// Owns every file read while evaluating a schedule, so diagnostics can quote them.
class SourceManager {
 public:
  const SourceFile& add(std::string name, std::string text);
  const SourceFile* find(const std::string& name) const;

 private:
  std::vector<std::unique_ptr<SourceFile>> files_;
};

// Where a C++ fluent-API call was made; default arguments capture it.
struct CallSite {
  const char* file;
  int line;
  static CallSite current(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return {file, line};
  }
  SourceRange range() const;
};

}  // namespace loom
