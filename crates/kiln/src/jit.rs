//! The compiling tiers as [`Engine`]s: graph → kernel (lowering in `kiln-ir`)
//! → machine code (`kiln-cranelift`, or `kiln-llvm` with the `llvm` feature),
//! and safe ways to call the result. Both tiers produce a [`JitProgram`]: the
//! calling convention (8-byte slots, `docs/abi.md`) is the same.

use crate::{CompileError, CompileResult, Engine, Program};
use kiln_ir::exec::{bind_inputs, ExecError, ExecResult};
use kiln_ir::kernel::{self, Kernel, LowerOptions, Param};
use kiln_ir::{Buffer, DType, Data, Graph, GraphInfo, Scalar, Type};
use std::marker::PhantomData;
use std::sync::Arc;

#[cfg(not(target_endian = "little"))]
compile_error!("the JIT's uniform entry passes narrow scalars in the low bytes of 8-byte slots: little-endian hosts only");

/// The Cranelift JIT tier.
#[derive(Copy, Clone, Debug, Default)]
pub struct Cranelift;

impl Engine for Cranelift {
    fn name(&self) -> &'static str {
        "cranelift"
    }

    fn compile(&self, graph: &Graph, info: &GraphInfo) -> CompileResult<Box<dyn Program>> {
        Ok(Box::new(
            compile_many(&[(graph, info)])?
                .pop()
                .expect("one graph in, one program out"),
        ))
    }
}

/// Machine code from one of the tiers.
#[derive(Clone, Debug)]
enum Code {
    Cranelift(kiln_cranelift::CompiledKernel),
    #[cfg(feature = "llvm")]
    Llvm(kiln_llvm::CompiledKernel),
}

impl Code {
    fn kernel(&self) -> &Kernel {
        match self {
            Code::Cranelift(c) => c.kernel(),
            #[cfg(feature = "llvm")]
            Code::Llvm(c) => c.kernel(),
        }
    }

    fn native_ptr(&self) -> *const u8 {
        match self {
            Code::Cranelift(c) => c.native_ptr(),
            #[cfg(feature = "llvm")]
            Code::Llvm(c) => c.native_ptr(),
        }
    }

    /// # Safety
    /// As for the tiers' `CompiledKernel::call`.
    unsafe fn call(&self, slots: &mut [u64]) -> i32 {
        match self {
            // SAFETY: the caller's guarantee is the tier's precondition.
            Code::Cranelift(c) => unsafe { c.call(slots) },
            #[cfg(feature = "llvm")]
            // SAFETY: as above.
            Code::Llvm(c) => unsafe { c.call(slots) },
        }
    }
}

/// The LLVM tier (O3 by default), JIT-compiled in process with MCJIT.
#[cfg(feature = "llvm")]
#[derive(Copy, Clone, Debug, Default)]
pub struct Llvm {
    /// The optimization pipeline the JIT runs.
    pub opt: kiln_llvm::OptLevel,
}

#[cfg(feature = "llvm")]
impl Engine for Llvm {
    fn name(&self) -> &'static str {
        "llvm"
    }

    fn compile(&self, graph: &Graph, info: &GraphInfo) -> CompileResult<Box<dyn Program>> {
        Ok(Box::new(
            self.compile_many(&[(graph, info)])?
                .pop()
                .expect("one graph in, one program out"),
        ))
    }
}

#[cfg(feature = "llvm")]
impl Llvm {
    /// Compiles verified graphs into one LLVM module (one optimization run, one
    /// execution engine).
    pub fn compile_many(&self, graphs: &[(&Graph, &GraphInfo)]) -> CompileResult<Vec<JitProgram>> {
        self.compile_many_with(graphs, &LowerOptions::default())
    }

