//! What compiled code links against in process: the C math names kernels call
//! (`kiln_kernel::libcalls`) bound to `kiln_ir::math` (the pure-Rust `libm`
//! crate, and kiln's own `erf` of `f32`), the functions the interpreter's
//! semantics call, so every in-process tier returns
//! the interpreter's bits. Objects and wasm modules import the same names from
//! their host instead.

macro_rules! bindings {
    (() unary: [$($u:ident $u64:ident $u32:ident),*] binary: [$($b:ident $b64:ident $b32:ident),*]) => {
        $(
            extern "C" fn $u64(x: f64) -> f64 {
                kiln_ir::math::$u64(x)
            }

            extern "C" fn $u32(x: f32) -> f32 {
                kiln_ir::math::$u32(x)
            }
        )*
        $(
            extern "C" fn $b64(x: f64, y: f64) -> f64 {
                kiln_ir::math::$b64(x, y)
            }

            extern "C" fn $b32(x: f32, y: f32) -> f32 {
                kiln_ir::math::$b32(x, y)
            }
        )*

        /// Every C name a kernel may call (`kiln_kernel::libcalls`), and
        /// `fma`/`fmaf` (a fused multiply-add, [`kiln_kernel::Expr::MulAdd`],
        /// on a CPU without the instruction), with the address of the
        /// `libm` crate function the in-process tiers bind it to.
        pub fn libm_symbols() -> Vec<(&'static str, *const u8)> {
            vec![
                $((stringify!($u64), $u64 as *const u8), (stringify!($u32), $u32 as *const u8),)*
                $((stringify!($b64), $b64 as *const u8), (stringify!($b32), $b32 as *const u8),)*
                ("fma", fma as *const u8),
                ("fmaf", fmaf as *const u8),
            ]
        }
    };
}

kiln_ir::for_each_math_fn!(bindings);

extern "C" fn fma(x: f64, y: f64, z: f64) -> f64 {
    libm::fma(x, y, z)
}

extern "C" fn fmaf(x: f32, y: f32, z: f32) -> f32 {
    libm::fmaf(x, y, z)
}
