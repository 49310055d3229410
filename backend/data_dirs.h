// Where Loom's data files are read from: the standard schedules (import "stdlib/...") and the
// shipped cluster files. An installed `loom` reads its own share/loom/ beside its bin/, wherever
// the prefix was moved; a `loom` in the build tree reads the source tree it was built from.
#pragma once

#include <string>

namespace loom {

// The standard schedules' directory.
std::string stdlib_dir();
// The shipped cluster files' directory (clusters/).
std::string shipped_cluster_dir();

}  // namespace loom
