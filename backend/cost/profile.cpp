#include "backend/cost/profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "lang/diagnostics.h"

namespace loom {
namespace {

// Bump when the measurement changes meaning (2: op times take the work between ops; 3: two
// collective regimes, the mesh's groups and a pipeline's transfers; 5: each rank's op times and
// the gradient norm's own work, which a cached profile of format 4 would price at nothing; 6:
// the waits' unpacking, which the ops' times of format 5 still hold; 7: with sharded states the
// replica sums' copies too, which format 6's ops' times hold; 8: on a GPU each op's host time).
constexpr int kFormat = 8;

// The world a profile's key names (0 when it names none).
int key_world(const std::string& key) {
  std::istringstream fields(key);
  for (std::string field; fields >> field;)
    if (field.rfind("world=", 0) == 0) {
      long world = std::strtol(field.c_str() + 6, nullptr, 10);  // a foreign key's text may be anything
      return world > 1 && world < (1 << 20) ? static_cast<int>(world) : 0;
    }
  return 0;
}

// Each rank's op times, where a profile has them: a forward and a backward time per rank of its
// world for every op.
void check_rank_times(const Profile& p, const std::string& origin) {
  bool any = false;
  for (const OpProfile& op : p.ops) any = any || !op.forward_ms_by_rank.empty() || !op.backward_ms_by_rank.empty();
  if (!any) return;
  int world = key_world(p.key);
  size_t ranks = 2;  // without a world in the key: as many as the most any op has, and two or more
  for (const OpProfile& op : p.ops) ranks = std::max({ranks, op.forward_ms_by_rank.size(), op.backward_ms_by_rank.size()});
  if (world > 1) ranks = static_cast<size_t>(world);
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const OpProfile& op = p.ops[i];
    if (op.forward_ms_by_rank.size() == ranks && op.backward_ms_by_rank.size() == ranks) continue;
    throw UserError(SourceRange{}, origin + ": op " + std::to_string(i) + " (`" + op.module + "`) has " +
                                       std::to_string(op.forward_ms_by_rank.size()) + " forward and " +
                                       std::to_string(op.backward_ms_by_rank.size()) + " backward times by rank, where every op needs " +
                                       std::to_string(ranks) + " of each (one per rank" + (world > 1 ? " of its world" : "") + ")",
                    "write it again with `loom profile`");
  }
}

}  // namespace

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

double CollectiveProfile::predict_ms(int64_t bytes) const { return in_step_scale * loom::predict_ms(samples, fit, bytes); }

const CollectiveProfile* Profile::collective(const std::string& name, const std::string& group, bool beside_compute) const {
  const CollectiveProfile* other = nullptr;
  for (auto& c : collectives)
    if (c.collective == name && c.group == group) {
      if (c.beside_compute == beside_compute) return &c;
      other = &c;
    }
  return other;
}

int Profile::ranks_timed() const {
  if (ops.empty()) return 0;
  size_t ranks = ops.front().forward_ms_by_rank.size();
  for (const OpProfile& op : ops)
    if (op.forward_ms_by_rank.size() != ranks || op.backward_ms_by_rank.size() != ranks) return 0;
  return static_cast<int>(ranks);
}

Profile Profile::as_timed_on(int rank) const {
  if (rank < 0 || rank >= ranks_timed()) throw InternalError("the profile has no times of rank " + std::to_string(rank));
  Profile p = *this;
  for (OpProfile& op : p.ops) {
    op.forward_ms = op.forward_ms_by_rank[static_cast<size_t>(rank)];
    op.backward_ms = op.backward_ms_by_rank[static_cast<size_t>(rank)];
    op.forward_ms_by_rank.clear();  // one rank's copy: the others' times would make R copies cost R^2
    op.backward_ms_by_rank.clear();
  }
  return p;
}

