#include "autotuner/space.h"

namespace loom::tune {

std::string point_text(const Point& p) {
  std::string out;
  for (const auto& [name, value] : p) out += (out.empty() ? "" : ", ") + name + "=" + value.to_source();
  return out;
}

std::vector<std::string> point_settings(const Point& p) {
  std::vector<std::string> out;
  for (const auto& [name, value] : p) out.push_back(name + "=" + value.to_source());
  return out;
}

std::map<std::string, Value> values_of(const Point& p) { return {p.begin(), p.end()}; }

KnobSpace SearchSpace::evaluated(const std::map<std::string, Value>& values, bool& violated) const {
  KnobSpace knobs;
  knobs.set_assignment(values);
  violated = false;
  try {
    evaluate_(knobs);
  } catch (const ConstraintViolation&) {
    violated = true;
  }
  return knobs;
}

std::optional<SearchSpace::Resolved> SearchSpace::resolve(const std::map<std::string, Value>& values) const {
  bool violated = false;
  KnobSpace knobs = evaluated(values, violated);
  if (violated) return std::nullopt;
  Resolved r;
  for (const Knob& k : knobs.knobs()) {
    r.point.push_back({k.name, k.value});
    r.domains.push_back(k.domain);
  }
  return r;
}

void SearchSpace::for_each_point(const std::function<bool(const Point&)>& visit, size_t* pruned) const {
  if (pruned) *pruned = 0;
  // An explicit stack of prefixes, so that points come one at a time: fix a prefix, evaluate
  // to learn the next knob and its domain under it, branch over that domain in order.
  struct Frame {
    std::map<std::string, Value> prefix;
    size_t depth;
  };
  std::vector<Frame> stack{{{}, 0}};
  while (!stack.empty()) {
    Frame f = std::move(stack.back());
    stack.pop_back();
    bool violated = false;
    KnobSpace knobs = evaluated(f.prefix, violated);
    const std::vector<Knob>& declared = knobs.knobs();
    if (f.depth >= declared.size()) {
      if (violated) {
        if (pruned) ++*pruned;
        continue;
      }
      Point p;
      for (const Knob& k : declared) p.push_back({k.name, k.value});
      if (!visit(p)) return;
      continue;
    }
    const Knob& next = declared[f.depth];
    for (size_t i = next.domain.size(); i-- > 0;) {  // pushed in reverse: popped in domain order
      Frame child{f.prefix, f.depth + 1};
      child.prefix[next.name] = next.domain[i];
      stack.push_back(std::move(child));
    }
  }
}

std::vector<Point> SearchSpace::points(size_t limit, size_t* pruned) const {
  std::vector<Point> out;
  for_each_point(
      [&](const Point& p) {
        out.push_back(p);
        return out.size() < limit;
      },
      pruned);
  return out;
}

}  // namespace loom::tune
