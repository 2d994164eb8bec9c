//! The in-process LLVM JIT: kernels compiled into one relocatable object for
//! the host CPU and its features (or that object read back from the code
//! cache, `crate::cache`), linked into the process by ORC's LLJIT, with the
//! C math names kernels call bound to the addresses the caller gives. One
//! LLJIT instance per object, freed when the last `CompiledKernel` drops.
//!
//! Compiling to an object first (rather than handing the module to an
//! execution engine) is what makes the cache possible: a cache miss and a
//! cache hit run the same loader on the same bytes, so the code a second
//! process runs is the code the first one ran.

use crate::cache::{self, Cache};
use crate::{codegen, optimize, resolve_target, CodegenError, CodegenResult, OptLevel, TargetSpec};
use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::context::Context;
use inkwell::llvm_sys::core::LLVMCreateMemoryBufferWithMemoryRangeCopy;
use inkwell::llvm_sys::error::{LLVMDisposeErrorMessage, LLVMErrorRef, LLVMGetErrorMessage};
use inkwell::llvm_sys::orc2::lljit::{
    LLVMOrcCreateLLJIT, LLVMOrcCreateLLJITBuilder, LLVMOrcDisposeLLJIT, LLVMOrcLLJITAddObjectFile,
    LLVMOrcLLJITGetMainJITDylib, LLVMOrcLLJITLookup, LLVMOrcLLJITMangleAndIntern, LLVMOrcLLJITRef,
};
use inkwell::llvm_sys::orc2::{
    LLVMJITEvaluatedSymbol, LLVMJITSymbolFlags, LLVMJITSymbolGenericFlags, LLVMOrcAbsoluteSymbols,
    LLVMOrcCSymbolMapPair, LLVMOrcJITDylibDefine,
};
use inkwell::targets::FileType;
use kiln_kernel::abi::{self, CompiledKernel};
use kiln_kernel::Kernel;
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Once};

/// An LLJIT instance that owns linked machine code.
struct JitCode(LLVMOrcLLJITRef);

impl Drop for JitCode {
    fn drop(&mut self) {
        // SAFETY: the instance was created by `LLVMOrcCreateLLJIT` and is
        // disposed of exactly once, here. Every function pointer into its
        // code is held by a `CompiledKernel` that also holds an `Arc` to this
        // `JitCode`, so none is called after this.
        let error = unsafe { LLVMOrcDisposeLLJIT(self.0) };
        // A failure to release is not actionable at drop: consume it.
        drop(take_error(error));
    }
}

// SAFETY: after the symbols have been looked up, nothing touches the LLJIT
// instance again except `drop`, which runs once, on whichever thread drops
// the last `Arc`. The machine code is immutable.
unsafe impl Send for JitCode {}
// SAFETY: as for `Send`: shared access never touches the instance.
unsafe impl Sync for JitCode {}

/// The message of an LLVM error, consuming it; `None` for success.
fn take_error(error: LLVMErrorRef) -> Option<String> {
    if error.is_null() {
        return None;
    }
    // SAFETY: a non-null `LLVMErrorRef` is consumed by `LLVMGetErrorMessage`,
    // whose string is freed with `LLVMDisposeErrorMessage`.
    unsafe {
        let message = LLVMGetErrorMessage(error);
        let text = CStr::from_ptr(message).to_string_lossy().into_owned();
        LLVMDisposeErrorMessage(message);
        Some(text)
    }
}

fn check(error: LLVMErrorRef, what: &str) -> CodegenResult<()> {
    match take_error(error) {
        None => Ok(()),
        Some(message) => Err(CodegenError::Llvm(format!("{what}: {message}"))),
    }
}

/// The symbol kernel `idx` of a JIT object is exported as.
fn kernel_symbol(idx: usize) -> String {
    format!("__kiln_kernel_{idx}")
}

/// LLVM work in flight in this address space, and the process that started
/// it: what makes exit and `fork()` safe while another thread compiles (a
/// background tier-up).
///
/// - **Exit.** LLVM's global objects are destroyed by the process's exit
///   handlers while other threads still run. A host calls [`before_exit`]
///   first: it refuses new work and waits for what runs to finish (Python's
///   `kiln` does from an `atexit` callback, which runs before any C exit
///   handler; kiln's CLI at the end of `main`). The first LLVM use also
///   registers a C `atexit` handler that does the same, for hosts that do
///   not. It protects only the globals that existed before it (handlers run
///   in reverse order of registration): LLVM builds some on first use, in
///   the middle of a compile (`TargetLibraryInfoImpl::getLibFunc`'s table,
///   the X86 fold tables), and their destructors run before it.
/// - **`fork()`.** A child forked while a thread was inside LLVM inherits
///   LLVM's locks and half-updated state but not the thread: it refuses
///   LLVM work for good (a typed error; a program on the `auto` tier stays
///   on its first tier). A child forked while LLVM was idle compiles as
///   usual.
pub struct InFlight(());

