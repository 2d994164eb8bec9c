//! Tensors: 256×256×256 and 512×512×512 f32 matmuls, a transformer's
//! `Linear(768, 3072)` on 128 rows (its weight an input, as torch.compile
//! passes it, in torch's `[out, in]` layout and pre-transposed) and on
//! ViT-B/16's 197 tokens (torch's layout), a batch-64
//! MLP forward (784→256→10, ReLU) and one 3×3 convolution layer of
//! ResNet-18 (64→64 channels at 56×56, padding 1), on the VM, the Cranelift tier and (with the `llvm`
//! feature) the LLVM tier, against the naive triple loop in C at `-O3`
//! (`benches/c/tensor.c`, same summation order) and the machine's measured
//! peak f32 FLOP/s: independent FMAs (`-O3 -march=native`), and independent
//! multiplies and adds (`-ffp-contract=off`), the bound of kiln's semantics,
//! which round each product and each sum. All in this run.
//!
//! `cargo bench -p kiln --features llvm --bench tensor`
//!
//! `KILN_BENCH_TIERS=llvm` (a comma-separated list) measures only those
//! tiers; `KILN_BENCH_LINEAR` picks the `Linear` layers ([`linear_shapes`]),
//! `KILN_BENCH_COLD=1` gives each of their calls a weight from memory, and
//! `KILN_BENCH_AB` compares variants of a lowering call by call
//! ([`interleaved`]); `KILN_BENCH_BEST=1` reports the fastest of three
//! times as many calls rather than the median, which a noisy machine
//! disturbs least.
//! Set `KILN_NUM_THREADS=1` for one thread's figures (the kernels use
//! every core by default).

use kiln::ir::{Builder, CmpOp, Op, TensorConst};
use kiln::{
    Buffer, CompileOptions, DType, Data, Dim, Engine, Graph, JitProgram, Program, Scalar,
    TensorType, Type,
};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

fn filled(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
        .collect()
}

fn tensor(dims: &[u64]) -> Type {
    Type::Tensor(TensorType {
        dtype: DType::F32,
        shape: dims.iter().map(|&d| Dim::Fixed(d)).collect(),
    })
}

fn matmul_graph(n: u64) -> Graph {
    let mut b = Builder::new("matmul");
    let x = b.input("a", tensor(&[n, n]));
    let y = b.input("b", tensor(&[n, n]));
    let c = b.op(Op::MatMul, &[x, y]).unwrap();
    b.output("c", c);
    b.finish()
}

/// `x @ w.T + bias` (torch's `Linear` as aot_autograd writes it, `addmm(b,
/// x, t(w))`, the weight `[out, in]`), or `x @ w + bias` with `w` given
/// `[in, out]`; every operand an input.
fn linear_graph(rows: u64, inp: u64, out: u64, torch_layout: bool) -> Graph {
    let mut b = Builder::new("linear");
    let x = b.input("x", tensor(&[rows, inp]));
    let w = if torch_layout {
        let w = b.input("w", tensor(&[out, inp]));
        b.op(Op::Transpose(vec![1, 0]), &[w]).unwrap()
    } else {
        b.input("w", tensor(&[inp, out]))
    };
    let bias = b.input("bias", tensor(&[out]));
    let y = b.op(Op::MatMul, &[x, w]).unwrap();
    let y = b.binary(kiln::ir::BinaryOp::Add, y, bias).unwrap();
    b.output("y", y);
    b.finish()
}

/// The `Linear` layers measured: `KILN_BENCH_LINEAR` as `ROWS,IN,OUT,t`
/// (`t` torch's `[out, in]` weight, `p` pre-transposed `[in, out]`)
/// separated by `;` (ViT-B/16's four: `197,768,2304,t;197,768,768,t;
/// 197,768,3072,t;197,3072,768,t`), else `Linear(768, 3072)` on 128 rows in
/// both layouts and on 197 rows in torch's.
fn linear_shapes() -> Vec<(u64, u64, u64, bool)> {
    let Ok(spec) = std::env::var("KILN_BENCH_LINEAR") else {
        return vec![
            (128, 768, 3072, true),
            (128, 768, 3072, false),
            (197, 768, 3072, true),
        ];
    };
    spec.split(';')
        .map(|shape| {
            let parts: Vec<&str> = shape.trim().split(',').collect();
            let dim = |i: usize| -> u64 {
                parts
                    .get(i)
                    .and_then(|p| p.trim().parse().ok())
                    .unwrap_or_else(|| {
                        panic!("KILN_BENCH_LINEAR: {shape:?} is not ROWS,IN,OUT,t|p")
                    })
            };
            let torch_layout = match parts.get(3).map(|p| p.trim()) {
                Some("t") => true,
                Some("p") => false,
                _ => panic!("KILN_BENCH_LINEAR: {shape:?} is not ROWS,IN,OUT,t|p"),
            };
            (dim(0), dim(1), dim(2), torch_layout)
        })
        .collect()
}

