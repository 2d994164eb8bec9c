#!/usr/bin/env bash
# Builds fmaf.wasm from fmaf.ll with LLVM 19 (llc, wasm-ld) and prints it in
# base64, the form wasm.js carries (FMAF_WASM).
set -euo pipefail
cd "$(dirname "$0")"
tmp=$(mktemp -d)
/usr/lib/llvm-19/bin/llc -O2 -mtriple=wasm32-unknown-unknown -filetype=obj fmaf.ll -o "$tmp/fmaf.o"
wasm-ld-19 --no-entry --export=fmaf --strip-all -o "$tmp/fmaf.wasm" "$tmp/fmaf.o"
base64 -w0 "$tmp/fmaf.wasm"
echo
rm -rf "$tmp"