std::string Profile::to_json() const {
  nlohmann::json j{{"format", "loom-profile-" + std::to_string(kFormat)},
                   {"key", key},
                   {"device", device},
                   {"measured_steps", measured_steps},
                   {"optimizer_step_ms", optimizer_step_ms},
                   {"grad_norm_ms", grad_norm_ms},
                   {"unpack_gb_per_s", unpack_gb_per_s},
                   {"unpack_bytes_per_step", unpack_bytes_per_step}};
  j["ops"] = nlohmann::json::array();
  for (auto& op : ops) {
    nlohmann::json o{{"module", op.module},
                     {"forward_ms", op.forward_ms},
                     {"backward_ms", op.backward_ms},
                     {"memory_before_bytes", op.memory_before_bytes},
                     {"forward_peak_bytes", op.forward_peak_bytes},
                     {"backward_before_bytes", op.backward_before_bytes},
                     {"backward_peak_bytes", op.backward_peak_bytes}};
    if (!op.forward_ms_by_rank.empty()) {
      o["forward_ms_by_rank"] = op.forward_ms_by_rank;
      o["backward_ms_by_rank"] = op.backward_ms_by_rank;
    }
    if (op.forward_host_ms >= 0) o["forward_host_ms"] = op.forward_host_ms;
    if (op.backward_host_ms >= 0) o["backward_host_ms"] = op.backward_host_ms;
    j["ops"].push_back(std::move(o));
  }
  j["collectives"] = nlohmann::json::array();
  for (auto& c : collectives) {
    nlohmann::json samples = nlohmann::json::array();
    for (auto& s : c.samples) samples.push_back({s.bytes, s.ms});
    j["collectives"].push_back({{"collective", c.collective},
                                {"group", c.group},
                                {"group_size", c.group_size},
                                {"beside_compute", c.beside_compute},
                                {"alpha_ms", c.fit.alpha_ms},
                                {"beta_ms_per_byte", c.fit.beta_ms_per_byte},
                                {"samples_bytes_ms", samples},
                                {"in_step_scale", c.in_step_scale}});
  }
  return j.dump(1) + "\n";
}

Profile Profile::from_json(const std::string& text, const std::string& origin) {
  try {
    auto j = nlohmann::json::parse(text);
    if (j.value("format", "") != "loom-profile-" + std::to_string(kFormat))
      throw UserError(SourceRange{}, origin + " is not a Loom profile of format " + std::to_string(kFormat),
                      "write it again with `loom profile`");
    Profile p;
    p.key = j.at("key").get<std::string>();
    p.device = j.at("device").get<std::string>();
    p.measured_steps = j.at("measured_steps").get<int>();
    p.optimizer_step_ms = j.at("optimizer_step_ms").get<double>();
    p.grad_norm_ms = j.value("grad_norm_ms", -1.0);
    p.unpack_gb_per_s = j.value("unpack_gb_per_s", -1.0);
    p.unpack_bytes_per_step = j.value("unpack_bytes_per_step", int64_t{0});
    for (auto& o : j.at("ops")) {
      p.ops.push_back({o.at("module").get<std::string>(), o.at("forward_ms").get<double>(), o.at("backward_ms").get<double>(),
                       o.at("memory_before_bytes").get<int64_t>(), o.at("forward_peak_bytes").get<int64_t>(),
                       o.at("backward_before_bytes").get<int64_t>(), o.at("backward_peak_bytes").get<int64_t>(),
                       o.value("forward_ms_by_rank", std::vector<double>{}), o.value("backward_ms_by_rank", std::vector<double>{})});
      p.ops.back().forward_host_ms = o.value("forward_host_ms", -1.0);
      p.ops.back().backward_host_ms = o.value("backward_host_ms", -1.0);
    }
    for (auto& c : j.at("collectives")) {
      CollectiveProfile cp;
      cp.collective = c.at("collective").get<std::string>();
      cp.group = c.at("group").get<std::string>();
      cp.group_size = c.at("group_size").get<int>();
      cp.beside_compute = c.at("beside_compute").get<bool>();
      cp.fit = {c.at("alpha_ms").get<double>(), c.at("beta_ms_per_byte").get<double>()};
      for (auto& s : c.at("samples_bytes_ms")) cp.samples.push_back({s.at(0).get<int64_t>(), s.at(1).get<double>()});
      cp.in_step_scale = c.at("in_step_scale").get<double>();
      if (!(cp.in_step_scale > 0))
        throw UserError(SourceRange{}, origin + ": the " + cp.collective + " on `" + cp.group + "` has in_step_scale " +
                                           std::to_string(cp.in_step_scale) + ", not a positive number",
                        "write it again with `loom profile`");
      p.collectives.push_back(std::move(cp));
    }
    check_rank_times(p, origin);
    return p;
  } catch (const nlohmann::json::exception& e) {
    throw UserError(SourceRange{}, origin + " is not a readable Loom profile: " + e.what(), "write it again with `loom profile`");
  }
}

