#!/usr/bin/env bash
# Puts Google OR-Tools' CP-SAT library (from the pinned `ortools` wheel on PyPI, not installed
# into any Python) into build/ortools/: ortools/.libs/libortools.so.9 and the libraries it loads
# (ortools/.libs and ortools.libs, where the wheel has them: their run paths are relative) and
# ortools.desc, the wheel's own descriptors of cp_model.proto and sat_parameters.proto, for the
# tests that decode what optpipe encodes. optpipe loads the library at run time
# (src/exact/cp_sat.cpp); without it, everything builds and the CP-SAT paths say what is missing.
# Safe to run again; a few seconds when it downloads (about 30 MB), nothing when it is there.
set -euo pipefail
cd "$(dirname "$0")/.."
version=9.15.6755
wheel=ortools-$version-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
sha256=7a85a68ffb3fc1967e78624f40d3707aae459e82e3f2d9fe02e91788b3c7bf2a
dest=build/ortools
[ -f "$dest/VERSION" ] && [ "$(cat "$dest/VERSION")" = "$version" ] && exit 0
mkdir -p "$dest/wheel"
if [ ! -f "$dest/wheel/$wheel" ]; then
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
    --abi cp311 --platform manylinux_2_28_x86_64 "ortools==$version" -d "$dest/wheel" >&2
fi
echo "$sha256  $dest/wheel/$wheel" | sha256sum --check --quiet
python3 - "$dest/wheel/$wheel" "$dest" <<'PY'
import ast, os, sys, zipfile

wheel, dest = sys.argv[1], sys.argv[2]
descriptors = bytearray()  # a FileDescriptorSet: field 1, one FileDescriptorProto each


def varint(n):
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(("ortools/.libs/", "ortools.libs/")) and not name.endswith("/"):
            target = os.path.join(dest, name)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with z.open(name) as src, open(target, "wb") as out:
                out.write(src.read())
    for proto in ("cp_model", "sat_parameters"):
        text = z.read(f"ortools/sat/{proto}_pb2.py").decode()
        start = text.index("AddSerializedFile(") + len("AddSerializedFile(")
        data = ast.literal_eval(text[start:text.index(")\n", start)])
        descriptors += b"\x0a" + varint(len(data)) + data
with open(os.path.join(dest, "ortools.desc"), "wb") as f:
    f.write(descriptors)
PY
rm -rf "$dest/wheel"
echo "$version" > "$dest/VERSION"
echo "setup: CP-SAT (ortools $version) in $dest" >&2
