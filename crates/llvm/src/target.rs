//! Target selection: short names and full triples to an LLVM target machine.
//! The native target gets the host's CPU and features unless told otherwise;
//! RISC-V 64 defaults to RV64GC with the `lp64d` ABI, as Linux distributions
//! (and their cross gcc) build it; wasm32 to bulk memory and saturating
//! conversions, so a module imports nothing but the math functions.

use crate::{CodegenError, CodegenResult, OptLevel};
use inkwell::attributes::AttributeLoc;
use inkwell::context::Context;
use inkwell::module::Module;
use inkwell::targets::{
    CodeModel, InitializationConfig, RelocMode, Target, TargetMachine, TargetMachineOptions,
    TargetTriple,
};
use std::sync::{Once, OnceLock};

/// The short target names `--target` accepts, and their triples. Any other
/// triple LLVM knows is accepted as it is.
pub const TARGETS: &[(&str, &str)] = &[
    ("x86_64", "x86_64-unknown-linux-gnu"),
    ("aarch64", "aarch64-unknown-linux-gnu"),
    ("riscv64", "riscv64-unknown-linux-gnu"),
    ("wasm32", "wasm32-unknown-unknown"),
];

/// A resolved target: triple, CPU, features and ABI name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetSpec {
    /// The LLVM triple.
    pub triple: String,
    /// The CPU (`""` is the target's generic CPU).
    pub cpu: String,
    /// The feature string.
    pub features: String,
    /// The ABI name, where the target needs one (`lp64d` on RISC-V 64).
    pub abi: Option<String>,
}

pub(crate) fn init_targets() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        Target::initialize_all(&InitializationConfig::default());
        set_process_options();
    });
}

/// Sets the three LLVM options kiln needs for the process (global to the
/// process's LLVM, which only kiln uses here: llvmlite and numba link
/// their own copy):
///
/// - **`-vectorize-slp=false`**: LLVM 19's SLP vectorizer miscompiled a
///   convolution for AVX-512 targets (x86-64-v4, znver4): after the tap
///   passes' short loops were unrolled, it gathered the destination's loads
///   with masked gathers ahead of earlier stores to the same elements
///   (`tests/filetests/regressions/conv2d_slp.kiln`). The C API's pipeline
///   option (`LLVMPassBuilderOptionsSetSLPVectorization`) does not stop it
///   in LLVM 19: the pass runs whatever the option says and obeys only
///   this flag. kiln's kernels are loops, which the loop vectorizer takes;
///   the benchmarks measured no loss (docs/performance.md).
/// - **`-x86-cmov-converter=false`**: a kernel's `select` is data's choice
///   (a tree walk's next node, a row's clamp), which kiln computes without
///   a branch on every tier; the x86 back end's pass turned a tree walk's
///   selects in loops into branches that the data mispredicts half the
///   time (the walk of a 1,000-tree model ran 1.5× slower than
///   Cranelift's cmovs, docs/performance.md).
/// - **`-disable-copyprop`**: LLVM 19's Machine Copy Propagation pass
///   miscompiled an AArch64 object of 30 inline math functions at O2 and
///   O3 (`tests/objects.rs`, the f32 math case under qemu: `atan`,
///   `asinh`, `acosh` and `atanh` wrong in the vector lanes once `erf` of
///   `f32` became kiln's fused polynomials). `llc -O2` reproduces it from
///   the optimized IR alone, and `-opt-bisect-limit` names the pass; O1,
///   or O2 without the pass, is right. The pass only removes register
///   copies; x86-64 figures showed no loss (docs/performance.md).
fn set_process_options() {
    let args = [
        c"kiln".as_ptr(),
        c"-vectorize-slp=false".as_ptr(),
        c"-x86-cmov-converter=false".as_ptr(),
        c"-disable-copyprop".as_ptr(),
    ];
    // SAFETY: valid NUL-terminated strings that outlive the call; LLVM
    // copies what it keeps. Called once, before any pass runs.
    unsafe {
        inkwell::llvm_sys::support::LLVMParseCommandLineOptions(
            args.len() as i32,
            args.as_ptr(),
            c"".as_ptr(),
        );
    }
}

