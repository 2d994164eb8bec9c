//! What the tests of `kiln query` and `kiln sql` share: running `kiln`,
//! the pyarrow-written fixtures, and the checks of exit statuses.

use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs the `kiln` binary with `args`.
pub fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .output()
        .expect("kiln runs")
}

/// A file of tests/fixtures/arrow (written by pyarrow: make_files.py).
pub fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/arrow")
        .join(name)
        .display()
        .to_string()
}

/// Asserts exit 0 and gives stdout.
pub fn ok(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Asserts exit `code` with an `error:` containing `message`, and no panic.
pub fn fails(out: &Output, code: i32, message: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{err}");
    assert!(err.contains(message) && err.contains("error:"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// The tiers this build has.
pub fn tiers() -> Vec<&'static str> {
    let mut t = vec!["interp", "vm", "cranelift"];
    if cfg!(feature = "llvm") {
        t.push("llvm");
    }
    t
}
