//! Kernels on several threads (`kiln::threads`), through the facade on
//! every compiling tier: the same bits at every thread count, work below
//! the grain kept on the caller's thread, concurrent callers (threads of
//! their own and a rayon pool's workers),
//! the thread count changed while others run, errors and selections from
//! chunks. (Every filetest, fixture and differential case also runs at
//! 1, 2, 3 and 7 threads with every loop cut: `tests/`.)
//!
//! The grain and the count of chunked runs are the process's: the tests
//! take turns.

use kiln::{CompileOptions, Data, Engine, ExecError, Format, JitProgram, Program, Tier, Verified};
use std::sync::Mutex;

static TURN: Mutex<()> = Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

fn verified(src: &str) -> Verified {
    let graph = kiln::load(src, Format::Py, &Default::default())
        .expect("parses")
        .graph;
    kiln::verify(graph).expect("verifies")
}

fn program(tier: Tier, src: &str) -> JitProgram {
    tier.backend()
        .expect("a compiling tier")
        .compile(&verified(src), &CompileOptions::default())
        .expect("compiles")
}

fn column(n: usize) -> Data {
    Data::Column(kiln::Buffer::F64(
        (0..n).map(|i| (i as f64 * 0.37).sin() * 100.0).collect(),
    ))
}

fn same(a: &[Data], b: &[Data]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(a, b)| a.same_data(b))
}

const ELEMENTWISE: &str = "def f(x: f64[n], y: f64[n]): return sin(x) * y + 1.5, x > y";

#[test]
fn large_kernels_run_in_chunks_with_the_same_bits_and_small_ones_stay() {
    let _turn = turn();
    kiln::threads::set_grain(kiln::threads::DEFAULT_GRAIN);
    for tier in Tier::compiling() {
        let f = program(tier, ELEMENTWISE);
        let oracle = Tier::Interp
            .engine()
            .expect("the interpreter")
            .compile_dyn(&verified(ELEMENTWISE), &CompileOptions::default())
            .expect("compiles");
        // 1,000 rows: below the grain, no thread is woken.
        let small = [column(1000), column(1000)];
        let before = kiln::threads::chunked_runs();
        let got = kiln::threads::with_num_threads(2, || f.run(&small)).expect("runs");
        assert_eq!(
            kiln::threads::chunked_runs(),
            before,
            "{tier}: 1,000 rows were cut"
        );
        assert!(same(&got, &oracle.run(&small).expect("runs")), "{tier}");
        // 300,000 rows: cut, and the same bits at every count.
        let large = [column(300_001), column(300_001)];
        let want = oracle.run(&large).expect("runs");
        for threads in [1, 2, 3, 7] {
            let before = kiln::threads::chunked_runs();
            let got = kiln::threads::with_num_threads(threads, || f.run(&large)).expect("runs");
            assert!(same(&got, &want), "{tier} at {threads} threads");
            let cut = kiln::threads::chunked_runs() > before;
            assert_eq!(cut, threads > 1, "{tier} at {threads} threads: cut {cut}");
        }
    }
}

#[test]
fn selections_join_in_row_order_and_errors_name_the_first_failing_row() {
    let _turn = turn();
    kiln::threads::set_grain(0);
    let filter = "def f(x: f64[n]): return filter(sin(x) > 0.25)";
    let divide = "def f(a: i64[n], b: i64[n]): return a // b";
    let n = 10_007;
    let a = Data::Column(kiln::Buffer::I64((0..n).collect()));
    // Zeros near the end of the last chunks only: at 7 threads the first
    // failing row is in a later chunk than the first.
    let b = Data::Column(kiln::Buffer::I64(
        (0..n)
            .map(|i| if i % 4999 == 4998 { 0 } else { i + 1 })
            .collect(),
    ));
    for tier in Tier::compiling() {
        let f = program(tier, filter);
        let x = [column(n as usize)];
        let want = kiln::threads::with_num_threads(1, || f.run(&x)).expect("runs");
        let Data::Selection(rows) = &want[0] else {
            panic!("a selection")
        };
        assert!(rows.len() > 1000 && rows.windows(2).all(|w| w[0] < w[1]));
        for threads in [2, 3, 7] {
            let got = kiln::threads::with_num_threads(threads, || f.run(&x)).expect("runs");
            assert!(same(&got, &want), "{tier} at {threads} threads");
        }
        let d = program(tier, divide);
        for threads in [1, 2, 3, 7] {
            let err = kiln::threads::with_num_threads(threads, || d.run(&[a.clone(), b.clone()]))
                .expect_err("divides by zero");
            assert!(
                matches!(err, ExecError::DivisionByZero { .. }),
                "{tier} at {threads} threads: {err}"
            );
        }
    }
    kiln::threads::set_grain(kiln::threads::DEFAULT_GRAIN);
}

