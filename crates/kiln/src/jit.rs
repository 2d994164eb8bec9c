//! The compiling tiers as [`Engine`]s: every [`Backend`] (the VM, Cranelift,
//! LLVM) is one, through the same steps: graph → kernel (lowering in
//! `kiln-kernel`, with the backend's choices) → the backend's code, and safe
//! ways to call the result. Every tier produces a [`JitProgram`]: the
//! calling convention is `kiln_kernel::abi`'s, and every call here is
//! packed by its one packer (`abi::pack`).

use crate::arrays::{check_rooms, each_array, ArrayMut, ArrayRef};
use crate::{runtime, CompileError, CompileOptions, CompileResult, Engine, Program};
use kiln_ir::exec::{bind_inputs, bind_shapes, ExecError, ExecResult, InputShape};
use kiln_ir::{Buffer, DType, Data, Scalar, Verified};
use kiln_kernel::abi::{self, Arg, Bind, CompiledKernel};
use kiln_kernel::backend::{Backend, BackendError, BackendOptions, CacheUse};
use kiln_kernel::{Kernel, LowerOptions, Param};
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};

/// Every backend is an engine whose programs are [`JitProgram`]s:
/// `kiln::Cranelift.compile(&graph, &options)`, or a tier chosen at run time
/// (`Tier::backend`).
impl<B: Backend + ?Sized> Engine for B {
    type Program = JitProgram;

    fn name(&self) -> &'static str {
        Backend::name(self)
    }

    fn compile_batch(
        &self,
        graphs: &[Verified],
        options: &CompileOptions,
    ) -> CompileResult<Vec<JitProgram>> {
        compile_with(self, graphs, options)
    }
}

impl From<BackendError> for CompileError {
    fn from(e: BackendError) -> CompileError {
        match e {
            BackendError::Unsupported(m) => CompileError::Unsupported(m),
            BackendError::Failed(m) => CompileError::Codegen(m),
            e @ BackendError::NotCached => CompileError::Unsupported(e.to_string()),
        }
    }
}

/// What every compiling tier does around its backend: prepares each graph as
/// `options` say, lowers it with the backend's choices (and the caller's
/// `packed_bools` and `libm_calls`), has the backend compile the kernels as
/// one unit with the math names bound to the `libm` crate, and pairs each
/// program with its graph and constant buffers.
fn compile_with<B: Backend + ?Sized>(
    backend: &B,
    graphs: &[Verified],
    options: &CompileOptions,
) -> CompileResult<Vec<JitProgram>> {
    let cache = if options.cache {
        CacheUse::ReadWrite
    } else {
        CacheUse::Off
    };
    compile_using(backend, graphs, options, cache)
}

/// `graph`'s program from the code `backend`'s cache holds for it, compiling
/// nothing: an error where it holds none (the `auto` tier's probe).
#[cfg(feature = "llvm")]
pub(crate) fn compile_cached_only<B: Backend + ?Sized>(
    backend: &B,
    graph: &Verified,
    options: &CompileOptions,
) -> CompileResult<JitProgram> {
    let mut programs = compile_using(
        backend,
        std::slice::from_ref(graph),
        options,
        CacheUse::ReadOnly,
    )?;
    Ok(programs.pop().expect("one graph in, one program out"))
}

fn compile_using<B: Backend + ?Sized>(
    backend: &B,
    graphs: &[Verified],
    options: &CompileOptions,
    cache: CacheUse,
) -> CompileResult<Vec<JitProgram>> {
    let tier = backend.lower_options();
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
            kiln_kernel::lower(&graph, &lower)
                .map_err(|e| CompileError::Unsupported(e.to_string()))?,
        );
        prepared.push(graph);
    }
    let backend_options = BackendOptions {
        opt_level: options.opt_level,
        vectorize: options.vectorize.unwrap_or(true),
        parallel: options.parallel.unwrap_or(true),
        cache,
    };
    let code = kiln_kernel::backend::compile(
        backend,
        kernels,
        &backend_options,
        &runtime::libm_symbols(),
    )?;
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
            let direct = code
                .kernel()
                .direct
                .then(|| abi::args(code.kernel(), &[]).into());
            JitProgram {
                graph,
                consts: Arc::new(consts),
                scratch: Arc::default(),
                code,
                direct,
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
    /// A direct kernel's arguments (`abi::args` with no extents), made once
    /// so that scalar calls allocate nothing.
    direct: Option<Arc<[Arg]>>,
}

