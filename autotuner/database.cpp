#include "autotuner/database.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "lang/diagnostics.h"

namespace loom::tune {
namespace {

nlohmann::json value_json(const Value& v) {
  switch (v.kind()) {
    case ValueKind::Int: return v.as_int();
    case ValueKind::Float: return v.as_number();
    case ValueKind::Bool: return v.as_bool();
    case ValueKind::String: return v.as_string();
    default: return v.to_source();
  }
}

Value value_from_json(const nlohmann::json& j) {
  if (j.is_boolean()) return Value::boolean(j.get<bool>());
  if (j.is_number_integer()) return Value::integer(j.get<int64_t>());
  if (j.is_number()) return Value::floating(j.get<double>());
  return Value::string(j.get<std::string>());
}

nlohmann::json knobs_object(const Point& knobs) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, value] : knobs) j[name] = value_json(value);
  return j;
}

std::string line_of(const std::string& context, const Trial& t) {
  nlohmann::json knob_names = nlohmann::json::array();
  for (const auto& kv : t.knobs) knob_names.push_back(kv.first);
  return nlohmann::json{{"context", context},         {"key", point_text(t.knobs)}, {"knobs", knobs_object(t.knobs)},
                        {"knob_order", knob_names},   {"status", status_name(t.status)}, {"objective", t.objective},
                        {"step_s", t.step_s},         {"peak_bytes", t.peak_bytes}, {"message", t.message},
                        {"seconds", t.seconds},       {"steps", t.steps}}
      .dump();
}

Trial trial_of(const nlohmann::json& j) {
  Trial t;
  const nlohmann::json& knobs = j.at("knobs");
  for (const auto& name : j.at("knob_order")) t.knobs.push_back({name.get<std::string>(), value_from_json(knobs.at(name.get<std::string>()))});
  t.status = status_named(j.at("status").get<std::string>());
  t.objective = j.at("objective").get<double>();
  t.step_s = j.at("step_s").get<double>();
  t.peak_bytes = j.at("peak_bytes").get<int64_t>();
  t.message = j.at("message").get<std::string>();
  t.seconds = j.at("seconds").get<double>();
  t.steps = j.value("steps", 0);  // absent from databases written before successive halving
  t.from_database = true;
  return t;
}

}  // namespace

const char* status_name(TrialStatus s) {
  switch (s) {
    case TrialStatus::Ok: return "ok";
    case TrialStatus::Infeasible: return "infeasible";
    case TrialStatus::Failed: return "failed";
    case TrialStatus::TimedOut: return "timed_out";
  }
  return "failed";
}

TrialStatus status_named(const std::string& name) {
  for (TrialStatus s : {TrialStatus::Ok, TrialStatus::Infeasible, TrialStatus::Failed, TrialStatus::TimedOut})
    if (name == status_name(s)) return s;
  throw std::invalid_argument("unknown trial status '" + name + "'");
}

std::string knobs_json(const Point& knobs) { return knobs_object(knobs).dump(); }

TrialDatabase::TrialDatabase(std::string path, std::ostream* warn) : path_(std::move(path)) {
  if (path_.empty() || !std::filesystem::exists(path_)) return;
  std::ifstream in(path_, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bool ends_line = !text.empty() && text.back() == '\n';
  std::vector<std::string> lines;
  std::istringstream split(text);
  for (std::string line; std::getline(split, line);) lines.push_back(line);
  std::streamoff good_bytes = 0;  // the length of the file up to the end of the last good line
  size_t trials = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].empty()) {
      good_bytes += 1;
      continue;
    }
    try {
      nlohmann::json j = nlohmann::json::parse(lines[i]);
      remember(j.at("context").get<std::string>(), trial_of(j));
      good_bytes += static_cast<std::streamoff>(lines[i].size()) + 1;
      ++trials;
    } catch (const std::exception& e) {
      // Only a trial cut off mid-write is dropped: the last line, unfinished (no newline, not
      // JSON), after trials of this database or opening as every trial does. Anything else is
      // not ours to truncate.
      bool trial_like = trials > 0 || lines[i].rfind("{\"context\"", 0) == 0;
      bool cut_off = i + 1 == lines.size() && !ends_line && trial_like && !nlohmann::json::accept(lines[i]);
      if (!cut_off)
        throw UserError(SourceRange{}, path_ + ":" + std::to_string(i + 1) + " is not a trial: " + e.what(),
                        "give --db a trial database (one JSON object per line, as loom tune writes it), or repair or "
                        "remove that line; the file was left as it is");
      // A kill mid-write: drop the partial line, so that the next trial starts a line of its own.
      if (warn) *warn << "warning: " << path_ << ":" << i + 1 << " is an unfinished trial (the sweep was stopped while writing it); dropped it\n";
      std::filesystem::resize_file(path_, static_cast<uintmax_t>(good_bytes));
      return;
    }
  }
  // A whole last line without its newline: end it, so that the next trial starts its own.
  std::ifstream tail(path_, std::ios::binary | std::ios::ate);
  if (tail.tellg() > 0) {
    tail.seekg(-1, std::ios::end);
    if (tail.get() != '\n') std::ofstream(path_, std::ios::app) << "\n";
  }
}

void TrialDatabase::remember(const std::string& context, Trial trial) {
  std::string key = context + "\n" + point_text(trial.knobs);
  auto known = index_.find(key);
  if (known != index_.end()) {
    trials_[known->second].second = std::move(trial);  // a later measurement of the same point replaces it
    return;
  }
  index_[key] = trials_.size();
  trials_.push_back({context, std::move(trial)});
}

const Trial* TrialDatabase::find(const std::string& context, const Point& point) const {
  auto it = index_.find(context + "\n" + point_text(point));
  return it == index_.end() ? nullptr : &trials_[it->second].second;
}

void TrialDatabase::append(const std::string& context, const Trial& trial) {
  remember(context, trial);
  if (path_.empty()) return;
  std::ofstream out(path_, std::ios::app);
  out << line_of(context, trial) << "\n" << std::flush;
  if (!out) throw UserError(SourceRange{}, "cannot append to the trial database " + path_, "free space, or give another --db");
}

std::vector<Trial> TrialDatabase::trials(const std::string& context) const {
  std::vector<Trial> out;
  for (const auto& [c, t] : trials_)
    if (c == context) out.push_back(t);
  return out;
}

}  // namespace loom::tune
