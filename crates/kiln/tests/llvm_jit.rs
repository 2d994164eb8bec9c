//! The LLVM tier through the facade: typed calls on its code, threads,
//! populations in one module, division errors, and memory returned when the
//! last handle drops. Only with `--features llvm`.
#![cfg(feature = "llvm")]

use kiln::{Data, Engine, Format, JitProgram, Llvm, Program, PyOptions, Scalar};

fn graph(src: &str) -> (kiln::Graph, kiln::GraphInfo) {
    let graph = kiln::load(src, Format::Py, &PyOptions::default())
        .expect("parses")
        .graph;
    let info = kiln::verify(&graph).expect("verifies");
    (graph, info)
}

fn program(src: &str) -> JitProgram {
    let (graph, info) = graph(src);
    Llvm::default()
        .compile_many(&[(&graph, &info)])
        .expect("compiles")
        .pop()
        .expect("one program")
}

#[test]
fn typed_scalar_calls() {
    let f = program("x * 2.0 + 1.0")
        .scalar_fn::<(f64,), f64>()
        .expect("f64 -> f64");
    assert_eq!(f.call((20.0,)), 41.0);
    let g = program("def g(a: int, b: f32, c: bool): return float(a) * 2.0 if c else 0.5")
        .scalar_fn::<(i64, f32, bool), f64>()
        .unwrap();
    assert_eq!(
        (g.call((3, 1.0, true)), g.call((3, 1.0, false))),
        (6.0, 0.5)
    );
    let h = program("def h(k: i32): return k < 0")
        .scalar_fn::<(i32,), bool>()
        .unwrap();
    assert!(h.call((-5,)) && !h.call((5,)));
    // Transcendentals are the libm crate's, as in the interpreter.
    let s = program("sin(x)").scalar_fn::<(f64,), f64>().unwrap();
    assert_eq!(s.call((1e22,)).to_bits(), libm::sin(1e22).to_bits());
}

#[test]
fn programs_are_shared_across_threads() {
    let f = program("sqrt(x) + 1.0").scalar_fn::<(f64,), f64>().unwrap();
    let p = program("def f(x: float[n]): return x * 3.0, sum(x)");
    std::thread::scope(|s| {
        for t in 0..4 {
            let (f, p) = (f.clone(), &p);
            s.spawn(move || {
                for i in 0..1000 {
                    assert_eq!(f.call((f64::from(i * i),)), f64::from(i) + 1.0);
                    let out = p.run(&[Data::from(vec![f64::from(t); 3])]).unwrap();
                    assert_eq!(out[1], Data::Scalar(Scalar::F64(f64::from(t) * 3.0)));
                }
            });
        }
    });
}

#[test]
fn compiles_on_several_threads_at_once() {
    std::thread::scope(|s| {
        for t in 0..4 {
            s.spawn(move || {
                for i in 0..20 {
                    let p = program(&format!("x * {}.0 + {t}.0", i + 1));
                    let f = p.scalar_fn::<(f64,), f64>().unwrap();
                    assert_eq!(f.call((2.0,)), f64::from(2 * (i + 1) + t));
                }
            });
        }
    });
}

#[test]
fn a_population_compiles_as_one_module() {
    let sources = ["x0 + x1", "sin(x0) * x1", "max(x0, x1) - 1.0", "x0 / x1"];
    let graphs: Vec<_> = sources.iter().map(|s| graph(s)).collect();
    let refs: Vec<_> = graphs.iter().map(|(g, i)| (g, i)).collect();
    let programs = Llvm::default().compile_many(&refs).unwrap();
    let args = [
        Data::Scalar(Scalar::F64(0.5)),
        Data::Scalar(Scalar::F64(-2.0)),
    ];
    for ((graph, info), program) in graphs.iter().zip(&programs) {
        let want = kiln::interp::run(graph, info, &args).unwrap();
        assert!(
            program.run(&args).unwrap()[0].same_data(&want[0]),
            "{}",
            graph.name
        );
    }
    let last = programs.into_iter().last().unwrap();
    assert_eq!(
        last.run(&args).unwrap()[0],
        Data::Scalar(Scalar::F64(-0.25))
    );
}

#[test]
fn division_by_zero_is_an_error_not_a_crash() {
    let (g, _) = graph("def f(a: i32[n], b: i32[n]):\n    q = a % b\n    return q");
    let p = Llvm::default().compile_graph(&g, true).unwrap();
    let col = |v: Vec<i32>| Data::Column(kiln::Buffer::I32(v));
    let err = p
        .run(&[col(vec![1, 2, i32::MIN]), col(vec![1, 0, -1])])
        .unwrap_err();
    assert_eq!(err.to_string(), "integer division by zero in v2 (`q`)");
    assert_eq!(
        p.run(&[col(vec![7, i32::MIN]), col(vec![-2, -1])]).unwrap(),
        vec![col(vec![-1, 0])]
    );
}

fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("linux");
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .expect("resident field")
        .parse()
        .expect("number");
    pages * 4096
}

#[test]
fn compiling_and_dropping_many_graphs_returns_the_memory() {
    let (graph, info) = graph("sin(x) * y + 2.0 * x");
    let kernel = kiln::jit::lower(&graph, &info).unwrap();
    let mut baseline = 0;
    let n_graphs = 1_500;
    let start = std::time::Instant::now();
    for i in 0..n_graphs {
        let compiled = kiln::llvm::jit(vec![kernel.clone()], kiln::llvm::OptLevel::O2)
            .unwrap()
            .pop()
            .unwrap();
        let mut out = 0.0f64;
        let mut slots = [
            1.0f64.to_bits(),
            0.0f64.to_bits(),
            &mut out as *mut f64 as u64,
        ];
        // SAFETY: one slot per parameter of the direct kernel (x, y, out pointer).
        assert_eq!(unsafe { compiled.call(&mut slots) }, 0);
        assert_eq!(out, 2.0);
        drop(compiled);
        if i == 300 {
            baseline = rss_bytes();
        }
    }
    let grown = rss_bytes().saturating_sub(baseline);
    eprintln!(
        "{n_graphs} LLVM compile+drop: {:?}, RSS grew {} KiB after the first 300",
        start.elapsed(),
        grown / 1024
    );
    assert!(grown < 16 << 20, "RSS grew by {} MiB", grown >> 20);
}
