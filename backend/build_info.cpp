#include "backend/build_info.h"

#include <cstdlib>

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

std::string internal_error_report(const std::exception& e) {
  const char* backtrace = std::getenv("LOOM_BACKTRACE");
  bool with_backtrace = backtrace && std::string(backtrace) == "1";
  return kInternalErrorPrefix + exception_text(e, with_backtrace) + "\nplease report this with the command that caused it" +
         (with_backtrace ? "" : " (LOOM_BACKTRACE=1 adds the stack trace)") + "\n";
}

}  // namespace loom
