#include "backend/instrument/timeline.h"

#include <cstdio>
#include <fstream>
#include <mutex>

#include <nlohmann/json.hpp>

namespace loom::timeline {
namespace {

struct Event {
  std::string name;
  const char* category;
  Track track;
  double start, end;
};

std::mutex mutex;
bool on = false;
int this_rank = 0;
std::chrono::steady_clock::time_point origin;
std::vector<Event> events;

}  // namespace

void enable(int rank) {
  std::lock_guard<std::mutex> lock(mutex);
  on = true;
  this_rank = rank;
  origin = std::chrono::steady_clock::now();
  events.clear();
}

bool enabled() { return on; }

double now_us() { return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin).count(); }

void record(const std::string& name, const char* category, Track track, double start_us, double end_us) {
  if (!on) return;
  std::lock_guard<std::mutex> lock(mutex);
  events.push_back({name, category, track, start_us, end_us});
}

Span::Span(std::string name, const char* category)
    : name_(std::move(name)), category_(category), start_(on ? now_us() : 0), active_(on) {}

Span::~Span() {
  if (active_) record(name_, category_, Track::Compute, start_, now_us());
}

std::string rank_events() {
  std::lock_guard<std::mutex> lock(mutex);
  std::string lines;
  for (auto& e : events) {
    nlohmann::json j{{"name", e.name}, {"cat", e.category}, {"ph", "X"}, {"ts", e.start}, {"dur", e.end - e.start},
                     {"pid", this_rank}, {"tid", static_cast<int>(e.track)}};
    lines += j.dump() + "\n";
  }
  return lines;
}

std::string merged_trace(const std::string& prefix, int world) {
  nlohmann::json trace;
  trace["displayTimeUnit"] = "ms";
  trace["traceEvents"] = nlohmann::json::array();
  for (int r = 0; r < world; ++r) {
    trace["traceEvents"].push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", r}, {"args", {{"name", "rank " + std::to_string(r)}}}});
    for (int t = 0; t < 2; ++t)
      trace["traceEvents"].push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", r}, {"tid", t},
                                      {"args", {{"name", t == 0 ? "compute" : "collectives"}}}});
    std::string file = prefix + ".rank" + std::to_string(r);
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line))
      if (!line.empty()) trace["traceEvents"].push_back(nlohmann::json::parse(line));
  }
  return trace.dump() + "\n";
}

void remove_rank_files(const std::string& prefix, int world) {
  for (int r = 0; r < world; ++r) std::remove((prefix + ".rank" + std::to_string(r)).c_str());
}

}  // namespace loom::timeline
