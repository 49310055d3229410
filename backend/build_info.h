// What the command line says about this build and about exceptions that escape to it;
// torch-free declarations, implemented beside the version-specific code (torch_compat.cpp).
#pragma once

#include <exception>
#include <string>

namespace loom {

// "LibTorch 1.13.1, CPU" or "LibTorch 2.11.0, CUDA and NCCL".
std::string build_description();
// Whether this build has the CUDA path (-DLOOM_WITH_CUDA=ON).
bool built_with_cuda();

// An exception's message for the user: LibTorch's C++ stack trace only when `with_backtrace`
// (LOOM_BACKTRACE=1), since it is for Loom's developers, not for whoever ran the command.
std::string exception_text(const std::exception& e, bool with_backtrace);

// What a command prints for an exception that is a Loom bug, not the user's mistake: its text
// (with the stack trace under LOOM_BACKTRACE=1) after kInternalErrorPrefix, and how to report
// it. The command then exits kInternalError.
std::string internal_error_report(const std::exception& e);
constexpr const char* kInternalErrorPrefix = "loom: internal error: ";
constexpr int kInternalError = 70;  // sysexits' EX_SOFTWARE

// Whether `e` is an allocation that was refused (LibTorch's CPU or CUDA caching allocator, or
// C++'s `new`): the run asked for more memory than the machine gives it, which is not a Loom bug.
// A request no machine could meet (2^60 bytes or more, or a negative array size) is a bug.
bool is_out_of_memory(const std::exception& e);

// What a command prints for an exception that escaped its own error handling, and its exit
// code: running out of memory is the user's error (exit 1), with `hint` saying what to change;
// anything else is internal_error_report's (kInternalError).
struct EscapedError {
  std::string text;
  int exit_code = kInternalError;
};
EscapedError escaped_error_report(const std::exception& e, const std::string& hint);

}  // namespace loom
