// The one place for code that differs between LibTorch 1.13 (Debian, CPU) and 2.x (CUDA builds).
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/version.h>

namespace loom::compat {

#if TORCH_VERSION_MAJOR >= 2
// 2.x: ProcessGroupGloo is a c10d::Backend; collectives are called on it directly.
using C10dGroup = c10d::Backend;
#else
// 1.13: ProcessGroupGloo is itself a c10d::ProcessGroup.
using C10dGroup = c10d::ProcessGroup;
#endif

}  // namespace loom::compat
