//! Where the LLVM tier's compile time goes for the GP population: building the
//! IR, the `default<On>` pipeline, and code generation, per level.
//! Run: `cargo run --release -p kiln --features llvm --example llvm_phases [POP.txt]`.

use kiln::llvm::emit;
use kiln::{Emit, EmitOptions, OptLevel};
use std::time::Instant;

fn main() {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "../shared/fixtures/gp/gp_population.txt".to_string());
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let opts = kiln::LoadOptions {
        py: kiln::PyOptions {
            default_shape: vec![kiln::Dim::Sym("n".into())],
            ..Default::default()
        },
        ..Default::default()
    };
    let kernels: Vec<_> = text
        .lines()
        .take(200)
        .map(|l| {
            let graph = kiln::load(l, kiln::Format::Py, &opts)
                .expect("parses")
                .graph;
            let graph = kiln::verify(graph).expect("verifies");
            let graph = kiln::optimize(&graph).expect("optimizes");
            kiln::kernel::lower(&graph, &Default::default()).expect("lowers")
        })
        .collect();
    for opt in [OptLevel::O0, OptLevel::O1, OptLevel::O2, OptLevel::O3] {
        let time = |emit_what| {
            let options = EmitOptions {
                emit: emit_what,
                target: "native".into(),
                opt_level: opt,
                cpu: None,
                features: None,
            };
            let t = Instant::now();
            for k in &kernels {
                emit(k, "k", &options).expect("emits");
            }
            t.elapsed().as_secs_f64() * 1e6 / kernels.len() as f64
        };
        let (ir, obj) = (time(Emit::LlvmIr), time(Emit::Object));
        println!("{opt:?}: build + optimize {ir:.0} us/graph, + codegen {obj:.0} us/graph (codegen {:.0})", obj - ir);
    }
}
