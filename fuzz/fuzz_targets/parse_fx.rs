//! Any bytes through the torch.fx importer: an error or a graph, never a panic
//! or a hang. Every placeholder is typed so lowering runs: an f64 column
//! `[n]` for inputs of even length, a fixed `f64[2, 3]` tensor (so layout ops
//! and indexing along fixed axes run) for odd; a graph that verifies must
//! optimize and run in the interpreter.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut opts = kiln::LoadOptions::default();
    let fixed = data.len() % 2 == 1;
    let shape = if fixed {
        vec![kiln::Dim::Fixed(2), kiln::Dim::Fixed(3)]
    } else {
        vec![kiln::Dim::Sym("n".into())]
    };
    // Either form: `print(gm.graph)`, or `print(gm)`'s tree and code.
    if let Ok((g, _)) = kiln::frontend::fx::parse_nodes(text) {
        for node in g.nodes.iter().filter(|n| n.kind == "placeholder") {
            let ty = kiln::Type::Tensor(kiln::TensorType {
                dtype: kiln::DType::F64,
                shape: shape.clone(),
            });
            opts.fx.inputs.insert(node.name.clone(), ty);
        }
    }
    let Ok(loaded) = kiln::load_bytes(data, kiln::Format::Fx, &opts) else {
        return;
    };
    let Ok(verified) = kiln::verify(loaded.graph) else {
        return;
    };
    let graph = kiln::optimize(&verified).expect("verified graphs optimize");
    let inputs: Vec<kiln::Data> = graph
        .graph()
        .inputs()
        .iter()
        .map(|_| {
            let row = [1.5, -0.0, f64::NAN];
            let n = if fixed { 2 } else { 1 };
            kiln::Data::Column(kiln::Buffer::F64(row.repeat(n)))
        })
        .collect();
    let _ = kiln::interp::run(&graph, &inputs);
});
