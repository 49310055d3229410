#!/usr/bin/env bash
# Installs what Loom needs on Debian 12 (run as root, or with sudo available).
set -euo pipefail
packages=(
  build-essential cmake ninja-build ccache git
  libtorch-dev libopenblas0-openmp       # LibTorch 1.13 (CPU) and the fast BLAS (see ../shared/ENVIRONMENT.md)
  antlr4 libantlr4-runtime-dev default-jre-headless
  doctest-dev nlohmann-json3-dev libcli11-dev libfmt-dev pybind11-dev libgloo-dev
  python3 python3-dev python3-torch iproute2   # python3-dev: the Python module's headers
  libtcmalloc-minimal4                  # the allocator loom links (faster parsing)
  librsvg2-bin file                     # the tests render the SVG plots loom writes to PNG
  openmpi-bin slurmd slurmctld slurm-client munge  # the launcher tests: mpirun, and srun on a one-node Slurm
)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install_deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
