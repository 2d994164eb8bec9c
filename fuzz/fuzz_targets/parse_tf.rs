//! Any bytes through the TensorFlow importer, as a binary GraphDef and (when
//! UTF-8) as a text one: an error or a graph, never a panic, a hang or an
//! allocation the input's declared sizes ask for. A graph that verifies must
//! optimize.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let opts = kiln::LoadOptions::default();
    let binary = kiln::frontend::tf::parse_binary(data, &opts.tf);
    let text = std::str::from_utf8(data)
        .ok()
        .map(|t| kiln::frontend::tf::parse_text(t, &opts.tf));
    for (graph, _) in [Some(binary), text].into_iter().flatten().flatten() {
        if let Ok(verified) = kiln::verify(graph) {
            kiln::optimize(&verified).expect("verified graphs optimize");
        }
    }
});
