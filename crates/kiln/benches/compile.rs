//! Compile latency of the GP population (issue 18, docs/performance.md):
//! its 1000 expressions (`../shared/fixtures/gp/`) through each phase on
//! one thread, in µs per expression, then the Cranelift batch under its
//! settings, and one small expression compiled on its own (the interactive
//! case). `cargo bench -p kiln --bench compile`; medians of 7 runs.

use kiln::kernel::{self, Kernel};
use kiln::{
    Backend, CompileOptions, Cranelift, DynEngine, Engine, Format, LoadOptions, OptLevel, Program,
    PyOptions,
};
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// The median of 7 runs of `f` (after one to warm up), per item.
fn per_item<T>(items: usize, mut f: impl FnMut() -> T) -> f64 {
    black_box(f());
    let d = median(
        (0..7)
            .map(|_| {
                let t = Instant::now();
                black_box(f());
                t.elapsed()
            })
            .collect(),
    );
    d.as_secs_f64() * 1e6 / items as f64
}

fn load_options() -> LoadOptions {
    LoadOptions {
        py: PyOptions {
            default_shape: vec![kiln::Dim::Sym("n".into())],
            ..PyOptions::default()
        },
        ..LoadOptions::default()
    }
}

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/gp");
    let text = std::fs::read_to_string(dir.join("gp_population.txt"))
        .expect("../shared/fixtures/gp/gp_population.txt (the GP workload)");
    let exprs: Vec<&str> = text.lines().collect();
    let n = exprs.len();
    let options = load_options();
    println!("phase,us_per_expression ({n} expressions, 1 thread)");

    let parse = per_item(n, || {
        exprs
            .iter()
            .map(|e| kiln::load(e, Format::Py, &options).expect("parses").graph)
            .collect::<Vec<_>>()
    });
    println!("parse (Python subset to graph),{parse:.2}");
    let graphs: Vec<_> = exprs
        .iter()
        .map(|e| kiln::load(e, Format::Py, &options).expect("parses").graph)
        .collect();
    let verify = per_item(n, || {
        graphs
            .iter()
            .map(|g| kiln::verify(g.clone()).expect("verifies"))
            .collect::<Vec<_>>()
    });
    println!("verify (with the clone it consumes),{verify:.2}");
    let verified: Vec<_> = graphs
        .iter()
        .map(|g| kiln::verify(g.clone()).expect("verifies"))
        .collect();
    let optimize = per_item(n, || {
        verified
            .iter()
            .map(|g| kiln::optimize(g).expect("optimizes"))
            .collect::<Vec<_>>()
    });
    println!("optimize (fold, simplify, CSE, DCE),{optimize:.2}");
    let optimized: Vec<_> = verified
        .iter()
        .map(|g| kiln::optimize(g).expect("optimizes"))
        .collect();
    let lower_options = Backend::lower_options(&Cranelift);
    let lower = per_item(n, || {
        optimized
            .iter()
            .map(|g| kernel::lower(g, &lower_options).expect("lowers"))
            .collect::<Vec<_>>()
    });
    println!("lower (graph to kernel),{lower:.2}");
    let kernels: Vec<Kernel> = optimized
        .iter()
        .map(|g| kernel::lower(g, &lower_options).expect("lowers"))
        .collect();
    let symbols = kiln::runtime::libm_symbols();
    for (label, opt, vectorize) in [
        (
            "Cranelift codegen (speed, scalar loops: populations' default)",
            OptLevel::O2,
            false,
        ),
        (
            "Cranelift codegen (none, scalar loops)",
            OptLevel::O0,
            false,
        ),
        (
            "Cranelift codegen (speed, vector loops)",
            OptLevel::O2,
            true,
        ),
    ] {
        let codegen = per_item(n, || {
            kiln::cranelift::jit(kernels.clone(), &symbols, opt, vectorize).expect("compiles")
        });
        println!("{label},{codegen:.2}");
    }
    let clone = per_item(n, || kernels.clone());
    println!("(the kernels' clone the codegen rows include),{clone:.2}");
    // The VM: lowered with its options (libm calls, as Cranelift), then
    // translated to its instructions.
    let vm_lower = per_item(n, || {
        optimized
            .iter()
            .map(|g| kernel::lower(g, &Backend::lower_options(&kiln::Vm)).expect("lowers"))
            .collect::<Vec<_>>()
    });
    println!("lower for the VM,{vm_lower:.2}");
    let vm_kernels: Vec<Kernel> = optimized
        .iter()
        .map(|g| kernel::lower(g, &Backend::lower_options(&kiln::Vm)).expect("lowers"))
        .collect();
    let vm = per_item(n, || {
        vm_kernels
            .iter()
            .map(|k| kiln::vm::compile(k).expect("compiles"))
            .collect::<Vec<_>>()
    });
    println!("VM codegen (kernel to instructions),{vm:.2}");

    // The facade, end to end: what kiln::Population pays per expression.
    let compile = CompileOptions {
        vectorize: Some(false),
        ..CompileOptions::default()
    };
    let variables = kiln::population::variables_of(&exprs);
    for engine in [&Cranelift as &dyn DynEngine, &kiln::Vm] {
        let population = || {
            kiln::Population::compile(
                &exprs,
                &variables,
                engine,
                &kiln::PopulationOptions {
                    threads: 1,
                    compile: compile.clone(),
                    ..Default::default()
                },
            )
        };
        let tier = engine.name();
        let whole = per_item(n, population);
        println!("kiln::Population::compile on {tier} (all phases),{whole:.2}");
        let drop = per_item(n, || drop(population()));
        println!("(compile and drop on {tier}),{drop:.2}");
    }

    // The experiment issue 18 weighs: the expressions as the outputs of a
    // few graphs (one kernel each: one pass over the rows, columns loaded
    // once, subtrees shared by CSE), against one graph per expression.
    let data = std::fs::read_to_string(dir.join("gp_data.csv")).expect("gp_data.csv");
    let mut lines = data.lines();
    let names: Vec<String> = lines
        .next()
        .expect("a header")
        .split(',')
        .map(str::to_string)
        .collect();
    let mut cols = vec![Vec::new(); names.len()];
    for line in lines {
        for (col, v) in cols.iter_mut().zip(line.split(',')) {
            col.push(v.parse::<f64>().expect("a number"));
        }
    }
    let rows = cols[0].len();
    let signature = names
        .iter()
        .map(|v| format!("{v}: float[n]"))
        .collect::<Vec<_>>()
        .join(", ");
    for (group, engine) in [1usize, 16, 64, 250]
        .into_iter()
        .flat_map(|g| [(g, kiln::Tier::Cranelift), (g, kiln::Tier::Vm)])
    {
        let engine = engine.backend().expect("a compiling tier");
        let sources: Vec<String> = exprs
            .chunks(group)
            .map(|part| {
                let outs: Vec<String> = part.iter().map(|e| format!("({e})")).collect();
                format!("def f({signature}):\n    return {}\n", outs.join(", "))
            })
            .collect();
        let graphs: Vec<_> = sources
            .iter()
            .map(|src| {
                let g = kiln::load(src, Format::Py, &options).expect("parses").graph;
                kiln::verify(g).expect("verifies")
            })
            .collect();
        let opts = CompileOptions {
            vectorize: Some(false),
            ..CompileOptions::default()
        };
        let compile = per_item(n, || {
            engine.compile_batch(&graphs, &opts).expect("compiles")
        });
        let programs = engine.compile_batch(&graphs, &opts).expect("compiles");
        let mut out = vec![0.0; rows * group];
        let eval = per_item(n, || {
            for (program, part) in programs.iter().zip(exprs.chunks(group)) {
                let inputs: Vec<kiln::ArrayRef> = program
                    .verified()
                    .graph()
                    .inputs()
                    .iter()
                    .map(|i| {
                        let k = names.iter().position(|v| *v == i.name).expect("a column");
                        kiln::ArrayRef::F64(&cols[k])
                    })
                    .collect();
                // A column gets `rows` elements, a constant one.
                let graph = program.verified().graph();
                let mut rest = &mut out[..rows * part.len()];
                let mut outs: Vec<kiln::ArrayMut> = Vec::with_capacity(part.len());
                for o in graph.outputs() {
                    let len = match graph.ty(o.value) {
                        kiln::Type::Tensor(t) if !t.shape.is_empty() => rows,
                        _ => 1,
                    };
                    let (this, tail) = std::mem::take(&mut rest).split_at_mut(len);
                    outs.push(kiln::ArrayMut::F64(this));
                    rest = tail;
                }
                program.run_arrays(&inputs, &mut outs).expect("runs");
            }
        });
        let tier = Engine::name(&engine);
        println!("{group} expression(s) per graph on {tier}: compile (optimize, lower, codegen),{compile:.2}");
        println!("{group} expression(s) per graph on {tier}: evaluate {rows} rows,{eval:.2}");
    }

    // One small expression on its own, as `kiln run -e` compiles it.
    let small = "sin(x0) * x1 + 2.0";
    for engine in [&Cranelift as &dyn DynEngine, &kiln::Vm] {
        let single = per_item(1, || {
            let graph = kiln::load(small, Format::Py, &options)
                .expect("parses")
                .graph;
            let graph = kiln::verify(graph).expect("verifies");
            engine
                .compile_dyn(&graph, &CompileOptions::default())
                .expect("compiles")
        });
        let tier = engine.name();
        println!("one expression alone on {tier} (`{small}`: parse to runnable code),{single:.2}");
    }
}
