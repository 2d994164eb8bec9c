//! Differential property test: random valid graphs (`kiln-fuzzgen`) with
//! edge-biased inputs run on the interpreter and on every engine of this build,
//! as written and optimized; all must agree bit for bit (every NaN equal), or
//! report the same error. A failure is shrunk and printed as a ready-to-commit
//! filetest (`tests/filetests/regressions/`).
//!
//! CI runs `DIFFERENTIAL_CASES` cases (default 1000); set it higher for a long run.
//! Every case runs at 1, 2, 3 and 7 threads with every loop cut, and once
//! with 7 chunks run last first (`kiln::threads::TESTED`). A case that
//! crashes the process is written to `KILN_CASE_DIR` first, when that is
//! set.

use arbitrary::Unstructured;
use proptest::prelude::*;

fn cases() -> u32 {
    std::env::var("DIFFERENTIAL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn every_engine_agrees_with_the_interpreter(bytes in prop::collection::vec(any::<u8>(), 16..1024)) {
        let mut u = Unstructured::new(&bytes);
        let Ok(case) = kiln_fuzzgen::generate(&mut u, 24) else { return Ok(()) };
        if let Err(report) = kiln_fuzzgen::differential(&case) {
            prop_assert!(false, "{}", report);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: (cases() / 4).max(100), failure_persistence: None, max_shrink_iters: 2000, ..ProptestConfig::default() })]

    /// The derivatives of random graphs (`kiln::ir::grad`: gradients and
    /// Jacobians) are graphs every engine runs with the interpreter's bits.
    #[test]
    fn every_engine_agrees_on_derivatives(bytes in prop::collection::vec(any::<u8>(), 16..1024)) {
        let mut u = Unstructured::new(&bytes);
        let Ok(case) = kiln_fuzzgen::generate(&mut u, 24) else { return Ok(()) };
        for jacobian in [false, true] {
            if let Some(derived) = kiln_fuzzgen::derivative(&case, jacobian) {
                if let Err(report) = kiln_fuzzgen::differential(&derived) {
                    prop_assert!(false, "{}", report);
                }
            }
        }
    }
}

/// Derivatives are taken of a good share of the generated graphs: the
/// test above is not vacuous.
#[test]
fn the_generator_gives_graphs_to_differentiate() {
    let cases: Vec<kiln_fuzzgen::Case> =
        kiln_fuzzgen::seeded(0x51ed_270b_2760_39a9, 600, 512).collect();
    let gradients = cases
        .iter()
        .filter(|c| kiln_fuzzgen::derivative(c, false).is_some())
        .count();
    let jacobians = cases
        .iter()
        .filter(|c| kiln_fuzzgen::derivative(c, true).is_some())
        .count();
    assert!(
        gradients * 4 >= cases.len(),
        "{gradients} gradients of {} cases",
        cases.len()
    );
    assert!(
        jacobians * 20 >= cases.len(),
        "{jacobians} Jacobians of {} cases",
        cases.len()
    );
}

/// The LLVM tier's wasm32 modules (linked by wasm-ld, run under wasmi) agree
/// with the interpreter too: fewer cases, since each links a module.
#[cfg(feature = "llvm")]
#[test]
fn wasm_modules_agree_with_the_interpreter() {
    let engines: Vec<Box<dyn kiln::DynEngine>> = vec![Box::new(kiln_tests::wasm::Wasm)];
    let mut n_cases = 0;
    let tries = (cases() / 5).max(50) as usize;
    for case in kiln_fuzzgen::seeded(0x2545_f491_4f6c_dd1d, tries, 768) {
        n_cases += 1;
        if let Err(report) = kiln_fuzzgen::differential_with(&case, &engines) {
            panic!("{report}");
        }
    }
    assert!(n_cases >= 40, "only {n_cases} cases generated");
}

/// The generator really produces what the differential test claims to cover.
#[test]
fn the_generator_covers_every_op_and_dtype() {
    use std::collections::HashSet;
    let mut mnemonics = HashSet::new();
    let mut dtypes = HashSet::new();
    for case in kiln_fuzzgen::seeded(0x9e37_79b9_7f4a_7c15, 3000, 512) {
        for (_, node) in case.graph.nodes() {
            mnemonics.insert(node.op.mnemonic());
            if let Some(d) = node.ty.dtype() {
                dtypes.insert(d);
            }
        }
    }
    let all: Vec<&str> = kiln::ir::UnaryOp::ALL
        .iter()
        .map(|o| o.name())
        .chain(kiln::ir::BinaryOp::ALL.iter().map(|o| o.name()))
        .chain(kiln::ir::CmpOp::ALL.iter().map(|o| o.name()))
        .chain(kiln::ir::ReduceOp::ALL.iter().map(|o| o.name()))
        .chain(["input", "const", "select", "cast", "filter", "isin"])
        .chain([
            "tensor",
            "matmul",
            "transpose",
            "reshape",
            "reduce_axes",
            "concat",
            "slice",
            "broadcast_to",
            "conv2d",
            "max_pool2d",
            "avg_pool2d",
            "gather",
            "trees",
        ])
        .collect();
    let missing: Vec<&&str> = all.iter().filter(|m| !mnemonics.contains(**m)).collect();
    assert!(missing.is_empty(), "never generated: {missing:?}");
    assert_eq!(dtypes.len(), 5);
}
