//! The Cranelift JIT's vectorizer (`kiln-cranelift`'s `vector.rs`): loops of
//! every dtype and mix of dtypes, at row counts around the lane counts (the
//! scalar loop runs the last `n % lanes` rows), agree bit for bit with the
//! interpreter on every engine; and the loops really run in vectors.
//!
//! Inputs are the differential generator's edge-biased values (NaN, ±0,
//! ±inf, extremes of every integer type, huge `sin` arguments that take the
//! scalar fallback) in every lane position.

use arbitrary::Unstructured;
use kiln::ir::{Buffer, DType, Data, Type};
use kiln::DynEngine;

/// (what it covers, the function, a vector type its CLIF must use).
const PROGRAMS: &[(&str, &str, &str)] = &[
    (
        "f64 arithmetic, rounding, min/max, copysign, and the math routines",
        "def f(x: f64[n], y: f64[n]):
    return exp(x) * sin(y) + cos(x) / log(abs(y)), expm1(x) - tanh(y), erf(x) + erfc(y), sinh(x) / cosh(y), log1p(y), log2(x) - log10(y), tan(x), arctan(y), arcsin(x) + arccos(y), arcsinh(x) - arccosh(y) + arctanh(x), minimum(x, y), maximum(x, y), \
copysign(x, y), floor(x), ceil(y), around(x), fix(y), sqrt(abs(x)), -x, x / y, exp2(x), cbrt(y)",
        "f64x2",
    ),
    (
        "the binary math routines, which take two vectors",
        "def f(x: f64[n], y: f64[n], u: f32[n], v: f32[n]):
    return power(abs(x), y), arctan2(x, y), hypot(x, y), power(abs(u), v), arctan2(u, v), hypot(u, v)",
        "(f64x2, f64x2) -> f64x2",
    ),
    (
        "f32 math, which computes in f64 (two lanes of f32x4), and expf/logf (four)",
        "def f(x: f32[n], y: f32[n]):
    return sin(x), cos(y), exp(x), log(y), expm1(x), tanh(y), erf(x), erfc(y), sinh(x), cosh(y), log1p(x), log2(x), log10(y), tan(x), arctan(y), arcsin(x), arccos(y), arcsinh(x), arccosh(y), arctanh(x), cbrt(y), exp2(x), x * y - 1.5, minimum(x, y)",
        "f32x4",
    ),
    (
        "i32: wrapping arithmetic, shifts by a constant and by a column, bit ops, \
         division by a constant, comparisons",
        "def f(a: i32[n], b: i32[n]):
    return a + b, a * b, a - b, a << 3, a >> 2, left_shift(a, b), right_shift(a, b), \
a & b, a | b, a ^ b, ~a, -a, abs(a), a // 3, a % 5, minimum(a, b), maximum(a, b), a < b, a == b",
        "i32x4",
    ),
    (
        "i64: the same in two lanes",
        "def f(a: i64[n], b: i64[n]):
    return a + b, a * b, a - b, a << 3, a >> 2, left_shift(a, b), right_shift(a, b), \
a & b, a | b, a ^ b, ~a, -a, abs(a), a // 3, a % 5, minimum(a, b), maximum(a, b), a >= b, a != b",
        "i64x2",
    ),
    (
        "every conversion between the five dtypes",
        "def f(x: f64[n], s: f32[n], a: i32[n], b: i64[n], p: bool[n]):
    return float32(x), int32(x), long(x), bool_(x), double(s), int32(s), long(s), bool_(s), \
double(a), float32(a), long(a), bool_(a), double(b), float32(b), int32(b), bool_(b), \
double(p), float32(p), int32(p), long(p)",
        "f64x2",
    ),
    (
        "bools: comparisons of one width selecting values of another, logic, stores",
        "def f(x: f64[n], s: f32[n], a: i32[n], p: bool[n]):
    return where(x < 1.0, s, s * 2.0), where(s > 0.5, x, -x), where(p, a, a + 1), \
(x < 0.0) & p | (s == s), ~p, isnan(x) ^ isinf(s)",
        "f64x2",
    ),
    (
        "a column scaled by its length, and a broadcast tensor (strided rows, unit-stride columns)",
        "def f(x: f64[n], m: f32[3, 4], r: f32[4]):
    return x * len(x), m * r + 1.0",
        "f32x4",
    ),
];

