//! Vector math routines: kiln's inline math for one function and dtype
//! (`kiln_kernel::math_kernel`, the expansion every tier computes),
//! translated by the vectorizer into `v -> v` on a 128-bit vector and
//! compiled once per process. The JIT's vector loops call them, one call
//! per vector of rows, where that is faster than a call per lane
//! ([`profitable`]): their kernels stay as small (and as fast to compile)
//! as with scalar `libm` calls, and the math runs in vectors with the
//! interpreter's bits. Scalar loops keep calling the `libm` crate.

use crate::codegen;
use crate::vector::{max_lanes, Routines};
use crate::{host_isa, CodegenError, CodegenResult};
use cranelift_codegen::isa::TargetIsa;
use cranelift_jit::{JITBuilder, JITModule};
use kiln_ir::{DType, UnaryOp};
use kiln_kernel::{libcalls, math_kernel, Expr, Kernel, MathFn, Stmt};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// Whether the vectorizer runs on `isa`: x86-64 with SSE4.2 (its 64-bit
/// lane comparisons) and SSSE3 (byte shuffles), where it is tested.
/// AArch64's NEON would do, but no machine here runs its JIT.
pub(crate) fn vectorizes(isa: &dyn TargetIsa) -> bool {
    if isa.triple().architecture != target_lexicon::Architecture::X86_64 {
        return false;
    }
    let flags = isa.isa_flags();
    ["has_ssse3", "has_sse41", "has_sse42"].iter().all(|want| {
        flags
            .iter()
            .any(|f| f.name == *want && f.as_bool() == Some(true))
    })
}

/// Whether a vector loop calls the routine for `op` on `dtype` rather than
/// the `libm` function once per lane, by measurement (`cargo bench -p kiln
/// --features llvm --bench math`; the figures are in docs/performance.md,
/// "Inline math, third step" and "fourth step"). A routine computes every
/// path of the algorithm for every lane, where the scalar function takes
/// one branch: with four `f32` lanes that pays for almost every function
/// (not `sinhf` and `coshf`), with two `f64` lanes it does not, so `f64`
/// loops keep the calls. The exceptions the other way: the f64 `cbrt` (the
/// `libm` crate's is slow) and the binary functions in both dtypes.
fn profitable(f: MathFn, dtype: DType) -> bool {
    match f {
        MathFn::Unary(UnaryOp::Cbrt) => dtype == DType::F64,
        MathFn::Unary(op) => dtype == DType::F32 && !matches!(op, UnaryOp::Sinh | UnaryOp::Cosh),
        MathFn::Binary(_) => true,
    }
}

/// A compiled routine: its symbol, lanes and address.
#[derive(Clone)]
struct Compiled {
    symbol: String,
    lanes: u8,
    address: usize,
}

/// Every routine compiled so far (`None`: kiln has no inline port of that
/// function), for the life of the process: a few dozen at most.
type Cache = Mutex<HashMap<(MathFn, DType), Option<Compiled>>>;

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// The float math functions `stmts` calls.
fn calls(kernel: &Kernel, stmts: &[Stmt], out: &mut Vec<(MathFn, DType)>) {
    for stmt in stmts {
        match stmt {
            Stmt::Let(reg, Expr::Unary(op, _)) if kernel.reg_type(*reg).is_float() => {
                out.push((MathFn::Unary(*op), kernel.reg_type(*reg)));
            }
            Stmt::Let(reg, Expr::Binary(op, ..))
                if libcalls::binary_name(*op, kernel.reg_type(*reg)).is_some()
                    && kernel.reg_type(*reg).is_float() =>
            {
                out.push((MathFn::Binary(*op), kernel.reg_type(*reg)));
            }
            Stmt::Loop { body, .. } => calls(kernel, body, out),
            _ => {}
        }
    }
}

/// The functions `kernels` call that have a routine worth calling
/// ([`profitable`]), each once.
fn wanted(kernels: &[Kernel]) -> Vec<(MathFn, DType)> {
    let mut wanted = Vec::new();
    for kernel in kernels {
        calls(kernel, &kernel.body, &mut wanted);
    }
    wanted.retain(|&(f, dtype)| profitable(f, dtype));
    wanted.sort_by_key(|(f, dtype)| (f.to_string(), *dtype));
    wanted.dedup();
    wanted
}

/// The routines `kernels` may call, compiled if not yet, and the symbols to
/// bind them by. `symbols` binds the routines' own calls (the `libm`
/// functions of their rare paths), as for kernels.
pub(crate) fn routines_for(
    kernels: &[Kernel],
    symbols: &[(&'static str, *const u8)],
) -> CodegenResult<(Routines, Vec<(String, *const u8)>)> {
    let mut routines = Routines::default();
    let mut bound = Vec::new();
    let mut cache = cache().lock().unwrap_or_else(|e| e.into_inner());
    for key in wanted(kernels) {
        let compiled = match cache.get(&key) {
            Some(done) => done.clone(),
            None => {
                let done = compile(key.0, key.1, symbols)?;
                cache.insert(key, done.clone());
                done
            }
        };
        if let Some(c) = compiled {
            routines.map.insert(key, (c.symbol.clone(), c.lanes));
            bound.push((c.symbol, c.address as *const u8));
        }
    }
    Ok((routines, bound))
}

/// The routines `kernel` would call, described but not compiled (for
/// `kiln ir --emit clif`).
pub(crate) fn describe(kernel: &Kernel) -> Routines {
    let mut routines = Routines::default();
    for (f, dtype) in wanted(std::slice::from_ref(kernel)) {
        if let Some(math) = math_kernel(f, dtype) {
            routines
                .map
                .insert((f, dtype), (symbol(f, dtype), lanes(&math)));
        }
    }
    routines
}

fn symbol(f: MathFn, dtype: DType) -> String {
    format!("__kiln_vmath_{f}_{dtype}x{}", max_lanes(dtype))
}

/// The lanes a math kernel runs in: as many as its widest dtype allows.
fn lanes(kernel: &Kernel) -> u8 {
    kernel
        .regs
        .iter()
        .filter(|&&d| d != DType::Bool)
        .map(|&d| max_lanes(d))
        .min()
        .unwrap_or(2)
}

fn compile(
    f: MathFn,
    dtype: DType,
    symbols: &[(&'static str, *const u8)],
) -> CodegenResult<Option<Compiled>> {
    let Some(kernel) = math_kernel(f, dtype) else {
        return Ok(None);
    };
    let lanes = lanes(&kernel);
    let symbol = symbol(f, dtype);
    let mut builder =
        JITBuilder::with_isa(host_isa(true)?, cranelift_module::default_libcall_names());
    for &(name, ptr) in symbols {
        builder.symbol(name, ptr);
    }
    let mut module = JITModule::new(builder);
    let id = codegen::define_routine(&mut module, &kernel, &symbol, lanes)?;
    module
        .finalize_definitions()
        .map_err(|e| CodegenError::Module(e.to_string()))?;
    let address = module.get_finalized_function(id) as usize;
    // The code lives as long as the process: the cache hands its address to
    // every later JIT module.
    std::mem::forget(module);
    Ok(Some(Compiled {
        symbol,
        lanes,
        address,
    }))
}
