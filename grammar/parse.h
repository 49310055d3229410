// Parsing .sched text into Loom's AST. The only interface to the ANTLR-generated parser.
#pragma once

#include <memory>

#include "lang/ast.h"
#include "lang/source.h"

namespace loom {

// Parses a whole file. Throws UserError (located, with a hint) on invalid
// UTF-8, unbalanced brackets, unterminated strings and any syntax error.
std::shared_ptr<ast::Program> parse_program(const SourceFile& file);

}  // namespace loom
