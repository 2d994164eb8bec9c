//! The vector VM where the differential tests' short columns do not reach:
//! columns of several blocks and a partial one (`kiln_vm::BLOCK` rows run
//! at a time), row loops the VM must run row by row (reductions), filters,
//! division errors, and tensor loop nests, each against the interpreter,
//! bit for bit.

use kiln::{Buffer, CompileOptions, Data, Engine, ExecError, Format, Program, Scalar, Verified};

fn verified(src: &str, format: Format) -> Verified {
    let graph = kiln::load(src, format, &Default::default())
        .unwrap_or_else(|e| panic!("{src}: {e}"))
        .graph;
    kiln::verify(graph).expect("verifies")
}

/// Row counts around the block size: none, one, a block less one, a
/// block, a block and one, several blocks and a tail.
fn lengths() -> Vec<usize> {
    let b = kiln::vm::BLOCK;
    vec![0, 1, b - 1, b, b + 1, 3 * b + 17]
}

/// `n` draws of a 64-bit LCG from `seed`.
fn draws(n: usize, seed: u64) -> impl Iterator<Item = u64> {
    (0..n).scan(seed, |s, _| {
        *s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        Some(*s)
    })
}

/// A deterministic mix of ordinary values and the specials every op
/// treats apart: ±0, ±inf, NaN, subnormals, huge arguments of `sin`.
fn floats(n: usize, seed: u64) -> Vec<f64> {
    let specials = [
        0.0,
        -0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        5e-324,
        1e300,
        -1e22,
        0.5,
        -3.0,
    ];
    draws(n, seed)
        .enumerate()
        .map(|(i, s)| {
            if i % 7 == 3 {
                specials[(s >> 60) as usize % specials.len()]
            } else {
                ((s >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 40.0
            }
        })
        .collect()
}

fn ints(n: usize, seed: u64) -> Vec<i64> {
    draws(n, seed)
        .map(|s| match s >> 61 {
            0 => i64::MIN,
            1 => -1,
            _ => (s >> 33) as i64 % 1000 - 500,
        })
        .collect()
}

fn agree(graph: &Verified, inputs: &[Data], what: &str) {
    let want = kiln::interp::run(graph, &inputs.iter().collect::<Vec<_>>());
    for optimize in [false, true] {
        let options = CompileOptions {
            optimize,
            ..CompileOptions::default()
        };
        let got = kiln::Vm
            .compile(graph, &options)
            .unwrap_or_else(|e| panic!("{what}: {e}"))
            .run(inputs);
        match (&want, &got) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a.len(), b.len());
                for (k, (x, y)) in a.iter().zip(b).enumerate() {
                    assert!(
                        x.same_data(y),
                        "{what} (optimize {optimize}), output {k}:\n  interp: {x}\n  vm:     {y}"
                    );
                }
            }
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{what}"),
            _ => panic!("{what} (optimize {optimize}): interp {want:?}, vm {got:?}"),
        }
    }
}

#[test]
fn float_columns_in_blocks() {
    let src = "def f(x: float[n], y: float[n], k: float):
    return (sin(x) * y + exp(-abs(x)) / (1.0 + y * y), x // y, x % y, minimum(x, y),
            maximum(x, k), round(x), sqrt(abs(y)), log(abs(x) + 1e-300) - cos(y),
            where(x > y, tanh(x), atan2(y, x)), x ** 2.0, hypot(x, y), floor(y) - ceil(x))";
    let graph = verified(src, Format::Py);
    for n in lengths() {
        let inputs = [
            Data::Column(Buffer::F64(floats(n, 1))),
            Data::Column(Buffer::F64(floats(n, 2))),
            Data::Scalar(Scalar::F64(0.25)),
        ];
        agree(&graph, &inputs, &format!("floats, {n} rows"));
    }
}

#[test]
fn f32_and_integer_columns_in_blocks() {
    let src = "def f(a: int[n], b: int[n], x: float32[n]):
    return (a * b + 3, a - b, a & b, a | 5, a ^ b, a << 3, a >> 2, -a, abs(a),
            minimum(a, b), a == b, a < b, float32(a) * x + sin(x), x / 3.0,
            int(x), exp(x) - float32(2.5), where(a > 0, x, -x))";
    let graph = verified(src, Format::Py);
    for n in lengths() {
        let inputs = [
            Data::Column(Buffer::I64(ints(n, 3))),
            Data::Column(Buffer::I64(ints(n, 4))),
            Data::Column(Buffer::F32(
                floats(n, 5).iter().map(|&v| v as f32).collect(),
            )),
        ];
        agree(&graph, &inputs, &format!("ints and f32, {n} rows"));
    }
}

/// Every transcendental the VM may run as a routine (`kiln_vm`'s
/// `routines.rs`, whichever `KILN_VM_SIMD` variant runs), on both dtypes,
/// over columns of several blocks whose specials send some blocks down the
/// exact path (a huge `sin` argument, a NaN `pow`), and the binary ones in
/// their three loop forms (a constant on either side).
#[test]
fn math_routines_in_blocks() {
    let unary = [
        "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh",
        "atanh", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "cbrt", "erf", "erfc",
    ];
    for dtype in ["f64", "f32"] {
        let mut text = format!(
            "graph \"math\"\nv0: {dtype}[n] = input \"x\"\nv1: {dtype}[n] = input \"y\"\n\
             v2: {dtype} = const 1.75\nv3: {dtype} = const -0.5\n"
        );
        let mut v = 4;
        for op in unary {
            text.push_str(&format!(
                "v{v}: {dtype}[n] = {op} v0\noutput \"{op}\" = v{v}\n"
            ));
            v += 1;
        }
        for op in ["pow", "atan2", "hypot"] {
            for (form, a, b) in [("vv", 0, 1), ("vk", 0, 2), ("kv", 3, 1)] {
                text.push_str(&format!(
                    "v{v}: {dtype}[n] = {op} v{a}, v{b}\noutput \"{op}_{form}\" = v{v}\n"
                ));
                v += 1;
            }
        }
        let graph = verified(&text, Format::Kiln);
        for n in lengths() {
            let column = |seed| match dtype {
                "f64" => Data::Column(Buffer::F64(floats(n, seed))),
                _ => Data::Column(Buffer::F32(
                    floats(n, seed).iter().map(|&v| v as f32).collect(),
                )),
            };
            let inputs = [column(6), column(7)];
            agree(&graph, &inputs, &format!("math on {dtype}, {n} rows"));
        }
    }
}