/// Row counts around the lane counts (2 and 4) and a long column.
const ROWS: &[usize] = &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 1000];

/// Edge-biased random values from a fixed xorshift stream.
fn column(seed: &mut u64, dtype: DType, len: usize) -> Buffer {
    let bytes: Vec<u8> = (0..len * 16 + 16)
        .map(|_| {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            *seed as u8
        })
        .collect();
    let mut u = Unstructured::new(&bytes);
    let values: Vec<_> = (0..len)
        .map(|_| kiln_fuzzgen::scalar(&mut u, dtype).expect("bytes enough"))
        .collect();
    Buffer::from_scalars(dtype, &values)
}

fn inputs(graph: &kiln::Graph, seed: &mut u64, n: usize) -> Vec<Data> {
    graph
        .inputs()
        .iter()
        .map(|input| match graph.ty(input.value) {
            Type::Tensor(t) if t.shape.is_empty() => {
                Data::Scalar(column(seed, t.dtype, 1).get(0).expect("one value"))
            }
            Type::Tensor(t) => {
                // Tensors are row-major buffers; `n` binds the symbolic dims.
                let len: u64 = t
                    .shape
                    .iter()
                    .map(|d| match d {
                        kiln::Dim::Fixed(k) => *k,
                        kiln::Dim::Sym(_) => n as u64,
                    })
                    .product();
                Data::Column(column(seed, t.dtype, len as usize))
            }
            other => panic!("no inputs of type {other}"),
        })
        .collect()
}

fn load(source: &str) -> kiln::Graph {
    kiln::load(source, kiln::Format::Py, &Default::default())
        .unwrap_or_else(|e| panic!("{e}\n{source}"))
        .graph
}

