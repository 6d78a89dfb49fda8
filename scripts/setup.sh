#!/usr/bin/env bash
# Installs what optpipe needs from Debian's archive (only what is missing), then configures and
# builds into build/. Safe to run again: it does nothing that is already done.
#   --test   also install what the tests need (Chromium, to render the HTML report headless)
set -euo pipefail
cd "$(dirname "$0")/.."

# libtorch-dev, libgloo-dev (c10d gloo headers) and libopenblas0-pthread (LibTorch's BLAS; without
# it matrix products run ~30× slower) are for the runtime, optpipe-runtime; clang-format (14 on
# Debian 12) is for scripts/check_format.sh.
packages=(cmake g++ make pkg-config nlohmann-json3-dev libcli11-dev libfmt-dev libgtest-dev libbenchmark-dev
          pybind11-dev python3-dev coinor-libcbc-dev libgecode-dev libtorch-dev libgloo-dev libopenblas0-pthread
          clang-format)
if [ "${1:-}" = "--test" ]; then
  packages+=(chromium)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  if ! $sudo_cmd apt-get install -y --no-install-recommends "${missing[@]}" >&2; then
    $sudo_cmd apt-get update >&2
    $sudo_cmd apt-get install -y --no-install-recommends "${missing[@]}" >&2
  fi
fi

jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >&2
cmake --build build -j "$jobs" >&2
