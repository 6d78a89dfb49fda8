#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (ctest: unit, property and CLI tests).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --test
cd build
ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)"
