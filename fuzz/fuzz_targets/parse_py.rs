//! Any bytes through the Python-subset frontend: an error or a graph, never a
//! panic or a hang. A graph that parses must verify, optimize, and run in the
//! interpreter on zeros without panicking.
#![no_main]

use kiln::{Data, Engine, Format, Program, Scalar};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(loaded) = kiln::load(text, Format::Py, &Default::default()) else {
        return;
    };
    // The frontend builds through the builder: what it returns must verify.
    let verified = kiln::verify(loaded.graph).expect("frontend graphs verify");
    let graph = verified.graph();
    let inputs: Vec<Data> = graph
        .inputs()
        .iter()
        .map(|i| {
            Data::Scalar(kiln::ir::semantics::cast(
                Scalar::I64(0),
                graph.ty(i.value).dtype().expect("tensor input"),
            ))
        })
        .collect();
    // Optimizing a verified graph gives a verified graph (`optimize` panics in
    // debug builds otherwise).
    if let Ok(program) = kiln::Interpreter.compile(&verified, &Default::default()) {
        let _ = program.run(&inputs);
    }
});
