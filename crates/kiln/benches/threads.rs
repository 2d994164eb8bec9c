//! Figures for docs/performance.md (issue 35, kernels on several threads):
//! `cargo bench -p kiln --features llvm --bench threads [-- THREADS...]`.
//!
//! For each compiling tier and each thread count (default 1 and 2; give
//! others as arguments, such as `1 2 4 8 16` on a larger machine), the
//! median of several calls of:
//! - the NNC kernel (`d + f`, `a = x*x; b = sin(a); c = cos(b); d = c*c;
//!   f = d*d`) over 10,000,000 f64;
//! - a 256×256×256 f32 matmul;
//! - one ResNet 3×3 layer: conv2d 64→64 at 56×56, pad 1, f32, batch 1;
//! - a 1,000-row elementwise call (`x * 2.0 + y`), in µs: below the grain,
//!   it runs on the caller's thread; beside it the same kernel compiled
//!   whole (`parallel: Some(false)`), the cost of running in stages.
//!
//! - with `KILN_BENCH_FX=DIR` (a `module.txt` and `weights.safetensors` as
//!   `crates/python/tests/models.py`'s `write_fx` writes them, of a network
//!   taking `input` or `x: f32[1, 3, 224, 224]`), that network on the LLVM tier:
//!   compile time and run time compiled in stages and whole, at 1 thread
//!   and at each count.
//!
//! Each figure is the median of several repetitions; this machine is noisy,
//! so compare ratios within one run.

use kiln::{CompileOptions, Data, Engine, Format, Program, Tier};
use std::time::{Duration, Instant};

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn compile(tier: Tier, graph: &kiln::Verified, parallel: bool) -> kiln::JitProgram {
    tier.backend()
        .expect("a compiling tier")
        .compile(
            graph,
            &CompileOptions {
                parallel: Some(parallel),
                ..CompileOptions::default()
            },
        )
        .expect("compiles")
}

fn py(src: &str) -> kiln::Verified {
    let graph = kiln::load(src, Format::Py, &Default::default())
        .expect("parses")
        .graph;
    kiln::verify(graph).expect("verifies")
}

fn kiln_text(src: &str) -> kiln::Verified {
    kiln::verify(kiln::ir::text::parse(src).expect("parses")).expect("verifies")
}

fn f32s(n: usize, seed: f32) -> Data {
    Data::Column(kiln::Buffer::F32(
        (0..n).map(|i| ((i as f32) * seed).sin()).collect(),
    ))
}

/// The median time of `reps` runs of `p` on `inputs` at `threads`.
fn time(p: &kiln::JitProgram, inputs: &[Data], threads: usize, reps: usize) -> Duration {
    kiln::threads::with_num_threads(threads, || {
        p.run(inputs).expect("runs");
        median(
            (0..reps)
                .map(|_| {
                    let t = Instant::now();
                    std::hint::black_box(p.run(inputs).expect("runs"));
                    t.elapsed()
                })
                .collect(),
        )
    })
}

/// A benchmark: its name, graph, inputs and repetitions.
type Case<'a> = (&'a str, &'a kiln::Verified, &'a [Data], usize);

/// The fx network in `dir` on the LLVM tier, in stages and whole.
#[cfg(feature = "llvm")]
fn fx_network(dir: &std::path::Path, counts: &[usize]) {
    let read = |name: &str| std::fs::read(dir.join(name)).expect("the network's files");
    let mut options = kiln::LoadOptions::default();
    for name in ["input", "x"] {
        options.fx.inputs.insert(
            name.into(),
            kiln::parse_type("f32[1, 3, 224, 224]").expect("a type"),
        );
    }
    options.fx.weights =
        kiln::frontend::fx::read_weights(&read("weights.safetensors")).expect("safetensors");
    let graph = kiln::load_bytes(&read("module.txt"), Format::Fx, &options)
        .expect("loads")
        .graph;
    let graph = kiln::verify(graph).expect("verifies");
    let input = [f32s(3 * 224 * 224, 0.37)];
    for parallel in [true, false] {
        let start = Instant::now();
        let p = compile(Tier::Llvm, &graph, parallel);
        let compiled = start.elapsed();
        let row: Vec<String> = counts
            .iter()
            .filter(|&&t| parallel || t == 1)
            .map(|&t| format!("{t}: {:.2} ms", time(&p, &input, t, 15).as_secs_f64() * 1e3))
            .collect();
        println!(
            "llvm      fx network ({}) compile {:.2} s | {}",
            if parallel { "stages" } else { "whole" },
            compiled.as_secs_f64(),
            row.join(" | ")
        );
    }
}