/// The host's triple, as LLVM names it.
pub fn host_triple() -> String {
    TargetMachine::get_default_triple()
        .as_str()
        .to_string_lossy()
        .into_owned()
}

fn arch(triple: &str) -> &str {
    triple.split('-').next().unwrap_or(triple)
}

/// Resolves `target` (a short name of [`TARGETS`], `native`, or a triple) with
/// a CPU and features (by default the host's for the native target, else the
/// target's generic ones).
pub fn resolve_target(
    target: &str,
    cpu: Option<&str>,
    features: Option<&str>,
) -> CodegenResult<TargetSpec> {
    init_targets();
    let host = host_triple();
    let triple = match target {
        "native" | "host" => host.clone(),
        _ => TARGETS
            .iter()
            .find(|(short, _)| *short == target)
            .map_or_else(|| target.to_string(), |(_, t)| t.to_string()),
    };
    let llvm_triple = TargetTriple::create(&triple);
    if let Err(e) = Target::from_triple(&llvm_triple) {
        let names: Vec<&str> = TARGETS.iter().map(|(s, _)| *s).collect();
        return Err(CodegenError::Unsupported(format!(
            "unknown target `{target}`: {} (use one of {}, `native`, or a triple LLVM knows, such as `armv7-unknown-linux-gnueabihf`)",
            e.to_string().trim_end_matches('.'),
            names.join(", ")
        )));
    }
    let native = arch(&triple) == arch(&host) && triple.contains("linux") == host.contains("linux");
    let is_riscv64 = arch(&triple).starts_with("riscv64");
    // `--cpu native` (or `host`) is the host's CPU, where it is the target's.
    let cpu = match cpu {
        Some("native" | "host") if native => None,
        Some(c @ ("native" | "host")) => {
            return Err(CodegenError::Unsupported(format!(
                "cpu `{c}` is the host's, which is not a `{triple}` CPU: name one"
            )))
        }
        other => other,
    };
    // A CPU given without features means that CPU's own features, not the host's.
    let (default_cpu, default_features) = if native && cpu.is_none() {
        (
            TargetMachine::get_host_cpu_name().to_string(),
            TargetMachine::get_host_cpu_features().to_string(),
        )
    } else if is_riscv64 {
        ("generic-rv64".to_string(), "+m,+a,+f,+d,+c".to_string())
    } else if arch(&triple) == "wasm32" {
        // What LLVM 20 made the generic wasm CPU: bulk memory lowers the
        // memsets LLVM forms from loops to `memory.fill` instead of importing
        // `memset`, and saturating float-to-int becomes one instruction.
        (
            "generic".to_string(),
            "+bulk-memory,+nontrapping-fptoint,+sign-ext,+mutable-globals".to_string(),
        )
    } else {
        (String::new(), String::new())
    };
    let mut features = features.map_or(default_features, str::to_string);
    let wide = arch(&triple) == "x86_64" || is_riscv64;
    if cpu.is_some() && wide && !features.contains("64bit") {
        // A CPU name LLVM does not know leaves it a subtarget without
        // 64-bit mode, on which it aborts the process (x86-64: "64-bit code
        // requested on a subtarget that doesn't support it"; RISC-V: "RV64
        // target requires an RV64 CPU"): with `+64bit` it says it ignores
        // the name and builds for the generic CPU.
        features = if features.is_empty() {
            "+64bit".to_string()
        } else {
            format!("{features},+64bit")
        };
    }
    Ok(TargetSpec {
        triple,
        cpu: cpu.map_or(default_cpu, str::to_string),
        features,
        abi: is_riscv64.then(|| "lp64d".to_string()),
    })
}

