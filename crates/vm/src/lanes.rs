//! The loops the VM runs: each kernel operation on one dtype, over `n`
//! lanes of 8-byte cells, compiled three times by rustc (baseline x86-64, AVX2 and
//! AVX-512, picked once per process: [`simd`]), so a block of rows runs as SIMD code
//! without a code generator.
//!
//! A lane holds a value's bits zero-extended to 64 (`Scalar::bits`): an
//! `f64` or `i64` as is, an `f32` or `i32` in the low 32 bits, a `bool` as
//! 0 or 1. Every function here reads and writes lanes in that form and
//! computes what `kiln_kernel::Expr` says the machine computes, under
//! the preconditions lowering guarantees; where a precondition could fail
//! in lanes a scalar kernel would never reach (a divisor a failed check
//! already rejected), the result is some value, never a panic.

use kiln_ir::{BinaryOp, CmpOp, DType, UnaryOp};

/// `dst[i] = f(a[i])` for `i < n`.
pub(crate) type Un = unsafe fn(*mut u64, *const u64, usize);
/// `(dst[i], dst2[i]) = f(a[i])` for `i < n`: a function of two results
/// (`sin` and `cos`), `dst` apart from `dst2`.
pub(crate) type Un2 = unsafe fn(*mut u64, *mut u64, *const u64, usize);
/// `dst[i] = f(a[i], b[i])` for `i < n`.
pub(crate) type Bin = unsafe fn(*mut u64, *const u64, *const u64, usize);
/// A loop of a ternary lane function, `dst[i] = f(a[i], b[i], c[i])` for
/// `i < n`: the same contract as [`Bin`], three operands.
pub(crate) type Tern = unsafe fn(*mut u64, *const u64, *const u64, *const u64, usize);

/// The SIMD variants the VM's loops are compiled in (rustc compiles every
/// loop three times; the VM runs one, [`simd`]).
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Simd {
    /// The target's baseline (SSE2 on x86-64).
    Base,
    /// AVX2 with FMA (a CPU with AVX2 but no FMA runs the baseline).
    Avx2,
    /// AVX-512 F, DQ, VL and BW: 64-bit integer multiplies and conversions
    /// in vectors, which inline math uses.
    Avx512,
}

/// The [`Simd`] the VM runs (decided once per process): this CPU's
/// widest, or narrower if the environment variable `KILN_VM_SIMD` says
/// `avx2` or `base`, so tests and benchmarks can run every variant on one
/// machine (the bits are the same: rustc contracts no FMA and keeps every
/// rounding in all three; `mul_add` is one rounding in each, the FMA
/// instruction in the AVX2 and AVX-512 variants, a correctly rounded `fmaf`
/// call in the baseline's).
pub fn simd() -> Simd {
    static SIMD: std::sync::OnceLock<Simd> = std::sync::OnceLock::new();
    *SIMD.get_or_init(|| {
        let cap = match std::env::var("KILN_VM_SIMD").as_deref() {
            Ok("base") => Simd::Base,
            Ok("avx2") => Simd::Avx2,
            _ => Simd::Avx512,
        };
        cpu_simd().min(cap)
    })
}

fn cpu_simd() -> Simd {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx512f") && has!("avx512dq") && has!("avx512vl") && has!("avx512bw") {
            Simd::Avx512
        } else if has!("avx2") && has!("fma") {
            Simd::Avx2
        } else {
            Simd::Base
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        Simd::Base
    }
}

