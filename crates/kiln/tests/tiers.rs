//! Every compiling tier through the facade, each test written once and run on
//! each tier of this build ([`Tier::compiling`]): typed calls, borrowed arrays,
//! threads, populations in one module, division errors, and code memory that
//! is returned when the last handle drops.

use kiln::{
    ArrayMut, ArrayRef, CompileError, CompileOptions, Data, DynEngine, Engine, ExecError, Format,
    JitProgram, Program, Scalar, Tier, TypedFunc, Verified,
};

fn verified(src: &str) -> Verified {
    let graph = kiln::load(src, Format::Py, &Default::default())
        .expect("parses")
        .graph;
    kiln::verify(graph).expect("verifies")
}

fn program(tier: Tier, src: &str) -> JitProgram {
    let backend = tier.backend().expect("a compiling tier");
    backend
        .compile(&verified(src), &CompileOptions::default())
        .expect("compiles")
}

fn program_of(tier: Tier, graph: &Verified, options: &CompileOptions) -> JitProgram {
    let backend = tier.backend().expect("a compiling tier");
    backend.compile(graph, options).expect("compiles")
}

#[test]
fn typed_scalar_calls() {
    for tier in Tier::compiling() {
        let f = program(tier, "x * 2.0 + 1.0")
            .typed::<(f64,), f64>()
            .expect("f64 -> f64");
        assert_eq!(f.call((20.0,)), 41.0);
        let g = program(
            tier,
            "def g(a: int, b: f32, c: bool): return float(a) * 2.0 if c else 0.5",
        )
        .typed::<(i64, f32, bool), f64>()
        .unwrap();
        assert_eq!(
            (g.call((3, 1.0, true)), g.call((3, 1.0, false))),
            (6.0, 0.5)
        );
        let h = program(tier, "def h(k: i32): return k < 0")
            .typed::<(i32,), bool>()
            .unwrap();
        assert!(h.call((-5,)) && !h.call((5,)), "{tier:?}");
        // Transcendentals are the libm crate's, as in the interpreter.
        let s = program(tier, "sin(x)").typed::<(f64,), f64>().unwrap();
        assert_eq!(s.call((1e22,)).to_bits(), libm::sin(1e22).to_bits());
    }
}

#[test]
fn typed_handles_check_the_signature() {
    for tier in Tier::compiling() {
        let p = program(tier, "x * 2.0");
        let err =
            |r: Result<TypedFunc<(f32,), f64>, CompileError>| r.expect_err("mismatch").to_string();
        assert_eq!(
            err(p.typed::<(f32,), f64>()),
            "signature mismatch: the graph is (f64) -> (f64), not (f32) -> f64"
        );
        // Integer division can fail, so it has a status and no direct signature.
        let q = program(tier, "def q(a: int, b: int): return a // b");
        assert!(q.typed::<(i64, i64), i64>().is_err());
        let two = program(tier, "x, x + 1.0");
        assert!(two.typed::<(f64,), f64>().is_err());
    }
}

/// Borrowed arrays on every engine: the compiling tiers read and write them
/// in place, the interpreter copies; both check the room first.
#[test]
fn borrowed_arrays_in_and_out() {
    let src = "def f(x: float[n], k: int): return filter(x > 0.0), x * 2.0, k + 1, sum(x)";
    let compile = |engine: &dyn DynEngine, src: &str| {
        engine
            .compile_dyn(&verified(src), &CompileOptions::default())
            .expect("compiles")
    };
    for engine in kiln::engines() {
        let (tier, p) = (engine.name(), compile(&*engine, src));
        let x = [1.5, -2.0, 3.0, 0.0];
        let (mut sel, mut doubled, mut k1, mut total) = ([9u32; 4], [0.0; 4], [0i64], [0.0]);
        let written = p
            .run_arrays(
                &[ArrayRef::F64(&x), ArrayRef::Scalar(Scalar::I64(41))],
                &mut [
                    ArrayMut::Selection(&mut sel),
                    ArrayMut::F64(&mut doubled),
                    ArrayMut::I64(&mut k1),
                    ArrayMut::F64(&mut total),
                ],
            )
            .unwrap();
        assert_eq!(written, [2, 4, 1, 1], "{tier:?}");
        assert_eq!(&sel[..2], [0, 2]);
        assert_eq!((doubled, k1, total), ([3.0, -4.0, 6.0, 0.0], [42], [2.5]));
        // Room of the wrong dtype or length is an error, not a write past it.
        let mut short = [0.0; 3];
        let err = p
            .run_arrays(
                &[ArrayRef::F64(&x), ArrayRef::Scalar(Scalar::I64(1))],
                &mut [
                    ArrayMut::Selection(&mut sel),
                    ArrayMut::F64(&mut short),
                    ArrayMut::I64(&mut k1),
                    ArrayMut::F64(&mut total),
                ],
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "output `out1` needs f64[4], got f64[3]",
            "{tier:?}"
        );
        let err = p
            .run_arrays(
                &[ArrayRef::I64(&[1, 2]), ArrayRef::Scalar(Scalar::I64(1))],
                &mut [],
            )
            .unwrap_err();
        assert!(matches!(err, ExecError::InputType { .. }), "{err}");
        let err = p
            .run_arrays(
                &[ArrayRef::F64(&x), ArrayRef::Scalar(Scalar::I64(1))],
                &mut [ArrayMut::Selection(&mut sel)],
            )
            .unwrap_err();
        assert_eq!(err.to_string(), "the graph has 4 output(s), got room for 1");
        // A selection needs room for every row.
        let mut few = [0u32; 3];
        let err = p
            .run_arrays(
                &[ArrayRef::F64(&x), ArrayRef::Scalar(Scalar::I64(1))],
                &mut [
                    ArrayMut::Selection(&mut few),
                    ArrayMut::F64(&mut doubled),
                    ArrayMut::I64(&mut k1),
                    ArrayMut::F64(&mut total),
                ],
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "output `out0` needs room for 4 rows, got room for 3 rows",
            "{tier}"
        );
        // A direct kernel's returned value lands in the caller's room too.
        let d = compile(&*engine, "x * 3.0");
        let mut y = [0.0];
        d.run_arrays(
            &[ArrayRef::Scalar(Scalar::F64(2.0))],
            &mut [ArrayMut::F64(&mut y)],
        )
        .unwrap();
        assert_eq!(y, [6.0]);
    }
}