    /// [`Self::compile_many`] with a choice of native signature.
    pub fn compile_many_with(
        &self,
        graphs: &[(&Graph, &GraphInfo)],
        options: &LowerOptions,
    ) -> CompileResult<Vec<JitProgram>> {
        let kernels = graphs
            .iter()
            .map(|(g, i)| lower_with(g, i, options))
            .collect::<CompileResult<Vec<_>>>()?;
        let compiled = kiln_llvm::jit(kernels, self.opt).map_err(|e| match e {
            kiln_llvm::CodegenError::Unsupported(m) => CompileError::Unsupported(m),
            e => CompileError::Codegen(e.to_string()),
        })?;
        Ok(programs(graphs, compiled.into_iter().map(Code::Llvm)))
    }
}

fn programs(graphs: &[(&Graph, &GraphInfo)], code: impl Iterator<Item = Code>) -> Vec<JitProgram> {
    graphs
        .iter()
        .zip(code)
        .map(|((graph, info), code)| {
            // Tensor constants as the typed buffers the kernel reads, once.
            let consts = code
                .kernel()
                .params
                .iter()
                .map(|p| match p {
                    Param::ConstIn { tensor, .. } => {
                        let mut b = Buffer::with_capacity(tensor.dtype, tensor.values.len());
                        for v in &tensor.values {
                            b.push(*v);
                        }
                        Some(b)
                    }
                    _ => None,
                })
                .collect();
            JitProgram {
                graph: Arc::new((*graph).clone()),
                info: Arc::new((*info).clone()),
                consts: Arc::new(consts),
                code,
            }
        })
        .collect()
}

/// The error a nonzero kernel status stands for (`docs/abi.md`): a division
/// by zero at the graph node the status names, else an unknown status.
pub fn status_error(graph: &Graph, kernel: &Kernel, status: i32) -> ExecError {
    match kernel.failed_check(status) {
        Some(node) => ExecError::DivisionByZero {
            node,
            name: graph.source_name(node).map(str::to_string),
        },
        None => ExecError::Unsupported(format!("kernel returned status {status}")),
    }
}

/// Lowers a verified graph to its kernel.
pub fn lower(graph: &Graph, info: &GraphInfo) -> CompileResult<Kernel> {
    lower_with(graph, info, &LowerOptions::default())
}

/// Lowers a verified graph to its kernel with a choice of native signature.
pub fn lower_with(
    graph: &Graph,
    info: &GraphInfo,
    options: &LowerOptions,
) -> CompileResult<Kernel> {
    kernel::lower_with(graph, info, options).map_err(|e| CompileError::Unsupported(e.to_string()))
}

/// Compiles verified graphs into one JIT module with one finalize: the way to
/// compile a GP population. Each program keeps the shared code alive.
pub fn compile_many(graphs: &[(&Graph, &GraphInfo)]) -> CompileResult<Vec<JitProgram>> {
    compile_many_with(graphs, &LowerOptions::default())
}

/// [`compile_many`] with a choice of native signature (packed `bool` columns).
pub fn compile_many_with(
    graphs: &[(&Graph, &GraphInfo)],
    options: &LowerOptions,
) -> CompileResult<Vec<JitProgram>> {
    let options = LowerOptions {
        register_tiles: LowerOptions::cranelift().register_tiles,
        ..*options
    };
    let kernels = graphs
        .iter()
        .map(|(g, i)| lower_with(g, i, &options))
        .collect::<CompileResult<Vec<_>>>()?;
    let compiled =
        kiln_cranelift::jit(kernels).map_err(|e| CompileError::Codegen(e.to_string()))?;
    Ok(programs(graphs, compiled.into_iter().map(Code::Cranelift)))
}

/// A graph compiled to machine code. `Send + Sync`: call it from many threads.
#[derive(Clone, Debug)]
pub struct JitProgram {
    graph: Arc<Graph>,
    info: Arc<GraphInfo>,
    /// For each kernel parameter that is a tensor constant, its elements.
    consts: Arc<Vec<Option<Buffer>>>,
    code: Code,
}

/// Storage for one output while the kernel runs.
enum OutSlot {
    Scalar(DType, u64),
    Column(Buffer),
    Selection(Vec<u32>, i64),
}