fn constant(b: &mut Builder, dims: &[u64]) -> kiln::ir::Value {
    let n = dims.iter().product::<u64>() as usize;
    let values = filled(n).into_iter().map(Scalar::F32).collect();
    let t = TensorConst {
        dtype: DType::F32,
        dims: dims.to_vec(),
        values,
    };
    b.op(Op::Tensor(Arc::new(t)), &[]).unwrap()
}

fn mlp_graph(batch: u64) -> Graph {
    let mut b = Builder::new("mlp");
    let x = b.input("x", tensor(&[batch, 784]));
    let w1 = constant(&mut b, &[784, 256]);
    let b1 = constant(&mut b, &[256]);
    let w2 = constant(&mut b, &[256, 10]);
    let b2 = constant(&mut b, &[10]);
    let h = b.op(Op::MatMul, &[x, w1]).unwrap();
    let h = b.binary(kiln::ir::BinaryOp::Add, h, b1).unwrap();
    let zero = b.constant(Scalar::F32(0.0));
    let pos = b.compare(CmpOp::Gt, h, zero).unwrap();
    let h = b.select(pos, h, zero).unwrap();
    let y = b.op(Op::MatMul, &[h, w2]).unwrap();
    let y = b.binary(kiln::ir::BinaryOp::Add, y, b2).unwrap();
    b.output("y", y);
    b.finish()
}

/// ResNet-18's second 3×3 layer: `conv2d(x, w)` of `[1, 64, 56, 56]` with
/// constant `[64, 64, 3, 3]` weights, padding 1.
fn conv_graph() -> Graph {
    let mut b = Builder::new("conv");
    let x = b.input("x", tensor(&[1, 64, 56, 56]));
    let w = constant(&mut b, &[64, 64, 3, 3]);
    let attrs = kiln::ir::Conv2d {
        padding: [1; 4],
        ..kiln::ir::Conv2d::default()
    };
    let y = b.op(Op::Conv2d(attrs), &[x, w]).unwrap();
    b.output("y", y);
    b.finish()
}

fn median_ns(program: &JitProgram, inputs: &[Data], reps: usize) -> f64 {
    median_ns_of(program, std::slice::from_ref(&inputs.to_vec()), reps)
}

/// [`median_ns`] with call `i` on `sets[i % sets.len()]`.
fn median_ns_of(program: &JitProgram, sets: &[Vec<Data>], reps: usize) -> f64 {
    program.run(&sets[0]).unwrap();
    // `KILN_BENCH_BEST=1`: the fastest call of three times as many.
    let best = std::env::var("KILN_BENCH_BEST").is_ok_and(|v| v == "1");
    let reps = if best { reps * 3 } else { reps };
    let mut ts: Vec<f64> = (0..reps)
        .map(|i| {
            let inputs = &sets[i % sets.len()];
            let t0 = Instant::now();
            std::hint::black_box(program.run(inputs).unwrap());
            t0.elapsed().as_secs_f64() * 1e9
        })
        .collect();
    ts.sort_by(f64::total_cmp);
    if best {
        ts[0]
    } else {
        ts[reps / 2]
    }
}

fn c_tool(flags: &[&str], out: &str) -> Option<std::path::PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/c/tensor.c");
    let out = std::env::temp_dir().join(out);
    let ok = std::process::Command::new("cc")
        .args(flags)
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .status()
        .ok()?
        .success();
    ok.then_some(out)
}