/// Room not written yet (a new vector's spare capacity) on every engine:
/// a call that returns `Ok` writes every element, here of outputs large
/// enough that the VM stores them past the caches (`kiln_vm::STREAM_BYTES`),
/// at offsets off the 16-byte boundary and lengths off the vector width.
#[test]
fn uninitialized_room_is_written_whole() {
    let rows = (kiln_vm::STREAM_BYTES as usize) / 8 + 3;
    let x: Vec<f64> = (0..rows).map(|i| i as f64 * 0.25 - 7.0).collect();
    let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
    for engine in kiln::engines() {
        let name = engine.name();
        let compile = |src: &str| {
            engine
                .compile_dyn(&verified(src), &CompileOptions::default())
                .expect("compiles")
        };
        let f = compile("def f(x: float[n]): return x * 3.0 + 1.0, sqrt(x)");
        let g = compile("def g(x: f32[n]): return x * 3.0 + 1.0");
        for skip in 0..4 {
            let n = rows - skip - (skip % 2);
            let mut a: Vec<f64> = Vec::with_capacity(rows);
            let mut b: Vec<f64> = Vec::with_capacity(rows);
            let mut c: Vec<f32> = Vec::with_capacity(rows);
            let (a, b, c) = (
                &mut a.spare_capacity_mut()[skip..skip + n],
                &mut b.spare_capacity_mut()[skip..skip + n],
                &mut c.spare_capacity_mut()[skip..skip + n],
            );
            f.run_arrays(
                &[ArrayRef::F64(&x[..n])],
                &mut [ArrayMut::F64Uninit(a), ArrayMut::F64Uninit(b)],
            )
            .unwrap();
            g.run_arrays(&[ArrayRef::F32(&x32[..n])], &mut [ArrayMut::F32Uninit(c)])
                .unwrap();
            for i in 0..n {
                // SAFETY: the calls returned `Ok`, so they wrote every element.
                let (a, b, c) =
                    unsafe { (a[i].assume_init(), b[i].assume_init(), c[i].assume_init()) };
                assert_eq!(
                    a.to_bits(),
                    (x[i] * 3.0 + 1.0).to_bits(),
                    "{name} {skip} {i}"
                );
                assert_eq!(b.to_bits(), x[i].sqrt().to_bits(), "{name} {skip} {i}");
                assert_eq!(
                    c.to_bits(),
                    (x32[i] * 3.0 + 1.0).to_bits(),
                    "{name} {skip} {i}"
                );
            }
        }
        // Room of the wrong length is refused before anything is written.
        let mut short: Vec<f32> = Vec::with_capacity(4);
        let err = g
            .run_arrays(
                &[ArrayRef::F32(&x32[..5])],
                &mut [ArrayMut::F32Uninit(&mut short.spare_capacity_mut()[..4])],
            )
            .unwrap_err();
        assert!(err.to_string().contains("f32[4]"), "{name}: {err}");
    }
}