/// How many scratch arenas a program keeps between calls.
const SCRATCH_ARENAS: usize = 4;

/// Where each scratch parameter's room starts in one call's arena, in
/// bytes, and the arena's length in 8-byte words. Room `k` starts on a page
/// plus `k * 320 mod 4096` bytes (64 different offsets, 64 bytes apart at
/// least), so no two of 64 rooms start at the same address modulo 4096: a
/// loop that stores to one and loads from another at the same index would
/// otherwise wait on a false dependency (4K aliasing), which ResNet-18's
/// convolutions (reading their phases and updating four accumulator planes
/// in one loop) measurably suffered with the page-aligned rooms large
/// allocations get (docs/performance.md, "CNNs, second step").
fn scratch_layout(args: &[Arg]) -> (Vec<usize>, usize) {
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

    /// The address of the elements of kernel parameter `param`, a tensor
    /// constant ([`Param::ConstIn`]: an `isin` set, a tree's tables), for a
    /// caller that binds the kernel's parameters itself (`abi::Bind::
    /// constant`); `None` for any other parameter. The elements live as long
    /// as the program.
    pub fn constant_address(&self, param: usize) -> Option<u64> {
        self.consts.get(param)?.as_ref().map(|b| b.as_ptr() as u64)
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
    /// `None` on the VM, which runs kernels without machine code, and for a
    /// kernel compiled in stages (docs/abi.md; `CompileOptions::parallel`).
    ///
    /// # Safety
    /// Calling it requires the exact native signature and valid buffers.
    pub unsafe fn raw_fn_ptr(&self) -> Option<*const u8> {
        self.code.native_ptr()
    }

    /// Calls the kernel through its uniform entry: one 8-byte slot per
    /// parameter of [`Self::kernel`], in order, as `kiln_kernel::abi::args`
    /// describes them. Returns the kernel's status.
    ///
    /// # Safety
    /// As for `kiln_kernel::abi::CompiledKernel::call`.
    pub unsafe fn call_slots(&self, slots: &mut [u64]) -> i32 {
        // SAFETY: the caller's guarantee is the callee's precondition.
        unsafe { self.code.call(slots) }
    }

    /// A typed handle for a graph of scalars with one output, checked once:
    /// `program.typed::<(f64,), f64>()?.call((2.0,))`.
    pub fn typed<A: ScalarArgs, R: NativeScalar>(&self) -> CompileResult<TypedFunc<A, R>> {
        let kernel = self.kernel();
        let graph = self.graph.graph();
        let want: Vec<DType> = A::dtypes();
        let got = self.input_dtypes();
        let outs: Vec<DType> = graph
            .outputs()
            .iter()
            .filter_map(|o| graph.ty(o.value).dtype())
            .collect();
        if !kernel.direct || want != got || outs != [R::DTYPE] || got.len() != graph.inputs().len()
        {
            return Err(CompileError::Signature(format!(
                "the graph is ({}) -> ({}){}, not ({}) -> {}",
                names(&got),
                names(&outs),
                if kernel.direct {
                    ""
                } else {
                    " with columns or a status"
                },
                names(&want),
                R::DTYPE
            )));
        }
        Ok(TypedFunc {
            code: self.code.clone(),
            args: self
                .direct
                .clone()
                .expect("a direct kernel has its arguments"),
            _sig: PhantomData,
        })
    }

    /// Calls the kernel on bound inputs, whose output rooms were checked
    /// (or made) for these extents: packs the slots (`abi::pack`), calls,
    /// and reads the counts.
    fn invoke(
        &self,
        extents: &[u64],
        inputs: &[ArrayRef<'_>],
        outputs: &mut [ArrayMut<'_>],
    ) -> ExecResult<Vec<usize>> {
        let kernel = self.kernel();
        let args = abi::args(kernel, extents);
        // Every scratch parameter's room in one arena (an earlier call's
        // when one is free). Lowering writes every scratch element before
        // reading it (`kiln_kernel::scratch`), so what the arena holds
        // does not matter: debug builds fill new words with NaN bits (-1,
        // `true`) to keep that so.
        let (rooms, words) = scratch_layout(&args);
        let mut arena = Vec::new();
        if words > 0 {
            arena = (self.scratch.lock().unwrap_or_else(PoisonError::into_inner))
                .pop()
                .unwrap_or_default();
            let fill = if cfg!(debug_assertions) { u64::MAX } else { 0 };
            arena.resize(words, fill);
        }
        let mut bind = HostBind {
            inputs,
            outputs,
            consts: &self.consts,
            arena: arena.as_mut_ptr(),
            rooms,
            cells: vec![0; args.len()],
            bitmaps: Vec::new(),
            written: vec![0; self.graph.graph().outputs().len()],
            counts: Vec::new(),
        };
        let mut slots = vec![0u64; args.len()];
        abi::pack(&args, &mut bind, &mut slots)?;
        // SAFETY: `pack` filled one slot per parameter as `abi::args`
        // describes it. Input arrays were checked against the signature and
        // the bound extents by `bind_shapes`; each output's room has the
        // dtype and length the kernel writes (checked by `check_rooms` or
        // made from `abi::args`, and asserted by `HostBind::output`);
        // scratch and bitmaps were sized from the same extents; all outlive
        // the call. Outputs are distinct `&mut` borrows, so nothing the
        // kernel writes overlaps anything else.
        let status = unsafe { self.code.call(&mut slots) };
        let HostBind {
            cells,
            mut written,
            counts,
            ..
        } = bind;
        if !arena.is_empty() {
            let mut arenas = self.scratch.lock().unwrap_or_else(PoisonError::into_inner);
            if arenas.len() < SCRATCH_ARENAS {
                arenas.push(arena);
            }
        }
        if status != abi::STATUS_OK {
            return Err(kernel.status_error(self.graph.graph(), status));
        }
        for (output, cell) in counts {
            written[output] = cells[cell] as usize;
        }
        Ok(written)
    }

    /// Calls a direct kernel (scalars in, scalars out) without arrays:
    /// `inputs` in signature order, each output's bits (`Scalar::bits`)
    /// written to `outputs`. The scalar path of typed handles and of the
    /// Python package.
    pub fn call_scalars(&self, inputs: &[Scalar], outputs: &mut [u64]) -> ExecResult<()> {
        let graph = self.graph.graph();
        let kernel = self.kernel();
        let Some(args) = self.direct.as_deref() else {
            return Err(ExecError::Unsupported(
                "call_scalars needs a graph of scalars in and out".into(),
            ));
        };
        if outputs.len() != graph.outputs().len() {
            return Err(ExecError::OutputCount {
                expected: graph.outputs().len(),
                got: outputs.len(),
            });
        }
        let mut params = self.scalar_inputs();
        if inputs.len() != graph.inputs().len()
            || inputs.iter().any(|s| params.next() != Some(s.dtype()))
        {
            return Err(ExecError::Unsupported(format!(
                "the graph takes ({}), not ({})",
                names(&self.input_dtypes()),
                names(&inputs.iter().map(|s| s.dtype()).collect::<Vec<_>>())
            )));
        }
        // SAFETY: the kernel is direct, `args` are its arguments, and each
        // input was checked to have its parameter's dtype, with a cell per
        // output.
        let status =
            unsafe { call_direct(&self.code, args, |input| inputs[input].bits(), outputs) };
        if status != abi::STATUS_OK {
            return Err(kernel.status_error(graph, status));
        }
        Ok(())
    }

    /// The dtypes of a direct kernel's scalar inputs, in order.
    fn scalar_inputs(&self) -> impl Iterator<Item = DType> + '_ {
        self.kernel().params.iter().filter_map(|p| match p {
            Param::ScalarIn { dtype, .. } => Some(*dtype),
            _ => None,
        })
    }

    fn input_dtypes(&self) -> Vec<DType> {
        self.scalar_inputs().collect()
    }
}

fn names(dtypes: &[DType]) -> String {
    dtypes
        .iter()
        .map(|d| d.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Calls a direct kernel through its uniform entry, allocating nothing for
/// up to 16 parameters: scalar input `i` by value (`input(i)`, its bits),
/// each output written to its cell of `outputs`.
///
/// # Safety
/// `code` is a direct kernel, `args` its `abi::args`, `input(i)` the bits
/// of a scalar of input `i`'s dtype, and `outputs` has a cell per output.
unsafe fn call_direct(
    code: &CompiledKernel,
    args: &[Arg],
    input: impl Fn(usize) -> u64,
    outputs: &mut [u64],
) -> i32 {
    struct Cells<F> {
        input: F,
        outputs: *mut u64,
    }
    impl<F: Fn(usize) -> u64> Bind for Cells<F> {
        type Error = std::convert::Infallible;
        fn scalar(&mut self, input: usize) -> Result<u64, Self::Error> {
            Ok((self.input)(input))
        }
        fn output(&mut self, output: usize, _: DType, _: usize) -> Result<u64, Self::Error> {
            // SAFETY: `output` is below the kernel's output count, which is
            // `outputs.len()` (the caller's guarantee).
            Ok(unsafe { self.outputs.add(output) } as u64)
        }
        fn input(&mut self, _: usize) -> Result<u64, Self::Error> {
            unreachable!("a direct kernel takes its scalars by value")
        }
        fn bitmap(&mut self, _: usize) -> Result<u64, Self::Error> {
            unreachable!("a direct kernel has no columns")
        }
        fn constant(&mut self, _: usize) -> Result<u64, Self::Error> {
            unreachable!("a direct kernel has no tensors")
        }
        fn scratch(&mut self, _: usize, _: DType, _: usize) -> Result<u64, Self::Error> {
            unreachable!("a direct kernel has no tensors")
        }
        fn selection(&mut self, _: usize, _: usize) -> Result<u64, Self::Error> {
            unreachable!("a direct kernel has no columns")
        }
        fn count(&mut self, _: usize) -> Result<u64, Self::Error> {
            unreachable!("a direct kernel has no columns")
        }
    }
    // The most parameters a direct call packs without allocating.
    const STACK: usize = 16;
    let mut stack = [0u64; STACK];
    let mut heap = Vec::new();
    let slots = if args.len() <= STACK {
        &mut stack[..args.len()]
    } else {
        heap.resize(args.len(), 0);
        &mut heap[..]
    };
    let mut cells = Cells {
        input,
        outputs: outputs.as_mut_ptr(),
    };
    let Ok(()) = abi::pack(args, &mut cells, slots);
    // SAFETY: one slot per parameter: the inputs by value, the outputs as
    // pointers to 8-byte cells that outlive the call (the caller's
    // guarantee that the kernel has these inputs and outputs).
    unsafe { code.call(slots) }
}

/// A call's memory in this process: the caller's arrays, the program's
/// constants, one scratch arena, and cells for scalars, counts and bitmaps.
struct HostBind<'c, 'a, 'o> {
    inputs: &'c [ArrayRef<'a>],
    outputs: &'c mut [ArrayMut<'o>],
    consts: &'c [Option<Buffer>],
    arena: *mut u64,
    /// Where each scratch parameter's room starts in the arena, in bytes.
    rooms: Vec<usize>,
    /// Cells behind pointers to scalar inputs and counts (never resized,
    /// so their addresses hold).
    cells: Vec<u64>,
    /// Packed bitmaps, alive until the call returns; a Vec's heap data does
    /// not move when the Vec of them grows.
    bitmaps: Vec<Vec<u8>>,
    /// How many elements each output gets.
    written: Vec<usize>,
    /// Each selection's output and the cell its count is written to.
    counts: Vec<(usize, usize)>,
}

impl HostBind<'_, '_, '_> {
    /// A free cell's index and address.
    fn cell(&mut self) -> (usize, u64) {
        let idx = self.counts.len() + self.inputs.len();
        (idx, &mut self.cells[idx] as *mut u64 as u64)
    }
}