fn main() {
    let mut counts: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    if counts.is_empty() {
        counts = vec![1, 2];
    }
    let nnc = py("def nnc(x: float[n]):\n    a = x * x\n    b = sin(a)\n    c = cos(b)\n    d = c * c\n    f = d * d\n    return d + f");
    let x = Data::from(
        (0..10_000_000)
            .map(|i| (i as f64) * 1e-6 - 5.0)
            .collect::<Vec<_>>(),
    );
    let matmul = kiln_text("graph \"mm\"\nv0: f32[256, 256] = input \"a\"\nv1: f32[256, 256] = input \"b\"\nv2: f32[256, 256] = matmul v0, v1\noutput \"c\" = v2\n");
    let ab = [f32s(65536, 0.37), f32s(65536, 0.11)];
    let conv = kiln_text("graph \"conv\"\nv0: f32[1, 64, 56, 56] = input \"x\"\nv1: f32[64, 64, 3, 3] = input \"w\"\nv2: f32[1, 64, 56, 56] = conv2d v0, v1 pad [1, 1, 1, 1]\noutput \"y\" = v2\n");
    let xw = [f32s(64 * 56 * 56, 0.37), f32s(64 * 64 * 9, 0.11)];
    let small = py("def f(x: float[n], y: float[n]): return x * 2.0 + y");
    let xy = [
        Data::from((0..1000).map(|i| i as f64).collect::<Vec<_>>()),
        Data::from((0..1000).map(|i| (i as f64).sqrt()).collect::<Vec<_>>()),
    ];
    println!(
        "CPU threads available: {}",
        kiln::threads::default_threads()
    );
    #[cfg(feature = "llvm")]
    if let Some(dir) = std::env::var_os("KILN_BENCH_FX") {
        fx_network(std::path::Path::new(&dir), &counts);
    }
    for tier in Tier::compiling() {
        let cases: [Case; 3] = [
            ("NNC d+f, 10M f64", &nnc, std::slice::from_ref(&x), 5),
            ("matmul 256^3 f32", &matmul, &ab, 9),
            ("conv 3x3 64->64 @56 f32", &conv, &xw, 7),
        ];
        for (name, graph, inputs, reps) in cases {
            let p = compile(tier, graph, true);
            let base = time(&p, inputs, 1, reps);
            let row: Vec<String> = counts
                .iter()
                .map(|&t| {
                    let d = if t == 1 {
                        base
                    } else {
                        time(&p, inputs, t, reps)
                    };
                    let speedup = base.as_secs_f64() / d.as_secs_f64();
                    format!(
                        "{t}: {:.2} ms ({speedup:.2}x, eff {:.0}%)",
                        d.as_secs_f64() * 1e3,
                        100.0 * speedup / t as f64
                    )
                })
                .collect();
            println!("{tier:9} {name:26} {}", row.join(" | "));
        }
        let staged = compile(tier, &small, true);
        let whole = compile(tier, &small, false);
        let per_call = |p: &kiln::JitProgram| {
            median(
                (0..7)
                    .map(|_| {
                        let t = Instant::now();
                        for _ in 0..2000 {
                            std::hint::black_box(p.run(&xy).expect("runs"));
                        }
                        t.elapsed() / 2000
                    })
                    .collect(),
            )
        };
        println!(
            "{tier:9} {:26} staged {:.2} us | whole {:.2} us",
            "1,000-row x*2+y call",
            per_call(&staged).as_secs_f64() * 1e6,
            per_call(&whole).as_secs_f64() * 1e6
        );
        // What waking the pool costs: the same call cut in two (grain 0)
        // against one thread.
        kiln::threads::set_grain(0);
        let one = kiln::threads::with_num_threads(1, || per_call(&staged));
        let two = kiln::threads::with_num_threads(2, || per_call(&staged));
        kiln::threads::set_grain(kiln::threads::DEFAULT_GRAIN);
        println!(
            "{tier:9} {:26} 1 thread {:.2} us | cut in 2 {:.2} us",
            "same, every loop cut",
            one.as_secs_f64() * 1e6,
            two.as_secs_f64() * 1e6
        );
    }
}