/// `item` three times, as `$base`, `$avx2` and `$avx512`, compiled for the
/// baseline, AVX2 and AVX-512 ([`Simd`]); off x86-64 all three are the
/// baseline's (statements: it expands where a block's statements go).
macro_rules! for_each_simd {
    ($base:ident, $avx2:ident, $avx512:ident, $(#[$m:meta])* unsafe fn $($item:tt)*) => {
        $(#[$m])*
        unsafe fn $base $($item)*
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        $(#[$m])*
        unsafe fn $avx2 $($item)*
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,avx512f,avx512dq,avx512vl,avx512bw")]
        $(#[$m])*
        unsafe fn $avx512 $($item)*
        #[cfg(not(target_arch = "x86_64"))]
        let ($avx2, $avx512) = ($base, $base);
    };
}

/// The [`Un`] for this CPU of `body(d, x)`, a loop over `d.len()` lanes.
macro_rules! un_of {
    ($body:ident) => {{
        for_each_simd!(base, avx2, avx512, unsafe fn (d: *mut u64, x: *const u64, n: usize) {
            // SAFETY: `Un`'s contract: `n` lanes at each pointer, `d` apart
            // from `x`; each variant only where the CPU has its features.
            unsafe { $body($crate::lanes::slice_mut(d, n), $crate::lanes::slice(x, n)) }
        });
        match $crate::lanes::simd() {
            $crate::lanes::Simd::Base => base as $crate::lanes::Un,
            $crate::lanes::Simd::Avx2 => avx2,
            $crate::lanes::Simd::Avx512 => avx512,
        }
    }};
}

/// The [`Bins`] for this CPU of `vv(d, x, y)`, `vk(d, x, k)` and `kv(d, k,
/// y)`, loops over `d.len()` lanes.
macro_rules! bins_of {
    ($vv:ident, $vk:ident, $kv:ident) => {{
        // SAFETY (all): `Bin`'s and `BinK`'s contracts: `n` lanes at each
        // pointer, `d` apart from the others; each variant only where the
        // CPU has its features.
        for_each_simd!(vv_base, vv_avx2, vv_avx512,
            unsafe fn (d: *mut u64, x: *const u64, y: *const u64, n: usize) {
                unsafe { $vv($crate::lanes::slice_mut(d, n), $crate::lanes::slice(x, n), $crate::lanes::slice(y, n)) }
            });
        for_each_simd!(vk_base, vk_avx2, vk_avx512,
            unsafe fn (d: *mut u64, x: *const u64, k: u64, n: usize) {
                unsafe { $vk($crate::lanes::slice_mut(d, n), $crate::lanes::slice(x, n), k) }
            });
        for_each_simd!(kv_base, kv_avx2, kv_avx512,
            unsafe fn (d: *mut u64, y: *const u64, k: u64, n: usize) {
                unsafe { $kv($crate::lanes::slice_mut(d, n), k, $crate::lanes::slice(y, n)) }
            });
        let (vv, vk, kv): ($crate::lanes::Bin, $crate::lanes::BinK, $crate::lanes::BinK) =
            match $crate::lanes::simd() {
                $crate::lanes::Simd::Base => (vv_base, vk_base, kv_base),
                $crate::lanes::Simd::Avx2 => (vv_avx2, vk_avx2, kv_avx2),
                $crate::lanes::Simd::Avx512 => (vv_avx512, vk_avx512, kv_avx512),
            };
        $crate::lanes::Bins { vv, vk, kv }
    }};
}

/// A lane loop of the lane function `f` of one argument, as a [`Un`] for
/// this CPU.
macro_rules! un {
    ($f:path) => {{
        #[inline(always)]
        fn body(d: &mut [u64], x: &[u64]) {
            for (d, &x) in d.iter_mut().zip(x) {
                *d = $f(x);
            }
        }
        un_of!(body)
    }};
}

/// The lane loops of the lane function `f` of two arguments for this CPU,
/// in their three forms.
macro_rules! bin {
    ($f:path) => {{
        #[inline(always)]
        fn f(a: u64, b: u64) -> u64 {
            $f(a, b)
        }
        #[inline(always)]
        fn vv(d: &mut [u64], x: &[u64], y: &[u64]) {
            for ((d, &x), &y) in d.iter_mut().zip(x).zip(y) {
                *d = f(x, y);
            }
        }
        #[inline(always)]
        fn vk(d: &mut [u64], x: &[u64], k: u64) {
            for (d, &x) in d.iter_mut().zip(x) {
                *d = f(x, k);
            }
        }
        #[inline(always)]
        fn kv(d: &mut [u64], k: u64, y: &[u64]) {
            for (d, &y) in d.iter_mut().zip(y) {
                *d = f(k, y);
            }
        }
        bins_of!(vv, vk, kv)
    }};
}

/// Blocks shorter than this run a math function by its `libm` call, lane
/// by lane, rather than by its routine, which computes every path of the
/// algorithm for every lane (a row-by-row loop runs one lane at a time).
pub(crate) const ROUTINE_MIN_LANES: usize = 8;

/// Lanes a routine's loop runs at a time: one flag each (whether the lane
/// needs the `libm` function) lives on the stack. The VM's blocks are no
/// longer.
pub(crate) const ROUTINE_CHUNK: usize = 256;

/// A generated math routine (`routines.rs`) over the lanes of `d` (at most
/// [`ROUTINE_CHUNK`]), whose arguments `inputs` yields (an expression
/// evaluated once per pass), by `fast` (the routine: its result and whether
/// the lane needs the `libm` function) and `call` (the `libm` function):
/// the routine over every lane in SIMD, then, only in a block where some
/// lane needs the function, the function for those lanes alone (the
/// routine's own result there, as `generate.rs` checks). Short blocks call
/// the function lane by lane. A macro, not a function of closures: LLVM
/// does not inline a routine's body through a closure into the SIMD loop
/// (the loop then ran at the call's speed).
macro_rules! routine_loop {
    ($d:ident, $inputs:expr, |$v:pat_param| $fast:expr, $call:expr) => {{
        if $d.len() < $crate::lanes::ROUTINE_MIN_LANES {
            for (d, $v) in $d.iter_mut().zip($inputs) {
                *d = $call;
            }
        } else {
            let mut flags = [0u64; $crate::lanes::ROUTINE_CHUNK];
            let flags = &mut flags[..$d.len()];
            let mut rare = 0;
            for ((d, flag), $v) in $d.iter_mut().zip(flags.iter_mut()).zip($inputs) {
                let (v, r) = $fast;
                (*d, *flag) = (v, r);
                rare |= r;
            }
            if rare != 0 {
                for ((d, &flag), $v) in $d.iter_mut().zip(flags.iter()).zip($inputs) {
                    if flag != 0 {
                        *d = $call;
                    }
                }
            }
        }
    }};
}

/// The lane loop ([`routine_loop`]) of a generated math routine `f` of one
/// argument, whose `libm` function is `call`, as a [`Un`] for this CPU.
macro_rules! routine1 {
    ($f:ident, |$a:ident| $call:expr) => {{
        #[inline(always)]
        fn body(d: &mut [u64], x: &[u64]) {
            let chunk = $crate::lanes::ROUTINE_CHUNK;
            for (d, x) in d.chunks_mut(chunk).zip(x.chunks(chunk)) {
                routine_loop!(d, x, |&$a| $f($a), $call)
            }
        }
        un_of!(body)
    }};
}

/// [`routine1`] of a routine of two results, `(first, second, rare)`
/// (`sincos`), whose `libm` functions are `call` (a pair), as a [`Un2`].
macro_rules! routine_sincos {
    ($f:ident, |$a:ident| $call:expr) => {{
        #[inline(always)]
        fn chunk(d: &mut [u64], e: &mut [u64], x: &[u64]) {
            if d.len() < $crate::lanes::ROUTINE_MIN_LANES {
                for ((d, e), &$a) in d.iter_mut().zip(e.iter_mut()).zip(x) {
                    (*d, *e) = $call;
                }
                return;
            }
            let mut flags = [0u64; $crate::lanes::ROUTINE_CHUNK];
            let flags = &mut flags[..d.len()];
            let mut rare = 0;
            for (((d, e), flag), &$a) in d.iter_mut().zip(e.iter_mut()).zip(flags.iter_mut()).zip(x)
            {
                let (first, second, r) = $f($a);
                (*d, *e, *flag) = (first, second, r);
                rare |= r;
            }
            if rare != 0 {
                for (((d, e), &flag), &$a) in
                    d.iter_mut().zip(e.iter_mut()).zip(flags.iter()).zip(x)
                {
                    if flag != 0 {
                        (*d, *e) = $call;
                    }
                }
            }
        }
        un2_of!(chunk)
    }};
}

/// The [`Un2`] for this CPU of `chunk(d, e, x)` over runs of at most
/// [`ROUTINE_CHUNK`] lanes.
macro_rules! un2_of {
    ($chunk:ident) => {{
        #[inline(always)]
        fn body(d: &mut [u64], e: &mut [u64], x: &[u64]) {
            let n = $crate::lanes::ROUTINE_CHUNK;
            for ((d, e), x) in d.chunks_mut(n).zip(e.chunks_mut(n)).zip(x.chunks(n)) {
                $chunk(d, e, x);
            }
        }
        for_each_simd!(base, avx2, avx512, unsafe fn (d: *mut u64, e: *mut u64, x: *const u64, n: usize) {
            // SAFETY: `Un2`'s contract: `n` lanes at each pointer, `d`, `e`
            // and `x` apart; each variant only where the CPU has its features.
            unsafe {
                body(
                    $crate::lanes::slice_mut(d, n),
                    $crate::lanes::slice_mut(e, n),
                    $crate::lanes::slice(x, n),
                )
            }
        });
        match $crate::lanes::simd() {
            $crate::lanes::Simd::Base => base as $crate::lanes::Un2,
            $crate::lanes::Simd::Avx2 => avx2,
            $crate::lanes::Simd::Avx512 => avx512,
        }
    }};
}

/// [`routine1`] of a routine of two arguments, as [`Bins`].
macro_rules! routine2 {
    ($f:ident, |$a:ident, $b:ident| $call:expr) => {{
        #[inline(always)]
        fn vv(d: &mut [u64], x: &[u64], y: &[u64]) {
            let n = $crate::lanes::ROUTINE_CHUNK;
            for ((d, x), y) in d.chunks_mut(n).zip(x.chunks(n)).zip(y.chunks(n)) {
                let xy = || x.iter().zip(y).map(|(&a, &b)| (a, b));
                routine_loop!(d, xy(), |($a, $b)| $f($a, $b), $call)
            }
        }
        #[inline(always)]
        fn vk(d: &mut [u64], x: &[u64], k: u64) {
            let $b = k;
            let n = $crate::lanes::ROUTINE_CHUNK;
            for (d, x) in d.chunks_mut(n).zip(x.chunks(n)) {
                routine_loop!(d, x, |&$a| $f($a, $b), $call)
            }
        }
        #[inline(always)]
        fn kv(d: &mut [u64], k: u64, y: &[u64]) {
            let $a = k;
            let n = $crate::lanes::ROUTINE_CHUNK;
            for (d, y) in d.chunks_mut(n).zip(y.chunks(n)) {
                routine_loop!(d, y, |&$b| $f($a, $b), $call)
            }
        }
        bins_of!(vv, vk, kv)
    }};
}

/// [`routine_loop`] of a *narrow* routine (`generate.rs`: an `f32`
/// routine of `u32` values) over the lanes of `d` (at most
/// [`ROUTINE_CHUNK`]). `wide` yields the arguments as lanes (an
/// expression evaluated once per pass), for `call` (the `libm` function)
/// in a short block and in a rare lane; `narrow` yields them narrowed to
/// `u32`s ([`narrowed`]), for `fast` (the routine). The routine runs into a `u32` buffer, a loop
/// of 32-bit values only, which rustc vectorizes twice as wide as a loop
/// storing 8-byte lanes (a routine that reduces in `f64`, `sinf`'s, still
/// runs those steps four to an AVX2 vector; docs/performance.md has the
/// figures), then widened into `d`.
macro_rules! routine_loop_32 {
    (
        $d:ident,
        $wide:expr, |$w:pat_param| $call:expr,
        $narrow:expr, |$v:pat_param| $fast:expr
    ) => {{
        if $d.len() < $crate::lanes::ROUTINE_MIN_LANES {
            for (d, $w) in $d.iter_mut().zip($wide) {
                *d = $call;
            }
        } else {
            let mut out = [0u32; $crate::lanes::ROUTINE_CHUNK];
            let mut flags = [0u32; $crate::lanes::ROUTINE_CHUNK];
            let n = $d.len();
            let (out, flags) = (&mut out[..n], &mut flags[..n]);
            let mut rare = 0;
            for ((o, flag), $v) in out.iter_mut().zip(flags.iter_mut()).zip($narrow) {
                let (v, r) = $fast;
                (*o, *flag) = (v, r);
                rare |= r;
            }
            for (d, &o) in $d.iter_mut().zip(out.iter()) {
                *d = u64::from(o);
            }
            if rare != 0 {
                for ((d, &flag), $w) in $d.iter_mut().zip(flags.iter()).zip($wide) {
                    if flag != 0 {
                        *d = $call;
                    }
                }
            }
        }
    }};
}

/// `x`'s lanes (4-byte values, zero-extended) as `u32`s in `buf`.
#[inline(always)]
pub(crate) fn narrowed<'a>(x: &[u64], buf: &'a mut [u32; ROUTINE_CHUNK]) -> &'a [u32] {
    let buf = &mut buf[..x.len()];
    for (b, &x) in buf.iter_mut().zip(x) {
        *b = x as u32;
    }
    buf
}

/// [`routine1`] of a narrow routine (`generate.rs`).
macro_rules! routine1_32 {
    ($f:ident, |$a:ident| $call:expr) => {{
        #[inline(always)]
        fn body(d: &mut [u64], x: &[u64]) {
            let chunk = $crate::lanes::ROUTINE_CHUNK;
            for (d, x) in d.chunks_mut(chunk).zip(x.chunks(chunk)) {
                let mut buf = [0u32; $crate::lanes::ROUTINE_CHUNK];
                let narrow = $crate::lanes::narrowed(x, &mut buf);
                routine_loop_32!(d, x, |&$a| $call, narrow, |&a| $f(a))
            }
        }
        un_of!(body)
    }};
}

/// [`routine2`] of a narrow routine (`generate.rs`).
macro_rules! routine2_32 {
    ($f:ident, |$a:ident, $b:ident| $call:expr) => {{
        #[inline(always)]
        fn vv(d: &mut [u64], x: &[u64], y: &[u64]) {
            let n = $crate::lanes::ROUTINE_CHUNK;
            for ((d, x), y) in d.chunks_mut(n).zip(x.chunks(n)).zip(y.chunks(n)) {
                let (mut xb, mut yb) = (
                    [0u32; $crate::lanes::ROUTINE_CHUNK],
                    [0u32; $crate::lanes::ROUTINE_CHUNK],
                );
                let xn = $crate::lanes::narrowed(x, &mut xb);
                let yn = $crate::lanes::narrowed(y, &mut yb);
                let wide = x.iter().zip(y).map(|(&a, &b)| (a, b));
                let narrow = xn.iter().zip(yn).map(|(&a, &b)| (a, b));
                routine_loop_32!(d, wide.clone(), |($a, $b)| $call, narrow, |(a, b)| $f(a, b))
            }
        }
        #[inline(always)]
        fn vk(d: &mut [u64], x: &[u64], k: u64) {
            let n = $crate::lanes::ROUTINE_CHUNK;
            for (d, x) in d.chunks_mut(n).zip(x.chunks(n)) {
                let mut buf = [0u32; $crate::lanes::ROUTINE_CHUNK];
                let narrow = $crate::lanes::narrowed(x, &mut buf);
                let (wide, $b) = (x, k);
                routine_loop_32!(d, wide, |&$a| $call, narrow, |&a| $f(a, k as u32))
            }
        }
        #[inline(always)]
        fn kv(d: &mut [u64], k: u64, y: &[u64]) {
            let n = $crate::lanes::ROUTINE_CHUNK;
            for (d, y) in d.chunks_mut(n).zip(y.chunks(n)) {
                let mut buf = [0u32; $crate::lanes::ROUTINE_CHUNK];
                let narrow = $crate::lanes::narrowed(y, &mut buf);
                let (wide, $a) = (y, k);
                routine_loop_32!(d, wide, |&$b| $call, narrow, |&b| $f(k as u32, b))
            }
        }
        bins_of!(vv, vk, kv)
    }};
}

/// [`routine_sincos`] of a narrow routine (`generate.rs`).
macro_rules! routine_sincos_32 {
    ($f:ident, |$a:ident| $call:expr) => {{
        #[inline(always)]
        fn chunk(d: &mut [u64], e: &mut [u64], x: &[u64]) {
            if d.len() < $crate::lanes::ROUTINE_MIN_LANES {
                for ((d, e), &$a) in d.iter_mut().zip(e.iter_mut()).zip(x) {
                    (*d, *e) = $call;
                }
                return;
            }
            let mut buf = [0u32; $crate::lanes::ROUTINE_CHUNK];
            let x = $crate::lanes::narrowed(x, &mut buf);
            let n = d.len();
            let mut first = [0u32; $crate::lanes::ROUTINE_CHUNK];
            let mut second = [0u32; $crate::lanes::ROUTINE_CHUNK];
            let mut flags = [0u32; $crate::lanes::ROUTINE_CHUNK];
            let (first, second, flags) = (&mut first[..n], &mut second[..n], &mut flags[..n]);
            let mut rare = 0;
            for (((s, c), flag), &a) in first
                .iter_mut()
                .zip(second.iter_mut())
                .zip(flags.iter_mut())
                .zip(x)
            {
                let (sv, cv, r) = $f(a);
                (*s, *c, *flag) = (sv, cv, r);
                rare |= r;
            }
            for ((d, e), (&s, &c)) in d
                .iter_mut()
                .zip(e.iter_mut())
                .zip(first.iter().zip(second.iter()))
            {
                (*d, *e) = (u64::from(s), u64::from(c));
            }
            if rare != 0 {
                for (((d, e), &flag), &a) in d.iter_mut().zip(e.iter_mut()).zip(flags.iter()).zip(x)
                {
                    if flag != 0 {
                        let $a = u64::from(a);
                        (*d, *e) = $call;
                    }
                }
            }
        }
        un2_of!(chunk)
    }};
}

/// `dst[i] = f(a[i], k)` (or `f(k, a[i])`) for `i < n`: a binary op with a
/// constant operand, which needs no lanes of its own.
pub(crate) type BinK = unsafe fn(*mut u64, *const u64, u64, usize);

/// A binary op's loops: both operands lanes, the second constant, the
/// first constant.
#[derive(Copy, Clone)]
pub(crate) struct Bins {
    pub(crate) vv: Bin,
    pub(crate) vk: BinK,
    pub(crate) kv: BinK,
}

/// # Safety
/// `n` elements at `p`, not aliased.
#[inline(always)]
pub(crate) unsafe fn slice_mut<'a>(p: *mut u64, n: usize) -> &'a mut [u64] {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(p, n) }
}

/// # Safety
/// `n` elements at `p`, not written meanwhile.
#[inline(always)]
pub(crate) unsafe fn slice<'a>(p: *const u64, n: usize) -> &'a [u64] {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(p, n) }
}

