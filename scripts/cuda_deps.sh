#!/usr/bin/env bash
# Gathers what scripts/build_cuda.sh needs on a machine that cannot install Debian packages
# (the lent GPU machine): the Debian .deb files of Loom's other dependencies and the parser
# generated here by the CPU build (build/generated/loom_grammar). Run on the Debian machine
# after scripts/build.sh; carry DEPS_DIR (e.g. .deps, which git ignores) to the GPU machine.
# Usage: bash scripts/cuda_deps.sh DEPS_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
deps="${1:?usage: bash scripts/cuda_deps.sh DEPS_DIR}"
[ -f build/generated/loom_grammar/LoomParser.cpp ] || { echo "no generated parser: run bash scripts/build.sh first" >&2; exit 1; }
mkdir -p "$deps/parser"
cp build/generated/loom_grammar/* "$deps/parser/"
# antlr4's runtime links libuuid; gloo's headers are what PyTorch's ProcessGroupGloo.hpp includes.
(cd "$deps" && apt-get download libantlr4-runtime-dev libantlr4-runtime4.9 uuid-dev libuuid1 libfmt-dev libfmt9 \
  libcli11-dev nlohmann-json3-dev libgloo-dev)
echo "$deps is ready: bash scripts/build_cuda.sh $deps on the GPU machine"
