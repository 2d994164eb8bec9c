//! Any bytes through the Python-subset frontend: an error or a graph, never a
//! panic or a hang. A graph that parses must verify, optimize, and run in the
//! interpreter on zeros without panicking.
#![no_main]

use kiln::{Data, Engine, Format, PyOptions, Scalar};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(loaded) = kiln::load(text, Format::Py, &PyOptions::default()) else {
        return;
    };
    // The frontend builds through the builder: what it returns must verify.
    let info = kiln::verify(&loaded.graph).expect("frontend graphs verify");
    kiln::optimize(&loaded.graph, &info).expect("optimized graphs verify");
    let inputs: Vec<Data> = loaded
        .graph
        .inputs()
        .iter()
        .map(|i| {
            Data::Scalar(kiln::ir::semantics::cast(
                Scalar::I64(0),
                loaded.graph.ty(i.value).dtype().expect("tensor input"),
            ))
        })
        .collect();
    if let Ok(program) = kiln::Interpreter.compile_graph(&loaded.graph, true) {
        let _ = program.run(&inputs);
    }
});
