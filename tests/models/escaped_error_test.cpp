// What a command says about an exception that escapes it (backend/build_info.h): an allocation
// refused, by LibTorch's allocators or C++'s, is the user's error with the caller's hint; anything
// else, a request no machine could meet included, is an internal error to report. `launch_tests`
// runs out of memory for real under ulimit.
#include <new>
#include <stdexcept>

#include <c10/util/Exception.h>
#include <doctest/doctest.h>

#include "backend/build_info.h"

namespace {

c10::SourceLocation here() { return {__func__, __FILE__, static_cast<uint32_t>(__LINE__)}; }

const std::string kHint = "lower the micro-batch";

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

}  // namespace

TEST_CASE("running out of memory is the user's error, with the caller's hint") {
  // 1.13's CPU allocator: a plain c10::Error, told by its message.
  c10::Error cpu(here(), "[enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: can't allocate memory: you tried "
                         "to allocate 134217728 bytes. Error code 12 (Cannot allocate memory)");
  loom::EscapedError said = loom::escaped_error_report(cpu, kHint);
  CHECK(said.exit_code == 1);
  CHECK(said.text == "error: out of memory: DefaultCPUAllocator: can't allocate memory: you tried to allocate 134217728 bytes. "
                     "Error code 12 (Cannot allocate memory)\n  hint: lower the micro-batch\n");

  c10::OutOfMemoryError gpu(here(), "CUDA out of memory. Tried to allocate 2.00 GiB");
  said = loom::escaped_error_report(gpu, kHint);
  CHECK(said.exit_code == 1);
  CHECK(starts_with(said.text, "error: out of memory: CUDA out of memory. Tried to allocate 2.00 GiB\n  hint: lower the micro-batch\n"));

  said = loom::escaped_error_report(std::bad_alloc(), kHint);
  CHECK(said.exit_code == 1);
  CHECK(said.text == "error: out of memory: std::bad_alloc\n  hint: lower the micro-batch\n");
}

TEST_CASE("any other escaping exception is an internal error to report") {
  auto internal = [](const std::exception& e, const std::string& message) {
    loom::EscapedError said = loom::escaped_error_report(e, kHint);
    CHECK(said.exit_code == loom::kInternalError);
    CHECK(starts_with(said.text, "loom: internal error: " + message));
    CHECK(said.text.find("please report this with the command that caused it") != std::string::npos);
  };
  internal(std::logic_error("a pass lost a wait"), "a pass lost a wait");
  internal(c10::Error(here(), "mat1 and mat2 shapes cannot be multiplied (4x3 and 5x6)"), "mat1 and mat2 shapes cannot be multiplied");
  // Sizes no machine has: computed wrongly, not the machine's limit.
  internal(std::bad_array_new_length(), "std::bad_array_new_length");
  internal(c10::Error(here(), "[enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: can't allocate memory: you "
                              "tried to allocate 18446744073709551600 bytes."),
           "[enforce fail at alloc_cpu.cpp:75]");
}
