//! The compiling tiers as [`Engine`]s: graph → kernel (lowering in `kiln-ir`)
//! → machine code (`kiln-cranelift`, or `kiln-llvm` with the `llvm` feature)
//! or the vector VM's instructions (`kiln-vm`), and safe ways to call the
//! result. Every tier produces a [`JitProgram`]: the calling convention is
//! `kiln_ir::kernel::abi`'s.

use crate::arrays::{each_array, ArrayMut, ArrayRef};
use crate::{runtime, CompileError, CompileOptions, CompileResult, Engine, Program};
use kiln_ir::exec::{bind_inputs, bind_shapes, ExecError, ExecResult, InputShape};
use kiln_ir::kernel::abi::{self, Arg, CompiledKernel};
use kiln_ir::kernel::{self, Kernel, LowerOptions, Param};
use kiln_ir::{Buffer, DType, Data, Verified};
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};

/// A compiling tier: each returns a [`JitProgram`]. The crate root exports
/// each variant by name (`kiln::Cranelift.compile(…)`), and
/// [`JitTier::all`] lists this build's, so code that wants typed handles or
/// borrowed-array calls on any tier picks one at run time.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum JitTier {
    /// The vector VM (`kiln_vm`): compiles a kernel into instructions over
    /// blocks of rows, which loops rustc compiled ahead of time run; no
    /// machine code. The cheapest compile: for kernels run once, and GP
    /// populations (`crate::DEFAULT_TIER`).
    Vm,
    /// The Cranelift JIT: compiles in microseconds.
    Cranelift,
    /// The LLVM tier (O3 by default), JIT-compiled in process with MCJIT for
    /// the host CPU.
    #[cfg(feature = "llvm")]
    Llvm,
}

impl JitTier {
    /// Every compiling tier of this build.
    pub fn all() -> &'static [JitTier] {
        &[
            JitTier::Vm,
            JitTier::Cranelift,
            #[cfg(feature = "llvm")]
            JitTier::Llvm,
        ]
    }
}

impl Engine for JitTier {
    type Program = JitProgram;

    fn name(&self) -> &'static str {
        match self {
            JitTier::Vm => "vm",
            JitTier::Cranelift => "cranelift",
            #[cfg(feature = "llvm")]
            JitTier::Llvm => "llvm",
        }
    }

    fn compile_batch(
        &self,
        graphs: &[Verified],
        options: &CompileOptions,
    ) -> CompileResult<Vec<JitProgram>> {
        match self {
            JitTier::Vm => compile_with(graphs, options, kiln_vm::LOWER_OPTIONS, |kernels, _| {
                kernels
                    .into_iter()
                    .map(|kernel| {
                        let vm = kiln_vm::compile(&kernel)
                            .map_err(|e| CompileError::Codegen(e.to_string()))?;
                        let entry: abi::HostEntry = Arc::new(move |slots: &[u64]| {
                            // SAFETY: reached only through
                            // `CompiledKernel::call`, whose contract is
                            // `VmKernel::call`'s.
                            unsafe { vm.call(slots) }
                        });
                        // SAFETY: `entry` runs this kernel under `call`'s
                        // contract and nothing else holds it.
                        Ok(unsafe { CompiledKernel::host(Arc::new(kernel), entry) })
                    })
                    .collect()
            }),
            JitTier::Cranelift => {
                let lower = kiln_cranelift::LOWER_OPTIONS;
                compile_with(graphs, options, lower, |kernels, symbols| {
                    let vectorize = options.vectorize.unwrap_or(true);
                    kiln_cranelift::jit(kernels, symbols, options.opt_level, vectorize)
                        .map_err(|e| CompileError::Codegen(e.to_string()))
                })
            }
            #[cfg(feature = "llvm")]
            JitTier::Llvm => {
                let lower = LowerOptions::default();
                compile_with(graphs, options, lower, |kernels, symbols| {
                    kiln_llvm::jit(kernels, options.opt_level, symbols).map_err(|e| match e {
                        kiln_llvm::CodegenError::Unsupported(m) => CompileError::Unsupported(m),
                        e => CompileError::Codegen(e.to_string()),
                    })
                })
            }
        }
    }
}

