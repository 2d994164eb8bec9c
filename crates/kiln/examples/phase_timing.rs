//! Where compile time goes for the GP population: parse, verify, optimize, lower,
//! JIT. Run: `cargo run --release -p kiln --example phase_timing [POP.txt]`.

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
    let t = Instant::now();
    let graphs: Vec<_> = text
        .lines()
        .map(|l| {
            kiln::load(l, kiln::Format::Py, &opts)
                .expect("parses")
                .graph
        })
        .collect();
    let t_parse = t.elapsed();
    let t = Instant::now();
    let verified: Vec<_> = graphs
        .into_iter()
        .map(|g| kiln::verify(g).expect("verifies"))
        .collect();
    let t_verify = t.elapsed();
    let t = Instant::now();
    let optimized: Vec<_> = verified
        .iter()
        .map(|g| kiln::optimize(g).expect("optimizes"))
        .collect();
    let t_opt = t.elapsed();
    let t = Instant::now();
    let kernels: Vec<_> = optimized
        .iter()
        .map(|g| {
            kiln::kernel::lower(g, &kiln::Backend::lower_options(&kiln::Cranelift)).expect("lowers")
        })
        .collect();
    let t_lower = t.elapsed();
    let t = Instant::now();
    let symbols = kiln::runtime::libm_symbols();
    let compiled =
        kiln::cranelift::jit(kernels, &symbols, Default::default(), true).expect("compiles");
    let t_jit = t.elapsed();
    println!("{} graphs: parse {t_parse:?}, verify {t_verify:?}, optimize {t_opt:?}, lower {t_lower:?}, jit {t_jit:?}", compiled.len());
}
