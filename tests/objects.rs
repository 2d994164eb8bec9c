//! Objects from the Cranelift tier and (with the `llvm` feature) the LLVM tier
//! at -O3, linked with a generated C `main` and run: natively on x86-64, under
//! qemu-user on AArch64 and RISC-V 64. Every output must match the interpreter
//! bit for bit.
//!
//! Needs `cc`, `aarch64-linux-gnu-gcc`, `riscv64-linux-gnu-gcc`, `qemu-aarch64`,
//! `qemu-riscv64` (`.ci/run` installs them). Without them the cross targets are
//! skipped with a message, except under `CI=true`, where that is a failure.

use kiln::kernel::{header, Kernel, Param};
use kiln::{Buffer, Data, Format, Scalar};
use std::path::{Path, PathBuf};
use std::process::Command;

struct Case {
    src: &'static str,
    format: Format,
    inputs: Vec<Data>,
    /// Lower with `bool` columns packed as bitmaps (`LowerOptions::packed_bools`).
    packed: bool,
}

fn cases() -> Vec<Case> {
    let f64s = |v: &[f64]| Data::Column(Buffer::F64(v.to_vec()));
    let i64s = |v: &[i64]| Data::Column(Buffer::I64(v.to_vec()));
    vec![
        Case {
            format: Format::Py,
            src: "def f(x: float, y: float): return sqrt(x) * y + x % y - min(x, y) + x ** 2.0",
            inputs: vec![
                Data::Scalar(Scalar::F64(2.5)),
                Data::Scalar(Scalar::F64(-0.75)),
            ],
            packed: false,
        },
        Case {
            format: Format::Py,
            src: "def g(x: float): return floor(x), x // 0.1, round(x) > 2.0",
            inputs: vec![Data::Scalar(Scalar::F64(2.5))],
            packed: false,
        },
        Case {
            format: Format::Py,
            src: "def d(a: i64[n], b: i64[n]): return a // b, a % b, sum(a), a >> b",
            inputs: vec![i64s(&[7, -7, i64::MIN, 5]), i64s(&[2, 2, -1, 70])],
            packed: false,
        },
        Case {
            format: Format::Py,
            src: "def d(a: i64[n], b: i64[n]): return a // b",
            inputs: vec![i64s(&[7, -7]), i64s(&[2, 0])],
            packed: false,
        },
        Case {
            format: Format::Py,
            src: "def s(x: f32[n], t: f32): return filter(x > t), x * t, mean(x), max(x)",
            inputs: vec![
                Data::Column(Buffer::F32(vec![0.5, 3.0, -0.0, 7.25, f32::NAN])),
                Data::Scalar(Scalar::F32(1.5)),
            ],
            packed: false,
        },
        Case {
            format: Format::Py,
            src: "def w(p: bool[n], k: i32[n]): return where(p, k << 3, -k), len(k), ~p",
            inputs: vec![
                Data::Column(Buffer::Bool(vec![true, false, true])),
                Data::Column(Buffer::I32(vec![1, i32::MIN, -3])),
            ],
            packed: false,
        },
        // Inline math (`kernel::math`): no call to the platform's libm, so
        // the bits are the `libm` crate's on every ISA at ordinary inputs
        // (sin and cos from 2^20·pi/2 on, and pow's special cases, call the
        // platform's).
        Case {
            format: Format::Py,
            src: "def t(x: float[n]): return exp(x), exp(-x) * 2.0, log(x), log(x * 1e-310), sin(x), cos(x * 3.0), expm1(x), expm1(x * 0.01), tanh(x), tanh(x * 0.1), erf(x * 0.5), erfc(x * 0.5), sinh(x), cosh(x * 0.5), log1p(x), log1p(x * 1e-5), log2(x), log10(x), tan(x), tan(x * 3.0), atan(x), asin(x * 0.01), acos(x * 0.01), asinh(x), acosh(x + 1.0), atanh(x * 0.01), pow(x, 1.7), pow(-x, 3.0), atan2(x, x * 0.5 - 1.0), hypot(x, 3.0), exp2(x), exp2(x * -4.1), cbrt(x), cbrt(x * 1e-310)",
            inputs: vec![f64s(&[
                0.3,
                -2.5,
                1.0,
                100.0,
                -745.5,
                -740.0,
                709.9,
                709.7,
                1e-300,
                -0.0,
                f64::INFINITY,
                f64::NAN,
                0.34657359027997264,
                3.0e5,
                -std::f64::consts::FRAC_PI_2,
            ])],
            packed: false,
        },
        Case {
            format: Format::Py,
            src: "def u(x: f32[n]): return exp(x), log(x), exp(x * -3.0), sin(x), cos(x * 3.0), expm1(x), tanh(x), tanh(x * 0.1), erf(x), erfc(x * 0.5), sinh(x), cosh(x), log1p(x), log2(x), log10(x), tan(x), tan(x * 3.0), atan(x), asin(x * 0.01), acos(x * 0.01), asinh(x), acosh(x + 1.0), atanh(x * 0.01), cbrt(x), pow(x, 1.7), pow(-x, 3.0), atan2(x, 2.0), hypot(x, x * 0.5), exp2(x), exp2(x * -1.3)",
            inputs: vec![Data::Column(Buffer::F32(vec![
                0.3,
                -2.5,
                1.0,
                88.8,
                -104.5,
                -95.0,
                1e-40,
                -0.0,
                f32::INFINITY,
                f32::NAN,
                -1.0,
            ]))],
            packed: false,
        },
        Case {
            format: Format::Py,
            src: "def e(x: float[n]): return x * 2.0, sum(x)",
            inputs: vec![f64s(&[])],
            packed: false,
        },
        Case {
            format: Format::Py,
            src: "def m(p: bool[n], q: bool[n], x: float[n]): return filter(p & ~q), where(p | q, x, -x)",
            inputs: vec![
                Data::Column(Buffer::Bool((0..11).map(|i| i % 3 == 0).collect())),
                Data::Column(Buffer::Bool((0..11).map(|i| i % 2 == 0).collect())),
                f64s(&[0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]),
            ],
            packed: true,
        },
        Case {
            // Loop nests: a matmul in panels (its rows in blocks of 4 and the
            // rest, its 5 columns a partial panel, `b` packed), a fused bias + ReLU,
            // transpose and slice as strided views, concat, a reduction over
            // an axis, and a scratch buffer.
            format: Format::Kiln,
            src: "v0: f32[n, 3] = input \"a\"
v1: f32[3, 5] = tensor 0.5, -1.0, 2.0, 0.25, -3.0, 1.5, 0.0, -0.5, 4.0, 1.0, -2.0, 3.0, 0.75, -1.25, 2.5
v2: f32[n, 5] = matmul v0, v1
v3: f32[5] = tensor 0.1, -0.2, 0.3, -0.4, 0.5
v4: f32[n, 5] = add v2, v3
v5: f32 = const 0.0
v6: f32[n, 5] = max v4, v5
v7: f32[5, n] = transpose v6 [1, 0]
v8: f32[n] = reduce_axes v6 [1] sum
v9: f32[n, 2] = slice v6 [:, 1:5:2]
v10: f32[n, 7] = concat v6, v9 [1]
output \"t\" = v7
output \"s\" = v8
output \"cat\" = v10
",
            inputs: vec![Data::Column(Buffer::F32(
                (0..18).map(|i| (i as f32 - 7.5) * 0.375).collect(),
            ))],
            packed: false,
        },
        Case {
            // A few rows by a transposed weight (`x @ w.T`, a batch-2 and
            // a batch-3 `Linear`): `w.T` packed in 8 × 8 tiles (4 × 4 of
            // `f64`) transposed in vectors, the `k` steps past the last
            // tile one by one.
            format: Format::Kiln,
            src: "v0: f32[2, 20] = input \"x\"
v1: f32[64, 20] = input \"w\"
v2: f32[20, 64] = transpose v1 [1, 0]
v3: f32[2, 64] = matmul v0, v2
v4: f64[3, 9] = input \"y\"
v5: f64[32, 9] = input \"v\"
v6: f64[9, 32] = transpose v5 [1, 0]
v7: f64[3, 32] = matmul v4, v6
output \"a\" = v3
output \"b\" = v7
",
            inputs: vec![
                Data::Column(Buffer::F32((0..40).map(|i| (i as f32 - 19.5) * 0.125).collect())),
                Data::Column(Buffer::F32(
                    (0..1280).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.0625).collect(),
                )),
                f64s(&(0..27).map(|i| (f64::from(i) - 13.0) * 0.3).collect::<Vec<_>>()),
                f64s(&(0..288).map(|i| (f64::from(i * 29 % 97) - 48.0) * 0.1).collect::<Vec<_>>()),
            ],
            packed: false,
        },
        Case {
            // A small CNN, as importers write one: a strided convolution
            // with asymmetric padding and a bias, ReLU, a depthwise dilated
            // convolution, max pooling with ceil_mode and padding, average
            // pooling counting and not counting the padding, and global
            // average pooling; the batch is symbolic.
            format: Format::Kiln,
            src: "v0: f32[n, 2, 6, 5] = input \"x\"
v1: f32[3, 2, 3, 3] = tensor -1.0, -0.625, -0.25, 0.125, 0.5, 0.875, -0.875, -0.5, -0.125, 0.25, 0.625, 1.0, -0.75, -0.375, 0.0, 0.375, 0.75, -1.0, -0.625, -0.25, 0.125, 0.5, 0.875, -0.875, -0.5, -0.125, 0.25, 0.625, 1.0, -0.75, -0.375, 0.0, 0.375, 0.75, -1.0, -0.625, -0.25, 0.125, 0.5, 0.875, -0.875, -0.5, -0.125, 0.25, 0.625, 1.0, -0.75, -0.375, 0.0, 0.375, 0.75, -1.0, -0.625, -0.25
v2: f32[n, 3, 3, 3] = conv2d v0, v1 stride [2, 2] pad [1, 0, 1, 1]
v3: f32[3, 1, 1] = tensor 0.5, -0.25, 0.125
v4: f32[n, 3, 3, 3] = add v2, v3
v5: f32 = const 0.0
v6: f32[n, 3, 3, 3] = max v4, v5
v7: f32[6, 1, 2, 1] = tensor -1.5, 0.5, -1.0, 1.0, -0.5, 1.5, 0.0, -1.5, 0.5, -1.0, 1.0, -0.5
v8: f32[n, 6, 2, 3] = conv2d v6, v7 pad [1, 0, 0, 0] dilation [2, 1] groups 3
v9: f32[n, 6, 2, 2] = max_pool2d v8 kernel [2, 2] stride [2, 2] pad [1, 1, 1, 1] ceil_mode
v10: f32[n, 3, 2, 2] = avg_pool2d v6 kernel [2, 2] stride [2, 2] pad [1, 1, 1, 1] count_include_pad
v11: f32[n, 3, 2, 2] = avg_pool2d v6 kernel [3, 2] stride [2, 2] pad [1, 1, 0, 0] ceil_mode
v12: f32[n, 6, 1, 1] = reduce_axes v8 [2, 3] mean keepdim
output \"max\" = v9
output \"avg\" = v10
output \"avg_ceil\" = v11
output \"global\" = v12
",
            inputs: vec![Data::Column(Buffer::F32(
                (0..120).map(|i| ((i * 29) % 23) as f32 * 0.25 - 2.75).collect(),
            ))],
            packed: false,
        },
    ]
}