/// A sine and a cosine of one value run as one routine (`sincos`), in
/// blocks and row by row (a loop with reductions), either first, on both
/// dtypes: each the bits of its own routine, which the interpreter's are.
#[test]
fn sines_and_cosines_of_one_value() {
    for ty in ["float", "float32"] {
        let src = format!(
            "def f(x: {ty}[n], y: {ty}[n]):
    return cos(x * y) * exp(y) + sin(x * y), sin(x) - cos(x), sum(cos(y)) + sum(sin(y))"
        );
        let graph = verified(&src, Format::Py);
        for n in lengths() {
            let column = |seed| match ty {
                "float" => Data::Column(Buffer::F64(floats(n, seed))),
                _ => Data::Column(Buffer::F32(
                    floats(n, seed).iter().map(|&v| v as f32).collect(),
                )),
            };
            agree(&graph, &[column(8), column(9)], &format!("{src}, {n} rows"));
        }
    }
}

#[test]
fn filters_reductions_and_division_errors() {
    // Filters alone run in blocks (each row's index kept in row order);
    // with reductions fused into the loop, row by row.
    for src in [
        "def f(x: float[n], a: int[n]): return filter(x > 0.5), a // 7, filter(a > 10)",
        "def f(x: float[n], a: int[n]):
    return filter(x > 0.5), sum(x), mean(x * 2.0), max(a), a // 7, filter(a > 10)",
    ] {
        let graph = verified(src, Format::Py);
        for n in lengths() {
            let inputs = [
                Data::Column(Buffer::F64(floats(n, 6))),
                Data::Column(Buffer::I64(ints(n, 7))),
            ];
            agree(&graph, &inputs, &format!("{src}, {n} rows"));
        }
    }
    // A zero divisor in the last block's tail fails the call with the
    // interpreter's error.
    let graph = verified(
        "def f(a: int[n], b: int[n]): return a // b, a % b",
        Format::Py,
    );
    let n = 3 * kiln::vm::BLOCK + 17;
    let mut b: Vec<i64> = (1..=n as i64).collect();
    b[n - 2] = 0;
    let inputs = [
        Data::Column(Buffer::I64(ints(n, 8))),
        Data::Column(Buffer::I64(b)),
    ];
    agree(&graph, &inputs, "division by zero");
    let err = kiln::Vm
        .compile(&graph, &CompileOptions::default())
        .unwrap()
        .run(&inputs)
        .unwrap_err();
    assert!(matches!(err, ExecError::DivisionByZero { .. }), "{err}");
}

#[test]
fn tensor_loop_nests_in_blocks() {
    // A matmul whose rows and inner dimension span blocks, with a bias and
    // relu epilogue; a convolution with stride and padding; pools.
    let src = "graph \"t\"
v0: f64[5, 300] = input \"a\"
v1: f64[300, 270] = input \"b\"
v2: f64[270] = input \"bias\"
v3: f64[5, 270] = matmul v0, v1
v4: f64[5, 270] = add v3, v2
v5: f64 = const 0.0
v6: f64[5, 270] = max v4, v5
v7: f32[1, 3, 40, 37] = input \"img\"
v8: f32[4, 3, 3, 3] = input \"w\"
v9: f32[1, 4, 20, 19] = conv2d v7, v8 stride [2, 2] pad [1, 1, 1, 1]
v10: f32[1, 4, 10, 10] = max_pool2d v9 kernel [2, 2] stride [2, 2] ceil_mode
v11: f32[1, 3, 39, 36] = avg_pool2d v7 kernel [2, 2] stride [1, 1]
v12: f64[270, 300] = transpose v1 [1, 0]
v13: f64[270, 300] = sin v12
output \"y\" = v6
output \"z\" = v10
output \"p\" = v11
output \"t\" = v13
";
    let graph = verified(src, Format::Kiln);
    let f32s = |n: usize, seed| -> Vec<f32> {
        floats(n, seed)
            .into_iter()
            .map(|v| {
                if v.is_finite() {
                    (v / 20.0) as f32
                } else {
                    0.5
                }
            })
            .collect()
    };
    let tensor = |dtype_f64: bool, n: usize, seed| {
        if dtype_f64 {
            Data::Column(Buffer::F64(
                floats(n, seed)
                    .into_iter()
                    .map(|v| if v.is_finite() { v / 20.0 } else { 1.0 })
                    .collect(),
            ))
        } else {
            Data::Column(Buffer::F32(f32s(n, seed)))
        }
    };
    let inputs = [
        tensor(true, 5 * 300, 9),
        tensor(true, 300 * 270, 10),
        tensor(true, 270, 11),
        tensor(false, 3 * 40 * 37, 12),
        tensor(false, 4 * 3 * 3 * 3, 13),
    ];
    agree(&graph, &inputs, "tensors");
}
