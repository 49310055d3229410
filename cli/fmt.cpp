// loom fmt: print a .sched file in canonical form (comments kept).
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "grammar/parse.h"
#include "lang/diagnostics.h"
#include "lang/printer.h"

namespace loom::cli {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void cannot_rewrite(const std::string& file, const std::string& why, const std::string& hint) {
  throw UserError(SourceRange{}, "cannot rewrite " + file + ": " + why, hint + "; " + file + " is unchanged");
}

// Replaces the schedule (the file a symbolic link names, where it is one) with `text` through a
// new file beside it, renamed over it once whole, so that a failed write (a full disk) leaves the
// schedule as it was. The new file has the schedule's permissions; a hard link to the old one
// keeps the old text.
void rewrite(const std::string& file, const std::string& text) {
  std::error_code ec;
  fs::path target = fs::canonical(file, ec);
  if (ec) cannot_rewrite(file, ec.message(), "check the path");
  if (::access(target.c_str(), W_OK) != 0) cannot_rewrite(file, std::strerror(errno), "make it writable, or print it with `loom fmt " + file + "`");
  std::string name = (target.parent_path() / ("." + target.filename().string() + ".loom-fmt-XXXXXX")).string();
  int fd = ::mkstemp(name.data());  // a new file of its own, whatever lies beside the schedule
  if (fd < 0) cannot_rewrite(file, std::string("cannot create a file beside it: ") + std::strerror(errno), "make its directory writable");
  size_t done = 0;
  int failed = 0;
  while (done < text.size() && !failed) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n >= 0) done += static_cast<size_t>(n);
    else if (errno != EINTR) failed = errno;
  }
  if (!failed && ::fchmod(fd, static_cast<mode_t>(fs::status(target).permissions())) != 0) failed = errno;
  if (::close(fd) != 0 && !failed) failed = errno;
  if (failed) {
    ::unlink(name.c_str());
    cannot_rewrite(file, std::strerror(failed), "free space (or raise the file-size limit)");
  }
  if (::rename(name.c_str(), target.c_str()) == 0) return;
  failed = errno;
  ::unlink(name.c_str());
  // mkstemp wrote beside it, so the directory is writable: it refuses the rename itself (append-only,
  // or sticky with the schedule another user's).
  cannot_rewrite(file, std::string("cannot rename the new file over it: ") + std::strerror(failed),
                 "check that its directory lets files be renamed in it (an append-only one does not)");
}

}  // namespace

void add_fmt(CLI::App& app, std::function<int()>& run) {
  auto file = std::make_shared<std::string>();
  auto in_place = std::make_shared<bool>(false);
  auto check = std::make_shared<bool>(false);
  CLI::App* c = app.add_subcommand("fmt", "Print a .sched file in canonical form");
  c->add_option("file", *file, "the .sched file")->required();
  c->add_flag("-i,--in-place", *in_place, "rewrite the file instead of printing");
  c->add_flag("--check", *check, "exit 1 if the file is not in canonical form");
  c->callback([&run, file, in_place, check] {
    run = [file, in_place, check] {
      std::error_code ec;
      if (std::filesystem::is_directory(*file, ec)) {  // it would read as an empty schedule
        std::cerr << "error: '" << *file << "' is a directory, not a schedule file\n";
        return kUsageError;
      }
      std::ifstream in(*file, std::ios::binary);
      if (!in) {
        std::cerr << "error: cannot read '" << *file << "'\n";
        return kUsageError;
      }
      std::stringstream buf;
      buf << in.rdbuf();
      SourceManager sources;
      const SourceFile& src = sources.add(*file, buf.str());
      try {
        std::string formatted = format_program(*parse_program(src));
        if (*check) return formatted == src.text ? kOk : kUserError;
        if (!*in_place) {
          std::cout << formatted;
          return kOk;
        }
        rewrite(*file, formatted);
        return kOk;
      } catch (const UserError& e) {
        std::cerr << render(e.diagnostic(), &sources);
        return kUserError;
      }
    };
  });
}

}  // namespace loom::cli
