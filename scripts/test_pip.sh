#!/usr/bin/env bash
# `pip install .` as a Python user does it: a fresh venv (build/pip-venv, made anew each run),
# the package built from this checkout by scikit-build-core and pybind11 from PyPI (CMake and the
# Debian libraries underneath: ./scripts/setup.sh --full installs them), then the example, run
# from outside the checkout so that only the installed package can answer `import optpipe`.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=build/pip-venv
rm -rf "$venv"
python3 -m venv "$venv"
started=$(date +%s)
"$venv/bin/pip" install --quiet --progress-bar off . >&2
echo "test_pip: pip install . took $(( $(date +%s) - started )) s" >&2
cd "$(mktemp -d)"
"$root/$venv/bin/python" -c 'import importlib.util, optpipe; assert importlib.util.find_spec("optpipe.torch"); print("installed:", optpipe.__file__, "with optpipe.torch")'
"$root/$venv/bin/python" "$root/examples/plan_in_python.py" --time-limit 2 --out plan.json
[ -s plan.json ] && echo "test_pip: ok"
