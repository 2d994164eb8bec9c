//! The Cranelift tier through the facade: typed calls, threads, populations,
//! errors, and code memory that is returned when the last handle drops.

use kiln::{compile_many, Cranelift, Data, Engine, Format, JitProgram, Program, PyOptions, Scalar};

fn program(src: &str) -> JitProgram {
    let graph = kiln::load(src, Format::Py, &PyOptions::default())
        .expect("parses")
        .graph;
    let info = kiln::verify(&graph).expect("verifies");
    let (graph, info) = kiln::optimize(&graph, &info).expect("optimizes");
    compile_many(&[(&graph, &info)])
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
    assert_eq!(g.call((3, 1.0, true)), 6.0);
    assert_eq!(g.call((3, 1.0, false)), 0.5);
    let h = program("def h(k: i32): return k < 0")
        .scalar_fn::<(i32,), bool>()
        .unwrap();
    assert!(h.call((-5,)) && !h.call((5,)));
}

#[test]
fn typed_handles_check_the_signature() {
    let p = program("x * 2.0");
    let err = |r: Result<kiln::ScalarFn<(f32,), f64>, kiln::CompileError>| {
        r.err().expect("mismatch").to_string()
    };
    assert_eq!(
        err(p.scalar_fn::<(f32,), f64>()),
        "signature mismatch: the graph is (f64) -> (f64), not (f32) -> f64"
    );
    // Integer division can fail, so it has a status and no direct signature.
    let q = program("def q(a: int, b: int): return a // b");
    assert!(q.scalar_fn::<(i64, i64), i64>().is_err());
    let two = program("x, x + 1.0");
    assert!(two.scalar_fn::<(f64,), f64>().is_err());
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
                    let col = Data::from(vec![f64::from(t); 3]);
                    let out = p.run(&[col]).unwrap();
                    assert_eq!(out[1], Data::Scalar(Scalar::F64(f64::from(t) * 3.0)));
                }
            });
        }
    });
}

#[test]
fn a_population_compiles_as_one_module() {
    let sources = ["x0 + x1", "sin(x0) * x1", "max(x0, x1) - 1.0", "x0 / x1"];
    let graphs: Vec<_> = sources
        .iter()
        .map(|s| {
            let g = kiln::load(s, Format::Py, &PyOptions::default())
                .unwrap()
                .graph;
            let i = kiln::verify(&g).unwrap();
            (g, i)
        })
        .collect();
    let refs: Vec<_> = graphs.iter().map(|(g, i)| (g, i)).collect();
    let programs = compile_many(&refs).unwrap();
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
    // The code outlives the list: a program kept alone still runs.
    let last = programs.into_iter().last().unwrap();
    assert_eq!(
        last.run(&args).unwrap()[0],
        Data::Scalar(Scalar::F64(-0.25))
    );
}

#[test]
fn division_by_zero_is_an_error_not_a_crash() {
    let graph = kiln::load(
        "def f(a: i32[n], b: i32[n]):\n    q = a % b\n    return q",
        Format::Py,
        &PyOptions::default(),
    )
    .unwrap()
    .graph;
    let p = Cranelift.compile_graph(&graph, true).unwrap();
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
    let graph = kiln::load("sin(x) * y + 2.0 * x", Format::Py, &PyOptions::default())
        .unwrap()
        .graph;
    let info = kiln::verify(&graph).unwrap();
    let kernel = kiln::jit::lower(&graph, &info).unwrap();
    let mut baseline = 0;
    let n_graphs = 100_000;
    let start = std::time::Instant::now();
    for i in 0..n_graphs {
        let compiled = kiln::cranelift::jit(vec![kernel.clone()])
            .unwrap()
            .pop()
            .unwrap();
        let mut slots = [1.0f64.to_bits(), 0.0f64.to_bits(), 0];
        let mut out = 0.0f64;
        slots[2] = &mut out as *mut f64 as u64;
        // SAFETY: one slot per parameter of the direct kernel (x, y, out pointer).
        assert_eq!(unsafe { compiled.call(&mut slots) }, 0);
        assert_eq!(out, 2.0);
        drop(compiled);
        if i == 10_000 {
            baseline = rss_bytes();
        }
    }
    let grown = rss_bytes().saturating_sub(baseline);
    eprintln!(
        "{n_graphs} compile+drop: {:?}, RSS grew {} KiB after the first 10,000",
        start.elapsed(),
        grown / 1024
    );
    assert!(
        grown < 32 << 20,
        "RSS grew by {} MiB between 10,000 and {n_graphs} compiles",
        grown >> 20
    );
}