fn scalar_bits(s: Scalar) -> u64 {
    match s {
        Scalar::Bool(b) => u64::from(b),
        Scalar::I32(v) => u64::from(v as u32),
        Scalar::I64(v) => v as u64,
        Scalar::F32(v) => u64::from(v.to_bits()),
        Scalar::F64(v) => v.to_bits(),
    }
}

/// The scalar a kernel wrote into an 8-byte output cell (low bytes first).
pub fn scalar_from_bits(dtype: DType, bits: u64) -> Scalar {
    match dtype {
        DType::Bool => Scalar::Bool(bits & 0xff != 0),
        DType::I32 => Scalar::I32(bits as u32 as i32),
        DType::I64 => Scalar::I64(bits as i64),
        DType::F32 => Scalar::F32(f32::from_bits(bits as u32)),
        DType::F64 => Scalar::F64(f64::from_bits(bits)),
    }
}

/// Packs one `bool` per row into bytes, row `i` at bit `i % 8` of byte `i / 8`
/// (Arrow's bitmap layout, [`Param::BitmapIn`]).
pub fn pack_bits(rows: &[bool]) -> Vec<u8> {
    rows.chunks(8)
        .map(|chunk| {
            chunk
                .iter()
                .enumerate()
                .fold(0u8, |byte, (bit, &set)| byte | (u8::from(set) << bit))
        })
        .collect()
}

fn buffer_ptr(b: &Buffer) -> u64 {
    match b {
        Buffer::Bool(v) => v.as_ptr() as u64,
        Buffer::I32(v) => v.as_ptr() as u64,
        Buffer::I64(v) => v.as_ptr() as u64,
        Buffer::F32(v) => v.as_ptr() as u64,
        Buffer::F64(v) => v.as_ptr() as u64,
    }
}

/// The address of a buffer's first element, as a kernel slot.
pub fn buffer_mut_ptr(b: &mut Buffer) -> u64 {
    match b {
        Buffer::Bool(v) => v.as_mut_ptr() as u64,
        Buffer::I32(v) => v.as_mut_ptr() as u64,
        Buffer::I64(v) => v.as_mut_ptr() as u64,
        Buffer::F32(v) => v.as_mut_ptr() as u64,
        Buffer::F64(v) => v.as_mut_ptr() as u64,
    }
}

/// A buffer of `len` zeros (`false`) of `dtype`: room for a kernel output.
pub fn zeroed(dtype: DType, len: usize) -> Buffer {
    match dtype {
        DType::Bool => Buffer::Bool(vec![false; len]),
        DType::I32 => Buffer::I32(vec![0; len]),
        DType::I64 => Buffer::I64(vec![0; len]),
        DType::F32 => Buffer::F32(vec![0.0; len]),
        DType::F64 => Buffer::F64(vec![0.0; len]),
    }
}

impl JitProgram {
    /// The kernel this program runs.
    pub fn kernel(&self) -> &Kernel {
        self.code.kernel()
    }

    /// The graph this program was compiled from.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The kernel's address with its native signature (`docs/abi.md`), for
    /// callers who manage the ABI themselves. Valid while `self` (or a clone) is.
    ///
    /// # Safety
    /// Calling it requires the exact native signature and valid buffers.
    pub unsafe fn raw_fn_ptr(&self) -> *const u8 {
        self.code.native_ptr()
    }

    /// Calls the kernel through its uniform entry: one 8-byte slot per
    /// parameter of [`Self::kernel`], in order (`docs/abi.md`). Returns the
    /// kernel's status.
    ///
    /// # Safety
    /// `slots` holds exactly one slot per parameter; every pointer slot points
    /// at a live buffer of the dtype and length the parameter and the extents
    /// in `slots` require; output buffers are writable and not aliased.
    pub unsafe fn call_slots(&self, slots: &mut [u64]) -> i32 {
        // SAFETY: the caller's guarantee is the tier's precondition.
        unsafe { self.code.call(slots) }
    }

