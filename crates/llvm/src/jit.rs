//! The in-process LLVM JIT (MCJIT): kernels optimized for the host CPU, math
//! functions bound to the addresses the caller gives, one context, module and
//! execution engine per call, freed when the last `CompiledKernel` drops.

use crate::{codegen, optimize, resolve_target, CodegenError, CodegenResult, OptLevel};
use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::context::Context;
use inkwell::execution_engine::ExecutionEngine;
use inkwell::module::Module;
use kiln_kernel::abi::{self, CompiledKernel};
use kiln_kernel::Kernel;
use std::mem::ManuallyDrop;
use std::sync::Arc;

/// An LLVM context, module and execution engine that own machine code.
struct JitCode {
    module: ManuallyDrop<Module<'static>>,
    engine: ManuallyDrop<ExecutionEngine<'static>>,
    context: *mut Context,
}

impl Drop for JitCode {
    fn drop(&mut self) {
        // SAFETY: each field is dropped exactly once, in the order LLVM needs:
        // the module handle (owned by the engine, so this only releases
        // inkwell's reference), then the engine (which frees the module and
        // the machine code), then the context both were created in. Every
        // function pointer into the code is held by a `CompiledKernel` that
        // also holds an `Arc` to this `JitCode`, so none is called after this.
        unsafe {
            ManuallyDrop::drop(&mut self.module);
            ManuallyDrop::drop(&mut self.engine);
            drop(Box::from_raw(self.context));
        }
    }
}

// SAFETY: after the engine has produced the function addresses, nothing touches
// the context, module or engine again except `drop`, which runs once, on
// whichever thread drops the last `Arc`. The inkwell `Rc`s inside are never
// cloned after construction, so their counts are not raced. The machine code
// is immutable.
unsafe impl Send for JitCode {}
// SAFETY: as for `Send`: shared access never touches the LLVM objects.
unsafe impl Sync for JitCode {}

/// Compiles kernels into one LLVM module, optimized at `opt` for the host CPU
/// and its features, with one execution engine, binding the C math names
/// kernels call to `symbols`.
pub fn jit(
    kernels: Vec<Kernel>,
    opt: OptLevel,
    symbols: &[(&'static str, *const u8)],
) -> CodegenResult<Vec<CompiledKernel>> {
    let spec = resolve_target("native", None, None)?;
    let machine = spec.machine(opt)?;
    let context: &'static Context = Box::leak(Box::new(Context::create()));
    let context_ptr = context as *const Context as *mut Context;
    // From here, every early return must free the context.
    let built = (|| {
        let module = context.create_module("kiln_jit");
        module.set_triple(&machine.get_triple());
        module.set_data_layout(&machine.get_target_data().get_data_layout());
        let cpu = context.create_string_attribute("target-cpu", &spec.cpu);
        let features = context.create_string_attribute("target-features", &spec.features);
        for (idx, kernel) in kernels.iter().enumerate() {
            let symbol = format!("__kiln_kernel_{idx}");
            codegen::define_kernel(context, &module, kernel, &symbol, true)?;
            // The kernel stays exported (typed handles call it directly), so
            // inlining it into its wrapper would only compile it twice.
            let kernel_fn = module.get_function(&symbol).expect("just defined");
            let noinline = Attribute::get_named_enum_kind_id("noinline");
            kernel_fn.add_attribute(
                AttributeLoc::Function,
                context.create_enum_attribute(noinline, 0),
            );
        }
        // MCJIT builds its own target machine for the generic host CPU;
        // these attributes make its code generator use the real one, for
        // every function defined here (kernels, wrappers, math helpers, whose
        // vector arguments must be passed alike on both sides of a call).
        for f in module
            .get_functions()
            .filter(|f| f.count_basic_blocks() > 0)
        {
            f.add_attribute(AttributeLoc::Function, cpu);
            f.add_attribute(AttributeLoc::Function, features);
        }
        module
            .verify()
            .map_err(|e| CodegenError::Invalid(format!("LLVM verifier: {e}")))?;
        optimize(&module, &machine, opt)?;
        let engine = module
            .create_jit_execution_engine(crate::codegen_level(opt))
            .map_err(|e| CodegenError::Llvm(e.to_string()))?;
        for &(name, address) in symbols {
            if let Some(f) = module.get_function(name) {
                engine.add_global_mapping(&f, address as usize);
            }
        }
        let mut addresses = Vec::with_capacity(kernels.len());
        for (idx, kernel) in kernels.iter().enumerate() {
            let symbol = format!("__kiln_kernel_{idx}");
            let lookup = |name: &str| {
                engine
                    .get_function_address(name)
                    .map(|a| a as *const u8)
                    .map_err(|e| CodegenError::Llvm(format!("{name}: {e}")))
            };
            let wrapper = abi::needs_wrapper(kernel)
                .then(|| lookup(&abi::wrapper_symbol(&symbol)))
                .transpose()?;
            addresses.push((lookup(&symbol)?, wrapper));
        }
        Ok((module, engine, addresses))
    })();
    let (module, engine, addresses) = match built {
        Ok(parts) => parts,
        Err(e) => {
            // SAFETY: the context was leaked above and nothing created in it
            // survives the failed closure (its module and engine were dropped).
            drop(unsafe { Box::from_raw(context_ptr) });
            return Err(e);
        }
    };
    let code = Arc::new(JitCode {
        module: ManuallyDrop::new(module),
        engine: ManuallyDrop::new(engine),
        context: context_ptr,
    });
    // SAFETY: each address is its kernel defined by `codegen` with
    // `abi::signature`, and its uniform entry (defined exactly when
    // `abi::needs_wrapper`), in `code`'s execution engine, which lives as long
    // as any handle holding `code`.
    Ok(unsafe { CompiledKernel::for_module(kernels, code, addresses) })
}
