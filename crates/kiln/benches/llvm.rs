//! The LLVM tier against the Cranelift tier and `gcc -O3`, for
//! docs/performance.md: `cargo bench -p kiln --features llvm --bench llvm`.
//!
//! - compile time of the GP population (`../shared/fixtures/gp/`), as one module
//!   and one module per graph, Cranelift and LLVM at O0/O2/O3;
//! - evaluation of that population over its 10,000 rows, both tiers;
//! - run time of the NNC kernel (10,000,000 f64) and of a pure-arithmetic
//!   column kernel (1,000,000 rows), Cranelift, LLVM O3, and the same loops in
//!   C built with `cc -O3` (`benches/c/reference.c`), all in this run;
//! - whether LLVM vectorized each loop (packed instructions in its assembly).
//!
//! Medians of several repetitions; this machine is noisy, so compare ratios
//! within one run.

use kiln::{
    CompileOptions, Cranelift, Data, Engine, Format, JitProgram, Llvm, LoadOptions, OptLevel,
    Program, PyOptions, Verified,
};
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn verified(src: &str, opts: &PyOptions) -> Verified {
    let opts = LoadOptions {
        py: opts.clone(),
        ..LoadOptions::default()
    };
    let graph = kiln::load(src, Format::Py, &opts).expect("parses").graph;
    let graph = kiln::verify(graph).expect("verifies");
    kiln::optimize(&graph).expect("optimizes")
}

fn columns() -> PyOptions {
    PyOptions {
        default_shape: vec![kiln::Dim::Sym("n".into())],
        ..PyOptions::default()
    }
}

fn compile(graphs: &[Verified], tier: Option<OptLevel>) -> Vec<JitProgram> {
    // The graphs are optimized already.
    let options = CompileOptions {
        optimize: false,
        opt_level: tier.unwrap_or_default(),
        ..CompileOptions::default()
    };
    match tier {
        None => Cranelift.compile_batch(graphs, &options),
        Some(_) => Llvm.compile_batch(graphs, &options),
    }
    .expect("compiles")
}

fn tier_name(tier: Option<OptLevel>) -> String {
    tier.map_or("Cranelift".to_string(), |o| format!("LLVM {o:?}"))
}

fn population() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/gp");
    let Ok(text) = std::fs::read_to_string(dir.join("gp_population.txt")) else {
        println!("population: ../shared/fixtures/gp not found, skipped");
        return;
    };
    let graphs: Vec<Verified> = text.lines().map(|l| verified(l, &columns())).collect();
    let n_each = 200;
    println!(
        "GP population, {} graphs (kiln's graph passes already run):",
        graphs.len()
    );
    let tiers = [
        None,
        Some(OptLevel::O0),
        Some(OptLevel::O2),
        Some(OptLevel::O3),
    ];
    for tier in tiers {
        let t = Instant::now();
        let programs = compile(&graphs, tier);
        let one_module = t.elapsed();
        let t = Instant::now();
        for g in &graphs[..n_each] {
            black_box(compile(std::slice::from_ref(g), tier));
        }
        let per_graph = t.elapsed() / n_each as u32;
        let eval = evaluate(&programs, &dir);
        println!(
            "  {:<10} one module: {:>8.1} ms ({:>6.0} us/graph); own module per graph: {:>6.0} us/graph; evaluate all over 10,000 rows: {:>6.1} ms",
            tier_name(tier),
            one_module.as_secs_f64() * 1e3,
            one_module.as_secs_f64() * 1e6 / graphs.len() as f64,
            per_graph.as_secs_f64() * 1e6,
            eval.as_secs_f64() * 1e3
        );
    }
}

fn evaluate(programs: &[JitProgram], dir: &Path) -> Duration {
    let text = std::fs::read_to_string(dir.join("gp_data.csv")).expect("gp_data.csv");
    let mut cols: Vec<Vec<f64>> = vec![Vec::new(); 5];
    for line in text.lines().skip(1) {
        for (col, v) in cols.iter_mut().zip(line.split(',')) {
            col.push(v.parse().expect("a number"));
        }
    }
    let cols: Vec<Data> = cols.into_iter().map(Data::from).collect();
    let samples = (0..3)
        .map(|_| {
            let t = Instant::now();
            for p in programs {
                // Inputs by name: x0..x4 in the order the graph declares them.
                let inputs: Vec<&Data> = p
                    .verified()
                    .graph()
                    .inputs()
                    .iter()
                    .map(|i| &cols[i.name[1..].parse::<usize>().expect("xK")])
                    .collect();
                black_box(p.run_refs(&inputs).expect("runs"));
            }
            t.elapsed()
        })
        .collect();
    median(samples)
}