/// Each program compiled once per engine and option set, run at every row
/// count (four input sets each) against the interpreter.
fn agree(options: &kiln::CompileOptions, programs: &[(&str, &str, &str)], mut seed: u64) {
    for (what, source, _) in programs {
        let graph = load(source);
        let verified = kiln::verify(graph.clone()).unwrap();
        let oracle = kiln::Interpreter.compile_dyn(&verified, options).unwrap();
        for engine in kiln::engines() {
            for optimize in [false, true] {
                let options = kiln::CompileOptions {
                    optimize,
                    ..options.clone()
                };
                let program = engine.compile_dyn(&verified, &options).unwrap();
                for &n in ROWS {
                    for _ in 0..4 {
                        let inputs = inputs(&graph, &mut seed, n);
                        let (want, got) = (oracle.run(&inputs), program.run(&inputs));
                        assert!(
                            kiln_fuzzgen::same(&want, &got),
                            "{what}: {} (optimize {optimize}) at {n} rows\ninputs {inputs:?}\nwant {want:?}\ngot {got:?}",
                            engine.name()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn vector_loops_agree_with_the_interpreter_at_every_row_count() {
    agree(
        &kiln::CompileOptions::default(),
        PROGRAMS,
        0x9e37_79b9_7f4a_7c15,
    );
}

/// Inline math (`libm_calls: Some(false)`, as objects compile it) vectorized
/// in the loop itself rather than through the routines.
#[test]
fn inline_math_in_vector_loops_agrees_with_the_interpreter() {
    let options = kiln::CompileOptions {
        libm_calls: Some(false),
        ..kiln::CompileOptions::default()
    };
    agree(&options, &PROGRAMS[..2], 0x2545_f491_4f6c_dd1d);
}

/// Each program's loop runs in the vectors it should: the vectorizer does
/// not silently fall back to scalar code.
#[cfg(target_arch = "x86_64")]
#[test]
fn the_loops_are_vectorized() {
    if !std::arch::is_x86_feature_detected!("sse4.2") {
        return;
    }
    for (what, source, vector) in PROGRAMS {
        let verified = kiln::verify(load(source)).unwrap();
        let kernel =
            kiln::kernel::lower(&verified, &kiln::Backend::lower_options(&kiln::Cranelift))
                .unwrap();
        let clif = kiln::cranelift::clif(&kernel).unwrap();
        assert!(clif.contains(vector), "{what}: no {vector} in\n{clif}");
    }
}

/// A convolution's wide-row tap loop (`acc[p] = acc[p] + x[s + p] * w`)
/// reads the buffer it writes, but each row only at its own element: it
/// runs in vectors, and agrees with the interpreter bit for bit (odd plane
/// sizes, so the scalar loop finishes every plane; a strided convolution,
/// through its input's phases; inputs with NaN, -0.0 and infinities).
#[cfg(target_arch = "x86_64")]
#[test]
fn convolution_taps_run_in_vectors() {
    if !std::arch::is_x86_feature_detected!("sse4.2") {
        return;
    }
    let source = "v0: f32[2, 3, 5, 7] = input \"x\"
v1: f32[4, 3, 3, 3] = input \"w\"
v2: f32[2, 4, 5, 5] = conv2d v0, v1 pad [1, 1, 2, 0] dilation [1, 2]
v3: f32[2, 4, 3, 4] = conv2d v0, v1 stride [2, 2] pad [1, 1, 1, 1]
output \"y\" = v2
output \"strided\" = v3
";
    let (graph, verified, clif) = cranelift_clif(source);
    assert!(clif.contains("f32x4"), "no f32x4 in\n{clif}");
    cranelift_agrees(&graph, &verified, 0x1234_5678_9abc_def1, "conv2d");
}

/// A `.kiln` source loaded and verified, and the CLIF its kernel becomes on
/// the Cranelift JIT.
fn cranelift_clif(source: &str) -> (kiln::Graph, kiln::Verified, String) {
    let graph = kiln::load(source, kiln::Format::Kiln, &Default::default())
        .unwrap()
        .graph;
    let verified = kiln::verify(graph.clone()).unwrap();
    let kernel =
        kiln::kernel::lower(&verified, &kiln::Backend::lower_options(&kiln::Cranelift)).unwrap();
    let clif = kiln::cranelift::clif(&kernel).unwrap();
    (graph, verified, clif)
}

/// The Cranelift JIT agrees with the interpreter bit for bit on 8 sets of
/// the generator's edge-biased inputs.
fn cranelift_agrees(graph: &kiln::Graph, verified: &kiln::Verified, mut seed: u64, what: &str) {
    let options = kiln::CompileOptions::default();
    let oracle = kiln::Interpreter.compile_dyn(verified, &options).unwrap();
    let program = kiln::Cranelift.compile_dyn(verified, &options).unwrap();
    for _ in 0..8 {
        let inputs = inputs(graph, &mut seed, 0);
        let (want, got) = (oracle.run(&inputs), program.run(&inputs));
        assert!(
            kiln_fuzzgen::same(&want, &got),
            "{what}: want {want:?}\ngot {got:?}"
        );
    }
}

/// A matmul panel's `k` loop keeps its block of sums in vector registers
/// (`kiln-cranelift`'s `Promotion`: block parameters of the loop, not
/// loads and stores of the block), and agrees with the interpreter bit for
/// bit: f32 and f64, rows past the last block of 4, columns past the last
/// panel, a batch, NaN, -0.0 and infinities among the inputs.
#[cfg(target_arch = "x86_64")]
#[test]
fn matmul_panels_keep_their_sums_in_registers() {
    if !std::arch::is_x86_feature_detected!("sse4.2") {
        return;
    }
    for (dtype, vector) in [("f32", "f32x4"), ("f64", "f64x2")] {
        let source = format!(
            "v0: {dtype}[9, 70] = input \"a\"
v1: {dtype}[70, 19] = input \"b\"
v2: {dtype}[9, 19] = matmul v0, v1
v3: {dtype}[2, 6, 5] = input \"x\"
v4: {dtype}[2, 5, 13] = input \"y\"
v5: {dtype}[2, 6, 13] = matmul v3, v4
output \"c\" = v2
output \"batched\" = v5
"
        );
        let (graph, verified, clif) = cranelift_clif(&source);
        let carried = clif
            .lines()
            .filter(|l| l.starts_with("block") && l.contains(": i64") && l.contains(vector))
            .count();
        assert!(carried > 0, "{dtype}: no loop carries {vector}s in\n{clif}");
        cranelift_agrees(&graph, &verified, 0x0bad_5eed_1234_5678, dtype);
    }
}
