// Checks, before any work is spent, that the outputs a command was asked for can be written:
// a run must not train for an hour and then fail to save. Torch-free.
#pragma once

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

// A directory output (--save, a cache): created when missing, then a probe file is written in
// it and removed. Throws UserError naming `flag`, the path and why (a file in the way, a
// read-only or missing file system, permissions).
void prepare_output_directory(const std::string& dir, const std::string& flag);

// A file output (--metrics, --trace, --out): its directory is created when missing and the file
// is opened for appending, so nothing it holds is lost; a probe that created it removes it.
// Throws UserError like prepare_output_directory.
void check_output_file(const std::string& path, const std::string& flag);

// A write that failed (a full disk, a file-size limit): the path and the system's reason.
class WriteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Writes `bytes` as the whole of `path`, or throws WriteError (as CheckedFileWriter::finish()
// does): for the files of a checkpoint, a profile, a trace, where a silently short file would be
// read back later.
void write_whole_file(const std::string& path, const std::string& bytes);
// The same, of `pieces` one after another (without copying them into one string first).
void write_whole_file(const std::string& path, const std::vector<std::string_view>& pieces);
// write_whole_file of an output the user asked for: a failed write is a UserError, "`what`:
// cannot write PATH: why", with `hint`.
void write_output_file(const std::string& path, const std::vector<std::string_view>& pieces, const std::string& what,
                       const std::string& hint);

// Streams a LibTorch archive into a file (`archive.save_to(writer.sink())`). LibTorch 1.13's
// own file writer aborts the process when a write fails, so the sink reports every write as
// done and finish() throws WriteError for the first one that was not, having removed the file
// it opened and could not finish (a file it could not open, a device such as /dev/full, or a
// symbolic link is left as it was).
class CheckedFileWriter {
 public:
  explicit CheckedFileWriter(const std::string& path);
  ~CheckedFileWriter();
  std::function<size_t(const void*, size_t)> sink();
  void finish();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace loom