#[test]
fn programs_are_shared_across_threads() {
    for tier in Tier::compiling() {
        let f = program(tier, "sqrt(x) + 1.0")
            .typed::<(f64,), f64>()
            .unwrap();
        let p = program(tier, "def f(x: float[n]): return x * 3.0, sum(x)");
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
}

/// A two-layer network over `n` rows: its hidden layers are scratch.
const LAYERS: &str = "graph \"layers\"\n\
    v0: f32[n, 3] = input \"x\"\n\
    v1: f32[3, 3] = tensor 0.5, -1.0, 2.0, 0.25, 1.5, -0.75, 1.0, 0.0, -2.0\n\
    v2: f32[n, 3] = matmul v0, v1\n\
    v3: f32[n, 3] = matmul v2, v1\n\
    v4: f32[n, 3] = sin v3\n\
    v5: f32[n, 3] = matmul v4, v1\n\
    output \"y\" = v5\n";

#[test]
fn scratch_is_reused_across_calls_threads_and_extents() {
    let graph = kiln::verify(kiln::ir::text::parse(LAYERS).expect("parses")).expect("verifies");
    let interp = kiln::Interpreter
        .compile(&graph, &CompileOptions::default())
        .unwrap();
    let input = |rows: usize, seed: usize| {
        let x: Vec<f32> = (0..rows * 3)
            .map(|i| ((i * 7 + seed * 13) % 23) as f32 * 0.25 - 2.5)
            .collect();
        Data::Column(kiln::ir::Buffer::F32(x))
    };
    for tier in Tier::compiling() {
        let p = program_of(tier, &graph, &CompileOptions::default());
        // Two hidden layers of n × 3 floats at a time, in rooms 4 KiB apart
        // (and staggered).
        let bytes = |n: u64| p.scratch_bytes(&[n]).expect("one extent");
        assert!(bytes(1000) >= 2 * 1000 * 3 * 4, "{tier:?}: {}", bytes(1000));
        assert!(bytes(1000) > bytes(10), "{tier:?}");
        assert_eq!(p.scratch_bytes(&[]), None);
        // Calls of several extents, from several threads, each taking an
        // arena another call left: every result is the interpreter's.
        std::thread::scope(|s| {
            for t in 0..3 {
                let (p, interp) = (&p, &interp);
                s.spawn(move || {
                    for (round, rows) in [700, 3, 700, 1, 256, 700].into_iter().enumerate() {
                        let x = [input(rows, t * 10 + round)];
                        assert_eq!(p.run(&x).unwrap(), interp.run(&x).unwrap(), "{tier:?}");
                    }
                });
            }
        });
    }
}

#[test]
fn compiles_on_several_threads_at_once() {
    for tier in Tier::compiling() {
        std::thread::scope(|s| {
            for t in 0..4 {
                s.spawn(move || {
                    for i in 0..20 {
                        let p = program(tier, &format!("x * {}.0 + {t}.0", i + 1));
                        let f = p.typed::<(f64,), f64>().unwrap();
                        assert_eq!(f.call((2.0,)), f64::from(2 * (i + 1) + t));
                    }
                });
            }
        });
    }
}

#[test]
fn a_population_compiles_as_one_module() {
    let sources = ["x0 + x1", "sin(x0) * x1", "max(x0, x1) - 1.0", "x0 / x1"];
    let graphs: Vec<Verified> = sources.iter().map(|s| verified(s)).collect();
    let args = [
        Data::Scalar(Scalar::F64(0.5)),
        Data::Scalar(Scalar::F64(-2.0)),
    ];
    for tier in Tier::compiling() {
        let programs = tier
            .backend()
            .unwrap()
            .compile_batch(&graphs, &CompileOptions::default())
            .unwrap();
        for (graph, program) in graphs.iter().zip(&programs) {
            let want = kiln::interp::run(graph, &args).unwrap();
            assert!(
                program.run(&args).unwrap()[0].same_data(&want[0]),
                "{tier:?}: {}",
                graph.graph().name
            );
        }
        // The code outlives the list: a program kept alone still runs.
        let last = programs.into_iter().last().unwrap();
        assert_eq!(
            last.run(&args).unwrap()[0],
            Data::Scalar(Scalar::F64(-0.25))
        );
    }
}

#[test]
fn division_by_zero_is_an_error_not_a_crash() {
    let src = "def f(a: i32[n], b: i32[n]):\n    q = a % b\n    return q";
    let col = |v: Vec<i32>| Data::Column(kiln::Buffer::I32(v));
    for tier in Tier::compiling() {
        let p = program(tier, src);
        let err = p
            .run(&[col(vec![1, 2, i32::MIN]), col(vec![1, 0, -1])])
            .unwrap_err();
        assert_eq!(err.to_string(), "integer division by zero in v2 (`q`)");
        assert_eq!(
            p.run(&[col(vec![7, i32::MIN]), col(vec![-2, -1])]).unwrap(),
            vec![col(vec![-1, 0])]
        );
    }
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
    let graph = kiln::optimize(&verified("sin(x) * y + 2.0 * x")).unwrap();
    // Off LLVM's code cache: every compile generates code (linking is the
    // same either way).
    let options = CompileOptions {
        optimize: false,
        cache: false,
        ..CompileOptions::default()
    };
    for tier in Tier::compiling() {
        // (compiles, the compile after which RSS is the baseline, allowed growth)
        let (n_graphs, warm, allowed) = match tier {
            Tier::Vm | Tier::Cranelift => (100_000, 10_000, 32 << 20),
            Tier::Llvm => (1_500, 300, 16 << 20),
            Tier::Interp | Tier::Auto => unreachable!("a compiling tier"),
        };
        let mut baseline = 0;
        let start = std::time::Instant::now();
        for i in 0..n_graphs {
            let f = program_of(tier, &graph, &options)
                .typed::<(f64, f64), f64>()
                .unwrap();
            assert_eq!(f.call((1.0, 0.0)), 2.0);
            drop(f);
            if i == warm {
                baseline = rss_bytes();
            }
        }
        let grown = rss_bytes().saturating_sub(baseline);
        eprintln!(
            "{tier:?}: {n_graphs} compile+drop: {:?}, RSS grew {} KiB after the first {warm}",
            start.elapsed(),
            grown / 1024
        );
        assert!(
            grown < allowed,
            "{tier:?}: RSS grew by {} MiB between {warm} and {n_graphs} compiles",
            grown >> 20
        );
    }
}

/// Every engine's outputs for `inputs` are the interpreter's, bit for bit.
fn every_engine_agrees(graph: &Verified, inputs: &[Data], what: &str) {
    let want = kiln::interp::run(graph, inputs).expect("runs");
    for engine in kiln::engines() {
        let program = engine
            .compile_dyn(graph, &CompileOptions::default())
            .expect("compiles");
        let got = program.run(inputs).expect("runs");
        for (g, w) in got.iter().zip(&want) {
            assert!(
                g.same_data(w),
                "{what} outputs={} on {}",
                want.len(),
                engine.name()
            );
        }
    }
}

/// A matmul `x @ w` (or `x @ w.T` of a `[n, k]` `w`) of the given shape and
/// dtype, with a bias and ReLU as its epilogue.
fn matmul_text(dtype: &str, (m, k, n): (u64, u64, u64), transposed: bool) -> String {
    let w = if transposed {
        format!(
            "v1: {dtype}[{n}, {k}] = input \"w\"\nv2: {dtype}[{k}, {n}] = transpose v1 [1, 0]\n"
        )
    } else {
        format!("v1: {dtype}[{k}, {n}] = input \"w\"\nv2: {dtype}[{k}, {n}] = reshape v1\n")
    };
    format!(
        "graph \"mm\"\nv0: {dtype}[{m}, {k}] = input \"x\"\n{w}\
         v3: {dtype}[{m}, {n}] = matmul v0, v2\n\
         v4: {dtype}[{n}] = input \"b\"\n\
         v5: {dtype}[{m}, {n}] = add v3, v4\n\
         v6: {dtype} = const 0\n\
         v7: {dtype}[{m}, {n}] = max v5, v6\n\
         output \"y\" = v7\noutput \"raw\" = v3\n"
    )
}

fn values(dtype: kiln::DType, count: u64, seed: u64) -> Data {
    let f = |i: u64| ((i * 7919 + seed * 104_729) % 2003) as f64 / 1001.0 - 1.0;
    Data::Column(match dtype {
        kiln::DType::F32 => kiln::Buffer::F32((0..count).map(|i| f(i) as f32 * 0.37).collect()),
        kiln::DType::F64 => kiln::Buffer::F64((0..count).map(|i| f(i) * 0.37).collect()),
        kiln::DType::I32 => kiln::Buffer::I32((0..count).map(|i| (f(i) * 50.0) as i32).collect()),
        _ => kiln::Buffer::I64((0..count).map(|i| (f(i) * 50.0) as i64).collect()),
    })
}

#[test]
fn matmuls_of_every_shape_agree_with_the_interpreter_bit_for_bit() {
    // Rows below, at and past the 4-row blocks and the 64-row tiles (the
    // last tile with and without blocks, with and without the rows past
    // them); columns below, at and past the 64-column (f32) and 32-column
    // (f64) panels (and the 16- and 8-column ones of 64-byte panels, which
    // `.ci/test` runs with `KILN_LLVM_PANEL_BYTES=64`); `w` in torch's
    // `[out, in]` layout too (lowered as `(w @ x.T).T` when `w` is the
    // larger, `x.T` copied 8 rows at a time: 10 and 17 rows); a bias + ReLU
    // epilogue. Each element's sum is in `k` order on
    // every tier, so the bits are the interpreter's.
    let shapes = [
        (1, 3, 70),
        (3, 5, 64),
        (4, 2, 65),
        (9, 7, 130),
        (13, 1, 33),
        (6, 17, 5),
        (64, 3, 64),
        (70, 2, 97),
        (131, 3, 66),
        (259, 2, 9),
        (10, 40, 70),
        (17, 64, 90),
        // Past a panel's `k` block (32 KiB of it: 128 steps of AVX-512's
        // 256-byte panels, 512 of 64-byte ones, 1024 on Cranelift): in `k`
        // blocks, the sums waiting in the destination between them (last
        // blocks of 76 and of 1 past 1024, of 44 past 128).
        (9, 1100, 70),
        (70, 2049, 20),
        (45, 300, 21),
        // A padded rest block narrower than a panel, its row blocks in
        // stacks of 4 (AVX-512: 6 and 21 columns past the last panel),
        // then the blocks past the last stack, then the rows past them.
        (55, 5, 70),
        (23, 4, 85),
        // `b` dense and exactly one panel wide (64, 32, 16 and 8 columns:
        // f32 and f64 on AVX-512, 64-byte panels, Cranelift's f32), read
        // in place rather than packed, in `k` blocks; with `w` transposed,
        // `x.T`'s dense copy is that `b` (`(w @ x.T).T`: `x` of 64, 32, 16
        // and 8 rows and a larger `w`).
        (70, 130, 64),
        (40, 130, 32),
        (20, 600, 16),
        (12, 1100, 8),
        (64, 130, 130),
        (32, 130, 50),
        (16, 600, 20),
        (8, 1100, 12),
    ];
    use kiln::DType::{F32, F64, I32, I64};
    for (dtype, dt) in [("f32", F32), ("f64", F64), ("i32", I32), ("i64", I64)] {
        for &(m, k, n) in &shapes {
            for transposed in [false, true] {
                matmul_agrees((dtype, dt), (m, k, n), transposed);
            }
        }
    }
}

/// `x @ w` (`w` as written or as the transpose of `[n, k]`), with a bias +
/// ReLU, on every engine against the interpreter: returned, the matmul is
/// stored on its own; not returned, it computes the bias and ReLU as its
/// epilogue (through the result's transpose where it runs as
/// `(w @ x.T).T`).
fn matmul_agrees((dtype, dt): (&str, kiln::DType), (m, k, n): (u64, u64, u64), transposed: bool) {
    let with_raw = matmul_text(dtype, (m, k, n), transposed);
    let alone = with_raw.replace("output \"raw\" = v3\n", "");
    for src in [with_raw, alone] {
        let graph = kiln::ir::text::parse(&src).expect("parses");
        let graph = kiln::verify(graph).expect("verifies");
        let inputs = [values(dt, m * k, 1), values(dt, k * n, 2), values(dt, n, 3)];
        let what = format!("{dtype} {m}×{k}×{n} transposed={transposed}");
        every_engine_agrees(&graph, &inputs, &what);
    }
}

#[test]
fn matmuls_of_a_few_rows_by_a_transposed_weight_agree_with_the_interpreter_bit_for_bit() {
    // `x @ w.T` of 1 to 12 rows (a small batch through a `Linear`): LLVM
    // multiplies up to 8 rows (12 on AVX-512) as written, packing `w.T` in
    // 8 × 8 tiles (4 × 4 of 8-byte elements) it transposes in registers
    // (`LowerOptions::transpose_tiles`), the `k` steps past the last tile
    // and the columns past the last panel one by one; the other tiers, and
    // LLVM past those rows, as `(w @ x.T).T`. `k` of one tile, past the
    // tiles by 1 to 7, and in `k` blocks (784: 512 + 272; 1100: the last
    // block of 76); columns of whole panels and past them; rows of one
    // block of 4, two, three and a rest.
    let shapes = [
        (1, 768, 48),
        (2, 100, 40),
        (3, 37, 16),
        (4, 784, 70),
        (1, 1100, 33),
        (2, 8, 16),
        (4, 9, 130),
        (3, 64, 64),
        (5, 300, 70),
        (8, 768, 130),
        (11, 37, 90),
        (12, 1100, 64),
    ];
    use kiln::DType::{F32, F64, I32, I64};
    for (dtype, dt) in [("f32", F32), ("f64", F64), ("i32", I32), ("i64", I64)] {
        for &(m, k, n) in &shapes {
            matmul_agrees((dtype, dt), (m, k, n), true);
        }
    }
}

#[test]
fn matmuls_whose_rest_columns_run_in_tiles_agree_on_every_thread_count() {
    // The columns past a matrix's last full block, packed once over all of
    // `k`, run in tiles of row groups of their own: all of `(w @ x.T).T`
    // for 13 to 63 rows of `x @ w.T` on AVX-512 (13: past the rows LLVM
    // multiplies as written; 300 steps in `k` blocks), and the 16 past 64
    // of `x @ b` (162 rows: 5 groups of 8 blocks, the 2 rows past the last
    // block in the last).
    // Every loop cut (grain 0), at every tested thread count and with the
    // chunks run last first: each tile writes its own rows.
    kiln::threads::set_grain(0);
    use kiln::DType::{F32, F64};
    for (dtype, dt) in [("f32", F32), ("f64", F64)] {
        for (m, k, n, transposed) in [
            (13, 300, 200, true),
            (40, 72, 150, true),
            (162, 40, 80, false),
        ] {
            let src = matmul_text(dtype, (m, k, n), transposed);
            let graph =
                kiln::verify(kiln::ir::text::parse(&src).expect("parses")).expect("verifies");
            let inputs = [values(dt, m * k, 1), values(dt, k * n, 2), values(dt, n, 3)];
            let want = kiln::interp::run(&graph, &inputs).expect("runs");
            for engine in kiln::engines() {
                let program = engine
                    .compile_dyn(&graph, &CompileOptions::default())
                    .expect("compiles");
                for (mode, got) in kiln::threads::in_tested_modes(|| program.run(&inputs)) {
                    let got = got.expect("runs");
                    assert!(
                        got.iter().zip(&want).all(|(g, w)| g.same_data(w)),
                        "{dtype} {m}×{k}×{n} transposed={transposed} on {} ({mode})",
                        engine.name()
                    );
                }
            }
        }
    }
    kiln::threads::set_grain(kiln::threads::DEFAULT_GRAIN);
}

#[test]
fn matmuls_of_a_few_rows_by_a_large_dense_b_agree_with_the_interpreter_bit_for_bit() {
    // `x @ b` of 1 to 4 rows by a dense `b` past 1 MiB (GPT-2's `Conv1D`
    // at one token): the panel tiers stream `b`, 16 `k` steps a block (8
    // where `k` is not a multiple of 16, 136, or `b`'s rows are a multiple
    // of 4 KiB apart, 1024 columns), each block across a chunk of 2 to 8
    // KiB of `b`'s columns, the sums waiting in `d` between blocks. Chunks
    // of whole panels and the columns past them (a padded rest block), one
    // chunk and several; returned alone and with a bias + ReLU epilogue.
    // `k` past 8 by 4 (1100) reads `b` as before.
    let shapes = [
        (1, 512, 600),
        (4, 1024, 300),
        (3, 136, 2050),
        (2, 256, 4100),
        (2, 264, 1024),
        (1, 1100, 300),
    ];
    use kiln::DType::{F32, F64, I32, I64};
    for (dtype, dt) in [("f32", F32), ("f64", F64), ("i32", I32), ("i64", I64)] {
        for &(m, k, n) in &shapes {
            matmul_agrees((dtype, dt), (m, k, n), false);
        }
    }
}

#[test]
fn matmuls_of_a_transposed_a_agree_with_the_interpreter_bit_for_bit() {
    // `g.T @ x` (a weight gradient's form): where `g.T` has more than 4
    // rows and the product is wider than one panel, the JIT tiers copy
    // `g.T` densely first, 8 of `g`'s rows at a time (`g` of 8, 33 and 3
    // rows: no rows past the blocks, one, no block); else they read it
    // where it is (`g.T` of 4 rows; 16 `f32` columns, one 64-byte panel,
    // which Cranelift's 32-byte panels still copy for).
    let shapes = [
        (12, 8, 40),
        (70, 33, 130),
        (4, 9, 100),
        (64, 10, 16),
        (131, 3, 65),
    ];
    use kiln::DType::{F32, F64, I64};
    for (dtype, dt) in [("f32", F32), ("f64", F64), ("i64", I64)] {
        for (m, k, n) in shapes {
            let src = format!(
                "graph \"at\"\nv0: {dtype}[{k}, {m}] = input \"g\"\n\
                 v1: {dtype}[{k}, {n}] = input \"x\"\n\
                 v2: {dtype}[{m}, {k}] = transpose v0 [1, 0]\n\
                 v3: {dtype}[{m}, {n}] = matmul v2, v1\noutput \"y\" = v3\n"
            );
            let graph =
                kiln::verify(kiln::ir::text::parse(&src).expect("parses")).expect("verifies");
            let inputs = [values(dt, k * m, 1), values(dt, k * n, 2)];
            every_engine_agrees(&graph, &inputs, &format!("{dtype} {k}×{m}.T @ {k}×{n}"));
        }
    }
}

#[test]
fn matmuls_that_stream_a_agree_with_the_interpreter_bit_for_bit() {
    // Where a row group's rows of `a` over all of `k` outgrow L2 (past
    // 2048 `f32` steps or 1024 `f64` for a tile of 128 rows), the JIT
    // tiers' tiles are up to 512 rows × a chunk of column blocks, each `k`
    // block run over every block of the chunk. 9 × 2200 × 300: one row
    // group, chunks of one block (f32 on AVX-512), of one and two (f64),
    // of two to four (64-byte panels, Cranelift's), the rest block after
    // the tiles. 517 × 1100 × 100 in f64: three row groups of 256 rows,
    // the last of one block and a row. Each element still folds its
    // products in `k` order.
    use kiln::DType::{F32, F64};
    for (dtype, dt, shapes) in [
        ("f32", F32, &[(9, 2200, 300)][..]),
        ("f64", F64, &[(9, 2200, 300), (517, 1100, 100)][..]),
    ] {
        for &shape in shapes {
            matmul_agrees((dtype, dt), shape, false);
        }
    }
    // With symbolic rows the groups are counted at run time (up to 512
    // rows each), the tiles wanted as if in one group.
    let (k, n) = (2200, 300);
    let src = matmul_text("f32", (9, k, n), false).replace("[9, ", "[r, ");
    assert!(src.contains("f32[r, 2200]"), "{src}");
    let graph = kiln::verify(kiln::ir::text::parse(&src).expect("parses")).expect("verifies");
    for m in [9, 21] {
        let inputs = [
            values(F32, m * k, 1),
            values(F32, k * n, 2),
            values(F32, n, 3),
        ];
        every_engine_agrees(&graph, &inputs, &format!("f32 r={m}×{k}×{n}"));
    }
}

#[test]
fn matmuls_of_symbolic_rows_agree_with_the_interpreter_bit_for_bit() {
    // A symbolic `m` (a batch Dynamo leaves dynamic): with LLVM's 64-byte
    // panels the rows past the last block of 4 run as one padded block
    // whose stores (and epilogues) only the real rows take, how many known
    // at run time; elsewhere one row at a time. Rows below 4, past blocks
    // by 1 to 3, and at a block's end; `k` in one block and past a panel's
    // `k` block (the sums waiting in the destination); `w` as written and
    // transposed; returned alone and with a bias + ReLU epilogue.
    use kiln::DType::{F32, F64};
    for (dtype, dt) in [("f32", F32), ("f64", F64)] {
        for (k, n) in [(40, 70), (1100, 21)] {
            for transposed in [false, true] {
                let text = matmul_text(dtype, (9, k, n), transposed).replace("[9, ", "[r, ");
                for src in [text.clone(), text.replace("output \"raw\" = v3\n", "")] {
                    let graph = kiln::verify(kiln::ir::text::parse(&src).expect("parses"))
                        .expect("verifies");
                    for m in [1, 2, 3, 5, 6, 7, 8, 135] {
                        let inputs = [values(dt, m * k, 1), values(dt, k * n, 2), values(dt, n, 3)];
                        let what = format!("{dtype} r={m}×{k}×{n} transposed={transposed}");
                        every_engine_agrees(&graph, &inputs, &what);
                    }
                }
            }
        }
    }
}

#[test]
fn elementwise_ops_through_transposes_agree_with_the_interpreter_bit_for_bit() {
    // A transposed input under an elementwise op with a broadcast row: the
    // JIT tiers run such a nest in tiles of 16 rows × every column
    // (`store_all`), with the rows past the last tile after them; below 16
    // rows or columns, and on the VM, row by row. With batch axes in front,
    // and a transpose of a transpose (contiguous again: not tiled).
    let shapes: [&[u64]; 7] = [
        &[16, 16],
        &[17, 33],
        &[40, 20],
        &[15, 64],
        &[64, 15],
        &[3, 20, 18],
        &[2, 2, 33, 16],
    ];
    use kiln::DType::{F32, F64, I64};
    for (dtype, dt) in [("f32", F32), ("f64", F64), ("i64", I64)] {
        for dims in shapes {
            let r = dims.len();
            let show = |d: &[u64]| d.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
            // `x` is stored with its last two axes swapped.
            let mut stored = dims.to_vec();
            stored.swap(r - 2, r - 1);
            let mut perm: Vec<usize> = (0..r).collect();
            perm.swap(r - 2, r - 1);
            let perm = show(&perm.iter().map(|&p| p as u64).collect::<Vec<_>>());
            let last = dims[r - 1];
            let src = format!(
                "graph \"t\"\n\
                 v0: {dtype}[{s}] = input \"x\"\n\
                 v1: {dtype}[{d}] = transpose v0 [{perm}]\n\
                 v2: {dtype}[{last}] = input \"b\"\n\
                 v3: {dtype}[{d}] = mul v1, v1\n\
                 v4: {dtype}[{d}] = add v3, v2\n\
                 v5: {dtype}[{s}] = transpose v4 [{perm}]\n\
                 v6: {dtype}[{s}] = sub v5, v0\n\
                 output \"y\" = v4\n\
                 output \"z\" = v6\n",
                s = show(&stored),
                d = show(dims),
            );
            let graph = kiln::ir::text::parse(&src).expect("parses");
            let graph = kiln::verify(graph).expect("verifies");
            let n: u64 = dims.iter().product();
            let inputs = [values(dt, n, 1), values(dt, last, 2)];
            every_engine_agrees(&graph, &inputs, &format!("{dtype} {dims:?}"));
        }
    }
}

#[test]
fn values_returned_as_reshapes_agree_with_the_interpreter_bit_for_bit() {
    // Activations read by the next layer and returned as reshapes (as
    // aot_autograd saves them for the backward): stored in the first
    // reshape's output, which the second reshape and the second matmul
    // then read; a matmul's result returned reshaped while its epilogue
    // reads it; a reduction returned reshaped with a broadcast of it.
    let src = "graph \"r\"\n\
               v0: f32[8, 5] = input \"x\"\n\
               v1: f32[5, 70] = input \"w\"\n\
               v2: f32[8, 70] = matmul v0, v1\n\
               v3: f32[8, 70] = tanh v2\n\
               v4: f32[70, 3] = input \"w2\"\n\
               v5: f32[8, 3] = matmul v3, v4\n\
               v6: f32[2, 4, 70] = reshape v3\n\
               v7: f32[560] = reshape v3\n\
               v8: f32[8, 3] = mul v5, v5\n\
               v9: f32[24] = reshape v5\n\
               v10: f32[8, 1] = reduce_axes v3 [1] sum keepdim\n\
               v11: f32[8, 70] = sub v3, v10\n\
               v12: f32[8] = reshape v10\n\
               output \"y\" = v8\n\
               output \"saved\" = v6\n\
               output \"flat\" = v7\n\
               output \"raw\" = v9\n\
               output \"centred\" = v11\n\
               output \"sums\" = v12\n";
    let graph = kiln::verify(kiln::ir::text::parse(src).expect("parses")).expect("verifies");
    let inputs = [
        values(kiln::DType::F32, 40, 1),
        values(kiln::DType::F32, 350, 2),
        values(kiln::DType::F32, 210, 3),
    ];
    every_engine_agrees(&graph, &inputs, "reshaped outputs");
}

#[test]
fn matmuls_packing_a_strided_b_agree_with_the_interpreter_bit_for_bit() {
    // `b` a transpose (an LM head's `x @ wte.T`, wider than one column
    // block with a ragged last one, `k` past one block of panel rows), a
    // batched transpose (attention's `q @ k.T`) and a slice with a row
    // stride: each packed by its strides where the tiers pack panels.
    let src = "graph \"strided_b\"\n\
               v0: f32[70, 300] = input \"x\"\n\
               v1: f32[90, 300] = input \"w\"\n\
               v2: f32[300, 90] = transpose v1 [1, 0]\n\
               v3: f32[70, 90] = matmul v0, v2\n\
               v4: f64[2, 3, 9, 5] = input \"q\"\n\
               v5: f64[2, 3, 11, 5] = input \"k\"\n\
               v6: f64[2, 3, 5, 11] = transpose v5 [0, 1, 3, 2]\n\
               v7: f64[2, 3, 9, 11] = matmul v4, v6\n\
               v8: f32[300, 45] = slice v2 [:, 0:90:2]\n\
               v9: f32[70, 45] = matmul v0, v8\n\
               output \"head\" = v3\n\
               output \"scores\" = v7\n\
               output \"every_other\" = v9\n";
    let graph = kiln::verify(kiln::ir::text::parse(src).expect("parses")).expect("verifies");
    let inputs = [
        values(kiln::DType::F32, 70 * 300, 11),
        values(kiln::DType::F32, 90 * 300, 12),
        values(kiln::DType::F64, 2 * 3 * 9 * 5, 13),
        values(kiln::DType::F64, 2 * 3 * 11 * 5, 14),
    ];
    every_engine_agrees(&graph, &inputs, "strided b");
}

#[test]
fn cheap_nodes_computed_in_several_loops_agree_with_the_interpreter_bit_for_bit() {
    // `log_softmax` (`x - max` read by the stored `exp` and by the result)
    // and a layer norm (`x - mean` read by the variance's square and by the
    // result, beside a scale and a shift): each such node is computed in
    // every loop that reads it, on rows long enough for vector loops,
    // threads' chunks and panels.
    let src = "graph \"shared\"\n\
               v0: f32[6, 300] = input \"x\"\n\
               v1: f32[6, 1] = reduce_axes v0 [1] reduce_max keepdim\n\
               v2: f32[6, 300] = sub v0, v1\n\
               v3: f32[6, 300] = exp v2\n\
               v4: f32[6, 1] = reduce_axes v3 [1] sum keepdim\n\
               v5: f32[6, 1] = log v4\n\
               v6: f32[6, 300] = sub v2, v5\n\
               v7: f32[6, 1] = reduce_axes v0 [1] mean keepdim\n\
               v8: f32[6, 300] = sub v0, v7\n\
               v9: f32[6, 300] = mul v8, v8\n\
               v10: f32[6, 1] = reduce_axes v9 [1] mean keepdim\n\
               v11: f32 = const 0.00001\n\
               v12: f32[6, 1] = add v10, v11\n\
               v13: f32[6, 1] = sqrt v12\n\
               v14: f32[300] = input \"gamma\"\n\
               v15: f32[6, 300] = div v8, v13\n\
               v16: f32[6, 300] = mul v15, v14\n\
               output \"log_softmax\" = v6\n\
               output \"layer_norm\" = v16\n";
    let graph = kiln::verify(kiln::ir::text::parse(src).expect("parses")).expect("verifies");
    let inputs = [
        values(kiln::DType::F32, 1800, 4),
        values(kiln::DType::F32, 300, 5),
    ];
    every_engine_agrees(&graph, &inputs, "shared nodes");
}

/// A convolution of the given geometry and dtype, with a per-channel bias
/// and ReLU as its epilogue: `(n, c_in, c_out, groups, [h, w], [kh, kw],
/// stride, [top, bottom, left, right], dilation)`.
#[allow(clippy::type_complexity)]
fn conv_text(
    dtype: &str,
    (n, ci, co, groups, [h, w], [kh, kw], [sh, sw], [t, b, l, r], [dh, dw]): (
        u64,
        u64,
        u64,
        u64,
        [u64; 2],
        [u64; 2],
        [u64; 2],
        [u64; 4],
        [u64; 2],
    ),
) -> (String, [u64; 3]) {
    let oh = (h + t + b - dh * (kh - 1) - 1) / sh + 1;
    let ow = (w + l + r - dw * (kw - 1) - 1) / sw + 1;
    let text = format!(
        "graph \"conv\"\nv0: {dtype}[{n}, {ci}, {h}, {w}] = input \"x\"\n\
         v1: {dtype}[{co}, {}, {kh}, {kw}] = input \"w\"\n\
         v2: {dtype}[{n}, {co}, {oh}, {ow}] = conv2d v0, v1 stride [{sh}, {sw}] pad [{t}, {b}, {l}, {r}] dilation [{dh}, {dw}] groups {groups}\n\
         v3: {dtype}[{co}, 1, 1] = input \"b\"\n\
         v4: {dtype}[{n}, {co}, {oh}, {ow}] = add v2, v3\n\
         v5: {dtype} = const 0\n\
         v6: {dtype}[{n}, {co}, {oh}, {ow}] = max v4, v5\n\
         output \"y\" = v6\noutput \"raw\" = v2\n",
        ci / groups
    );
    (text, [n * ci * h * w, co * (ci / groups) * kh * kw, co])
}

#[test]
fn convolutions_as_matmul_panels_agree_with_the_interpreter_bit_for_bit() {
    // Enough output channels per group (8 and more) that the LLVM tier runs
    // the convolution as matmul panels over its taps (`conv2d_panels`):
    // 1×1, 3×3 and 7×7 kernels, strides, dilations, asymmetric padding,
    // groups, a batch of 2, channel counts past the 4-row blocks, planes
    // below, at and past a panel's columns, `k` blocks; with the bias +
    // ReLU epilogue and without (the convolution stored on its own). Each
    // element folds its taps in (input channel, kernel row, kernel column)
    // order.
    let shapes = [
        (1, 3, 8, 1, [9, 9], [3, 3], [1, 1], [1, 1, 1, 1], [1, 1]),
        (2, 5, 12, 1, [6, 7], [1, 1], [1, 1], [0, 0, 0, 0], [1, 1]),
        (1, 3, 9, 1, [16, 14], [7, 7], [2, 2], [3, 3, 3, 3], [1, 1]),
        (2, 4, 16, 2, [11, 5], [3, 2], [2, 1], [1, 0, 2, 1], [2, 1]),
        (1, 6, 10, 1, [3, 3], [3, 3], [1, 1], [1, 1, 1, 1], [1, 1]),
        (1, 2, 24, 1, [20, 17], [3, 3], [1, 2], [0, 1, 1, 0], [1, 1]),
        (1, 16, 8, 1, [1, 1], [1, 1], [1, 1], [0, 0, 0, 0], [1, 1]),
        // More taps than a `k` block holds: blocks of 113 input channels
        // of 9 taps (1017 steps), and of 1024 channels of one tap.
        (1, 120, 8, 1, [5, 6], [3, 3], [1, 1], [1, 1, 1, 1], [1, 1]),
        (2, 1100, 9, 1, [3, 2], [1, 1], [1, 1], [0, 0, 0, 0], [1, 1]),
        // A batch of small planes (a quarter of a panel's columns or
        // fewer): one matmul over every element's positions, gathered
        // first (`conv2d_columns`): 2×2 outputs of 3×3 taps, `k` blocks,
        // stride 2, groups, dilation, a 1×1 kernel.
        (4, 24, 16, 1, [2, 2], [3, 3], [1, 1], [1, 1, 1, 1], [1, 1]),
        (3, 130, 8, 1, [2, 2], [3, 3], [1, 1], [1, 1, 1, 1], [1, 1]),
        (2, 6, 10, 1, [4, 3], [3, 3], [2, 2], [1, 1, 1, 1], [1, 1]),
        (3, 8, 16, 2, [3, 3], [1, 1], [1, 1], [0, 0, 0, 0], [1, 1]),
        (2, 4, 8, 1, [5, 5], [2, 2], [1, 1], [0, 0, 0, 0], [3, 3]),
        (5, 12, 9, 1, [1, 2], [1, 1], [1, 1], [0, 0, 0, 0], [1, 1]),
        // 64 gathered columns, `k` long enough to stream `a`: AVX-512's
        // f32 panel width (read in place), two f64 blocks.
        (4, 520, 16, 1, [4, 4], [3, 3], [1, 1], [1, 1, 1, 1], [1, 1]),
    ];
    use kiln::DType::{F32, F64, I32};
    for (dtype, dt) in [("f32", F32), ("f64", F64), ("i32", I32)] {
        for &shape in &shapes {
            let (with_raw, [nx, nw, nb]) = conv_text(dtype, shape);
            let alone = with_raw.replace("output \"raw\" = v2\n", "");
            // Also the weights as strided views, which the panels read by
            // their strides, `k` as (input channel, kernel row, kernel
            // column): a transpose of `[c_in, c_out, kh, kw]` with one
            // group (as a gradient's are), and of `[c_out, c_in / groups,
            // kw, kh]` with any.
            let (_, ci, co, groups, _, [kh, kw], ..) = shape;
            let cg = ci / groups;
            let weights = format!("v1: {dtype}[{co}, {cg}, {kh}, {kw}] = input \"w\"\n");
            let view = |stored: String, perm: &str| {
                let src = alone.replace(
                    &weights,
                    &format!(
                        "v10: {dtype}[{stored}] = input \"w\"\n\
                         v1: {dtype}[{co}, {cg}, {kh}, {kw}] = transpose v10 [{perm}]\n"
                    ),
                );
                assert!(src.contains("transpose v10"), "{src}");
                src
            };
            let swapped =
                (groups == 1).then(|| view(format!("{ci}, {co}, {kh}, {kw}"), "1, 0, 2, 3"));
            let turned = view(format!("{co}, {cg}, {kw}, {kh}"), "0, 1, 3, 2");
            for src in [with_raw, alone, turned].into_iter().chain(swapped) {
                let graph = kiln::ir::text::parse(&src).expect("parses");
                let graph = kiln::verify(graph).expect("verifies");
                let inputs = [values(dt, nx, 1), values(dt, nw, 2), values(dt, nb, 3)];
                every_engine_agrees(&graph, &inputs, &format!("{dtype} {shape:?}"));
            }
        }
    }
}
