#include "backend/report/run_metrics.h"

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "lang/diagnostics.h"

namespace loom::report {

std::vector<MetricsRow> read_metrics(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UserError(SourceRange{}, "cannot read the metrics file '" + path + "'", "pass the file `loom run --metrics` wrote");
  std::vector<MetricsRow> rows;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::string where = path + ":" + std::to_string(number);
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("step") || !j.contains("loss") || !j.contains("tokens_per_s") || !j.contains("peak_mem_bytes"))
      throw UserError(SourceRange{}, where + " is not a metrics row (a JSON object with step, loss, tokens_per_s and peak_mem_bytes)",
                      "pass the file `loom run --metrics` wrote");
    auto need = [&](const char* field, bool typed, const char* kind) {
      if (!typed)
        throw UserError(SourceRange{}, where + ": `" + field + "` is " + j.at(field).dump() + ", not " + kind,
                        "pass the file `loom run --metrics` wrote");
    };
    need("step", j.at("step").is_number_integer(), "an integer");
    need("tokens_per_s", j.at("tokens_per_s").is_number(), "a number");
    need("peak_mem_bytes", j.at("peak_mem_bytes").is_number_integer(), "an integer");
    if (j.contains("step_ms")) need("step_ms", j.at("step_ms").is_number(), "a number");
    MetricsRow r;
    r.step = j.at("step").get<int64_t>();
    r.loss = j.at("loss").is_number() ? j.at("loss").get<double>() : std::nan("");  // not finite: not plotted
    r.tokens_per_s = j.at("tokens_per_s").get<double>();
    r.step_ms = j.value("step_ms", 0.0);
    r.peak_bytes = j.at("peak_mem_bytes").get<int64_t>();
    rows.push_back(r);
  }
  if (rows.empty()) throw UserError(SourceRange{}, path + " holds no steps", "pass the metrics of a run that trained at least one step");
  return rows;
}

}  // namespace loom::report
