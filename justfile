# kiln's everyday commands. `just` is optional: each recipe is one cargo
# command you can paste. Install it with `cargo install just` if you like.

# Install the Debian packages the tests need (LLVM 19, lld, qemu, cross gcc), if
# missing, and make the project's Python environment (.venv).
setup:
    bash .ci/run --setup-only

# Run every Rust and every Python test (the README's test command, and what CI runs).
test:
    bash .ci/test

# Run the main job on a bundled example: O3 AArch64 assembly of the torch.fx tutorial function.
example:
    cargo run --locked --features llvm --bin aot -- docs/examples/fn.py --target aarch64 --emit asm

# Formatting and lints, as CI checks them.
lint:
    cargo fmt --all --check
    cargo fmt --manifest-path fuzz/Cargo.toml --all --check
    cargo clippy --workspace --all-targets --features llvm,sql --locked -- -D warnings

# The long bit-exactness run of inline math (docs/testing.md): 10^9 random
# inputs per f64 function, then all 2^32 inputs of every f32 function, then
# 10^9 random pairs per binary function (f64 and f32), on every tier;
# `just math-long sin,cos` runs only those functions. Hours on 2 cores.
math-long ONLY="":
    MATH_ONLY={{ONLY}} MATH_CASES=1000000000 cargo test --locked --release -p kiln-tests --features llvm --test math f64_functions
    MATH_ONLY={{ONLY}} MATH_F32_EXHAUSTIVE=1 cargo test --locked --release -p kiln-tests --features llvm --test math f32_functions
    MATH_ONLY={{ONLY}} MATH_CASES=1000000000 cargo test --locked --release -p kiln-tests --features llvm --test math binary_functions_are_libms_on_every_engine

# Rewrite the expected optimized graphs in tests/filetests/opt/ (review the diff!).
bless:
    KILN_BLESS=1 cargo test --locked -p kiln-tests --test filetests

# Everything CI does.
ci:
    bash .ci/run

# Fuzz one target (parse_py, parse_kiln, verify, differential, parse_fx, parse_tf, arrow_query) for SECONDS with cargo-fuzz on nightly,
# seeded with the filetests and examples. Without nightly:
# `cargo build --release --manifest-path fuzz/Cargo.toml` builds uninstrumented
# libFuzzer binaries that replay inputs: `fuzz/target/release/parse_py -runs=0 DIR`.
# Extra cargo-fuzz flags go last: `just fuzz differential 600 --features llvm` adds the LLVM tier.
fuzz TARGET SECONDS="60" *FLAGS:
    mkdir -p fuzz/corpus/{{TARGET}} fuzz/seeds/{{TARGET}}
    cd fuzz && cargo +nightly fuzz run {{FLAGS}} {{TARGET}} corpus/{{TARGET}} seeds/{{TARGET}} ../tests/filetests ../docs/examples -- -max_total_time={{SECONDS}} -max_len=4096
