//! A random valid graph (kiln-fuzzgen) with edge-biased inputs through every
//! engine, as written and optimized: all must agree with the interpreter bit for
//! bit, or report the same error. A mismatch panics with a ready-to-commit
//! filetest.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut u = arbitrary::Unstructured::new(data);
    let Ok(case) = kiln_fuzzgen::generate(&mut u, 32) else {
        return;
    };
    if let Err(report) = kiln_fuzzgen::differential(&case) {
        panic!("{report}");
    }
});
