// Text inside the SVG plots Loom writes (loom report, the simulated memory timeline, loom tune's heatmap).
// Header-only and torch-free.
#pragma once

#include <string>

namespace loom {

// `text` as SVG character data: &, < and > escaped.
inline std::string svg_escaped(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : std::string(1, c);
  return out;
}

}  // namespace loom
