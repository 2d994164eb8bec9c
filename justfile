# kiln's everyday commands. `just` is optional: each recipe is one cargo
# command you can paste. Install it with `cargo install just` if you like.

# Run every test (the README's test command, and what CI runs).
test:
    cargo test --workspace --locked

# Run the main job on a bundled example: a pandas-style query over a CSV column.
example:
    cargo run --locked --bin kiln -- eval docs/examples/query.py --csv docs/examples/x.csv

# Formatting and lints, as CI checks them.
lint:
    cargo fmt --all --check
    cargo clippy --workspace --all-targets --locked -- -D warnings

# Rewrite the expected optimized graphs in tests/filetests/opt/ (review the diff!).
bless:
    KILN_BLESS=1 cargo test --locked -p kiln-tests --test filetests

# Everything CI does.
ci:
    bash .ci/run

# Fuzz one target (parse_py, parse_kiln, verify, differential) for SECONDS with cargo-fuzz on nightly,
# seeded with the filetests and examples. Without nightly:
# `cargo build --release --manifest-path fuzz/Cargo.toml` builds uninstrumented
# libFuzzer binaries that replay inputs: `fuzz/target/release/parse_py -runs=0 DIR`.
fuzz TARGET SECONDS="60":
    mkdir -p fuzz/corpus/{{TARGET}}
    cd fuzz && cargo +nightly fuzz run {{TARGET}} corpus/{{TARGET}} ../tests/filetests ../docs/examples -- -max_total_time={{SECONDS}} -max_len=4096
