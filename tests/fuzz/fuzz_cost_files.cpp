// libFuzzer target over the loaders of the files the cost model reads (issue #15 §6): a cluster
// description and a profile. Any input must either load or raise a loom::UserError; a crash, a
// sanitizer report or any other exception is a bug. Built with -DLOOM_FUZZ=ON (clang); run by
// scripts/fuzz.sh, seeded with clusters/*.json.
#include <cstdint>
#include <string>

#include "backend/cost/cluster.h"
#include "backend/cost/profile.h"
#include "lang/diagnostics.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    loom::parse_cluster(text, "fuzz.json");
  } catch (const loom::UserError&) {
  }
  try {
    loom::Profile::from_json(text, "fuzz.json");
  } catch (const loom::UserError&) {
  }
  return 0;
}