#[inline(always)]
pub(crate) fn f64_(x: u64) -> f64 {
    f64::from_bits(x)
}
#[inline(always)]
pub(crate) fn f32_(x: u64) -> f32 {
    f32::from_bits(x as u32)
}
#[inline(always)]
fn i32_(x: u64) -> i32 {
    x as u32 as i32
}
#[inline(always)]
fn i64_(x: u64) -> i64 {
    x as i64
}
#[inline(always)]
pub(crate) fn of_f64(v: f64) -> u64 {
    v.to_bits()
}
#[inline(always)]
pub(crate) fn of_f32(v: f32) -> u64 {
    u64::from(v.to_bits())
}
#[inline(always)]
fn of_i32(v: i32) -> u64 {
    u64::from(v as u32)
}
#[inline(always)]
fn of_i64(v: i64) -> u64 {
    v as u64
}
#[inline(always)]
fn of_bool(v: bool) -> u64 {
    u64::from(v)
}

/// IEEE 754-2019 `minimum`/`maximum` (NaN if either is, -0.0 < +0.0), as
/// the kernel's float `min`/`max` are.
macro_rules! minimum {
    ($a:expr, $b:expr, $bits:ident) => {{
        let (a, b) = ($a, $b);
        if a < b {
            a
        } else if b < a {
            b
        } else if a == b {
            // Equal: they differ at most in the sign of zero.
            <$bits>::from_bits(a.to_bits() | b.to_bits())
        } else {
            <$bits>::NAN
        }
    }};
}
macro_rules! maximum {
    ($a:expr, $b:expr, $bits:ident) => {{
        let (a, b) = ($a, $b);
        if a > b {
            a
        } else if b > a {
            b
        } else if a == b {
            <$bits>::from_bits(a.to_bits() & b.to_bits())
        } else {
            <$bits>::NAN
        }
    }};
}