static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    /// The guards this thread holds: work nested in a guard (the compile
    /// inside the `auto` tier's) is part of it, never refused.
    static HELD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}
static OWNER: AtomicU32 = AtomicU32::new(0);
static EXITING: AtomicBool = AtomicBool::new(false);

impl InFlight {
    /// Enters LLVM work, or says why this process may not: held for the
    /// guard's life (a caller may hold one around more than LLVM's part, as
    /// the `auto` tier does around a whole background compile, so an exit
    /// waits for it all).
    pub fn enter() -> CodegenResult<InFlight> {
        static AT_EXIT: Once = Once::new();
        AT_EXIT.call_once(|| {
            // SAFETY: registers a plain `extern "C" fn()`; a failure to
            // register leaves exit as it was without the wait.
            #[cfg(unix)]
            unsafe {
                libc::atexit(wait_at_exit);
            }
        });
        if HELD.get() > 0 {
            IN_FLIGHT.fetch_add(1, SeqCst);
            HELD.set(HELD.get() + 1);
            return Ok(InFlight(()));
        }
        let pid = std::process::id();
        if IN_FLIGHT.load(SeqCst) > 0 && OWNER.load(SeqCst) != pid {
            return Err(CodegenError::Unsupported(
                "this process was forked while LLVM was compiling on another thread; LLVM is \
                 not safe to use in it (compile on cranelift, or before forking)"
                    .into(),
            ));
        }
        OWNER.store(pid, SeqCst);
        IN_FLIGHT.fetch_add(1, SeqCst);
        // Counted first, checked second: the exit handler sets the flag
        // first and reads the count second, so one of them sees the other.
        if EXITING.load(SeqCst) {
            IN_FLIGHT.fetch_sub(1, SeqCst);
            return Err(CodegenError::Unsupported("the process is exiting".into()));
        }
        HELD.set(1);
        Ok(InFlight(()))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        HELD.set(HELD.get() - 1);
        IN_FLIGHT.fetch_sub(1, SeqCst);
    }
}

#[cfg(unix)]
extern "C" fn wait_at_exit() {
    before_exit();
}