fn c_run(tool: &Path, args: &[&str]) -> Option<f64> {
    let out = std::process::Command::new(tool).args(args).output().ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

fn compile(graph: &Graph) -> Vec<(&'static str, JitProgram)> {
    let graph = kiln::verify(graph.clone()).unwrap();
    let options = CompileOptions::default();
    let mut tiers = Vec::new();
    // `KILN_BENCH_TIERS=llvm,cranelift`: only those tiers (all by default).
    let wanted = std::env::var("KILN_BENCH_TIERS").ok();
    let wants = |tier: &str| {
        wanted
            .as_deref()
            .is_none_or(|w| w.split(',').any(|t| t == tier))
    };
    let mut timed = |tier: &'static str, label: &str, compile: &dyn Fn() -> JitProgram| {
        if wants(tier) {
            let t0 = Instant::now();
            let program = compile();
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            println!("  compile {label:<9} {ms:8.2} ms");
            tiers.push((tier, program));
        }
    };
    timed("vm", "vm", &|| kiln::Vm.compile(&graph, &options).unwrap());
    timed("cranelift", "cranelift", &|| {
        kiln::Cranelift.compile(&graph, &options).unwrap()
    });
    #[cfg(feature = "llvm")]
    timed("llvm", "llvm O3", &|| {
        kiln::Llvm.compile(&graph, &options).unwrap()
    });
    tiers
}

/// `KILN_BENCH_AB=NAME=A,B,...`: the graph compiled on the LLVM tier (else
/// Cranelift) once with the environment variable `NAME` set to each value
/// (`-`: unset),
/// then calls to each in turn, 99 rounds: the best and the first quartile
/// of each, GFLOP/s. A noisy machine's slow spells then fall on every
/// variant alike (a variable a lowering reads while experimenting).
fn interleaved(ab: &str, graph: &Graph, sets: &[Vec<Data>], flops: f64) {
    let (name, values) = ab.split_once('=').expect("KILN_BENCH_AB is NAME=A,B,...");
    let graph = kiln::verify(graph.clone()).unwrap();
    let options = CompileOptions::default();
    let programs: Vec<(&str, JitProgram)> = values
        .split(',')
        .map(|v| {
            if v == "-" {
                std::env::remove_var(name);
            } else {
                std::env::set_var(name, v);
            }
            #[cfg(feature = "llvm")]
            let program = kiln::Llvm.compile(&graph, &options).unwrap();
            #[cfg(not(feature = "llvm"))]
            let program = kiln::Cranelift.compile(&graph, &options).unwrap();
            program.run(&sets[0]).unwrap();
            (v, program)
        })
        .collect();
    std::env::remove_var(name);
    let mut times = vec![Vec::new(); programs.len()];
    for round in 0..99 {
        let inputs = &sets[round % sets.len()];
        for (ts, (_, program)) in times.iter_mut().zip(&programs) {
            let t0 = Instant::now();
            std::hint::black_box(program.run(inputs).unwrap());
            ts.push(t0.elapsed().as_secs_f64() * 1e9);
        }
    }
    for (ts, (value, _)) in times.iter_mut().zip(&programs) {
        ts.sort_by(f64::total_cmp);
        println!(
            "  {name}={value:<6} best {:7.2} GFLOP/s, first quartile {:7.2}",
            flops / ts[0],
            flops / ts[ts.len() / 4]
        );
    }
}

/// The measured peaks: with FMAs, and with separate multiplies and adds.
type Peaks = (Option<f64>, Option<f64>);

fn report(name: &str, ns: f64, flops: f64, (peak, plain): Peaks) {
    let gflops = flops / ns;
    let share = |p: Option<f64>, what: &str| {
        p.map_or(String::new(), |p| {
            format!(", {:5.1} % of {what}", gflops / p * 100.0)
        })
    };
    let share = share(peak, "peak") + &share(plain, "no-FMA peak");
    println!(
        "  {name:<22} {:10.1} µs  {gflops:7.2} GFLOP/s{share}",
        ns / 1e3
    );
}

