//! What compiled code links against in process: the C math names kernels call
//! (`kiln_ir::kernel::libcalls`) bound to the pure-Rust `libm` crate, the
//! functions the interpreter's semantics call, so every in-process tier returns
//! the interpreter's bits. Objects and wasm modules import the same names from
//! their host instead.

macro_rules! bindings {
    ($($name:ident: fn($($arg:ident: $t:ty),*) -> $r:ty;)*) => {
        $(
            extern "C" fn $name($($arg: $t),*) -> $r {
                libm::$name($($arg),*)
            }
        )*

        /// Every C name a kernel may call (`kiln_ir::kernel::libcalls`),
        /// with the address of the `libm` crate function the in-process
        /// tiers bind it to.
        pub fn libm_symbols() -> Vec<(&'static str, *const u8)> {
            vec![$((stringify!($name), $name as *const u8)),*]
        }
    };
}

bindings! {
    sin: fn(x: f64) -> f64; cos: fn(x: f64) -> f64; tan: fn(x: f64) -> f64;
    asin: fn(x: f64) -> f64; acos: fn(x: f64) -> f64; atan: fn(x: f64) -> f64;
    sinh: fn(x: f64) -> f64; cosh: fn(x: f64) -> f64; tanh: fn(x: f64) -> f64;
    exp: fn(x: f64) -> f64; exp2: fn(x: f64) -> f64; expm1: fn(x: f64) -> f64;
    log: fn(x: f64) -> f64; log2: fn(x: f64) -> f64; log10: fn(x: f64) -> f64;
    log1p: fn(x: f64) -> f64; cbrt: fn(x: f64) -> f64;
    asinh: fn(x: f64) -> f64; acosh: fn(x: f64) -> f64; atanh: fn(x: f64) -> f64;
    erf: fn(x: f64) -> f64; erfc: fn(x: f64) -> f64;
    pow: fn(x: f64, y: f64) -> f64; atan2: fn(x: f64, y: f64) -> f64;
    hypot: fn(x: f64, y: f64) -> f64; fmod: fn(x: f64, y: f64) -> f64;
    nextafter: fn(x: f64, y: f64) -> f64;
    sinf: fn(x: f32) -> f32; cosf: fn(x: f32) -> f32; tanf: fn(x: f32) -> f32;
    asinf: fn(x: f32) -> f32; acosf: fn(x: f32) -> f32; atanf: fn(x: f32) -> f32;
    sinhf: fn(x: f32) -> f32; coshf: fn(x: f32) -> f32; tanhf: fn(x: f32) -> f32;
    expf: fn(x: f32) -> f32; exp2f: fn(x: f32) -> f32; expm1f: fn(x: f32) -> f32;
    logf: fn(x: f32) -> f32; log2f: fn(x: f32) -> f32; log10f: fn(x: f32) -> f32;
    log1pf: fn(x: f32) -> f32; cbrtf: fn(x: f32) -> f32;
    asinhf: fn(x: f32) -> f32; acoshf: fn(x: f32) -> f32; atanhf: fn(x: f32) -> f32;
    erff: fn(x: f32) -> f32; erfcf: fn(x: f32) -> f32;
    powf: fn(x: f32, y: f32) -> f32; atan2f: fn(x: f32, y: f32) -> f32;
    hypotf: fn(x: f32, y: f32) -> f32; fmodf: fn(x: f32, y: f32) -> f32;
    nextafterf: fn(x: f32, y: f32) -> f32;
}
