#include "backend/ir/module_path.h"

#include <mutex>
#include <ostream>
#include <unordered_set>

namespace loom::ir {
namespace {

// The one copy of each path. A model has a few hundred modules; the table lives as long as the
// process (instructions may outlive any one program). Threads of `loom plan` lower at once.
const std::string* interned(const std::string& path) {
  static auto* mutex = new std::mutex;  // never destroyed, as the paths: an instruction may outlive main's statics
  static auto* paths = new std::unordered_set<std::string>;
  std::lock_guard<std::mutex> lock(*mutex);
  return &*paths->insert(path).first;
}

const std::string* empty_path() {
  static const std::string* empty = interned("");
  return empty;
}

}  // namespace

ModulePath::ModulePath() : path_(empty_path()) {}
ModulePath::ModulePath(const std::string& path) : path_(path.empty() ? empty_path() : interned(path)) {}
ModulePath::ModulePath(const char* path) : ModulePath(std::string(path)) {}

std::ostream& operator<<(std::ostream& out, const ModulePath& p) { return out << p.str(); }

}  // namespace loom::ir
