#!/usr/bin/env bash
# Installs what optpipe needs from Debian's archive (only what is missing), then configures and
# builds into build/. Safe to run again: it does nothing that is already done.
#   (no option)  what `optpipe plan` needs, and only that: the solvers and the command-line tool
#                (the first plan within a few minutes of a fresh clone)
#   --full   also the runtime (LibTorch), the Python module, the tests and the benchmarks
#   --test   --full, and what the tests need besides (Chromium, to render the HTML report headless)
#   --cuda   --full, and the runtime's GPU path into build-cuda/, against PyPI's CUDA LibTorch
#            (torch $OPTPIPE_TORCH_VERSION, default 2.11.0, installed into build-cuda/torch-venv:
#            a multi-GB download, which is why it is not part of the default build)
set -euo pipefail
cd "$(dirname "$0")/.."

with_all=0
with_tests=0
with_cuda=0
for arg in "$@"; do
  case "$arg" in
    --full) with_all=1 ;;
    --test) with_all=1; with_tests=1 ;;
    --cuda) with_all=1; with_cuda=1 ;;
    *) echo "setup: unknown option $arg (--full, --test, --cuda)" >&2; exit 2 ;;
  esac
done

packages=(cmake g++ make pkg-config nlohmann-json3-dev libcli11-dev libfmt-dev coinor-libcbc-dev libgecode-dev)
# libtorch-dev, libgloo-dev (c10d gloo headers) and libopenblas0-pthread (LibTorch's BLAS; without
# it matrix products run ~30× slower) are for the runtime, optpipe-runtime; clang-format (14 on
# Debian 12) is for scripts/check_format.sh; protoc (protobuf-compiler) for the test that decodes
# the CP-SAT model optpipe writes.
if [ $with_all = 1 ]; then
  packages+=(libgtest-dev libbenchmark-dev pybind11-dev python3-dev python3-venv libtorch-dev libgloo-dev
             libopenblas0-pthread clang-format protobuf-compiler)
fi
if [ $with_tests = 1 ]; then
  packages+=(chromium)
fi
if [ $with_cuda = 1 ]; then
  packages+=(python3-venv)
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

# CP-SAT's library from the pinned ortools wheel (a few seconds; optpipe builds without it).
./scripts/fetch_ortools.sh || echo "setup: CP-SAT not fetched; optpipe builds without it (--exact uses Gecode and CBC)" >&2

# The frameworks' code the export tests read optpipe's exports back with (about 3 MB).
if [ $with_all = 1 ]; then
  ./scripts/fetch_framework_sources.sh || echo "setup: framework sources not fetched; the export tests check against transcribed rules only" >&2
fi

jobs=$(nproc 2>/dev/null || echo 2)
if [ $with_all = 1 ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DOPTPIPE_BUILD_TESTS=ON -DOPTPIPE_BUILD_BENCH=ON \
        -DOPTPIPE_BUILD_PYTHON=ON -DOPTPIPE_BUILD_RUNTIME=ON >&2
  cmake --build build -j "$jobs" >&2
else
  started=$(date +%s)
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DOPTPIPE_BUILD_TESTS=OFF -DOPTPIPE_BUILD_BENCH=OFF \
        -DOPTPIPE_BUILD_PYTHON=OFF -DOPTPIPE_BUILD_RUNTIME=OFF >&2
  cmake --build build -j "$jobs" --target optpipe_cmd >&2
  echo "setup: built build/optpipe in $(( $(date +%s) - started )) s; ./scripts/setup.sh --full (or the test" \
       "command) adds the runtime (optpipe run, profile), the Python module, the tests and benchmarks" >&2
fi

if [ $with_cuda = 1 ]; then
  venv=build-cuda/torch-venv
  torch_version="${OPTPIPE_TORCH_VERSION:-2.11.0}"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv" >&2
  if ! "$venv/bin/python" -c "import torch; assert torch.__version__.startswith('$torch_version')" 2>/dev/null; then
    echo "setup: installing torch $torch_version (CUDA) into $venv" >&2
    started=$(date +%s)
    "$venv/bin/pip" install --progress-bar off "torch==$torch_version" >&2
    echo "setup: torch downloaded and installed in $(( $(date +%s) - started )) s ($(du -sh "$venv" | cut -f1))" >&2
  fi
  torch_cmake=$("$venv/bin/python" -c "import torch.utils; print(torch.utils.cmake_prefix_path)" 2>/dev/null)
  # The command line and the runtime with its tests: the GPU path changes nothing else.
  # TORCH_CUDA_ARCH_LIST spares its CMake config from probing for a GPU (none here; optpipe compiles
  # no CUDA code of its own). 9.0: H100 and H200.
  cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_cmake" \
        -DTORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}" \
        -DOPTPIPE_BUILD_BENCH=OFF -DOPTPIPE_BUILD_PYTHON=OFF >&2
  started=$(date +%s)
  cmake --build build-cuda -j "$jobs" --target optpipe_cmd optpipe-runtime optpipe_runtime_tests >&2
  echo "setup: build-cuda built in $(( $(date +%s) - started )) s" >&2
fi
