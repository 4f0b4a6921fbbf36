#!/usr/bin/env bash
# Installs the Debian 12 packages nibble needs, if any is missing (run as root).
set -euo pipefail
pkgs=(build-essential cmake git libeigen3-dev libxsimd-dev xtl-dev libopenblas-dev libomp-dev
      libgtest-dev libbenchmark-dev pybind11-dev python3-dev python3-numpy python3-pytest
      python3-venv python3-setuptools python3-wheel python3-pip python3-matplotlib
      g++-aarch64-linux-gnu qemu-user clang-14 libclang-rt-14-dev clang-format)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "deps: all packages present"
fi