/// Sets `"prefer-vector-width"="512"` on every function `module` defines,
/// for an x86-64 triple (elsewhere it does nothing).
///
/// LLVM tunes Intel's AVX-512 cores (`skylake-avx512` through
/// `emeraldrapids`, and `x86-64-v4`) to prefer 256-bit vectors, AMD's
/// (`znver4`, `znver5`) 512-bit ones. kiln's matmul panels are sized for
/// sixteen 512-bit accumulators (4 rows × 256 bytes, `kernel/tensor/
/// matmul.rs`); in 256-bit vectors they are 32, which with the operands
/// LLVM spills and shuffles inside the loop. On an Emerald Rapids core a
/// 512³ f32 matmul ran at 24 GFLOP/s so (docs/performance.md). Where the
/// CPU has no AVX-512 the attribute changes nothing: 256 bits is then the
/// widest legal vector.
pub(crate) fn prefer_wide_vectors(context: &Context, module: &Module<'_>) {
    let triple = module.get_triple();
    if !arch(&triple.as_str().to_string_lossy()).starts_with("x86_64") {
        return;
    }
    let width = context.create_string_attribute("prefer-vector-width", "512");
    for f in module
        .get_functions()
        .filter(|f| f.count_basic_blocks() > 0)
    {
        f.add_attribute(AttributeLoc::Function, width);
    }
}

/// Bytes of a matmul panel's row (`LowerOptions::panels`) for a target:
/// 64 bytes, and 256 with AVX-512. AVX-512's 32 registers of 64 bytes hold
/// the 4-row block's 16 accumulators, a row of `b` and a broadcast; AVX2's
/// 16 of 32 bytes hold 8 accumulators so (at 256 bytes LLVM spilled 100
/// times in the loop, docs/performance.md), NEON's 32 of 16 bytes hold 16.
/// Plain SSE (16 of 16 bytes) spills a little at 64 bytes, but at 32 LLVM
/// leaves the loop scalar.
pub fn panel_bytes(triple: &str, features: &str) -> u32 {
    let avx512 = features.split(',').any(|f| f == "+avx512f");
    if arch(triple) == "x86_64" && avx512 {
        256
    } else {
        64
    }
}

/// Whether panels `panel_bytes` wide prefetch the next row block's `a`
/// ([`kiln_kernel::LowerOptions::prefetch`]): AVX-512's 256-byte ones.
/// On an Emerald Rapids core the hint took ViT-B/16 from 1.335 to 1.172 s
/// (docs/performance.md). AVX2's 64-byte panels ran slower with it on a
/// Zen 3 core, every shape measured (one thread, best of 15 calls, against
/// the same build without: `x @ w.T` of 197×768 by 3072×768 13.3–14.2 ms
/// against 12.1–12.8, 197×3072 by 768×3072 14.8–14.9 against 12.7–13.5,
/// 128×768 by 768×768 2.0–2.3 against 1.8, 64×784 by 256×784 344–348 µs
/// against 313–315): the next rows' hinted lines crowd a 32 KiB L1 that
/// the packed `b` block fills, and a step of 8 fused multiply-adds pays
/// for the hint's address.
pub fn prefetches(panel_bytes: u32) -> bool {
    panel_bytes >= 256
}

/// Whether panels `panel_bytes` wide run the rows past `m`'s last block of
/// 4 as one padded block
/// ([`kiln_kernel::LowerOptions::padded_rest_rows`]): those of at most 64
/// bytes, whose one-row column loop (16 `f32` or 8 `f64` steps) LLVM
/// unrolls fully before it vectorizes. On a Zen 3 core (one thread, best
/// calls), `[1, 784] @ [784, 256]` took 72.6 µs in one-row panels (MKL
/// 22.3), `[10, 64] @ [64, 256]` 17.8 (MKL 7.3). AVX-512's rows of 64 `f32`
/// are vectorized one at a time, where a padded block would only add work.
pub fn pads_rest_rows(panel_bytes: u32) -> bool {
    panel_bytes <= 64
}

