//! The `.kiln` text format: one node per line, exact round trip. `docs/ir.md`
//! specifies it; [`print()`] writes it and [`parse()`] reads it.
//!
//! ```text
//! graph "fn"
//! v0 "x": f64[n] = input "x"
//! v1: f64 = const 2.0
//! v2 "a": f64[n] = add v0, v1
//! output "a" = v2
//! ```

mod parse;
mod print;

pub use parse::{parse, parse_with_source_map};
pub use print::print;

/// Writes `s` as a double-quoted string with Rust escapes, as the parser reads it.
fn quote(s: &str) -> String {
    format!("{s:?}")
}