std::string profile_key(const ProfileKeyInputs& k) {
  std::ostringstream s;
  s << "loom-profile-" << kFormat << " model=" << k.model << " world=" << k.world << " local_world=" << k.local_world
    << " micro_batch=" << k.micro_batch << " seq=" << k.seq << " accum=" << k.accum << " device=" << k.device
    << " precision=" << k.precision << " threads=" << k.threads << " schedule=" << std::hex << fnv1a(k.schedule);
  if (!k.build.empty()) s << " build=" << k.build;
  return s.str();
}

void check_profile_fits(const Profile& profile, const std::string& origin, const ProfileKeyInputs& run) {
  std::map<std::string, std::string> measured;
  std::istringstream fields(profile.key);
  for (std::string field; fields >> field;)
    if (size_t eq = field.find('='); eq != std::string::npos) measured[field.substr(0, eq)] = field.substr(eq + 1);
  std::vector<std::pair<std::string, std::string>> wanted{{"model", run.model},
                                                          {"world", std::to_string(run.world)},
                                                          {"micro_batch", std::to_string(run.micro_batch)},
                                                          {"seq", std::to_string(run.seq)},
                                                          {"accum", std::to_string(run.accum)}};
  std::string differences;
  for (const auto& [field, value] : wanted)
    if (measured[field] != value)
      differences += (differences.empty() ? "" : ", ") + field + " " + measured[field] + " (this run: " + value + ")";
  if (!differences.empty())
    throw UserError(SourceRange{}, origin + " was measured for another run: " + differences,
                    "measure this run with `loom profile` and the same --model, --nproc, --micro-batch, --seq and --accum");
}

std::string profile_cache_path(const std::string& dir, const std::string& model, int world, const std::string& key) {
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(fnv1a(key)));
  std::string name = model;
  for (char& c : name)
    if (c == ':' || c == '/') c = '-';
  return (std::filesystem::path(dir) / (name + "-w" + std::to_string(world) + "-" + hash + ".json")).string();
}

std::string default_profile_cache_dir() {
  if (const char* d = std::getenv("LOOM_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/loom/profiles";
  if (const char* d = std::getenv("HOME"); d && *d) return std::string(d) + "/.cache/loom/profiles";
  return ".loom-cache/profiles";
}

Profile load_profile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UserError(SourceRange{}, "cannot read the profile '" + path + "'", "write one with `loom profile ... --out FILE`");
  std::stringstream text;
  text << in.rdbuf();
  return Profile::from_json(text.str(), path);
}

std::optional<Profile> load_cached_profile(const std::string& path, const std::string& key) {
  try {
    Profile p = load_profile(path);
    if (p.key != key) return std::nullopt;
    return p;
  } catch (const UserError&) {
    return std::nullopt;  // a missing, stale or damaged cache entry is measured again
  }
}

}  // namespace loom