/// [`panel_bytes`] of the host (`KILN_LLVM_PANEL_BYTES` overrides it, so
/// the tests run the other widths on any machine).
pub(crate) fn host_panel_bytes() -> u32 {
    static BYTES: OnceLock<u32> = OnceLock::new();
    *BYTES.get_or_init(|| {
        let given = std::env::var("KILN_LLVM_PANEL_BYTES")
            .ok()
            .and_then(|v| v.parse::<u32>().ok())
            .filter(|b| b.is_power_of_two() && (16..=1024).contains(b));
        given.unwrap_or_else(|| {
            init_targets();
            panel_bytes(
                &host_triple(),
                &TargetMachine::get_host_cpu_features().to_string(),
            )
        })
    })
}

/// x86-64 CPUs LLVM 19 knows with AVX-512, for a CPU named without
/// features (whose feature string kiln cannot ask LLVM for).
const AVX512_CPUS: &[&str] = &[
    "skylake-avx512",
    "cascadelake",
    "cooperlake",
    "cannonlake",
    "icelake-client",
    "icelake-server",
    "tigerlake",
    "rocketlake",
    "sapphirerapids",
    "emeraldrapids",
    "graniterapids",
    "graniterapids-d",
    "knl",
    "knm",
    "znver4",
    "znver5",
    "x86-64-v4",
];

impl TargetSpec {
    /// The matmul panel width for this target ([`panel_bytes`]): from its
    /// features, else (a CPU named without them) from the CPU.
    pub fn panel_bytes(&self) -> u32 {
        let named = |cpu: &str| AVX512_CPUS.contains(&cpu).then_some("+avx512f");
        let features = if self.features.contains("avx512f") {
            self.features.as_str()
        } else {
            named(&self.cpu).unwrap_or(self.features.as_str())
        };
        panel_bytes(&self.triple, features)
    }

    /// A target machine for this spec: position-independent code, default
    /// code model.
    pub fn machine(&self, opt: OptLevel) -> CodegenResult<TargetMachine> {
        init_targets();
        let triple = TargetTriple::create(&self.triple);
        let target = Target::from_triple(&triple)
            .map_err(|e| CodegenError::Unsupported(format!("target `{}`: {e}", self.triple)))?;
        let mut options = TargetMachineOptions::default()
            .set_cpu(&self.cpu)
            .set_features(&self.features)
            .set_level(crate::codegen_level(opt))
            .set_reloc_mode(RelocMode::PIC)
            .set_code_model(CodeModel::Default);
        if let Some(abi) = &self.abi {
            options = options.set_abi(abi);
        }
        target
            .create_target_machine_from_options(&triple, options)
            .ok_or_else(|| {
                CodegenError::Unsupported(format!(
                    "LLVM cannot build a target machine for `{}` (cpu `{}`, features `{}`)",
                    self.triple, self.cpu, self.features
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panels_are_as_wide_as_the_vector_registers_hold() {
        let x86 = "x86_64-unknown-linux-gnu";
        assert_eq!(panel_bytes(x86, "+sse2,+avx,+avx2,+avx512f,+fma"), 256);
        assert_eq!(panel_bytes(x86, "+sse2,+avx,+avx2,-avx512f"), 64);
        assert_eq!(panel_bytes(x86, "+sse2,-avx"), 64);
        assert_eq!(panel_bytes("aarch64-unknown-linux-gnu", "+neon"), 64);
        // A target's width: its features, else its CPU's.
        let spec = |cpu: Option<&str>, features: Option<&str>| {
            resolve_target("x86_64", cpu, features)
                .expect("resolves")
                .panel_bytes()
        };
        assert_eq!(spec(Some("emeraldrapids"), None), 256);
        assert_eq!(spec(Some("znver4"), None), 256);
        assert_eq!(spec(Some("x86-64-v3"), None), 64);
        assert_eq!(spec(Some("x86-64-v3"), Some("+avx2,+avx512f")), 256);
        assert_eq!(spec(Some("emeraldrapids"), Some("+avx2,-avx512f")), 64);
    }
}
