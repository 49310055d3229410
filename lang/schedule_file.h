// Reading a .sched file named on the command line (or by loom.load): the one place that says
// what a path that is not a readable schedule file is, for the interpreter and for loom tune,
// which hashes the file's text into its trial database's context.
#pragma once

#include <string>

namespace loom {

// The text of the schedule file at `path`. UserError for a directory (which opens as a stream
// of nothing: an empty schedule) and for a file that cannot be read.
std::string read_schedule_file(const std::string& path);

}  // namespace loom
