#!/usr/bin/env bash
# Puts the framework code the export tests read optpipe's exports back with into
# build/frameworks/: megatron-core's pipeline layout class (PipelineParallelLayerLayout and the
# LayerType enum) and torchtitan 0.3's configuration dataclasses (ParallelismConfig,
# TrainingConfig), taken from their pinned wheels on PyPI (not installed into any Python, no
# dependencies). tests/check_framework_exports.py loads them. Safe to run again; a few seconds
# when it downloads (about 3 MB), nothing when it is there.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=build/frameworks
stamp="megatron-core 0.16.1, torchtitan 0.3.0"
[ -f "$dest/VERSION" ] && [ "$(cat "$dest/VERSION")" = "$stamp" ] && exit 0
mkdir -p "$dest/wheel"
fetch() {  # name version wheel-file sha256 members...
  local name=$1 version=$2 wheel=$3 sha=$4
  shift 4
  [ -f "$dest/wheel/$wheel" ] || python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --python-version 3.11 --implementation cp --abi cp311 --platform manylinux_2_28_x86_64 \
    "$name==$version" -d "$dest/wheel" >&2
  echo "$sha  $dest/wheel/$wheel" | sha256sum --check --quiet
  python3 -m zipfile -e "$dest/wheel/$wheel" "$dest/unpacked"
  for member in "$@"; do
    mkdir -p "$dest/$(dirname "$member")"
    cp "$dest/unpacked/$member" "$dest/$member"
  done
  rm -rf "$dest/unpacked"
}
fetch megatron-core 0.16.1 megatron_core-0.16.1-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl \
  38f6bef63cd4ebc4c39c1eccbaf578596accba5c47d012faffa0670913aec131 \
  megatron/core/transformer/pipeline_parallel_layer_layout.py megatron/core/transformer/enums.py
fetch torchtitan 0.3.0 torchtitan-0.3.0-py3-none-any.whl 5563ccf9a295b24e00a36087149e9c2d0686cecbd3972c31e67227029293af42 torchtitan/config/configs.py
echo "$stamp" > "$dest/VERSION"
