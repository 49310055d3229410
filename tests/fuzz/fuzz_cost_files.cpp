// libFuzzer target over the loaders of the files the cost model reads (issue #15 §6): a cluster
// description and a profile, and the sizes both and --memory-limit are written in. Any input must
// either load or raise a loom::UserError; a crash, a sanitizer report or any other exception is a
// bug. A profile that loads is also priced (each collective at a few sizes), which walks its
// samples. Built with -DLOOM_FUZZ=ON (clang); run by scripts/fuzz.sh, seeded with clusters/*.json
// and tests/fuzz/seeds/*.json.
#include <cstdint>
#include <string>

#include "backend/cost/cluster.h"
#include "backend/cost/profile.h"
#include "lang/diagnostics.h"
#include "lang/value.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  loom::read_size(text);
  try {
    loom::Cluster c = loom::parse_cluster(text, "fuzz.json");
    (void)c.world();
  } catch (const loom::UserError&) {
  }
  try {
    loom::Profile p = loom::Profile::from_json(text, "fuzz.json");
    for (const loom::CollectiveProfile& c : p.collectives)
      for (int64_t bytes : {int64_t{0}, int64_t{1} << 10, int64_t{1} << 20, int64_t{1} << 40}) (void)c.predict_ms(bytes);
  } catch (const loom::UserError&) {
  }
  return 0;
}