    /// A typed handle for a graph of scalars with one output, checked once:
    /// `program.scalar_fn::<(f64,), f64>()?.call((2.0,))`.
    pub fn scalar_fn<A: ScalarArgs, R: NativeType>(&self) -> CompileResult<ScalarFn<A, R>> {
        let kernel = self.kernel();
        let want: Vec<DType> = A::dtypes();
        let got: Vec<DType> = kernel
            .params
            .iter()
            .filter_map(|p| match p {
                Param::ScalarIn { dtype, .. } => Some(*dtype),
                _ => None,
            })
            .collect();
        let outs: Vec<DType> = self
            .graph
            .outputs()
            .iter()
            .filter_map(|o| self.graph.ty(o.value).dtype())
            .collect();
        if !kernel.direct
            || want != got
            || outs != [R::DTYPE]
            || got.len() != self.graph.inputs().len()
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
        Ok(ScalarFn {
            code: self.code.clone(),
            ptr: self.code.native_ptr(),
            _sig: PhantomData,
        })
    }
}

impl Program for JitProgram {
    fn run_refs(&self, inputs: &[&Data]) -> ExecResult<Vec<Data>> {
        let bindings = bind_inputs(&self.graph, &self.info, inputs)?;
        let kernel = self.kernel();
        // Elements of a value: the product of its bound dimensions.
        let count = |shape: &[kiln_ir::Dim]| -> usize {
            shape
                .iter()
                .map(|d| bindings.extent(d).expect("verified: dims are bound") as usize)
                .product()
        };
        let extent = |ty: &Type| -> usize {
            match ty {
                Type::Tensor(t) => count(&t.shape),
                Type::Selection(d) => count(std::slice::from_ref(d)),
            }
        };
        let mut outs: Vec<OutSlot> = self
            .graph
            .outputs()
            .iter()
            .map(|o| match self.graph.ty(o.value) {
                Type::Tensor(t) if t.is_scalar() => OutSlot::Scalar(t.dtype, 0),
                ty @ Type::Tensor(t) => OutSlot::Column(zeroed(t.dtype, extent(ty))),
                ty @ Type::Selection(_) => OutSlot::Selection(vec![0; extent(ty)], 0),
            })
            .collect();
        // Packed `bool` columns (`Param::BitmapIn`) are passed as these bitmaps.
        let bitmaps: Vec<Vec<u8>> = kernel
            .params
            .iter()
            .zip(inputs)
            .map(|(p, d)| match (p, d) {
                (Param::BitmapIn { .. }, Data::Column(Buffer::Bool(rows))) => pack_bits(rows),
                _ => Vec::new(),
            })
            .collect();
        // Scalar inputs of a non-direct kernel are passed by pointer to these.
        let scalar_cells: Vec<u64> = inputs
            .iter()
            .map(|d| match d {
                Data::Scalar(s) => scalar_bits(*s),
                _ => 0,
            })
            .collect();
        let mut slots: Vec<u64> = Vec::with_capacity(kernel.params.len());
        // Room for intermediate tensors; a Vec's heap data does not move when
        // the Vec of them grows.
        let mut scratch: Vec<Buffer> = Vec::new();
        let mut out_iter = outs.iter_mut();
        let mut pending_count: Option<*mut i64> = None;
        for (param_idx, param) in kernel.params.iter().enumerate() {
            let slot = match param {
                Param::ScalarIn { .. } | Param::ColumnIn { .. } => match inputs[param_idx] {
                    Data::Scalar(s) if kernel.direct => scalar_bits(*s),
                    Data::Scalar(_) => &scalar_cells[param_idx] as *const u64 as u64,
                    Data::Column(b) => buffer_ptr(b),
                    Data::Selection(_) => unreachable!("bind_inputs rejects selections as inputs"),
                },
                Param::BitmapIn { .. } => bitmaps[param_idx].as_ptr() as u64,
                Param::ConstIn { .. } => buffer_ptr(
                    self.consts[param_idx]
                        .as_ref()
                        .expect("every constant parameter has its buffer"),
                ),
                Param::Scratch { dtype, shape } => {
                    scratch.push(zeroed(*dtype, count(shape)));
                    buffer_mut_ptr(scratch.last_mut().expect("just pushed"))
                }
                Param::Extent { dim } => bindings
                    .extent(&kiln_ir::Dim::Sym(dim.clone()))
                    .expect("every symbol is bound"),
                Param::SelectionCount { .. } => {
                    pending_count.take().expect("a count follows its selection") as u64
                }
                Param::ScalarOut { .. } | Param::ColumnOut { .. } | Param::SelectionOut { .. } => {
                    match out_iter.next().expect("one slot per output") {
                        OutSlot::Scalar(_, cell) => cell as *mut u64 as u64,
                        OutSlot::Column(b) => buffer_mut_ptr(b),
                        OutSlot::Selection(rows, count) => {
                            pending_count = Some(count as *mut i64);
                            rows.as_mut_ptr() as u64
                        }
                    }
                }
            };
            slots.push(slot);
        }
        // SAFETY: one slot per parameter; input buffers were checked against the
        // signature and bound extents by `bind_inputs`; output buffers were sized
        // from the same extents; all outlive the call.
        let status = unsafe { self.code.call(&mut slots) };
        if status != 0 {
            return Err(status_error(&self.graph, kernel, status));
        }
        Ok(outs
            .into_iter()
            .map(|o| match o {
                OutSlot::Scalar(dtype, bits) => Data::Scalar(scalar_from_bits(dtype, bits)),
                OutSlot::Column(b) => Data::Column(b),
                OutSlot::Selection(mut rows, count) => {
                    rows.truncate(count as usize);
                    Data::Selection(rows)
                }
            })
            .collect())
    }
}

