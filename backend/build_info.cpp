#include "backend/build_info.h"

#include <c10/util/Exception.h>
#include <torch/version.h>

namespace loom {

std::string build_description() {
#ifdef LOOM_WITH_CUDA
  return std::string("LibTorch ") + TORCH_VERSION + ", CUDA and NCCL";
#else
  return std::string("LibTorch ") + TORCH_VERSION + ", CPU";
#endif
}

std::string exception_text(const std::exception& e, bool with_backtrace) {
  if (auto* c10_error = dynamic_cast<const c10::Error*>(&e); c10_error && !with_backtrace)
    return c10_error->what_without_backtrace();
  return e.what();
}

}  // namespace loom