fn main() {
    let measure = |flags: &[&str], out| c_tool(flags, out).and_then(|t| c_run(&t, &["peak"]));
    let peak = measure(&["-O3", "-march=native", "-DPEAK"], "kiln-peak");
    let plain = measure(
        &["-O3", "-march=native", "-ffp-contract=off", "-DPEAK"],
        "kiln-peak-plain",
    );
    match (peak, plain) {
        (Some(p), Some(q)) => println!(
            "peak: {p:.1} GFLOP/s f32 (independent FMAs, -O3 -march=native, one core); \
             {q:.1} without FMA (-ffp-contract=off: kiln's bound)"
        ),
        _ => println!("peak: not measured (no C compiler)"),
    }
    let peak = (peak, plain);
    let naive = c_tool(&["-O3"], "kiln-tensor-c");

    for (n, reps) in [(256u64, 21), (512, 11)] {
        println!(
            "matmul {n}×{n}×{n} f32 ({:.1} MFLOP):",
            2.0 * (n * n * n) as f64 / 1e6
        );
        let flops = 2.0 * (n * n * n) as f64;
        let a = Data::Column(Buffer::F32(filled((n * n) as usize)));
        let b = Data::Column(Buffer::F32(filled((n * n) as usize)));
        for (tier, program) in compile(&matmul_graph(n)) {
            // The VM takes a tenth of a second a call at 512.
            let reps = if tier == "vm" { reps.min(3) } else { reps };
            report(
                &format!("kiln {tier}"),
                median_ns(&program, &[a.clone(), b.clone()], reps),
                flops,
                peak,
            );
        }
        // The naive C loop takes seconds past 256.
        if let Some(ns) = naive
            .as_ref()
            .filter(|_| n == 256)
            .and_then(|t| c_run(t, &["matmul", "256", "21"]))
        {
            report("C naive loop, -O3", ns, flops, peak);
        }
    }

    // 128 rows, then ViT-B/16's 197 tokens (whose `(w @ x.T).T` has 5
    // columns past its third panel), with torch's weight only; or the
    // shapes of `KILN_BENCH_LINEAR`.
    for (rows, inp, outs, torch_layout) in linear_shapes() {
        let flops = 2.0 * (rows * inp * outs) as f64;
        let x = Data::Column(Buffer::F32(filled((rows * inp) as usize)));
        let bias = Data::Column(Buffer::F32(filled(outs as usize)));
        // `KILN_BENCH_COLD=1`: a weight of its own for each call, from 512
        // MiB of them, so that every call reads its weight from memory, as
        // a model's layers do.
        let cold = std::env::var("KILN_BENCH_COLD").is_ok_and(|v| v == "1");
        let copies = if cold {
            ((512u64 << 20) / (inp * outs * 4)).max(2)
        } else {
            1
        };
        let sets: Vec<Vec<Data>> = (0..copies)
            .map(|_| {
                let w = Data::Column(Buffer::F32(filled((inp * outs) as usize)));
                vec![x.clone(), w, bias.clone()]
            })
            .collect();
        let layout = if torch_layout {
            "[out, in] (torch's)"
        } else {
            "[in, out]"
        };
        println!(
            "Linear({inp}, {outs}) on {rows} rows, weight {layout} ({:.1} MFLOP):",
            flops / 1e6
        );
        if let Ok(ab) = std::env::var("KILN_BENCH_AB") {
            interleaved(
                &ab,
                &linear_graph(rows, inp, outs, torch_layout),
                &sets,
                flops,
            );
            continue;
        }
        for (tier, program) in compile(&linear_graph(rows, inp, outs, torch_layout)) {
            let reps = if tier == "vm" { 3 } else { 11 };
            report(
                &format!("kiln {tier}"),
                median_ns_of(&program, &sets, reps),
                flops,
                peak,
            );
        }
    }

    let batch = 64u64;
    let flops = 2.0 * (batch * 784 * 256 + batch * 256 * 10) as f64;
    println!(
        "MLP forward, batch {batch}, 784→256→10 ({:.1} MFLOP):",
        flops / 1e6
    );
    let x = Data::Column(Buffer::F32(filled((batch * 784) as usize)));
    for (tier, program) in compile(&mlp_graph(batch)) {
        report(
            &format!("kiln {tier}"),
            median_ns(&program, std::slice::from_ref(&x), 21),
            flops,
            peak,
        );
    }
    if let Some(ns) = naive.as_ref().and_then(|t| c_run(t, &["mlp", "64", "21"])) {
        report("C naive loops, -O3", ns, flops, peak);
    }

    let flops = 2.0 * (64 * 56 * 56 * 64 * 9) as f64;
    println!(
        "conv2d 3×3, 64→64 channels at 56×56, padding 1 ({:.1} MFLOP):",
        flops / 1e6
    );
    let x = Data::Column(Buffer::F32(filled(64 * 56 * 56)));
    for (tier, program) in compile(&conv_graph()) {
        report(
            &format!("kiln {tier}"),
            median_ns(&program, std::slice::from_ref(&x), 11),
            flops,
            peak,
        );
    }
}
