//! Any bytes through the `.kiln` parser and the verifier: errors, never panics.
//! A graph that verifies must print and parse back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(graph) = kiln::ir::text::parse(text) else {
        return;
    };
    if kiln::verify(graph.clone()).is_ok() {
        let printed = kiln::ir::text::print(&graph);
        assert_eq!(
            kiln::ir::text::parse(&printed).expect("printed graphs parse"),
            graph
        );
    }
});