/// A Rust type that is a kiln dtype with the same C representation.
pub trait NativeType: Copy + Send + Sync + 'static {
    /// The dtype.
    const DTYPE: DType;
}

impl NativeType for bool {
    const DTYPE: DType = DType::Bool;
}
impl NativeType for i32 {
    const DTYPE: DType = DType::I32;
}
impl NativeType for i64 {
    const DTYPE: DType = DType::I64;
}
impl NativeType for f32 {
    const DTYPE: DType = DType::F32;
}
impl NativeType for f64 {
    const DTYPE: DType = DType::F64;
}

/// Argument tuples of a [`ScalarFn`]: `()`, `(f64,)`, `(f64, i64)`, …
pub trait ScalarArgs: Copy {
    /// The dtypes, in order.
    fn dtypes() -> Vec<DType>;

    /// Calls `ptr` as `extern "C" fn(args…) -> R`.
    ///
    /// # Safety
    /// `ptr` must be a live function with exactly that signature.
    unsafe fn call<R: NativeType>(self, ptr: *const u8) -> R;
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

/// A compiled scalar function with its signature checked once; a call is one
/// indirect call. Keeps its machine code alive.
#[derive(Clone)]
pub struct ScalarFn<A, R> {
    code: Code,
    ptr: *const u8,
    _sig: PhantomData<fn(A) -> R>,
}

// SAFETY: the pointer is to immutable machine code kept alive by `code`, which
// is itself `Send + Sync`; calling it shares no mutable state.
unsafe impl<A, R> Send for ScalarFn<A, R> {}
// SAFETY: as for `Send`.
unsafe impl<A, R> Sync for ScalarFn<A, R> {}

impl<A: ScalarArgs, R: NativeType> ScalarFn<A, R> {
    /// Calls the function.
    #[inline]
    pub fn call(&self, args: A) -> R {
        let _ = &self.code;
        // SAFETY: `scalar_fn` checked the native signature against `A` and `R`,
        // and `self.code` keeps the code alive.
        unsafe { args.call(self.ptr) }
    }
}
