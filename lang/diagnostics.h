// Diagnostics: user errors (bad schedules) and internal errors (Loom bugs) are different types.
#pragma once

#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "lang/source.h"

namespace loom {

enum class Severity { Error, Warning, Note };

// One message about the user's input, pointing at a source range.
struct Diagnostic {
  Severity severity = Severity::Error;
  SourceRange range;
  std::string message;
  std::string hint;  // what to do about it; may be empty
};

// A mistake in the user's schedule, arguments or files. Carries the located diagnostic.
class UserError : public std::runtime_error {
 public:
  explicit UserError(Diagnostic d);
  UserError(SourceRange range, std::string message, std::string hint = "");
  const Diagnostic& diagnostic() const { return diagnostic_; }

 private:
  Diagnostic diagnostic_;
};

// A broken invariant inside Loom: a bug to report, never the user's fault.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// "file:line:col: error: message", the source line, the span underlined, then the hint.
std::string render(const Diagnostic& d, const SourceManager* sources);
// The diagnostic with its quoted source line folded into the message, so it renders the same
// where the sources are gone (a schedule checked in one function, reported by another).
Diagnostic self_contained(const Diagnostic& d, const SourceManager* sources);
// The diagnostic as one JSON object: file, range, severity, message, hint.
std::string render_json(const Diagnostic& d);

const char* severity_name(Severity s);

}  // namespace loom