/// The bytes of a column or scalar, little-endian, as the C side holds them.
fn bytes(data: &Data) -> Vec<u8> {
    match data {
        Data::Scalar(s) => s.to_le_bytes(),
        Data::Column(b) => b.iter().flat_map(Scalar::to_le_bytes).collect(),
        Data::Selection(rows) => rows.iter().flat_map(|r| r.to_le_bytes()).collect(),
    }
}

fn c_bytes(b: &[u8]) -> String {
    if b.is_empty() {
        return "0".to_string();
    }
    b.iter()
        .map(|x| format!("0x{x:02x}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// A C `main` that calls `symbol` on `inputs` and prints the status and each
/// output's bytes in hex, one line each.
/// `out_elems` are the element counts of the graph's outputs (the
/// interpreter's), when it ran; else each output has `n_rows`.
fn c_main(
    kernel: &Kernel,
    symbol: &str,
    inputs: &[Data],
    n_rows: usize,
    out_elems: Option<&[usize]>,
) -> String {
    let mut out_idx = 0;
    let mut out_len = || {
        out_idx += 1;
        out_elems.map_or(n_rows, |e| e[out_idx - 1])
    };
    let mut decls = String::new();
    let mut args = Vec::new();
    let mut prints = String::new();
    let mut direct_ret = None;
    let mut input_idx = 0;
    for (idx, param) in kernel.params.iter().enumerate() {
        match param {
            Param::ScalarIn { dtype, .. } | Param::ArrayIn { dtype, .. } => {
                let b = bytes(&inputs[input_idx]);
                input_idx += 1;
                decls += &format!(
                    "static _Alignas(8) unsigned char in{idx}[] = {{{}}};\n",
                    c_bytes(&b)
                );
                let ty = header::c_type(*dtype);
                if matches!(param, Param::ScalarIn { .. }) && kernel.direct {
                    decls += &format!("{ty} v{idx}; memcpy(&v{idx}, in{idx}, sizeof v{idx});\n");
                    args.push(format!("v{idx}"));
                } else {
                    args.push(format!("(const {ty}*)in{idx}"));
                }
            }
            Param::BitmapIn { .. } => {
                let Data::Column(Buffer::Bool(rows)) = &inputs[input_idx] else {
                    panic!("a packed input is a bool column")
                };
                input_idx += 1;
                decls += &format!(
                    "static _Alignas(8) unsigned char in{idx}[] = {{{}}};\n",
                    c_bytes(&kiln::kernel::abi::pack_bits(rows))
                );
                args.push(format!("(const uint8_t*)in{idx}"));
            }
            Param::ConstIn { tensor, .. } => {
                let b: Vec<u8> = tensor.values.iter().flat_map(|v| v.to_le_bytes()).collect();
                decls += &format!(
                    "static _Alignas(8) unsigned char c{idx}[] = {{{}}};\n",
                    c_bytes(&b)
                );
                args.push(format!("(const {}*)c{idx}", header::c_type(tensor.dtype)));
            }
            Param::Scratch { dtype, shape } => {
                let elements: usize = shape
                    .iter()
                    .map(|d| match d {
                        kiln::Dim::Fixed(k) => *k as usize,
                        kiln::Dim::Sym(_) => n_rows,
                    })
                    .product();
                decls += &format!(
                    "static _Alignas(8) unsigned char s{idx}[{}];\n",
                    elements * dtype.size_bytes() + 8
                );
                args.push(format!("({}*)s{idx}", header::c_type(*dtype)));
            }
            Param::Extent { .. } => args.push(format!("(int64_t){n_rows}")),
            Param::ScalarOut { dtype, .. } if kernel.direct && direct_ret.is_none() => {
                out_len();
                direct_ret = Some(header::c_type(*dtype));
                decls += &format!("{} r{idx};\n", header::c_type(*dtype));
                prints += &format!("dump(&r{idx}, sizeof r{idx});\n");
            }
            Param::ScalarOut { dtype, .. } => {
                out_len();
                decls += &format!("{} o{idx};\n", header::c_type(*dtype));
                args.push(format!("&o{idx}"));
                prints += &format!("dump(&o{idx}, sizeof o{idx});\n");
            }
            Param::ArrayOut { dtype, .. } => {
                let bytes = out_len() * kiln::DType::size_bytes(*dtype);
                decls += &format!("static _Alignas(8) unsigned char o{idx}[{}];\n", bytes + 8);
                args.push(format!("({}*)o{idx}", header::c_type(*dtype)));
                prints += &format!("dump(o{idx}, {bytes});\n");
            }
            Param::SelectionOut { .. } => {
                out_len();
                decls += &format!("static uint32_t o{idx}[{}];\n", n_rows + 1);
                args.push(format!("o{idx}"));
            }
            Param::SelectionCount { .. } => {
                decls += &format!("int64_t o{idx} = 0;\n");
                args.push(format!("&o{idx}"));
                prints += &format!("dump(o{}, (size_t)o{idx} * 4);\n", idx - 1);
            }
        }
    }
    let call = match direct_ret {
        Some(_) => {
            let ret_idx = kernel
                .params
                .iter()
                .position(|p| matches!(p, Param::ScalarOut { .. }))
                .expect("a direct kernel has an output");
            format!(
                "r{ret_idx} = {symbol}({}); int32_t status = 0;",
                args.join(", ")
            )
        }
        None => format!("int32_t status = {symbol}({});", args.join(", ")),
    };
    format!(
        "#include <stdio.h>\n#include <string.h>\n#include \"kernel.h\"\n\
         static void dump(const void* p, size_t n) {{ const unsigned char* b = p; for (size_t i = 0; i < n; i++) printf(\"%02x\", b[i]); printf(\"\\n\"); }}\n\
         int main(void) {{\n{decls}{call}\nprintf(\"%d\\n\", (int)status);\nif (status == 0) {{\n{prints}}}\nreturn 0;\n}}\n"
    )
}

/// The interpreter's expected output lines (status, then bytes of each output).
fn expected(graph: &kiln::Verified, inputs: &[Data]) -> Vec<String> {
    match kiln::interp::run(graph, inputs) {
        Err(kiln::ExecError::DivisionByZero { .. }) => vec!["division by zero".to_string()],
        Err(e) => panic!("unexpected interpreter error {e}"),
        Ok(outs) => {
            let mut lines = vec!["0".to_string()];
            lines.extend(outs.iter().map(|o| {
                bytes(o)
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            }));
            lines
        }
    }
}

/// NaN payloads are unspecified: canonicalize NaN bytes of float outputs.
fn same_output(graph: &kiln::Graph, want: &[String], got: &[String]) -> bool {
    if want.first().map(String::as_str) == Some("division by zero") {
        return got
            .first()
            .and_then(|s| s.parse::<i32>().ok())
            .is_some_and(|s| s & 0xff == 1);
    }
    if want.len() != got.len() || want[0] != got[0] {
        return false;
    }
    graph
        .outputs()
        .iter()
        .zip(&want[1..])
        .zip(&got[1..])
        .all(|((o, w), g)| {
            let dtype = graph.ty(o.value).dtype();
            let width = match dtype {
                Some(kiln::DType::F32) => 8,
                Some(kiln::DType::F64) => 16,
                _ => return w == g,
            };
            w.len() == g.len()
                && w.as_bytes()
                    .chunks(width)
                    .zip(g.as_bytes().chunks(width))
                    .all(|(a, b)| {
                        let parse = |hex: &[u8]| {
                            let le: Vec<u8> = hex
                                .chunks(2)
                                .map(|c| {
                                    u8::from_str_radix(std::str::from_utf8(c).expect("hex"), 16)
                                        .expect("hex")
                                })
                                .collect();
                            if width == 8 {
                                f64::from(f32::from_le_bytes(le.try_into().expect("4 bytes")))
                            } else {
                                f64::from_le_bytes(le.try_into().expect("8 bytes"))
                            }
                        };
                        let (x, y) = (parse(a), parse(b));
                        (x.is_nan() && y.is_nan()) || a == b
                    })
        })
}

fn tool_available(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Writes an object for (kernel, target, symbol).
type ObjectFn = dyn Fn(&Kernel, &str, &str) -> Vec<u8>;

/// An object from `tier`'s backend, as `aot --emit obj` writes it.
fn object(tier: kiln::Tier, kernel: &Kernel, target: &str, symbol: &str) -> Vec<u8> {
    let request = kiln::EmitOptions {
        emit: kiln::Emit::Object,
        target: target.into(),
        opt_level: kiln::OptLevel::O3,
        cpu: None,
        features: None,
    };
    let backend = tier.backend().expect("a compiling tier");
    backend.emit(kernel, symbol, &request).expect("object")
}

fn cranelift_object(kernel: &Kernel, target: &str, symbol: &str) -> Vec<u8> {
    object(kiln::Tier::Cranelift, kernel, target, symbol)
}

#[cfg(feature = "llvm")]
fn llvm_object(kernel: &Kernel, target: &str, symbol: &str) -> Vec<u8> {
    object(kiln::Tier::Llvm, kernel, target, symbol)
}

fn check_target(target: &str, cc: &str, runner: Option<&str>, object: &ObjectFn) {
    for tool in std::iter::once(cc).chain(runner) {
        if !tool_available(tool) {
            assert!(
                std::env::var_os("CI").is_none(),
                "`{tool}` is missing: CI must install it (.ci/run)"
            );
            eprintln!("skipping {target}: `{tool}` is not installed (apt-get install qemu-user gcc-aarch64-linux-gnu gcc-riscv64-linux-gnu)");
            return;
        }
    }
    static RUN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let run = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir: PathBuf = std::env::temp_dir().join(format!(
        "kiln-objects-{target}-{}-{run}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for (case_idx, case) in cases().into_iter().enumerate() {
        let graph = kiln::load(case.src, case.format, &Default::default())
            .expect("parses")
            .graph;
        let graph = kiln::verify(graph).expect("verifies");
        let graph = kiln::optimize(&graph).expect("optimizes");
        let options = kiln::kernel::LowerOptions {
            packed_bools: case.packed,
            panels: Some(256),
            conv_panels: true,
            prefetch: true,
            padded_rest_rows: false,
            transpose_tiles: true,
            // Objects carry kiln's inline math, as `kiln::aot` makes them.
            libm_calls: false,
            running_min_max: true,
            tree_selects: kiln::kernel::TREE_SELECTS,
            isin_chain: kiln::kernel::ISIN_CHAIN,
            tree_block: 8,
        };
        let kernel = kiln::kernel::lower(&graph, &options).expect("lowers");
        let symbol = format!("kiln_case_{case_idx}");
        let object = object(&kernel, target, &symbol);
        // The extent of `n`, and each output's element count.
        let n_rows = kiln::ir::exec::bind_inputs(&graph, &case.inputs)
            .expect("inputs bind")
            .extent(&kiln::Dim::Sym("n".into()))
            .unwrap_or(0) as usize;
        let out_elems: Option<Vec<usize>> =
            kiln::interp::run(&graph, &case.inputs).ok().map(|outs| {
                outs.iter()
                    .map(|d| match d {
                        Data::Column(b) => b.len(),
                        _ => 1,
                    })
                    .collect()
            });
        let case_dir = dir.join(format!("case{case_idx}"));
        std::fs::create_dir_all(&case_dir).expect("case dir");
        std::fs::write(case_dir.join("kernel.o"), object).expect("write object");
        std::fs::write(case_dir.join("kernel.h"), header::header(&kernel, &symbol))
            .expect("write header");
        std::fs::write(
            case_dir.join("main.c"),
            c_main(&kernel, &symbol, &case.inputs, n_rows, out_elems.as_deref()),
        )
        .expect("write main");
        let exe = case_dir.join("main");
        run_ok(
            Command::new(cc)
                .current_dir(&case_dir)
                .args([
                    "-std=c11", "-Wall", "-Werror", "-static", "main.c", "kernel.o", "-lm", "-o",
                ])
                .arg(&exe),
            &case_dir,
        );
        let output = match runner {
            Some(qemu) => run_ok(Command::new(qemu).arg(&exe), &case_dir),
            None => run_ok(&mut Command::new(&exe), &case_dir),
        };
        let got: Vec<String> = output.lines().map(str::to_string).collect();
        let want = expected(&graph, &case.inputs);
        assert!(
            same_output(graph.graph(), &want, &got),
            "{target}: `{}`\nwant {want:?}\ngot  {got:?}\n(files in {})",
            case.src,
            case_dir.display()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn run_ok(cmd: &mut Command, dir: &Path) -> String {
    let out = cmd.output().expect("runs");
    assert!(
        out.status.success(),
        "{cmd:?} failed in {}:\n{}{}",
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

#[test]
fn x86_64_objects_run_natively() {
    check_target("x86_64", "cc", None, &cranelift_object);
}

#[test]
fn aarch64_objects_run_under_qemu() {
    check_target(
        "aarch64",
        "aarch64-linux-gnu-gcc",
        Some("qemu-aarch64"),
        &cranelift_object,
    );
}

#[test]
fn riscv64_objects_run_under_qemu() {
    check_target(
        "riscv64",
        "riscv64-linux-gnu-gcc",
        Some("qemu-riscv64"),
        &cranelift_object,
    );
}

#[cfg(feature = "llvm")]
#[test]
fn llvm_x86_64_objects_run_natively() {
    check_target("x86_64", "cc", None, &llvm_object);
}

#[cfg(feature = "llvm")]
#[test]
fn llvm_aarch64_objects_run_under_qemu() {
    check_target(
        "aarch64",
        "aarch64-linux-gnu-gcc",
        Some("qemu-aarch64"),
        &llvm_object,
    );
}

#[cfg(feature = "llvm")]
#[test]
fn llvm_riscv64_objects_run_under_qemu() {
    check_target(
        "riscv64",
        "riscv64-linux-gnu-gcc",
        Some("qemu-riscv64"),
        &llvm_object,
    );
}

#[test]
fn headers_declare_the_native_signature() {
    let graph = kiln::load(
        "def f(x: float[n], k: int): return filter(x > 0.0), x * 2.0, k + 1",
        Format::Py,
        &Default::default(),
    )
    .unwrap()
    .graph;
    let graph = kiln::verify(graph).unwrap();
    let kernel = kiln::kernel::lower(&graph, &Default::default()).unwrap();
    assert_eq!(
        header::prototype(&kernel, "f"),
        "int32_t f(const double* x_0, const int64_t* k_1, int64_t n_2, uint32_t* out_out0_3, int64_t* out_out0_count_4, double* out_out1_5, int64_t* out_out2_6)"
    );
    let graph = kiln::load(
        "def g(x: float, y: f32): return x * 2.0, y",
        Format::Py,
        &Default::default(),
    )
    .unwrap()
    .graph;
    let graph = kiln::verify(graph).unwrap();
    let kernel = kiln::kernel::lower(&graph, &Default::default()).unwrap();
    assert_eq!(
        header::prototype(&kernel, "g"),
        "double g(double x_0, float y_1, float* out_y_3)"
    );
}
