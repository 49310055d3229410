// ModulePath: a module's dotted path as an instruction holds it, interned. Every instruction
// naming "layers.3.mlp" shares one copy of the text, so the passes, which rebuild the
// instruction list several times a step (and `loom plan` thousands of steps), move and compare
// it as a pointer rather than a string. Reads as a `const std::string&`. Torch-free.
#pragma once

#include <iosfwd>
#include <string>

namespace loom::ir {

class ModulePath {
 public:
  ModulePath();  // ""
  ModulePath(const std::string& path);  // NOLINT(google-explicit-constructor): assigned from strings
  ModulePath(const char* path);         // NOLINT(google-explicit-constructor)

  const std::string& str() const { return *path_; }
  operator const std::string&() const { return *path_; }  // NOLINT(google-explicit-constructor)
  bool empty() const { return path_->empty(); }

  // One copy per text: equal paths are the same copy.
  friend bool operator==(const ModulePath& a, const ModulePath& b) { return a.path_ == b.path_; }
  friend bool operator!=(const ModulePath& a, const ModulePath& b) { return a.path_ != b.path_; }
  friend bool operator==(const ModulePath& a, const std::string& b) { return *a.path_ == b; }
  friend bool operator==(const std::string& a, const ModulePath& b) { return a == *b.path_; }
  friend bool operator!=(const ModulePath& a, const std::string& b) { return *a.path_ != b; }
  friend bool operator!=(const std::string& a, const ModulePath& b) { return a != *b.path_; }
  friend bool operator==(const ModulePath& a, const char* b) { return *a.path_ == b; }
  friend bool operator!=(const ModulePath& a, const char* b) { return *a.path_ != b; }
  friend bool operator<(const ModulePath& a, const ModulePath& b) { return *a.path_ < *b.path_; }
  friend std::string operator+(const std::string& a, const ModulePath& b) { return a + *b.path_; }
  friend std::string operator+(const ModulePath& a, const std::string& b) { return *a.path_ + b; }
  friend std::string operator+(const char* a, const ModulePath& b) { return a + *b.path_; }
  friend std::string operator+(const ModulePath& a, const char* b) { return *a.path_ + b; }
  friend std::ostream& operator<<(std::ostream& out, const ModulePath& p);

 private:
  const std::string* path_;  // in the process's table of paths, never freed
};

}  // namespace loom::ir
