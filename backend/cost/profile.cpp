#include "backend/cost/profile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "backend/cost/json_fields.h"
#include "backend/cost/step_estimate.h"
#include "backend/ir/ir.h"
#include "backend/ir/role.h"
#include "lang/diagnostics.h"

namespace loom {
namespace {

// Bump when the measurement changes meaning (2: op times take the work between ops; 3: two
// collective regimes, the mesh's groups and a pipeline's transfers; 5: each rank's op times and
// the gradient norm's own work, which a cached profile of format 4 would price at nothing; 6:
// the waits' unpacking, which the ops' times of format 5 still hold; 7: with sharded states the
// replica sums' copies too, which format 6's ops' times hold; 8: on a GPU each op's host time;
// 9: the memory limit the measured program was planned within, which format 8 does not say).
// With a bump, write tests/fuzz/seeds/profile.json again: the fuzzer's seed of this format.
constexpr int kFormat = 9;

constexpr bool kUnmeasuredAllowed = true;

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

// The groups a profile's collectives are measured on: every role by its name, and the sweep's own
// names of the grads and optim roles ("grad_peers", "optim_peers"). Listed once for every file read.
const std::vector<std::string>& profiled_group_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> all;
    for (ir::Role role : ir::kGroupRoles) {
      all.push_back(ir::role_name(role));
      if (const char* alias = sweep_group_alias(role)) all.push_back(alias);
    }
    return all;
  }();
  return names;
}

// Reads the fields of one profile, naming the file and the field in every error: a profile
// written by hand or by another tool is priced as if measured, so a negative time or unsorted
// samples would price a step silently wrong.
class ProfileReader : public JsonFields {
 public:
  explicit ProfileReader(std::string origin) : JsonFields(std::move(origin), "write it again with `loom profile`") {}

  const nlohmann::json& list(const nlohmann::json& object, const std::string& path, const std::string& key) const {
    const nlohmann::json& v = at(object, path, key);
    if (!v.is_array()) fail(join(path, key), "must be a list, not " + shown_json(v));
    return v;
  }
  int64_t bytes(const nlohmann::json& object, const std::string& path, const std::string& key) const {
    return whole_number(object, path, key, "bytes");
  }
  int64_t elements(const nlohmann::json& object, const std::string& path, const std::string& key) const {
    return whole_number(object, path, key, "elements");
  }
  // A whole number of `what` ("bytes"): 0 or more.
  int64_t whole_number(const nlohmann::json& object, const std::string& path, const std::string& key, const std::string& what) const {
    const nlohmann::json& v = at(object, path, key);
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(join(path, key), "must be at most " + std::to_string(std::numeric_limits<int64_t>::max()) + ", not " + shown_json(v));
    if (!v.is_number_integer() || v.get<int64_t>() < 0) fail(join(path, key), "must be a whole number of " + what + " (0 or more), not " + shown_json(v));
    return v.get<int64_t>();
  }
  // A time or a rate: 0 or more, or with kUnmeasuredAllowed -1 for "not measured".
  double value_amount(const nlohmann::json& v, const std::string& field, bool unmeasured_allowed = false) const {
    if (v.is_number() && (v.get<double>() >= 0 || (unmeasured_allowed && v.get<double>() == -1)) && std::isfinite(v.get<double>()))
      return v.get<double>();
    fail(field, std::string("must be a number of 0 or more") + (unmeasured_allowed ? " (or -1: not measured)" : "") + ", not " + shown_json(v));
  }
  double amount(const nlohmann::json& object, const std::string& path, const std::string& key, bool unmeasured_allowed = false) const {
    return value_amount(at(object, path, key), join(path, key), unmeasured_allowed);
  }
  // An amount the file may leave out: -1 (not measured) where it does.
  double optional_amount(const nlohmann::json& object, const std::string& path, const std::string& key) const {
    return object.contains(key) ? amount(object, path, key, kUnmeasuredAllowed) : -1;
  }
  std::vector<double> amounts(const nlohmann::json& object, const std::string& path, const std::string& key) const {
    std::vector<double> values;
    if (!object.contains(key)) return values;
    const nlohmann::json& v = list(object, path, key);
    for (size_t i = 0; i < v.size(); ++i) values.push_back(value_amount(v[i], join(path, key) + "[" + std::to_string(i) + "]"));
    return values;
  }

  // A string field that must be one of `allowed`.
  std::string one_of(const nlohmann::json& object, const std::string& path, const std::string& key,
                     const std::vector<std::string>& allowed) const {
    std::string value = text(object, path, key);
    if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return value;
    std::string names;
    for (const std::string& a : allowed) names += (names.empty() ? "" : ", ") + a;
    fail(join(path, key), "must be one of " + names + ", not " + shown_json(value));
  }

  OpProfile op(const nlohmann::json& o, const std::string& at_index) const {
    OpProfile op;
    op.module = text(o, at_index, "module");
    std::string path = at_index + " (" + shown_name(op.module) + ")";
    op.forward_ms = amount(o, path, "forward_ms");
    op.backward_ms = amount(o, path, "backward_ms");
    op.memory_before_bytes = bytes(o, path, "memory_before_bytes");
    op.forward_peak_bytes = bytes(o, path, "forward_peak_bytes");
    op.backward_before_bytes = bytes(o, path, "backward_before_bytes");
    op.backward_peak_bytes = bytes(o, path, "backward_peak_bytes");
    op.forward_ms_by_rank = amounts(o, path, "forward_ms_by_rank");
    op.backward_ms_by_rank = amounts(o, path, "backward_ms_by_rank");
    op.forward_host_ms = optional_amount(o, path, "forward_host_ms");
    op.backward_host_ms = optional_amount(o, path, "backward_host_ms");
    return op;
  }

