// What a command says about an exception that escapes it (backend/build_info.h): running out of
// memory, from LibTorch's allocators or C++'s, is the user's error with what to change; anything
// else is an internal error to report. `launch_tests` runs out of memory for real under ulimit.
#include <new>
#include <stdexcept>

#include <c10/util/Exception.h>
#include <doctest/doctest.h>

#include "backend/build_info.h"

namespace {

c10::SourceLocation here() { return {__func__, __FILE__, static_cast<uint32_t>(__LINE__)}; }

}  // namespace

TEST_CASE("running out of memory is the user's error, with what to change") {
  const char* hint = "hint: the step needs more memory than this rank has: lower --micro-batch";
  // 1.13's CPU allocator: a plain c10::Error, told by its message.
  c10::Error cpu(here(), "[enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: can't allocate memory: you tried "
                         "to allocate 134217728 bytes. Error code 12 (Cannot allocate memory)");
  loom::EscapedError said = loom::escaped_error_report(cpu);
  CHECK(said.exit_code == 1);
  CHECK(said.text.rfind("error: out of memory: DefaultCPUAllocator: can't allocate memory: you tried to allocate 134217728 "
                        "bytes. Error code 12 (Cannot allocate memory)\n", 0) == 0);
  CHECK(said.text.find(hint) != std::string::npos);
  CHECK(said.text.find("internal error") == std::string::npos);

  c10::OutOfMemoryError gpu(here(), "CUDA out of memory. Tried to allocate 2.00 GiB");
  said = loom::escaped_error_report(gpu);
  CHECK(said.exit_code == 1);
  CHECK(said.text.rfind("error: out of memory: CUDA out of memory. Tried to allocate 2.00 GiB\n", 0) == 0);

  said = loom::escaped_error_report(std::bad_alloc());
  CHECK(said.exit_code == 1);
  CHECK(said.text.rfind("error: out of memory: std::bad_alloc\n", 0) == 0);
  CHECK(said.text.find(hint) != std::string::npos);
}

TEST_CASE("any other escaping exception is an internal error to report") {
  loom::EscapedError said = loom::escaped_error_report(std::logic_error("a pass lost a wait"));
  CHECK(said.exit_code == loom::kInternalError);
  CHECK(said.text == "loom: internal error: a pass lost a wait\nplease report this with the command that caused it "
                     "(LOOM_BACKTRACE=1 adds the stack trace)\n");
  c10::Error shape(here(), "mat1 and mat2 shapes cannot be multiplied (4x3 and 5x6)");
  said = loom::escaped_error_report(shape);
  CHECK(said.exit_code == loom::kInternalError);
  CHECK(said.text.rfind("loom: internal error: mat1 and mat2 shapes cannot be multiplied (4x3 and 5x6)", 0) == 0);
}
