#!/usr/bin/env bash
# Builds Loom's CUDA path against another LibTorch (e.g. PyTorch 2.x's, found through
# python3) on a machine that cannot install Debian packages: Debian .deb files of the
# other dependencies are unpacked from DEPS_DIR, and the parser, generated on a machine
# with antlr4, is taken from DEPS_DIR/parser (scripts/cuda_deps.sh DEPS_DIR gathers both).
# Usage: bash scripts/build_cuda.sh DEPS_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
deps=$(realpath "$1")
prefix=/tmp/loom-deps
mkdir -p "$prefix"
for f in "$deps"/*.deb; do dpkg -x "$f" "$prefix"; done
torch_cmake=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_WITH_CUDA=ON \
  -DLOOM_GENERATED_PARSER_DIR="$deps/parser" \
  -DCMAKE_PREFIX_PATH="$torch_cmake;$prefix/usr" -DCMAKE_CXX_FLAGS="-I$prefix/usr/include" \
  -DCMAKE_EXE_LINKER_FLAGS="-L$prefix/usr/lib/x86_64-linux-gnu" \
  -DLOOM_BUILD_TESTS=OFF
ninja -C build-cuda loom
echo "export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu:\$LD_LIBRARY_PATH to run build-cuda/loom"
