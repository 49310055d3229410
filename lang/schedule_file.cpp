#include "lang/schedule_file.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "lang/diagnostics.h"

namespace loom {

std::string read_schedule_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UserError(SourceRange{}, "'" + path + "' is a directory, not a schedule file", "give the .sched file's path");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(SourceRange{}, "cannot read schedule file '" + path + "'", "check the path");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace loom
