#!/usr/bin/env bash
# Configures and builds Loom into build/ (Release-like, ccache when available).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
ninja -C build