/// Prepares this process's LLVM for exit: refuses new LLVM work from now on
/// (it fails with a typed error, and an `auto` program stays on its first
/// tier) and waits for the work in flight on other threads (a background
/// tier-up) to finish. Call it before `exit` when LLVM may be compiling on
/// another thread, so that no exit handler destroys LLVM's globals under
/// it ([`InFlight`]). It cannot be undone.
pub fn before_exit() {
    EXITING.store(true, SeqCst);
    let pid = std::process::id();
    while IN_FLIGHT.load(SeqCst) > HELD.get() && OWNER.load(SeqCst) == pid {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Compiles kernels into one LLVM module, optimized at `opt` for the host
/// CPU and its features, and links it into the process, binding the C math
/// names kernels call to `symbols`. With a `cache`, the object is looked up
/// there first and stored there after a compile; an entry that does not
/// link (it lacks a kernel's symbol) is compiled again and replaced.
pub fn jit(
    kernels: Vec<Kernel>,
    opt: OptLevel,
    symbols: &[(&'static str, *const u8)],
    cache: Option<&Cache>,
) -> CodegenResult<Vec<CompiledKernel>> {
    let _in_flight = InFlight::enter()?;
    let spec = resolve_target("native", None, None)?;
    let Some(cache) = cache else {
        let object = compile_object(&kernels, opt, &spec)?;
        return Ok(link(&kernels, &object, symbols)?.handles(kernels));
    };
    let key = cache::key(&kernels, opt, &spec);
    if let Some(object) = cache.load(&key) {
        if let Ok(linked) = link(&kernels, &object, symbols) {
            return Ok(linked.handles(kernels));
        }
    }
    let object = compile_object(&kernels, opt, &spec)?;
    // A cache that cannot be written costs the next process a compile,
    // never this one its result.
    let _ = cache.store(&key, &object);
    Ok(link(&kernels, &object, symbols)?.handles(kernels))
}

/// The kernels linked from the object `cache` holds for them, or `None`
/// when it holds none (or a bad one): compiles nothing.
pub fn load_cached(
    kernels: Vec<Kernel>,
    opt: OptLevel,
    symbols: &[(&'static str, *const u8)],
    cache: &Cache,
) -> CodegenResult<Option<Vec<CompiledKernel>>> {
    let _in_flight = InFlight::enter()?;
    let spec = resolve_target("native", None, None)?;
    let Some(object) = cache.load(&cache::key(&kernels, opt, &spec)) else {
        return Ok(None);
    };
    Ok(link(&kernels, &object, symbols)
        .ok()
        .map(|linked| linked.handles(kernels)))
}

/// The kernels as one relocatable object for `spec` (the host): each kernel
/// exported as `__kiln_kernel_{idx}`, with its uniform entry where
/// `abi::needs_wrapper`.
fn compile_object(kernels: &[Kernel], opt: OptLevel, spec: &TargetSpec) -> CodegenResult<Vec<u8>> {
    let machine = spec.machine(opt)?;
    let context = Context::create();
    let module = context.create_module("kiln_jit");
    module.set_triple(&machine.get_triple());
    module.set_data_layout(&machine.get_target_data().get_data_layout());
    let cpu = context.create_string_attribute("target-cpu", &spec.cpu);
    let features = context.create_string_attribute("target-features", &spec.features);
    for (idx, kernel) in kernels.iter().enumerate() {
        let symbol = kernel_symbol(idx);
        let kernel_fn = codegen::define_kernel(&context, &module, kernel, &symbol, true)?;
        // The kernel stays exported (typed handles call it directly), so
        // inlining it into its wrapper would only compile it twice.
        let noinline = Attribute::get_named_enum_kind_id("noinline");
        kernel_fn.add_attribute(
            AttributeLoc::Function,
            context.create_enum_attribute(noinline, 0),
        );
    }
    // Every function defined here (kernels, wrappers, math helpers, whose
    // vector arguments must be passed alike on both sides of a call) is
    // compiled for the host's CPU and features, as the machine is.
    for f in module
        .get_functions()
        .filter(|f| f.count_basic_blocks() > 0)
    {
        f.add_attribute(AttributeLoc::Function, cpu);
        f.add_attribute(AttributeLoc::Function, features);
    }
    crate::target::prefer_wide_vectors(&context, &module);
    module
        .verify()
        .map_err(|e| CodegenError::Invalid(format!("LLVM verifier: {e}")))?;
    optimize(&module, &machine, opt)?;
    machine
        .write_to_memory_buffer(&module, FileType::Object)
        .map(|b| b.as_slice().to_vec())
        .map_err(|e| CodegenError::Llvm(e.to_string()))
}

/// Links `object` (from [`compile_object`], for these `kernels`) into a new
/// LLJIT instance, with `symbols` defined as absolute addresses, and looks
/// up each kernel's entries.
fn link(
    kernels: &[Kernel],
    object: &[u8],
    symbols: &[(&'static str, *const u8)],
) -> CodegenResult<Linked> {
    crate::target::init_targets();
    let mut instance: LLVMOrcLLJITRef = std::ptr::null_mut();
    // SAFETY: the builder is consumed by `LLVMOrcCreateLLJIT`, which writes
    // the instance on success.
    check(
        unsafe { LLVMOrcCreateLLJIT(&mut instance, LLVMOrcCreateLLJITBuilder()) },
        "creating the JIT",
    )?;
    // From here, dropping `code` disposes of the instance on every path.
    let code = Arc::new(JitCode(instance));
    // SAFETY: `instance` is live (owned by `code`). The symbol pairs hold
    // interned names whose references `LLVMOrcAbsoluteSymbols` takes over,
    // and the materialization unit is consumed by `LLVMOrcJITDylibDefine`
    // (which disposes of it on failure too). The object buffer is copied
    // and then owned by `LLVMOrcLLJITAddObjectFile`.
    unsafe {
        let dylib = LLVMOrcLLJITGetMainJITDylib(instance);
        let flags = || LLVMJITSymbolFlags {
            GenericFlags: LLVMJITSymbolGenericFlags::LLVMJITSymbolGenericFlagsExported as u8
                | LLVMJITSymbolGenericFlags::LLVMJITSymbolGenericFlagsCallable as u8,
            TargetFlags: 0,
        };
        let mut pairs = Vec::with_capacity(symbols.len());
        for &(name, address) in symbols {
            let name = CString::new(name).expect("C math names have no NUL");
            pairs.push(LLVMOrcCSymbolMapPair {
                Name: LLVMOrcLLJITMangleAndIntern(instance, name.as_ptr()),
                Sym: LLVMJITEvaluatedSymbol {
                    Address: address as u64,
                    Flags: flags(),
                },
            });
        }
        if !pairs.is_empty() {
            let unit = LLVMOrcAbsoluteSymbols(pairs.as_mut_ptr(), pairs.len());
            check(LLVMOrcJITDylibDefine(dylib, unit), "binding math functions")?;
        }
        let buffer = LLVMCreateMemoryBufferWithMemoryRangeCopy(
            object.as_ptr().cast(),
            object.len(),
            c"kiln_jit".as_ptr(),
        );
        check(
            LLVMOrcLLJITAddObjectFile(instance, dylib, buffer),
            "adding the object",
        )?;
    }
    let lookup = |name: &str| -> CodegenResult<*const u8> {
        let c_name = CString::new(name).expect("kernel symbols have no NUL");
        let mut address = 0u64;
        // SAFETY: `instance` is live; the lookup links the object on first
        // use and writes the symbol's address on success.
        check(
            unsafe { LLVMOrcLLJITLookup(instance, &mut address, c_name.as_ptr()) },
            name,
        )?;
        Ok(address as usize as *const u8)
    };
    let mut addresses = Vec::with_capacity(kernels.len());
    for (idx, kernel) in kernels.iter().enumerate() {
        let symbol = kernel_symbol(idx);
        let wrapper = abi::needs_wrapper(kernel)
            .then(|| lookup(&abi::wrapper_symbol(&symbol)))
            .transpose()?;
        addresses.push((lookup(&symbol)?, wrapper));
    }
    if std::env::var_os("KILN_PERF_MAP").is_some_and(|v| !v.is_empty() && v != "0") {
        write_perf_map(kernels, &addresses);
    }
    Ok(Linked { code, addresses })
}

/// Appends the kernels' code ranges to `/tmp/perf-PID.map`, the file `perf
/// report` reads JIT symbols from (`KILN_PERF_MAP=1`): each kernel (and its
/// wrapper) by its name and the source names of the first values it
/// computes. A range ends where the next function of the object starts (the
/// last one is given 4 KiB). Best effort: a failed write only loses names.
fn write_perf_map(kernels: &[Kernel], addresses: &[(*const u8, Option<*const u8>)]) {
    use std::io::Write;
    let mut starts: Vec<(usize, String)> = Vec::new();
    for (kernel, &(entry, wrapper)) in kernels.iter().zip(addresses) {
        let mut names: Vec<&str> = Vec::new();
        for n in kernel.reg_names.iter().flatten() {
            if names.len() == 4 {
                break;
            }
            if !names.contains(&n.as_str()) {
                names.push(n);
            }
        }
        let label = format!("kiln:{} [{}]", kernel.name, names.join(" "));
        starts.push((entry as usize, label.clone()));
        if let Some(w) = wrapper {
            starts.push((w as usize, format!("{label} (entry)")));
        }
    }
    starts.sort();
    let mut text = String::new();
    for (i, (start, label)) in starts.iter().enumerate() {
        let end = starts.get(i + 1).map_or(start + 4096, |n| n.0);
        text.push_str(&format!("{start:x} {:x} {label}\n", end - start));
    }
    let path = format!("/tmp/perf-{}.map", std::process::id());
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = f.write_all(text.as_bytes());
    }
}

/// An object linked for some kernels: the instance that owns the code, and
/// each kernel's native address and uniform entry.
struct Linked {
    code: Arc<JitCode>,
    addresses: Vec<(*const u8, Option<*const u8>)>,
}

impl Linked {
    /// The handles of `kernels`, the kernels [`link`] linked this for.
    fn handles(self, kernels: Vec<Kernel>) -> Vec<CompiledKernel> {
        // SAFETY: each address is its kernel defined by `codegen` with
        // `abi::signature`, and its uniform entry (defined exactly when
        // `abi::needs_wrapper`), linked by `code`'s instance, which lives as
        // long as any handle holding `code`.
        unsafe { CompiledKernel::for_module(kernels, self.code, self.addresses) }
    }
}