/// Defines each op's lane function (a module-level `fn` of lanes, which
/// the generated math routines, `routines.rs`, call by name), the table
/// from an op to its loop, and the table from an op to its function's name,
/// from one list, so what a lane computes is written once.
macro_rules! ops {
    (
        $(#[$doc:meta])*
        fn $table:ident($($p:ident: $pt:ty),*) -> $loops:ident by $looper:ident, named $names:ident;
        $($pat:pat => $name:ident(|$($a:ident),+| $e:expr),)*
    ) => {
        $(
            #[inline(always)]
            pub(crate) fn $name($($a: u64),+) -> u64 {
                $e
            }
        )*
        $(#[$doc])*
        pub(crate) fn $table($($p: $pt),*) -> Option<$loops> {
            #[allow(unused_imports)]
            use {BinaryOp::*, CmpOp::*, DType::*, UnaryOp::*};
            #[allow(unreachable_patterns)] // `compare` lists every case
            Some(match ($($p),*) {
                $($pat => $looper!($name),)*
                _ => return None,
            })
        }
        /// The name of the lane function [`
        #[doc = stringify!($table)]
        /// `] loops over, for the generator of `routines.rs`.
        #[cfg(test)]
        pub(crate) fn $names($($p: $pt),*) -> Option<&'static str> {
            #[allow(unused_imports)]
            use {BinaryOp::*, CmpOp::*, DType::*, UnaryOp::*};
            #[allow(unreachable_patterns)] // `compare` lists every case
            Some(match ($($p),*) {
                $($pat => stringify!($name),)*
                _ => return None,
            })
        }
    };
}

ops! {
    /// The loop of a unary op the machine computes (not the `libm`
    /// functions: [`crate::math`] calls those).
    fn unary(op: UnaryOp, dtype: DType) -> Un by un, named unary_name;
    (Neg, F64) => neg_f64(|a| of_f64(-f64_(a))),
    (Neg, F32) => neg_f32(|a| of_f32(-f32_(a))),
    (Neg, I64) => neg_i64(|a| of_i64(i64_(a).wrapping_neg())),
    (Neg, I32) => neg_i32(|a| of_i32(i32_(a).wrapping_neg())),
    (Abs, F64) => abs_f64(|a| of_f64(f64_(a).abs())),
    (Abs, F32) => abs_f32(|a| of_f32(f32_(a).abs())),
    (Abs, I64) => abs_i64(|a| of_i64(i64_(a).wrapping_abs())),
    (Abs, I32) => abs_i32(|a| of_i32(i32_(a).wrapping_abs())),
    (BNot, I64) => bnot_i64(|a| !a),
    (BNot, I32) => bnot_i32(|a| of_i32(!i32_(a))),
    (Sqrt, F64) => sqrt_f64(|a| of_f64(f64_(a).sqrt())),
    (Sqrt, F32) => sqrt_f32(|a| of_f32(f32_(a).sqrt())),
    (Floor, F64) => floor_f64(|a| of_f64(f64_(a).floor())),
    (Floor, F32) => floor_f32(|a| of_f32(f32_(a).floor())),
    (Ceil, F64) => ceil_f64(|a| of_f64(f64_(a).ceil())),
    (Ceil, F32) => ceil_f32(|a| of_f32(f32_(a).ceil())),
    (Trunc, F64) => trunc_f64(|a| of_f64(f64_(a).trunc())),
    (Trunc, F32) => trunc_f32(|a| of_f32(f32_(a).trunc())),
    (Round, F64) => round_f64(|a| of_f64(f64_(a).round_ties_even())),
    (Round, F32) => round_f32(|a| of_f32(f32_(a).round_ties_even())),
}

ops! {
    /// The loop of a binary op the machine computes (integer `div`/`rem`
    /// with a divisor lowering made nonzero and not -1; shift amounts below
    /// the width; bitwise `and`/`or`/`xor` on `bool` lanes too).
    fn binary(op: BinaryOp, dtype: DType) -> Bins by bin, named binary_name;
    (Add, F64) => add_f64(|a, b| of_f64(f64_(a) + f64_(b))),
    (Sub, F64) => sub_f64(|a, b| of_f64(f64_(a) - f64_(b))),
    (Mul, F64) => mul_f64(|a, b| of_f64(f64_(a) * f64_(b))),
    (Div, F64) => div_f64(|a, b| of_f64(f64_(a) / f64_(b))),
    (Min, F64) => min_f64(|a, b| of_f64(minimum!(f64_(a), f64_(b), f64))),
    (Max, F64) => max_f64(|a, b| of_f64(maximum!(f64_(a), f64_(b), f64))),
    (Copysign, F64) => copysign_f64(|a, b| of_f64(f64_(a).copysign(f64_(b)))),
    (Add, F32) => add_f32(|a, b| of_f32(f32_(a) + f32_(b))),
    (Sub, F32) => sub_f32(|a, b| of_f32(f32_(a) - f32_(b))),
    (Mul, F32) => mul_f32(|a, b| of_f32(f32_(a) * f32_(b))),
    (Div, F32) => div_f32(|a, b| of_f32(f32_(a) / f32_(b))),
    (Min, F32) => min_f32(|a, b| of_f32(minimum!(f32_(a), f32_(b), f32))),
    (Max, F32) => max_f32(|a, b| of_f32(maximum!(f32_(a), f32_(b), f32))),
    (Copysign, F32) => copysign_f32(|a, b| of_f32(f32_(a).copysign(f32_(b)))),
    (Add, I64) => add_i64(|a, b| a.wrapping_add(b)),
    (Sub, I64) => sub_i64(|a, b| a.wrapping_sub(b)),
    (Mul, I64) => mul_i64(|a, b| a.wrapping_mul(b)),
    (Div, I64) => div_i64(|a, b| of_i64(i64_(a).checked_div(i64_(b)).unwrap_or(0))),
    (Rem, I64) => rem_i64(|a, b| of_i64(i64_(a).checked_rem(i64_(b)).unwrap_or(0))),
    (Min, I64) => min_i64(|a, b| of_i64(i64_(a).min(i64_(b)))),
    (Max, I64) => max_i64(|a, b| of_i64(i64_(a).max(i64_(b)))),
    (Shl, I64) => shl_i64(|a, b| a.wrapping_shl(b as u32)),
    (ShrArith, I64) => shr_arith_i64(|a, b| of_i64(i64_(a).wrapping_shr(b as u32))),
    (ShrLogical, I64) => shr_logical_i64(|a, b| a.wrapping_shr(b as u32)),
    (Add, I32) => add_i32(|a, b| of_i32(i32_(a).wrapping_add(i32_(b)))),
    (Sub, I32) => sub_i32(|a, b| of_i32(i32_(a).wrapping_sub(i32_(b)))),
    (Mul, I32) => mul_i32(|a, b| of_i32(i32_(a).wrapping_mul(i32_(b)))),
    (Div, I32) => div_i32(|a, b| of_i32(i32_(a).checked_div(i32_(b)).unwrap_or(0))),
    (Rem, I32) => rem_i32(|a, b| of_i32(i32_(a).checked_rem(i32_(b)).unwrap_or(0))),
    (Min, I32) => min_i32(|a, b| of_i32(i32_(a).min(i32_(b)))),
    (Max, I32) => max_i32(|a, b| of_i32(i32_(a).max(i32_(b)))),
    (Shl, I32) => shl_i32(|a, b| of_i32(i32_(a).wrapping_shl(b as u32))),
    (ShrArith, I32) => shr_arith_i32(|a, b| of_i32(i32_(a).wrapping_shr(b as u32))),
    (ShrLogical, I32) => shr_logical_i32(|a, b| u64::from((a as u32).wrapping_shr(b as u32))),
    // Zero-extended lanes stay zero-extended under bitwise ops.
    (And | BAnd, Bool | I32 | I64) => and(|a, b| a & b),
    (Or | BOr, Bool | I32 | I64) => or(|a, b| a | b),
    (Xor | BXor, Bool | I32 | I64) => xor(|a, b| a ^ b),
}

ops! {
    /// A comparison of two `operand` lanes, giving `bool` lanes: integers
    /// signed, floats ordered except `ne`, bools by value (a `bool` lane is
    /// 0 or 1: as an `i64` it orders as false < true).
    fn compare(op: CmpOp, operand: DType) -> Bins by bin, named compare_name;
    (Eq, F64) => eq_f64(|a, b| of_bool(f64_(a) == f64_(b))),
    (Ne, F64) => ne_f64(|a, b| of_bool(f64_(a) != f64_(b))),
    (Lt, F64) => lt_f64(|a, b| of_bool(f64_(a) < f64_(b))),
    (Le, F64) => le_f64(|a, b| of_bool(f64_(a) <= f64_(b))),
    (Gt, F64) => gt_f64(|a, b| of_bool(f64_(a) > f64_(b))),
    (Ge, F64) => ge_f64(|a, b| of_bool(f64_(a) >= f64_(b))),
    (Eq, F32) => eq_f32(|a, b| of_bool(f32_(a) == f32_(b))),
    (Ne, F32) => ne_f32(|a, b| of_bool(f32_(a) != f32_(b))),
    (Lt, F32) => lt_f32(|a, b| of_bool(f32_(a) < f32_(b))),
    (Le, F32) => le_f32(|a, b| of_bool(f32_(a) <= f32_(b))),
    (Gt, F32) => gt_f32(|a, b| of_bool(f32_(a) > f32_(b))),
    (Ge, F32) => ge_f32(|a, b| of_bool(f32_(a) >= f32_(b))),
    (Eq, I64 | Bool) => eq_i64(|a, b| of_bool(i64_(a) == i64_(b))),
    (Ne, I64 | Bool) => ne_i64(|a, b| of_bool(i64_(a) != i64_(b))),
    (Lt, I64 | Bool) => lt_i64(|a, b| of_bool(i64_(a) < i64_(b))),
    (Le, I64 | Bool) => le_i64(|a, b| of_bool(i64_(a) <= i64_(b))),
    (Gt, I64 | Bool) => gt_i64(|a, b| of_bool(i64_(a) > i64_(b))),
    (Ge, I64 | Bool) => ge_i64(|a, b| of_bool(i64_(a) >= i64_(b))),
    (Eq, I32) => eq_i32(|a, b| of_bool(i32_(a) == i32_(b))),
    (Ne, I32) => ne_i32(|a, b| of_bool(i32_(a) != i32_(b))),
    (Lt, I32) => lt_i32(|a, b| of_bool(i32_(a) < i32_(b))),
    (Le, I32) => le_i32(|a, b| of_bool(i32_(a) <= i32_(b))),
    (Gt, I32) => gt_i32(|a, b| of_bool(i32_(a) > i32_(b))),
    (Ge, I32) => ge_i32(|a, b| of_bool(i32_(a) >= i32_(b))),
}

ops! {
    /// A conversion as `Expr::Cast` defines it (Rust's `as`; from a 0/1
    /// `bool`); `None` for a conversion to `bool`, which lowering never
    /// emits. The same dtype, and any `Expr::Bitcast` (a lane is only
    /// bits, zero-extended either way), is the identity.
    fn cast(from: DType, to: DType) -> Un by un, named cast_name;
    (F64, F64) | (F32, F32) | (I64, I64) | (I32, I32) | (Bool, Bool) | (Bool, I32 | I64)
        => same(|a| a),
    (Bool, F32) => bool_to_f32(|a| of_f32(a as f32)),
    (Bool, F64) => bool_to_f64(|a| of_f64(a as f64)),
    (I32, I64) => i32_to_i64(|a| of_i64(i64::from(i32_(a)))),
    (I32, F32) => i32_to_f32(|a| of_f32(i32_(a) as f32)),
    (I32, F64) => i32_to_f64(|a| of_f64(f64::from(i32_(a)))),
    (I64, I32) => i64_to_i32(|a| of_i32(i64_(a) as i32)),
    (I64, F32) => i64_to_f32(|a| of_f32(i64_(a) as f32)),
    (I64, F64) => i64_to_f64(|a| of_f64(i64_(a) as f64)),
    (F32, I32) => f32_to_i32(|a| of_i32(f32_(a) as i32)),
    (F32, I64) => f32_to_i64(|a| of_i64(f32_(a) as i64)),
    (F32, F64) => f32_to_f64(|a| of_f64(f64::from(f32_(a)))),
    (F64, I32) => f64_to_i32(|a| of_i32(f64_(a) as i32)),
    (F64, I64) => f64_to_i64(|a| of_i64(f64_(a) as i64)),
    (F64, F32) => f64_to_f32(|a| of_f32(f64_(a) as f32)),
}

/// `select(c, a, b)` of lanes, `c` a `bool` lane (0 or 1), branch-free.
#[inline(always)]
pub(crate) fn select_lane(c: u64, a: u64, b: u64) -> u64 {
    // A mask of the condition, so a loop of it is branch-free (written as
    // an `if`, LLVM branches on each lane).
    let keep_a = c.wrapping_neg();
    (a & keep_a) | (b & !keep_a)
}

/// `dst[i] = if c[i] != 0 { a[i] } else { b[i] }` for `i < n`, where
/// `c[i]` is a `bool` lane (0 or 1).
///
/// # Safety
/// `n` lanes at each pointer; `d` apart from the others.
pub(crate) unsafe fn select(d: *mut u64, c: *const u64, a: *const u64, b: *const u64, n: usize) {
    #[inline(always)]
    fn body(d: &mut [u64], c: &[u64], a: &[u64], b: &[u64]) {
        for (((d, &c), &a), &b) in d.iter_mut().zip(c).zip(a).zip(b) {
            *d = select_lane(c, a, b);
        }
    }
    for_each_simd!(base, avx2, avx512,
    unsafe fn (d: *mut u64, c: *const u64, a: *const u64, b: *const u64, n: usize) {
        // SAFETY: the caller's contract; each variant only where the
        // CPU has its features.
        unsafe { body(slice_mut(d, n), slice(c, n), slice(a, n), slice(b, n)) }
    });
    // SAFETY: as above.
    unsafe {
        match simd() {
            Simd::Base => base(d, c, a, b, n),
            Simd::Avx2 => avx2(d, c, a, b, n),
            Simd::Avx512 => avx512(d, c, a, b, n),
        }
    }
}

/// The loop of a fused multiply-add of `dtype` lanes, `a * b + c` rounded
/// once (`f32::mul_add`: `vfmadd` in the AVX2 and AVX-512 variants, both
/// compiled with FMA; a correctly rounded `fmaf` call in the baseline's).
pub(crate) fn mul_add(dtype: DType) -> Option<Tern> {
    macro_rules! tern {
        ($f:expr) => {{
            #[inline(always)]
            fn body(d: &mut [u64], a: &[u64], b: &[u64], c: &[u64]) {
                for (((d, &a), &b), &c) in d.iter_mut().zip(a).zip(b).zip(c) {
                    *d = $f(a, b, c);
                }
            }
            for_each_simd!(base, avx2, avx512,
            unsafe fn (d: *mut u64, a: *const u64, b: *const u64, c: *const u64, n: usize) {
                // SAFETY: `Tern`'s contract; each variant only where the
                // CPU has its features.
                unsafe { body(slice_mut(d, n), slice(a, n), slice(b, n), slice(c, n)) }
            });
            match simd() {
                Simd::Base => base as Tern,
                Simd::Avx2 => avx2,
                Simd::Avx512 => avx512,
            }
        }};
    }
    match dtype {
        DType::F32 => Some(tern!(mul_add_f32)),
        DType::F64 => Some(tern!(mul_add_f64)),
        _ => None,
    }
}

/// `a * b + c` of `f32` lanes, rounded once.
#[inline(always)]
pub(crate) fn mul_add_f32(a: u64, b: u64, c: u64) -> u64 {
    of_f32(f32_(a).mul_add(f32_(b), f32_(c)))
}

/// `a * b + c` of `f64` lanes, rounded once.
#[inline(always)]
pub(crate) fn mul_add_f64(a: u64, b: u64, c: u64) -> u64 {
    of_f64(f64_(a).mul_add(f64_(b), f64_(c)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_bin(f: Bins, a: &[u64], b: &[u64]) -> Vec<u64> {
        let mut d = vec![0; a.len()];
        // SAFETY: three buffers of the same length, `d` apart.
        unsafe { (f.vv)(d.as_mut_ptr(), a.as_ptr(), b.as_ptr(), a.len()) };
        // The constant forms agree lane by lane.
        for i in 0..a.len() {
            let (mut vk, mut kv) = (0, 0);
            // SAFETY: one lane each.
            unsafe {
                (f.vk)(&mut vk, &a[i], b[i], 1);
                (f.kv)(&mut kv, &b[i], a[i], 1);
            }
            assert_eq!((vk, kv), (d[i], d[i]));
        }
        d
    }

    #[test]
    fn float_min_max_are_ieee_minimum_maximum() {
        let min = binary(BinaryOp::Min, DType::F64).unwrap();
        let max = binary(BinaryOp::Max, DType::F64).unwrap();
        let a = [0.0f64, -0.0, 1.0, f64::NAN, 2.0].map(f64::to_bits);
        let b = [-0.0f64, 0.0, f64::NAN, 1.0, -3.0].map(f64::to_bits);
        let lo: Vec<f64> = run_bin(min, &a, &b)
            .into_iter()
            .map(f64::from_bits)
            .collect();
        let hi: Vec<f64> = run_bin(max, &a, &b)
            .into_iter()
            .map(f64::from_bits)
            .collect();
        assert!(lo[0] == 0.0 && lo[0].is_sign_negative());
        assert!(lo[1] == 0.0 && lo[1].is_sign_negative());
        assert!(lo[2].is_nan() && lo[3].is_nan());
        assert_eq!(lo[4], -3.0);
        assert!(hi[0] == 0.0 && hi[0].is_sign_positive());
        assert!(hi[1] == 0.0 && hi[1].is_sign_positive());
        assert!(hi[2].is_nan() && hi[3].is_nan());
        assert_eq!(hi[4], 2.0);
    }

    #[test]
    fn narrow_lanes_stay_zero_extended() {
        let not = unary(UnaryOp::BNot, DType::I32).unwrap();
        let mut d = [0u64; 2];
        let a = [0u64, of_i32(-1)];
        // SAFETY: two lanes each.
        unsafe { not(d.as_mut_ptr(), a.as_ptr(), 2) };
        assert_eq!(d, [0xffff_ffff, 0]);
        let shr = binary(BinaryOp::ShrArith, DType::I32).unwrap();
        assert_eq!(run_bin(shr, &[of_i32(-8)], &[1]), [of_i32(-4)]);
        let div = binary(BinaryOp::Div, DType::I64).unwrap();
        assert_eq!(run_bin(div, &[7, 7], &[of_i64(-2), 0]), [of_i64(-3), 0]);
        let to_i32 = cast(DType::F64, DType::I32).unwrap();
        let a = [of_f64(f64::NAN), of_f64(1e300), of_f64(-2.7)];
        let mut d = [0u64; 3];
        // SAFETY: three lanes each.
        unsafe { to_i32(d.as_mut_ptr(), a.as_ptr(), 3) };
        assert_eq!(d, [0, of_i32(i32::MAX), of_i32(-2)]);
    }
}
