#include "backend/build_info.h"

#include <cstdlib>
#include <new>

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

bool built_with_cuda() {
#ifdef LOOM_WITH_CUDA
  return true;
#else
  return false;
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

namespace {

// Where LibTorch's CPU allocator says it failed in an error's message (1.13's alloc_cpu.cpp
// raises a plain c10::Error, after "[enforce fail at alloc_cpu.cpp:75] err == 0. "), or npos.
size_t cpu_allocator_message_at(const std::string& message) {
  for (const char* said : {"DefaultCPUAllocator: can't allocate memory", "DefaultCPUAllocator: not enough memory"})
    if (size_t at = message.find(said); at != std::string::npos) return at;
  return std::string::npos;
}

// Whether the allocator's message asks for more bytes than any machine has: a size computed
// wrongly (an overflow), which is a bug to report.
bool absurd_request(const std::string& message) {
  const std::string asked = "you tried to allocate ";
  size_t at = message.find(asked);
  if (at == std::string::npos) return false;
  return std::strtoull(message.c_str() + at + asked.size(), nullptr, 10) >= (1ULL << 60);
}

}  // namespace

bool is_out_of_memory(const std::exception& e) {
  if (dynamic_cast<const std::bad_array_new_length*>(&e)) return false;  // a negative or overflowed size
  if (dynamic_cast<const std::bad_alloc*>(&e) || dynamic_cast<const c10::OutOfMemoryError*>(&e)) return true;
  auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  return c10_error && cpu_allocator_message_at(c10_error->msg()) != std::string::npos && !absurd_request(c10_error->msg());
}

EscapedError escaped_error_report(const std::exception& e, const std::string& hint) {
  if (!is_out_of_memory(e)) return {internal_error_report(e), kInternalError};
  std::string what = exception_text(e, false);
  if (size_t at = cpu_allocator_message_at(what); at != std::string::npos) what = what.substr(at);
  return {"error: out of memory: " + what + "\n  hint: " + hint + "\n", 1};
}

}  // namespace loom
