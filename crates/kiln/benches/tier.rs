//! Figures for docs/performance.md: `cargo bench -p kiln --bench tier`.
//!
//! - typed call: a compiled `f(x: f64) -> f64` through `TypedFunc`, ns per call;
//! - NNC kernel: `d + f` with `a = x*x; b = sin(a); c = cos(b); d = c*c; f = d*d`
//!   (vectorized with per-lane calls, the default; scalar; vectorized inline math)
//!   over 10,000,000 f64, ns per element;
//! - arithmetic: a 15-node pure-arithmetic expression over 1,000,000-row columns,
//!   node-evaluations per second on one core;
//! - compile: one small expression, from text to machine code, µs.
//!
//! Each figure is the median of several repetitions; this machine is noisy, so
//! compare ratios within one run (and run ../shared/peers/run.sh alongside).

use kiln::{CompileOptions, Cranelift, Data, Engine, Format, Program};
use std::hint::black_box;
use std::time::{Duration, Instant};

fn program(src: &str) -> kiln::JitProgram {
    program_with(src, &CompileOptions::default())
}

fn program_with(src: &str, options: &CompileOptions) -> kiln::JitProgram {
    let graph = kiln::load(src, Format::Py, &Default::default())
        .expect("parses")
        .graph;
    let graph = kiln::verify(graph).expect("verifies");
    Cranelift.compile(&graph, options).expect("compiles")
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn typed_call() {
    let f = program("x * 2.0 + 1.0")
        .typed::<(f64,), f64>()
        .expect("f64 -> f64");
    let n = 100_000_000u32;
    let samples = (0..5)
        .map(|_| {
            let t = Instant::now();
            let mut acc = 0.0;
            for i in 0..n {
                acc += f.call((black_box(f64::from(i)),));
            }
            black_box(acc);
            t.elapsed()
        })
        .collect();
    let per_call = median(samples).as_secs_f64() / f64::from(n) * 1e9;
    println!("typed call f(x: f64) -> f64: {per_call:.2} ns per call (incl. loop and add)");
}

fn nnc_kernel(label: &str, options: &CompileOptions) {
    let p = program_with("def nnc(x: float[n]):\n    a = x * x\n    b = sin(a)\n    c = cos(b)\n    d = c * c\n    f = d * d\n    return d + f", options);
    let n = 10_000_000;
    let x = Data::from((0..n).map(|i| (i as f64) * 1e-6 - 5.0).collect::<Vec<_>>());
    let samples = (0..5)
        .map(|_| {
            let t = Instant::now();
            black_box(p.run_refs(&[&x]).expect("runs"));
            t.elapsed()
        })
        .collect();
    let t = median(samples);
    println!(
        "NNC kernel over {n} f64 ({label}): {:.1} ms, {:.2} ns per element",
        t.as_secs_f64() * 1e3,
        t.as_secs_f64() / n as f64 * 1e9
    );
}

fn arithmetic() {
    let src = "def f(x0: float[n], x1: float[n], x2: float[n]): return x0 * x1 + x2 * 2.5 - x0 / (x1 + 1.5) + x2 * x0";
    let nodes = kiln::frontend::py::count_nodes("x0 * x1 + x2 * 2.5 - x0 / (x1 + 1.5) + x2 * x0")
        .expect("parses");
    let p = program(src);
    let n = 1_000_000;
    let col = |k: f64| Data::from((0..n).map(|i| (i as f64) * 1e-3 + k).collect::<Vec<_>>());
    let (x0, x1, x2) = (col(0.5), col(1.0), col(-2.0));
    let samples = (0..21)
        .map(|_| {
            let t = Instant::now();
            black_box(p.run_refs(&[&x0, &x1, &x2]).expect("runs"));
            t.elapsed()
        })
        .collect();
    let t = median(samples);
    let rate = (nodes * n) as f64 / t.as_secs_f64();
    println!("arithmetic ({nodes} nodes) over {n} rows: {:.2} ms, {:.2} G node-evaluations/s (1 core, incl. output allocation)", t.as_secs_f64() * 1e3, rate / 1e9);
}

fn compile_latency() {
    let samples = (0..200)
        .map(|i| {
            let src = format!("sin(x0) * (x1 + {i}.5) - exp(x2 / 3.0)");
            let t = Instant::now();
            black_box(program(&src));
            t.elapsed()
        })
        .collect();
    println!(
        "compile one expression (text to machine code, own module): {:.1} us",
        median(samples).as_secs_f64() * 1e6
    );
}

fn main() {
    typed_call();
    nnc_kernel(
        "vector loop, libm per lane: the default",
        &CompileOptions::default(),
    );
    let scalar = CompileOptions {
        vectorize: Some(false),
        ..CompileOptions::default()
    };
    nnc_kernel("scalar loop", &scalar);
    let inline = CompileOptions {
        libm_calls: Some(false),
        ..CompileOptions::default()
    };
    nnc_kernel("vector loop, inline math", &inline);
    arithmetic();
    compile_latency();
}