impl Bind for HostBind<'_, '_, '_> {
    type Error = ExecError;

    fn scalar(&mut self, input: usize) -> ExecResult<u64> {
        match self.inputs[input] {
            ArrayRef::Scalar(s) => Ok(s.bits()),
            _ => unreachable!("binding checked: a direct kernel's input is a scalar"),
        }
    }

    fn input(&mut self, input: usize) -> ExecResult<u64> {
        Ok(match self.inputs[input] {
            ArrayRef::Scalar(s) => {
                // Input `k` has cell `k`; counts take the cells after them.
                self.cells[input] = s.bits();
                &mut self.cells[input] as *mut u64 as u64
            }
            a => each_array!(a, v => v.as_ptr() as u64, ArrayRef::Scalar(_) => 0),
        })
    }

    fn bitmap(&mut self, input: usize) -> ExecResult<u64> {
        match self.inputs[input] {
            ArrayRef::Bool(rows) => {
                self.bitmaps.push(abi::pack_bits(rows));
                Ok(self.bitmaps.last().expect("just pushed").as_ptr() as u64)
            }
            _ => unreachable!("binding checked: a packed input is a bool array"),
        }
    }

    fn constant(&mut self, param: usize) -> ExecResult<u64> {
        Ok(self.consts[param]
            .as_ref()
            .expect("every constant parameter has its buffer")
            .as_ptr() as u64)
    }

    fn scratch(&mut self, k: usize, _: DType, _: usize) -> ExecResult<u64> {
        Ok(self.arena as u64 + self.rooms[k] as u64)
    }

    fn output(&mut self, output: usize, dtype: DType, len: usize) -> ExecResult<u64> {
        let room = &mut self.outputs[output];
        assert_eq!(
            room.array(),
            Some((dtype, len)),
            "an output's room was checked against its type"
        );
        self.written[output] = len;
        // Lowering writes every element of an output (docs/abi.md): debug
        // builds hand the kernel NaNs and -1s (`true`s) to keep that so, as
        // they do its scratch, so a kernel that read an output before
        // writing it would see them rather than the caller's zeros.
        if cfg!(debug_assertions) {
            match room {
                ArrayMut::Bool(v) => v.fill(true),
                ArrayMut::I32(v) => v.fill(-1),
                ArrayMut::I64(v) => v.fill(-1),
                ArrayMut::F32(v) => v.fill(f32::NAN),
                ArrayMut::F64(v) => v.fill(f64::NAN),
                ArrayMut::F32Uninit(v) => v.fill(std::mem::MaybeUninit::new(f32::NAN)),
                ArrayMut::F64Uninit(v) => v.fill(std::mem::MaybeUninit::new(f64::NAN)),
                ArrayMut::Selection(_) => {}
            }
        }
        Ok(room.as_mut_ptr() as u64)
    }

    fn selection(&mut self, output: usize, len: usize) -> ExecResult<u64> {
        match &mut self.outputs[output] {
            ArrayMut::Selection(rows) => {
                assert!(rows.len() >= len, "a selection's room was checked");
                Ok(rows.as_mut_ptr() as u64)
            }
            _ => unreachable!("a selection's room was checked to be one"),
        }
    }

    fn count(&mut self, output: usize) -> ExecResult<u64> {
        let (idx, addr) = self.cell();
        self.counts.push((output, idx));
        Ok(addr)
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
        check_rooms(self.graph.graph(), &bindings, outputs)?;
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

mod sealed {
    /// Implemented only here: see [`super::NativeScalar`].
    pub trait Sealed {}
}

/// A Rust type that is a kiln dtype with the same C representation: `bool`,
/// `i32`, `i64`, `f32`, `f64`, and nothing else. [`TypedFunc`] calls machine
/// code through a function pointer of these types, so a type that claimed a
/// dtype it does not have would make that call undefined behaviour. The
/// trait is sealed: no other crate can implement it.
///
/// ```compile_fail
/// // A foreign claim to be an `f64` is refused (`Sealed` is private).
/// #[derive(Copy, Clone)]
/// struct Wide([u64; 4]);
/// impl kiln::NativeScalar for Wide {
///     const DTYPE: kiln::DType = kiln::DType::F64;
///     fn to_slot(self) -> u64 { self.0[0] }
///     fn from_slot(bits: u64) -> Self { Wide([bits; 4]) }
/// }
/// ```
pub trait NativeScalar: sealed::Sealed + Copy + Send + Sync + 'static {
    /// The dtype.
    const DTYPE: DType;

    /// The value in an 8-byte slot (`Scalar::bits`: low bytes, zero above).
    fn to_slot(self) -> u64;

    /// The value an 8-byte cell holds in its low bytes.
    fn from_slot(bits: u64) -> Self;
}

