// compress(ratio=, index_bits=, sparsity=auto|float): TAGC gradient compression
// for this module's gradient reduction (tagc.txt). Lossy by design unless the
// gradients are at least as sparse as Table 1 asks for the ratio.
#include "primitives/registry.h"
#include "primitives/tagc_table1.h"

namespace {
using namespace loom;

// Errors: ratio <= 1, index bits outside 1..8, sparsity outside [0, 1).
void check_ranges(const PrimitiveCall& c) {
  double ratio = c.number_arg("ratio");
  if (!(ratio > 1))
    c.fail_at(c.arg_range("ratio"), "ratio must be greater than 1, got " + c.arg("ratio").to_source(),
              "tagc.txt Table 1 uses 2, 4 and 10");
  int64_t bits = c.int_arg("index_bits");
  if (bits < 1 || bits > 8)
    c.fail_at(c.arg_range("index_bits"), "index_bits must be in 1..8, got " + std::to_string(bits), "TAGC uses 1- or 4-bit indices");
  const Value& s = c.arg("sparsity");
  if (s.is(ValueKind::Float)) {
    if (!(s.as_number() >= 0 && s.as_number() < 1))
      c.fail_at(c.arg_range("sparsity"), "sparsity must be in [0, 1), got " + s.to_source(), "it is the fraction of zeroed values");
    double need = tagc_table1_sparsity(ratio);
    if (s.as_number() < need)
      c.warn("sparsity " + s.to_source() + " is below the " + format_float(need) + " that tagc.txt Table 1 needs for lossless " +
                 c.arg("ratio").to_source() + "x compression",
             "decoding will fall back to estimation and add noise; raise sparsity or lower ratio");
  }
}

// Errors: a module whose subtree owns no parameters, so no gradient to compress.
void check_has_gradients(const PrimitiveCall& c) {
  if (c.schedule().tree().parameter_count(c.module()) == 0)
    c.fail("the module owns no parameters, so it has no gradients to compress", "select a module with weights, e.g. an mlp.c_fc");
}
}  // namespace

LOOM_PRIMITIVE(compress) {
  return loom::PrimitiveSpec("compress", "Compress this module's gradient reduction with TAGC (lossy unless sparse enough).")
      .on(loom::Scope::Module)
      .param("ratio", loom::ParamType::floating(), "compression ratio of the count sketch")
      .param("index_bits", loom::ParamType::integer(), loom::Value::integer(1), "bits per entry of the non-zero index")
      .param("sparsity", loom::ParamType::float_or_auto(), loom::Value::auto_(), "fraction of gradient values zeroed; auto = Table 1's for the ratio")
      .check(check_ranges)
      .check(check_has_gradients);
}