  CollectiveProfile collective(const nlohmann::json& c, const std::string& at_index) const {
    CollectiveProfile cp;
    cp.collective = one_of(c, at_index, "collective",
                           {ir::kAllGatherName, ir::kReduceScatterName, ir::kAllReduceName, ir::kSendName, ir::kRecvName});
    cp.group = one_of(c, at_index, "group", profiled_group_names());
    std::string path = at_index + " (" + cp.collective + " on " + cp.group + ")";
    cp.group_size = count(c, path, "group_size", 1);
    const nlohmann::json& beside = at(c, path, "beside_compute");
    if (!beside.is_boolean()) fail(join(path, "beside_compute"), "must be true or false, not " + shown_json(beside));
    cp.beside_compute = beside.get<bool>();
    cp.fit = {amount(c, path, "alpha_ms"), amount(c, path, "beta_ms_per_byte")};
    std::string field = join(path, "samples_bytes_ms");
    for (const nlohmann::json& s : list(c, path, "samples_bytes_ms")) {
      if (!s.is_array() || s.size() != 2 || !s[0].is_number_integer() || s[0].get<int64_t>() < 0)
        fail(field, "holds " + shown_json(s) + ": each sample is [bytes, ms], bytes a whole number of 0 or more");
      cp.samples.push_back({s[0].get<int64_t>(), value_amount(s[1], field + " (" + shown_json(s) + ")")});
      if (cp.samples.size() > 1 && cp.samples[cp.samples.size() - 2].bytes > cp.samples.back().bytes)
        fail(field, "is not sorted by bytes (" + shown_json(s) + " comes after a larger sample)");
    }
    cp.in_step_scale = amount(c, path, "in_step_scale");
    if (!(cp.in_step_scale > 0)) fail(join(path, "in_step_scale"), "must be positive, not " + shown_json(at(c, path, "in_step_scale")));
    return cp;
  }

};

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
                   {"optimizer_elements", optimizer_elements},
                   {"grad_norm_ms", grad_norm_ms},
                   {"unpack_gb_per_s", unpack_gb_per_s},
                   {"unpack_bytes_per_step", unpack_bytes_per_step},
                   {"memory_limit_bytes", memory_limit_bytes},
                   {"measured_step_ms", measured_step_ms}};
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
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw UserError(SourceRange{}, origin + " is not a readable Loom profile: " + json_error_text(e), "write it again with `loom profile`");
  }
  if (!j.is_object() || j.value("format", nlohmann::json()) != "loom-profile-" + std::to_string(kFormat))
    throw UserError(SourceRange{}, origin + " is not a Loom profile of format " + std::to_string(kFormat),
                    "write it again with `loom profile`");
  ProfileReader r(origin);
  Profile p;
  p.key = r.text(j, "", "key");
  p.device = r.text(j, "", "device");
  p.measured_steps = r.count(j, "", "measured_steps", 0);
  p.optimizer_step_ms = r.amount(j, "", "optimizer_step_ms", kUnmeasuredAllowed);
  p.optimizer_elements = j.contains("optimizer_elements") ? r.elements(j, "", "optimizer_elements") : 0;
  p.grad_norm_ms = r.optional_amount(j, "", "grad_norm_ms");
  p.unpack_gb_per_s = r.optional_amount(j, "", "unpack_gb_per_s");
  p.unpack_bytes_per_step = j.contains("unpack_bytes_per_step") ? r.bytes(j, "", "unpack_bytes_per_step") : 0;
  p.memory_limit_bytes = r.bytes(j, "", "memory_limit_bytes");
  p.measured_step_ms = r.optional_amount(j, "", "measured_step_ms");
  const nlohmann::json& ops = r.list(j, "", "ops");
  for (size_t i = 0; i < ops.size(); ++i) p.ops.push_back(r.op(ops[i], "ops[" + std::to_string(i) + "]"));
  const nlohmann::json& collectives = r.list(j, "", "collectives");
  for (size_t i = 0; i < collectives.size(); ++i)
    p.collectives.push_back(r.collective(collectives[i], "collectives[" + std::to_string(i) + "]"));
  check_rank_times(p, origin);
  return p;
}

int64_t planning_limit(int64_t given, const Profile& profile) { return given >= 0 ? given : profile.memory_limit_bytes; }

std::string profile_key(const ProfileKeyInputs& k) {
  std::ostringstream s;
  s << "loom-profile-" << kFormat << " model=" << k.model << " world=" << k.world << " local_world=" << k.local_world
    << " micro_batch=" << k.micro_batch << " seq=" << k.seq << " accum=" << k.accum << " device=" << k.device
    << " precision=" << k.precision << " threads=" << k.threads << " memory_limit=" << k.memory_limit
    << " schedule=" << std::hex << fnv1a(k.schedule);
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
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UserError(SourceRange{}, "the profile '" + path + "' is a directory", "give the file `loom profile ... --out FILE` wrote");
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
