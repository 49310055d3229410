// What the command line says about this build and about exceptions that escape to it;
// torch-free declarations, implemented beside the version-specific code (torch_compat.cpp).
#pragma once

#include <exception>
#include <string>

namespace loom {

// "LibTorch 1.13.1, CPU" or "LibTorch 2.11.0, CUDA and NCCL".
std::string build_description();

// An exception's message for the user: LibTorch's C++ stack trace only when `with_backtrace`
// (LOOM_BACKTRACE=1), since it is for Loom's developers, not for whoever ran the command.
std::string exception_text(const std::exception& e, bool with_backtrace);

// What a command prints for an exception that is a Loom bug, not the user's mistake: its text
// (with the stack trace under LOOM_BACKTRACE=1) after kInternalErrorPrefix, and how to report
// it. The command then exits kInternalError.
std::string internal_error_report(const std::exception& e);
constexpr const char* kInternalErrorPrefix = "loom: internal error: ";
constexpr int kInternalError = 70;  // sysexits' EX_SOFTWARE

}  // namespace loom