/// What every compiling tier does around its backend: prepares each graph as
/// `options` say, lowers it with the tier's choices (and the caller's
/// `packed_bools`), has `jit` compile the kernels as one module with the math
/// names bound to the `libm` crate, and pairs each program with its graph and
/// constant buffers.
fn compile_with(
    graphs: &[Verified],
    options: &CompileOptions,
    tier: LowerOptions,
    jit: impl FnOnce(Vec<Kernel>, &[(&'static str, *const u8)]) -> CompileResult<Vec<CompiledKernel>>,
) -> CompileResult<Vec<JitProgram>> {
    let lower = LowerOptions {
        packed_bools: options.packed_bools,
        libm_calls: options.libm_calls.unwrap_or(tier.libm_calls),
        ..tier
    };
    let mut prepared = Vec::with_capacity(graphs.len());
    let mut kernels = Vec::with_capacity(graphs.len());
    for graph in graphs {
        let graph = options.prepare(graph)?;
        kernels.push(
            kernel::lower(&graph, &lower).map_err(|e| CompileError::Unsupported(e.to_string()))?,
        );
        prepared.push(graph);
    }
    let code = jit(kernels, &runtime::libm_symbols())?;
    Ok(prepared
        .into_iter()
        .zip(code)
        .map(|(graph, code)| {
            // Tensor constants as the typed buffers the kernel reads, once.
            let consts = code
                .kernel()
                .params
                .iter()
                .map(|p| match p {
                    Param::ConstIn { tensor, .. } => {
                        Some(Buffer::from_scalars(tensor.dtype, &tensor.values))
                    }
                    _ => None,
                })
                .collect();
            JitProgram {
                graph,
                consts: Arc::new(consts),
                scratch: Arc::default(),
                code,
            }
        })
        .collect())
}

/// A graph compiled to machine code by either tier. Cheap to clone;
/// `Send + Sync`: call it from many threads.
#[derive(Clone, Debug)]
pub struct JitProgram {
    graph: Verified,
    /// For each kernel parameter that is a tensor constant, its elements.
    consts: Arc<Vec<Option<Buffer>>>,
    /// Scratch arenas of earlier calls, one per call that ran at the same
    /// time (at most [`SCRATCH_ARENAS`]), for the next calls: a network does
    /// not allocate (and fault in) its activations on every call.
    scratch: Arc<Mutex<Vec<Vec<u64>>>>,
    code: CompiledKernel,
}

/// How many scratch arenas a program keeps between calls.
const SCRATCH_ARENAS: usize = 4;

/// Where each scratch parameter's room starts in one call's arena, in
/// bytes, and the arena's length in 8-byte words. Room `k` starts on a page
/// plus `k * 320 mod 4096` bytes (64 different offsets, 64 bytes apart at
/// least), so no two of 64 rooms start at the same address modulo 4096: a
/// loop that stores to one and loads from another at the same index would
/// otherwise wait on a false dependency (4K aliasing). Measured on
/// ResNet-18, where convolutions read their phases and update four
/// accumulator planes in one loop: the page-aligned rooms large
/// allocations get ran the network at 1.5–2.4× the time.
fn scratch_layout(args: &[Arg<'_>]) -> (Vec<usize>, usize) {
    let mut end = 0usize;
    let mut starts = Vec::new();
    for arg in args {
        if let Arg::Scratch { dtype, len } = *arg {
            let room = end.next_multiple_of(4096) + starts.len() * 320 % 4096;
            starts.push(room);
            end = room + len * dtype.size_bytes();
        }
    }
    (starts, end.div_ceil(8))
}

impl JitProgram {
    /// The kernel this program runs.
    pub fn kernel(&self) -> &Kernel {
        self.code.kernel()
    }

    /// The bytes of scratch memory one call takes: the room of every
    /// intermediate tensor no loop fuses, buffers shared by liveness
    /// (`docs/abi.md`), laid out as the safe API lays them out. `extents`
    /// gives each symbolic dimension's extent, in `GraphInfo::symbols`
    /// order; `None` when it gives fewer than the kernel has.
    pub fn scratch_bytes(&self, extents: &[u64]) -> Option<usize> {
        let kernel = self.kernel();
        let symbols = kernel
            .params
            .iter()
            .filter(|p| matches!(p, Param::Extent { .. }))
            .count();
        if extents.len() < symbols {
            return None;
        }
        Some(scratch_layout(&abi::args(kernel, extents)).1 * 8)
    }

    /// The kernel's address with its native signature (`docs/abi.md`), for
    /// callers who manage the ABI themselves. Valid while `self` (or a clone) is.
    /// `None` on the VM, which runs kernels without machine code.
    ///
    /// # Safety
    /// Calling it requires the exact native signature and valid buffers.
    pub unsafe fn raw_fn_ptr(&self) -> Option<*const u8> {
        self.code.native_ptr()
    }

    /// Calls the kernel through its uniform entry: one 8-byte slot per
    /// parameter of [`Self::kernel`], in order, as `kiln_ir::kernel::abi::args`
    /// describes them. Returns the kernel's status.
    ///
    /// # Safety
    /// As for `kiln_ir::kernel::abi::CompiledKernel::call`.
    pub unsafe fn call_slots(&self, slots: &mut [u64]) -> i32 {
        // SAFETY: the caller's guarantee is the callee's precondition.
        unsafe { self.code.call(slots) }
    }

    /// A typed handle for a graph of scalars with one output, checked once:
    /// `program.typed::<(f64,), f64>()?.call((2.0,))`.
    pub fn typed<A: ScalarArgs, R: NativeType>(&self) -> CompileResult<TypedFunc<A, R>> {
        let kernel = self.kernel();
        let graph = self.graph.graph();
        let want: Vec<DType> = A::dtypes();
        let got: Vec<DType> = kernel
            .params
            .iter()
            .filter_map(|p| match p {
                Param::ScalarIn { dtype, .. } => Some(*dtype),
                _ => None,
            })
            .collect();
        let outs: Vec<DType> = graph
            .outputs()
            .iter()
            .filter_map(|o| graph.ty(o.value).dtype())
            .collect();
        if !kernel.direct || want != got || outs != [R::DTYPE] || got.len() != graph.inputs().len()
        {
            return Err(CompileError::Signature(format!(
                "the graph is ({}) -> ({}){}, not ({}) -> {}",
                got.iter().map(|d| d.name()).collect::<Vec<_>>().join(", "),
                outs.iter().map(|d| d.name()).collect::<Vec<_>>().join(", "),
                if kernel.direct {
                    ""
                } else {
                    " with columns or a status"
                },
                want.iter().map(|d| d.name()).collect::<Vec<_>>().join(", "),
                R::DTYPE
            )));
        }
        Ok(TypedFunc {
            code: self.code.clone(),
            _sig: PhantomData,
        })
    }

    /// Calls the kernel on bound inputs: checks the room for each output,
    /// fills the slots as `abi::args` says, calls, and reads the counts.
    fn invoke(
        &self,
        extents: &[u64],
        inputs: &[ArrayRef<'_>],
        outputs: &mut [ArrayMut<'_>],
    ) -> ExecResult<Vec<usize>> {
        let kernel = self.kernel();
        let graph = self.graph.graph();
        if outputs.len() != graph.outputs().len() {
            return Err(ExecError::OutputCount {
                expected: graph.outputs().len(),
                got: outputs.len(),
            });
        }
        let args = abi::args(kernel, extents);
        let mut written: Vec<usize> = vec![0; outputs.len()];
        // Cells behind the pointers of scalar inputs and selection counts.
        let mut cells: Vec<u64> = vec![0; args.len()];
        // Packed bitmaps, alive until the call returns; a Vec's heap data
        // does not move when the Vec of them grows.
        let mut bitmaps: Vec<Vec<u8>> = Vec::new();
        // Every scratch parameter's room in one arena (an earlier call's
        // when one is free). Lowering writes every scratch element before
        // reading it (`kiln_ir::kernel::scratch`), so what the arena holds
        // does not matter: debug builds fill new words with NaN bits (-1,
        // `true`) to keep that so.
        let (starts, words) = scratch_layout(&args);
        let mut arena = Vec::new();
        if words > 0 {
            arena = (self.scratch.lock().unwrap_or_else(PoisonError::into_inner))
                .pop()
                .unwrap_or_default();
            let fill = if cfg!(debug_assertions) { u64::MAX } else { 0 };
            arena.resize(words, fill);
        }
        let mut rooms = starts.into_iter();
        let mut slots: Vec<u64> = Vec::with_capacity(args.len());
        for (idx, arg) in args.iter().enumerate() {
            let cell = &mut cells[idx] as *mut u64 as u64;
            slots.push(match *arg {
                Arg::Input { input, by_value } => match inputs[input] {
                    ArrayRef::Scalar(s) if by_value => s.bits(),
                    ArrayRef::Scalar(s) => {
                        cells[idx] = s.bits();
                        cell
                    }
                    a => each_array!(a, v => v.as_ptr() as u64, ArrayRef::Scalar(_) => 0),
                },
                Arg::Bitmap { input } => match inputs[input] {
                    ArrayRef::Bool(rows) => {
                        bitmaps.push(abi::pack_bits(rows));
                        bitmaps.last().expect("just pushed").as_ptr() as u64
                    }
                    _ => unreachable!("binding checked: a packed input is a bool array"),
                },
                Arg::Const(_) => self.consts[idx]
                    .as_ref()
                    .expect("every constant parameter has its buffer")
                    .as_ptr() as u64,
                Arg::Scratch { .. } => {
                    let start = rooms.next().expect("a room per scratch parameter");
                    arena.as_mut_ptr() as u64 + start as u64
                }
                Arg::Extent(n) => n,
                Arg::Returned { output, dtype } | Arg::Output { output, dtype, .. } => {
                    let len = match *arg {
                        Arg::Output { len, .. } => len,
                        _ => 1,
                    };
                    let room = &mut outputs[output];
                    if room.array() != Some((dtype, len)) {
                        return Err(ExecError::Output {
                            name: graph.outputs()[output].name.clone(),
                            expected: format!("{dtype}[{len}]"),
                            got: room.describe(),
                        });
                    }
                    written[output] = len;
                    room.as_mut_ptr() as u64
                }
                Arg::Selection { output, len } => match &mut outputs[output] {
                    ArrayMut::Selection(rows) if rows.len() >= len => rows.as_mut_ptr() as u64,
                    room => {
                        return Err(ExecError::Output {
                            name: graph.outputs()[output].name.clone(),
                            expected: format!("room for {len} rows"),
                            got: room.describe(),
                        })
                    }
                },
                Arg::Count { .. } => cell,
            });
        }
        // SAFETY: one slot per parameter, as `abi::args` describes it. Input
        // arrays were checked against the signature and the bound extents by
        // `bind_shapes`; each output's room was checked above to have the
        // dtype and length the kernel writes; scratch and bitmaps were sized
        // from the same extents; all outlive the call. Outputs are distinct
        // `&mut` borrows, so nothing the kernel writes overlaps anything else.
        let status = unsafe { self.code.call(&mut slots) };
        if !arena.is_empty() {
            let mut arenas = self.scratch.lock().unwrap_or_else(PoisonError::into_inner);
            if arenas.len() < SCRATCH_ARENAS {
                arenas.push(arena);
            }
        }
        if status != abi::STATUS_OK {
            return Err(ExecError::from_status(graph, kernel, status));
        }
        for (idx, arg) in args.iter().enumerate() {
            if let Arg::Count { output } = *arg {
                written[output] = cells[idx] as usize;
            }
        }
        Ok(written)
    }
}

impl Program for JitProgram {
    fn verified(&self) -> &Verified {
        &self.graph
    }

    /// Zero-copy: the kernel reads the caller's arrays and writes into the
    /// caller's room.
    fn run_arrays(
        &self,
        inputs: &[ArrayRef<'_>],
        outputs: &mut [ArrayMut<'_>],
    ) -> ExecResult<Vec<usize>> {
        let shapes: Vec<InputShape> = inputs.iter().map(ArrayRef::shape).collect();
        let bindings = bind_shapes(&self.graph, &shapes, |idx| inputs[idx].describe())?;
        let extents: Vec<u64> = bindings.extents().collect();
        self.invoke(&extents, inputs, outputs)
    }

    fn run_refs(&self, inputs: &[&Data]) -> ExecResult<Vec<Data>> {
        let bindings = bind_inputs(&self.graph, inputs)?;
        let extents: Vec<u64> = bindings.extents().collect();
        let arrays: Vec<ArrayRef<'_>> = inputs
            .iter()
            .map(|d| ArrayRef::of(d).expect("binding rejects selections as inputs"))
            .collect();
        // Room for each output, as the kernel's parameters say.
        let mut outs: Vec<Data> = Vec::with_capacity(self.graph.graph().outputs().len());
        for arg in abi::args(self.kernel(), &extents) {
            match arg {
                Arg::Returned { dtype, .. } => outs.push(Data::Column(Buffer::zeroed(dtype, 1))),
                Arg::Output { dtype, len, .. } => {
                    outs.push(Data::Column(Buffer::zeroed(dtype, len)))
                }
                Arg::Selection { len, .. } => outs.push(Data::Selection(vec![0; len])),
                _ => {}
            }
        }
        let mut rooms: Vec<ArrayMut<'_>> = outs
            .iter_mut()
            .map(|d| match d {
                Data::Column(Buffer::Bool(v)) => ArrayMut::Bool(v),
                Data::Column(Buffer::I32(v)) => ArrayMut::I32(v),
                Data::Column(Buffer::I64(v)) => ArrayMut::I64(v),
                Data::Column(Buffer::F32(v)) => ArrayMut::F32(v),
                Data::Column(Buffer::F64(v)) => ArrayMut::F64(v),
                Data::Selection(rows) => ArrayMut::Selection(rows),
                Data::Scalar(_) => unreachable!("room is an array"),
            })
            .collect();
        let written = self.invoke(&extents, &arrays, &mut rooms)?;
        let graph = self.graph.graph();
        Ok(outs
            .into_iter()
            .zip(written)
            .zip(graph.outputs())
            .map(|((data, count), out)| {
                let scalar = graph
                    .ty(out.value)
                    .as_tensor()
                    .is_some_and(|t| t.is_scalar());
                match data {
                    Data::Column(b) if scalar => {
                        Data::Scalar(b.get(0).expect("a scalar output has one element"))
                    }
                    Data::Selection(mut rows) => {
                        rows.truncate(count);
                        Data::Selection(rows)
                    }
                    d => d,
                }
            })
            .collect())
    }
}

/// A Rust type that is a kiln dtype with the same C representation.
pub trait NativeType: Copy + Send + Sync + 'static {
    /// The dtype.
    const DTYPE: DType;

    /// The value in an 8-byte slot (`Scalar::bits`: low bytes, zero above).
    fn to_slot(self) -> u64;

    /// The value an 8-byte cell holds in its low bytes.
    fn from_slot(bits: u64) -> Self;
}

macro_rules! native_type {
    ($($t:ty => $dtype:ident),*) => {$(
        impl NativeType for $t {
            const DTYPE: DType = DType::$dtype;

            fn to_slot(self) -> u64 {
                kiln_ir::Scalar::$dtype(self).bits()
            }

            fn from_slot(bits: u64) -> Self {
                match kiln_ir::Scalar::from_bits(DType::$dtype, bits) {
                    kiln_ir::Scalar::$dtype(v) => v,
                    _ => unreachable!("from_bits gives its dtype"),
                }
            }
        }
    )*};
}

native_type!(bool => Bool, i32 => I32, i64 => I64, f32 => F32, f64 => F64);

/// Argument tuples of a [`TypedFunc`]: `()`, `(f64,)`, `(f64, i64)`, …
pub trait ScalarArgs: Copy {
    /// The dtypes, in order.
    fn dtypes() -> Vec<DType>;

    /// Calls `ptr` as `extern "C" fn(args…) -> R`.
    ///
    /// # Safety
    /// `ptr` must be a live function with exactly that signature.
    unsafe fn call<R: NativeType>(self, ptr: *const u8) -> R;

    /// The arguments in 8-byte slots, in order.
    fn slots(self) -> Vec<u64>;
}

macro_rules! scalar_args {
    ($($a:ident),*) => {
        impl<$($a: NativeType),*> ScalarArgs for ($($a,)*) {
            fn dtypes() -> Vec<DType> {
                vec![$($a::DTYPE),*]
            }

            #[allow(non_snake_case)]
            unsafe fn call<R: NativeType>(self, ptr: *const u8) -> R {
                // SAFETY: the caller guarantees `ptr` has this signature.
                let f: extern "C" fn($($a),*) -> R = unsafe { std::mem::transmute::<*const u8, extern "C" fn($($a),*) -> R>(ptr) };
                let ($($a,)*) = self;
                f($($a),*)
            }

            #[allow(non_snake_case)]
            fn slots(self) -> Vec<u64> {
                let ($($a,)*) = self;
                vec![$($a.to_slot()),*]
            }
        }
    };
}

scalar_args!();
scalar_args!(A0);
scalar_args!(A0, A1);
scalar_args!(A0, A1, A2);
scalar_args!(A0, A1, A2, A3);
scalar_args!(A0, A1, A2, A3, A4);
scalar_args!(A0, A1, A2, A3, A4, A5);

/// A compiled scalar function with its signature checked once
/// ([`JitProgram::typed`]); a call is one indirect call. Keeps its machine
/// code alive.
#[derive(Clone, Debug)]
pub struct TypedFunc<A, R> {
    code: CompiledKernel,
    _sig: PhantomData<fn(A) -> R>,
}

impl<A: ScalarArgs, R: NativeType> TypedFunc<A, R> {
    /// Calls the function.
    #[inline]
    pub fn call(&self, args: A) -> R {
        match self.code.native_ptr() {
            // SAFETY: `typed` checked the native signature against `A` and
            // `R`, and `self.code` keeps the code alive.
            Some(ptr) => unsafe { args.call(ptr) },
            None => {
                // The VM: the inputs by value, then where the returned
                // output goes (`abi::args` of a direct kernel).
                let mut cell = 0u64;
                let mut slots = args.slots();
                slots.push(&mut cell as *mut u64 as u64);
                // SAFETY: `typed` checked that the kernel is direct with
                // exactly these scalar inputs and one output of `R`, which
                // the kernel writes into `cell`.
                let status = unsafe { self.code.call(&mut slots) };
                debug_assert_eq!(status, abi::STATUS_OK, "a direct kernel cannot fail");
                R::from_slot(cell)
            }
        }
    }
}
