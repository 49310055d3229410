#include "backend/train/output_paths.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "lang/diagnostics.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

// Why `dir` cannot be a directory: a file on its way ("'corpus.bin' is a file"), or the system's reason.
std::string why_not_directory(const fs::path& dir, const std::error_code& ec) {
  fs::path prefix;
  for (const fs::path& part : dir) {
    prefix /= part;
    std::error_code ignored;
    if (fs::exists(prefix, ignored) && !fs::is_directory(prefix, ignored))
      return "'" + prefix.string() + "' is a file, not a directory";
  }
  return ec ? ec.message() : "it is not a directory";
}

// `directory`: the flag names a directory (the hint's example is one).
[[noreturn]] void cannot(const std::string& flag, const std::string& path, const std::string& what, const std::string& why,
                         bool directory) {
  throw UserError(SourceRange{}, flag + " " + path + ": cannot " + what + ": " + why,
                  directory ? "choose a directory that can be created and written, e.g. " + flag + " ckpt/"
                            : "choose a file that can be written, in a directory that exists or can be created");
}

void create_directory(const fs::path& dir, const std::string& flag, const std::string& shown, bool directory) {
  if (dir.empty()) return;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    cannot(flag, shown, "create the directory " + dir.string(), why_not_directory(dir, ec), directory);
}

}  // namespace

void prepare_output_directory(const std::string& dir, const std::string& flag) {
  create_directory(dir, flag, dir, true);
  char host[256] = "";
  gethostname(host, sizeof host - 1);  // ranks of several nodes may probe one shared directory
  fs::path probe = fs::path(dir) / (".loom-write-test-" + std::string(host) + "-" + std::to_string(getpid()));
  std::ofstream out(probe);
  out << "loom\n" << std::flush;
  if (!out) cannot(flag, dir, "write in it", std::strerror(errno), true);
  out.close();
  std::error_code ignored;
  fs::remove(probe, ignored);
}

void check_output_file(const std::string& path, const std::string& flag) {
  create_directory(fs::path(path).parent_path(), flag, path, false);
  std::error_code ec;
  bool existed = fs::exists(path, ec);
  if (existed && fs::is_directory(path, ec)) cannot(flag, path, "write it", "it is a directory", false);
  std::ofstream out(path, std::ios::app);
  if (!out) cannot(flag, path, "write it", std::strerror(errno), false);
  out.close();
  if (!existed) fs::remove(path, ec);
}

void write_whole_file(const std::string& path, const std::vector<std::string_view>& pieces) {
  CheckedFileWriter writer(path);
  for (std::string_view piece : pieces) writer.sink()(piece.data(), piece.size());
  writer.finish();
}

void write_whole_file(const std::string& path, const std::string& bytes) { write_whole_file(path, std::vector<std::string_view>{bytes}); }

void write_output_file(const std::string& path, const std::vector<std::string_view>& pieces, const std::string& what,
                       const std::string& hint) {
  try {
    write_whole_file(path, pieces);
  } catch (const WriteError& e) {
    throw UserError(SourceRange{}, what + ": " + e.what(), hint);
  }
}

struct CheckedFileWriter::State {
  std::string path;
  std::ofstream out;
  std::string failure;  // the first failed write's reason
  bool opened = false;
};

CheckedFileWriter::CheckedFileWriter(const std::string& path) : s_(std::make_unique<State>()) {
  s_->path = path;
  s_->out.open(path, std::ios::binary | std::ios::trunc);
  s_->opened = s_->out.is_open();
  if (!s_->out) s_->failure = std::strerror(errno);
}

CheckedFileWriter::~CheckedFileWriter() = default;

std::function<size_t(const void*, size_t)> CheckedFileWriter::sink() {
  return [s = s_.get()](const void* data, size_t n) {
    if (s->failure.empty()) {
      s->out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
      if (!s->out) s->failure = std::strerror(errno);
    }
    return n;
  };
}

void CheckedFileWriter::finish() {
  if (s_->failure.empty()) {
    s_->out.close();
    if (!s_->out) s_->failure = std::strerror(errno);
  }
  if (s_->failure.empty()) return;
  // A short file would be read back as if whole (a profile in the cache).
  std::error_code ec;
  if (s_->opened && fs::is_regular_file(fs::symlink_status(s_->path, ec))) fs::remove(s_->path, ec);
  throw WriteError("cannot write " + s_->path + ": " + s_->failure);
}

}  // namespace loom
