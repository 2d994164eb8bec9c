//! Transcendentals per element, for docs/performance.md:
//! `cargo bench -p kiln --features llvm --bench math` (`ROWS=...`, default
//! 1,000,000 elements; f64, then f32). Each function as a one-op column kernel on the Cranelift
//! tier (its JIT's default: a vector loop calling the vector math routine;
//! and inline math vectorized in the loop),
//! the LLVM tier (O3, inline math) and the VM (its routines), against the `libm` crate's scalar function
//! (the interpreter's oracle, and what compiled kernels called before inline
//! math) and glibc's scalar function (`f64::exp`, `f32::exp` in std) in a
//! Rust loop.
//! Medians of 15 repetitions; compare ratios within one run.

use kiln::{ArrayMut, ArrayRef, CompileOptions, Cranelift, Engine, Llvm, OptLevel, Program, Vm};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// glibc's `erf` family, which std does not wrap.
mod glibc {
    extern "C" {
        #[link_name = "erf"]
        fn c_erf(x: f64) -> f64;
        #[link_name = "erfc"]
        fn c_erfc(x: f64) -> f64;
        #[link_name = "erff"]
        fn c_erff(x: f32) -> f32;
        #[link_name = "erfcf"]
        fn c_erfcf(x: f32) -> f32;
    }
    // SAFETY (all four): pure C functions of one float.
    pub fn erf(x: f64) -> f64 {
        unsafe { c_erf(x) }
    }
    pub fn erfc(x: f64) -> f64 {
        unsafe { c_erfc(x) }
    }
    pub fn erff(x: f32) -> f32 {
        unsafe { c_erff(x) }
    }
    pub fn erfcf(x: f32) -> f32 {
        unsafe { c_erfcf(x) }
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn time(mut f: impl FnMut()) -> Duration {
    f();
    median(
        (0..15)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect(),
    )
}

fn per_element(d: Duration, rows: usize) -> f64 {
    d.as_secs_f64() * 1e9 / rows as f64
}

/// `name` over a `dtype` column on Cranelift (its JIT's default: calls,
/// which a vector loop makes to the vector math routine; inline math in the
/// vector loop itself) and LLVM O3 (inline).
fn compiled(name: &str, dtype: &str, arity: usize) -> [(&'static str, Box<dyn Program>); 4] {
    let text = if arity == 1 {
        format!(
            "graph \"{name}\"\nv0: {dtype}[n] = input \"x\"\nv1: {dtype}[n] = {name} v0\noutput \"y\" = v1\n"
        )
    } else {
        format!(
            "graph \"{name}\"\nv0: {dtype}[n] = input \"x\"\nv1: {dtype}[n] = input \"y\"\n\
             v2: {dtype}[n] = {name} v0, v1\noutput \"z\" = v2\n"
        )
    };
    let graph = kiln::verify(kiln::ir::text::parse(&text).expect("parses")).expect("verifies");
    let options = |libm_calls| CompileOptions {
        opt_level: OptLevel::O3,
        libm_calls,
        ..CompileOptions::default()
    };
    let cranelift = |libm_calls| -> Box<dyn Program> {
        Box::new(
            Cranelift
                .compile(&graph, &options(libm_calls))
                .expect("compiles"),
        )
    };
    [
        (
            "kiln-cranelift (vector loop, vector math routine: its default)",
            cranelift(None),
        ),
        (
            "kiln-cranelift-inline (vector loop, inline math)",
            cranelift(Some(false)),
        ),
        (
            "kiln-llvm-O3 (inline, vectorized)",
            Box::new(Llvm.compile(&graph, &options(None)).expect("compiles")),
        ),
        (
            "kiln-vm (its default: the routine's block loop)",
            Box::new(Vm.compile(&graph, &options(None)).expect("compiles")),
        ),
    ]
}

fn main() {
    let rows: usize = std::env::var("ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    // Inputs where GP and NNC kernels live, away from the rare paths.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let xs: Vec<f64> = (0..rows)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f64 / (1u64 << 53) as f64 * 20.0 - 10.0
        })
        .collect();
    type Scalar = fn(f64) -> f64;
    // (name, the libm crate, glibc, the input domain)
    let functions: [(&str, Scalar, Scalar, Scalar); 22] = [
        ("exp", libm::exp, f64::exp, |x| x),
        ("exp2", libm::exp2, f64::exp2, |x| x),
        ("cbrt", libm::cbrt, f64::cbrt, |x| x),
        // log of positive inputs: |x| + 0.001 over (0.001, 10].
        ("log", libm::log, f64::ln, |x| x.abs() + 0.001),
        ("sin", libm::sin, f64::sin, |x| x),
        ("cos", libm::cos, f64::cos, |x| x),
        ("expm1", libm::expm1, f64::exp_m1, |x| x),
        // tanh where it is not ±1: [-5, 5).
        ("tanh", libm::tanh, f64::tanh, |x| x * 0.5),
        // erf and erfc where they are not constant: [-3, 3).
        ("erf", libm::erf, glibc::erf, |x| x * 0.3),
        ("erfc", libm::erfc, glibc::erfc, |x| x * 0.3),
        ("sinh", libm::sinh, f64::sinh, |x| x),
        ("cosh", libm::cosh, f64::cosh, |x| x),
        // log1p over (-0.999, 9]: |x| - 0.999.
        ("log1p", libm::log1p, f64::ln_1p, |x| x.abs() - 0.999),
        ("log2", libm::log2, f64::log2, |x| x.abs() + 0.001),
        ("log10", libm::log10, f64::log10, |x| x.abs() + 0.001),
        ("tan", libm::tan, f64::tan, |x| x),
        ("atan", libm::atan, f64::atan, |x| x),
        // asin and acos over [-1, 1).
        ("asin", libm::asin, f64::asin, |x| x * 0.1),
        ("acos", libm::acos, f64::acos, |x| x * 0.1),
        ("asinh", libm::asinh, f64::asinh, |x| x),
        // acosh over [1, 11), atanh over (-1, 1).
        ("acosh", libm::acosh, f64::acosh, |x| x.abs() + 1.0),
        ("atanh", libm::atanh, f64::atanh, |x| x * 0.099),
    ];
    println!("function,contender,ns_per_element ({rows} elements)");
    for (name, libm_fn, std_fn, domain) in functions {
        let xs: Vec<f64> = xs.iter().map(|&x| domain(x)).collect();
        let run: Run<f64> = |p, xs, out| {
            p.run_arrays(&[ArrayRef::F64(xs)], &mut [ArrayMut::F64(out)])
                .expect("runs");
        };
        measure(name, "f64", &xs, run, [libm_fn, std_fn]);
    }
    // The same for f32, against the `libm` crate's `expf`… (`erf`: kiln's own
    // `kiln_erff`, which the in-process tiers bind) and glibc's.
    type Scalar32 = fn(f32) -> f32;
    let functions32: [(&str, Scalar32, Scalar32, Scalar32); 22] = [
        ("exp", libm::expf, f32::exp, |x| x),
        ("exp2", libm::exp2f, f32::exp2, |x| x),
        ("log", libm::logf, f32::ln, |x| x.abs() + 0.001),
        ("sin", libm::sinf, f32::sin, |x| x),
        ("cos", libm::cosf, f32::cos, |x| x),
        ("expm1", libm::expm1f, f32::exp_m1, |x| x),
        ("tanh", libm::tanhf, f32::tanh, |x| x * 0.5),
        ("erf", kiln::ir::math::kiln_erff, glibc::erff, |x| x * 0.3),
        ("erfc", libm::erfcf, glibc::erfcf, |x| x * 0.3),
        ("sinh", libm::sinhf, f32::sinh, |x| x),
        ("cosh", libm::coshf, f32::cosh, |x| x),
        ("log1p", libm::log1pf, f32::ln_1p, |x| x.abs() - 0.999),
        ("log2", libm::log2f, f32::log2, |x| x.abs() + 0.001),
        ("log10", libm::log10f, f32::log10, |x| x.abs() + 0.001),
        ("tan", libm::tanf, f32::tan, |x| x),
        ("atan", libm::atanf, f32::atan, |x| x),
        ("asin", libm::asinf, f32::asin, |x| x * 0.1),
        ("acos", libm::acosf, f32::acos, |x| x * 0.1),
        ("asinh", libm::asinhf, f32::asinh, |x| x),
        ("acosh", libm::acoshf, f32::acosh, |x| x.abs() + 1.0),
        ("atanh", libm::atanhf, f32::atanh, |x| x * 0.099),
        ("cbrt", libm::cbrtf, f32::cbrt, |x| x),
    ];
    for (name, libm_fn, std_fn, domain) in functions32 {
        let xs: Vec<f32> = xs.iter().map(|&x| domain(x as f32)).collect();
        let run: Run<f32> = |p, xs, out| {
            p.run_arrays(&[ArrayRef::F32(xs)], &mut [ArrayMut::F32(out)])
                .expect("runs");
        };
        measure(name, "f32", &xs, run, [libm_fn, std_fn]);
    }
    // The binary functions: pow of (0.001, 10] to [-3, 3), atan2 and hypot
    // of [-10, 10)².
    let ys: Vec<f64> = xs.iter().rev().copied().collect();
    type Scalar2 = fn(f64, f64) -> f64;
    type Scalar2F32 = fn(f32, f32) -> f32;
    type Domain = fn(f64, f64) -> (f64, f64);
    let binary: [(&str, [Scalar2; 2], [Scalar2F32; 2], Domain); 3] = [
        (
            "pow",
            [libm::pow, f64::powf],
            [libm::powf, f32::powf],
            |x, y| (x.abs() + 0.001, y * 0.3),
        ),
        (
            "atan2",
            [libm::atan2, f64::atan2],
            [libm::atan2f, f32::atan2],
            |x, y| (x, y),
        ),
        (
            "hypot",
            [libm::hypot, f64::hypot],
            [libm::hypotf, f32::hypot],
            |x, y| (x, y),
        ),
    ];
    for (name, scalar, scalar32, domain) in binary {
        let (a, b): (Vec<f64>, Vec<f64>) = xs.iter().zip(&ys).map(|(&x, &y)| domain(x, y)).unzip();
        measure2(name, "f64", [&a, &b], scalar, |p, [a, b], out| {
            p.run_arrays(
                &[ArrayRef::F64(a), ArrayRef::F64(b)],
                &mut [ArrayMut::F64(out)],
            )
            .expect("runs");
        });
        let a: Vec<f32> = a.iter().map(|&v| v as f32).collect();
        let b: Vec<f32> = b.iter().map(|&v| v as f32).collect();
        measure2(name, "f32", [&a, &b], scalar32, |p, [a, b], out| {
            p.run_arrays(
                &[ArrayRef::F32(a), ArrayRef::F32(b)],
                &mut [ArrayMut::F32(out)],
            )
            .expect("runs");
        });
    }
}

/// [`measure`] for a function of two columns.
fn measure2<T: Copy + Default>(
    name: &str,
    dtype: &str,
    args: [&[T]; 2],
    [libm_fn, std_fn]: [fn(T, T) -> T; 2],
    run: fn(&dyn Program, [&[T]; 2], &mut [T]),
) {
    let scalar = |f: fn(T, T) -> T| {
        move |out: &mut [T]| {
            for ((o, &x), &y) in out.iter_mut().zip(args[0]).zip(args[1]) {
                *o = f(black_box(x), black_box(y));
            }
        }
    };
    report(
        name,
        dtype,
        2,
        args[0].len(),
        |p, out| run(p, args, out),
        [
            ("libm-crate-scalar", &scalar(libm_fn)),
            ("glibc-scalar", &scalar(std_fn)),
        ],
    );
}

/// Runs a compiled one-op kernel over a column into another.
type Run<T> = fn(&dyn Program, &[T], &mut [T]);

/// Prints `name` over `xs` on each tier (`compiled`), then the `libm`
/// crate's and glibc's scalar functions in a Rust loop.
fn measure<T: Copy + Default>(
    name: &str,
    dtype: &str,
    xs: &[T],
    run: Run<T>,
    [libm_fn, std_fn]: [fn(T) -> T; 2],
) {
    let scalar = |f: fn(T) -> T| {
        move |out: &mut [T]| {
            for (o, &x) in out.iter_mut().zip(xs) {
                *o = f(black_box(x));
            }
        }
    };
    report(
        name,
        dtype,
        1,
        xs.len(),
        |p, out| run(p, xs, out),
        [
            ("libm-crate-scalar", &scalar(libm_fn)),
            ("glibc-scalar", &scalar(std_fn)),
        ],
    );
}

/// A labelled scalar loop filling the output.
type ScalarLoop<'a, T> = (&'a str, &'a dyn Fn(&mut [T]));

/// Times `name` of `arity` columns of `rows` on each tier (`run` calls a
/// compiled program), then each labelled scalar loop, and prints ns per
/// element.
fn report<T: Copy + Default>(
    name: &str,
    dtype: &str,
    arity: usize,
    rows: usize,
    run: impl Fn(&dyn Program, &mut [T]),
    scalars: [ScalarLoop<'_, T>; 2],
) {
    let mut out = vec![T::default(); rows];
    let suffix = if dtype == "f32" { "f" } else { "" };
    for (label, program) in &compiled(name, dtype, arity) {
        let d = time(|| {
            run(program.as_ref(), &mut out);
            black_box(&out);
        });
        println!("{name}{suffix},{label},{:.3}", per_element(d, rows));
    }
    for (label, scalar) in scalars {
        let d = time(|| {
            scalar(&mut out);
            black_box(&out);
        });
        println!("{name}{suffix},{label},{:.3}", per_element(d, rows));
    }
}