fn time_kernel(p: &JitProgram, inputs: &[&Data], reps: usize) -> Duration {
    black_box(p.run_refs(inputs).expect("runs"));
    median(
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                black_box(p.run_refs(inputs).expect("runs"));
                t.elapsed()
            })
            .collect(),
    )
}

/// Builds `benches/c/reference.c` with `cc -O3` and runs one kernel.
fn c_reference(mode: &str, n: usize, reps: usize) -> Option<f64> {
    let out = std::env::temp_dir().join(format!("kiln-bench-reference-{}", std::process::id()));
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/c/reference.c");
    let built = std::process::Command::new("cc")
        .args(["-O3", "-o"])
        .arg(&out)
        .arg(&src)
        .arg("-lm")
        .status()
        .ok()?;
    if !built.success() {
        return None;
    }
    let run = std::process::Command::new(&out)
        .args([mode, &n.to_string(), &reps.to_string()])
        .output()
        .ok()?;
    let _ = std::fs::remove_file(&out);
    String::from_utf8_lossy(&run.stdout)
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// True when LLVM's host assembly of the kernel has packed double instructions.
fn vectorized(graph: &Verified) -> String {
    let kernel = kiln::kernel::lower(graph, &Default::default()).expect("lowers");
    let request = kiln::EmitOptions {
        emit: kiln::Emit::Assembly,
        target: "native".into(),
        opt_level: OptLevel::O3,
        cpu: None,
        features: None,
    };
    let asm = kiln::llvm::emit(&kernel, "k", &request).expect("assembly");
    let asm = String::from_utf8_lossy(&asm);
    let packed: Vec<&str> = ["vmulpd", "vaddpd", "vdivpd", "vsubpd", "mulpd", "addpd"]
        .into_iter()
        .filter(|i| asm.contains(*i))
        .collect();
    let width = if asm.contains("zmm") {
        "zmm (8 x f64)"
    } else if asm.contains("ymm") {
        "ymm (4 x f64)"
    } else {
        "xmm (2 x f64)"
    };
    if packed.is_empty() {
        "no (scalar code)".to_string()
    } else {
        format!("yes: {} on {width}", packed.join(", "))
    }
}

fn kernels() {
    let nnc_src = "def nnc(x: float[n]):\n    a = x * x\n    b = sin(a)\n    c = cos(b)\n    d = c * c\n    f = d * d\n    return d + f";
    let arith_src = "def f(x0: float[n], x1: float[n], x2: float[n]): return x0 * x1 + x2 * 2.5 - x0 / (x1 + 1.5) + x2 * x0";
    let nnc_n = 10_000_000;
    let arith_n = 1_000_000;
    let x = Data::from(
        (0..nnc_n)
            .map(|i| (i as f64) * 1e-6 - 5.0)
            .collect::<Vec<_>>(),
    );
    let col =
        |k: f64, s: f64| Data::from((0..arith_n).map(|i| (i as f64) * s + k).collect::<Vec<_>>());
    let (x0, x1, x2) = (col(-5.0, 1e-6), col(1.0, 1e-3), col(-2.0, 1e-3));
    for (name, src, inputs, n, reps, mode) in [
        ("NNC kernel", nnc_src, vec![&x], nnc_n, 5, "nnc"),
        (
            "arithmetic kernel (15 nodes)",
            arith_src,
            vec![&x0, &x1, &x2],
            arith_n,
            21,
            "arith",
        ),
    ] {
        let graph = verified(src, &PyOptions::default());
        println!("{name} over {n} rows (ns per row, incl. output allocation):");
        for tier in [None, Some(OptLevel::O3)] {
            let p = compile(std::slice::from_ref(&graph), tier)
                .pop()
                .expect("one");
            let t = time_kernel(&p, &inputs, reps);
            println!(
                "  {:<10} {:>7.3}",
                tier_name(tier),
                t.as_secs_f64() / n as f64 * 1e9
            );
        }
        match c_reference(mode, n, reps) {
            Some(ns) => println!("  {:<10} {ns:>7.3}", "gcc -O3"),
            None => println!("  gcc -O3: cc not available"),
        }
        println!("  LLVM O3 vectorized: {}", vectorized(&graph));
    }
}

fn main() {
    kernels();
    population();
}
