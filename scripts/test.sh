#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs every test with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
cd build && ctest --output-on-failure -j2 "$@"
