#!/usr/bin/env bash
# Builds the runtime's GPU path against PyPI's CUDA LibTorch (setup.sh --cuda: a multi-GB
# download) and runs the runtime's tests with that build. Without a GPU they run on the CPU:
# what they show there is that the CUDA build compiles, links, loads and keeps the CPU path.
# Then optpipe.torch's tests and example with that venv's torch (needs build/python: the test
# command builds it).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --cuda
./build-cuda/optpipe_runtime_tests
./tests/test_runtime_cli.sh "$PWD/build-cuda/optpipe"
# optpipe's plans in PyTorch's own pipeline runtime, with the same torch (gloo ranks on the CPU).
PYTHONPATH="$PWD/build/python" build-cuda/torch-venv/bin/python tests/test_torch_pipeline.py
PYTHONPATH="$PWD/build/python" build-cuda/torch-venv/bin/python examples/torch_pipeline.py --ranks 2
