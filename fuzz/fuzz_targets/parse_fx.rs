//! Any bytes through the torch.fx importer: an error or a graph, never a panic
//! or a hang. Every placeholder is typed (as an f64 column) so lowering runs;
//! a graph that verifies must optimize and run in the interpreter.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut opts = kiln::LoadOptions::default();
    if let Ok(g) = kiln::frontend::fx::parse_text(text) {
        for node in g.nodes.iter().filter(|n| n.kind == "placeholder") {
            let ty = kiln::Type::Tensor(kiln::TensorType {
                dtype: kiln::DType::F64,
                shape: vec![kiln::Dim::Sym("n".into())],
            });
            opts.fx.inputs.insert(node.name.clone(), ty);
        }
    }
    let Ok(loaded) = kiln::load_bytes(data, kiln::Format::Fx, &opts) else { return };
    let Ok(info) = kiln::verify(&loaded.graph) else { return };
    let (graph, info) = kiln::optimize(&loaded.graph, &info).expect("verified graphs optimize");
    let inputs: Vec<kiln::Data> = graph
        .inputs()
        .iter()
        .map(|_| kiln::Data::Column(kiln::Buffer::F64(vec![1.5, -0.0, f64::NAN])))
        .collect();
    let _ = kiln::interp::run(&graph, &info, &inputs);
});
