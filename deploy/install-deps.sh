#!/usr/bin/env bash
# Installs what building and testing Tandem needs, from Debian 12's archive.
# Idempotent; uses sudo when not run as root. The CUDA toolkit is optional:
# when /usr/local/cuda/bin/nvcc exists the CUDA backend is built too.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libzmq3-dev cppzmq-dev
  libprotobuf-dev protobuf-compiler
  libabsl-dev libboost-dev libgtest-dev libgmock-dev
  libsystemd-dev systemd dpkg-dev
  clang-format clang-tidy flake8
  # cluster/slurm's test starts a single-host Slurm (22.05) of its own, with its own munged.
  slurm-wlm munge
)
# The PyTorch adaptor and its tests use Debian's Python 3.11 with torch (and torchvision, for the model zoo);
# the Kubernetes device plugin (cluster/kubernetes) and its test use grpcio and protobuf.
if [ "${TANDEM_WITH_PYTHON:-1}" = 1 ]; then
  PACKAGES+=(python3 python3-numpy python3-torch python3-torchvision python3-pip python3-setuptools python3-wheel python3-grpcio python3-protobuf)
fi
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