macro_rules! native_scalar {
    ($($t:ty => $dtype:ident),*) => {$(
        impl sealed::Sealed for $t {}

        impl NativeScalar for $t {
            const DTYPE: DType = DType::$dtype;

            fn to_slot(self) -> u64 {
                Scalar::$dtype(self).bits()
            }

            fn from_slot(bits: u64) -> Self {
                match Scalar::from_bits(DType::$dtype, bits) {
                    Scalar::$dtype(v) => v,
                    _ => unreachable!("from_bits gives its dtype"),
                }
            }
        }
    )*};
}

native_scalar!(bool => Bool, i32 => I32, i64 => I64, f32 => F32, f64 => F64);

/// Argument tuples of a [`TypedFunc`]: `()`, `(f64,)`, `(f64, i64)`, … up to
/// six [`NativeScalar`]s. Sealed, like [`NativeScalar`].
pub trait ScalarArgs: sealed::Sealed + Copy {
    /// The dtypes, in order.
    fn dtypes() -> Vec<DType>;

    /// Calls `ptr` as `extern "C" fn(args…) -> R`.
    ///
    /// # Safety
    /// `ptr` must be a live function with exactly that signature.
    unsafe fn call<R: NativeScalar>(self, ptr: *const u8) -> R;

    /// Argument `idx` in an 8-byte slot.
    fn slot(self, idx: usize) -> u64;
}