#[test]
fn concurrent_nested_and_changing_callers_get_the_same_bits() {
    let _turn = turn();
    kiln::threads::set_grain(0);
    let x = [column(50_000), column(50_000)];
    for tier in Tier::compiling() {
        let f = program(tier, ELEMENTWISE);
        let want = kiln::threads::with_num_threads(1, || f.run(&x)).expect("runs");
        // Four callers at once, each asking for threads, while the
        // process's count changes under them.
        std::thread::scope(|s| {
            let callers: Vec<_> = (0..4)
                .map(|i| {
                    let (f, x, want) = (&f, &x, &want);
                    s.spawn(move || {
                        for round in 0..20 {
                            if i == 0 {
                                kiln::threads::set_num_threads(1 + round % 5);
                            }
                            let got = f.run(x).expect("runs");
                            assert!(same(&got, want), "{tier}: caller {i} round {round}");
                        }
                    })
                })
                .collect();
            for c in callers {
                c.join().expect("callers do not panic");
            }
        });
        kiln::threads::set_num_threads(0);
        // Called from a rayon pool's workers, several at once: one call's
        // stage at a time has kiln's pool, the others run their chunks on
        // their own worker.
        use rayon::prelude::*;
        let all: Vec<Vec<Data>> = (0..8)
            .into_par_iter()
            .map(|_| f.run(&x).expect("runs"))
            .collect();
        assert!(all.iter().all(|got| same(got, &want)), "{tier} nested");
    }
    kiln::threads::set_grain(kiln::threads::DEFAULT_GRAIN);
}

#[test]
fn the_thread_count_is_the_callers_override_then_the_process_setting() {
    let _turn = turn();
    kiln::threads::set_num_threads(3);
    assert_eq!(kiln::threads::num_threads(), 3);
    kiln::threads::with_num_threads(5, || {
        assert_eq!(kiln::threads::num_threads(), 5);
        std::thread::spawn(|| assert_eq!(kiln::threads::num_threads(), 3))
            .join()
            .expect("another thread sees the process's count");
    });
    assert_eq!(kiln::threads::num_threads(), 3);
    kiln::threads::set_num_threads(0);
    assert_eq!(
        kiln::threads::num_threads(),
        kiln::threads::default_threads()
    );
}

/// A kernel whose outer loop claims independence falsely: row `i` stores
/// `y[i] = i` and reads `y[min(i + 1, 7)]`, which row `i + 1` writes. The
/// verifier cannot tell (both indices come from the row), so the tests'
/// order check must: run last first, the chunks give other bits every time.
#[test]
fn chunks_run_last_first_expose_a_false_independence_claim() {
    use kiln::ir::op::BinaryOp;
    use kiln::ir::types::{DType, Dim};
    use kiln::kernel::{Expr, Extent, Iterations, Kernel, Param, ParamIdx, Reg, Stmt};
    let _turn = turn();
    let reg = |i: u32| Reg::from_u32(i);
    let (y, z) = (ParamIdx::from_u32(0), ParamIdx::from_u32(1));
    let out = |name: &str| Param::ArrayOut {
        name: name.into(),
        dtype: DType::F64,
        shape: vec![Dim::Fixed(8)],
    };
    let inner = vec![
        Stmt::Let(reg(2), Expr::Const(kiln::Scalar::I64(1))),
        Stmt::Let(reg(3), Expr::Binary(BinaryOp::Add, reg(0), reg(2))),
        Stmt::Let(reg(4), Expr::Const(kiln::Scalar::I64(7))),
        Stmt::Let(reg(5), Expr::Binary(BinaryOp::Min, reg(3), reg(4))),
        Stmt::Let(reg(6), Expr::Cast(DType::F64, reg(0))),
        Stmt::Store(y, Some(reg(0)), reg(6)),
        Stmt::Let(reg(7), Expr::Load(y, reg(5))),
        Stmt::Store(z, Some(reg(0)), reg(7)),
    ];
    let kernel = Kernel {
        name: "false_claim".into(),
        params: vec![out("y"), out("z")],
        regs: vec![
            DType::I64,
            DType::I64,
            DType::I64,
            DType::I64,
            DType::I64,
            DType::I64,
            DType::F64,
            DType::F64,
        ],
        vars: Vec::new(),
        body: vec![Stmt::Loop {
            extent: Extent::Fixed(8),
            row: reg(0),
            body: vec![Stmt::Loop {
                extent: Extent::Fixed(1),
                row: reg(1),
                body: inner,
                iterations: Iterations::Sequential,
            }],
            iterations: Iterations::Independent,
        }],
        checks: Vec::new(),
        direct: false,
        reg_names: vec![None; 8],
    };
    kiln::kernel::verify(&kernel).expect("the verifier cannot see the false claim");
    let code = kiln::kernel::backend::compile(
        &kiln::Vm,
        vec![kernel],
        &kiln::BackendOptions::default(),
        &kiln::runtime::libm_symbols(),
    )
    .expect("compiles");
    assert!(code[0].is_staged());
    let run = |reversed: bool| {
        let (mut y, mut z) = ([0.0f64; 8], [0.0f64; 8]);
        let mut slots = [y.as_mut_ptr() as u64, z.as_mut_ptr() as u64];
        let call = || {
            // SAFETY: one slot per parameter, each room for 8 f64.
            unsafe { code[0].call(&mut slots) }
        };
        let status = kiln::threads::with_num_threads(7, || {
            if reversed {
                kiln::threads::with_chunks_reversed(call)
            } else {
                kiln::threads::with_num_threads(1, call)
            }
        });
        assert_eq!(status, 0);
        z
    };
    kiln::threads::set_grain(0);
    let in_order = run(false);
    let last_first = run(true);
    kiln::threads::set_grain(kiln::threads::DEFAULT_GRAIN);
    assert_eq!(in_order, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 7.0]);
    assert_ne!(
        last_first, in_order,
        "the order check sees the claim is false"
    );
}
