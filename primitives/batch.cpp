// batch(micro=, accum=): the per-rank micro-batch and the micro-batches per step, set by the
// schedule so that a knob can tune them (slapo.txt §3.6, Fig. 10: batch size x checkpoint
// ratio). 0, the default, keeps the command line's (--micro-batch, --accum).
#include "primitives/registry.h"

namespace {
using namespace loom;

// Errors: a negative value. Warnings: neither set; batch() twice (the last one counts).
void check_sizes(const PrimitiveCall& c) {
  for (const char* name : {"micro", "accum"})
    if (c.int_arg(name) < 0)
      c.fail_at(c.arg_range(name), std::string(name) + " must be at least 1, got " + std::to_string(c.int_arg(name)),
                "leave it out (or 0) to keep the command line's");
  if (c.int_arg("micro") == 0 && c.int_arg("accum") == 0)
    c.warn("batch() sets neither the micro-batch nor the accumulation", "give micro=, accum= or both");
  if (!c.schedule().directives_on("", "batch").empty())
    c.warn("batch() is already set", "the last batch() counts; keep one");
}
}  // namespace

LOOM_PRIMITIVE(batch) {
  return loom::PrimitiveSpec("batch", "Set the per-rank micro-batch and the micro-batches per step (else the command line's).")
      .on(loom::Scope::Root)
      .param("micro", loom::ParamType::integer(), loom::Value::integer(0), "sequences per micro-batch per rank (0: --micro-batch)")
      .param("accum", loom::ParamType::integer(), loom::Value::integer(0), "micro-batches per optimizer step (0: --accum)")
      .check(check_sizes);
}