macro_rules! scalar_args {
    ($($a:ident),*) => {
        impl<$($a: NativeScalar),*> sealed::Sealed for ($($a,)*) {}

        impl<$($a: NativeScalar),*> ScalarArgs for ($($a,)*) {
            fn dtypes() -> Vec<DType> {
                vec![$($a::DTYPE),*]
            }

            #[allow(non_snake_case)]
            unsafe fn call<R: NativeScalar>(self, ptr: *const u8) -> R {
                // SAFETY: the caller guarantees `ptr` has this signature.
                let f: extern "C" fn($($a),*) -> R = unsafe { std::mem::transmute::<*const u8, extern "C" fn($($a),*) -> R>(ptr) };
                let ($($a,)*) = self;
                f($($a),*)
            }

            #[allow(non_snake_case)]
            fn slot(self, idx: usize) -> u64 {
                let ($($a,)*) = self;
                let slots: &[u64] = &[$($a.to_slot()),*];
                slots[idx]
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
    /// The kernel's arguments, for the VM's calls through slots.
    args: Arc<[Arg]>,
    _sig: PhantomData<fn(A) -> R>,
}

impl<A: ScalarArgs, R: NativeScalar> TypedFunc<A, R> {
    /// Calls the function.
    #[inline]
    pub fn call(&self, args: A) -> R {
        match self.code.native_ptr() {
            // SAFETY: `typed` checked the native signature against `A` and
            // `R`, and `self.code` keeps the code alive.
            Some(ptr) => unsafe { args.call(ptr) },
            None => {
                // The VM, which has no machine code: through the uniform
                // entry, as every direct call without a native pointer.
                let mut cell = [0u64];
                // SAFETY: `typed` checked that the kernel is direct with
                // exactly these scalar inputs and one output of `R`.
                let status =
                    unsafe { call_direct(&self.code, &self.args, |i| args.slot(i), &mut cell) };
                debug_assert_eq!(status, abi::STATUS_OK, "a direct kernel cannot fail");
                R::from_slot(cell[0])
            }
        }
    }
}
