//! Kernel → LLVM IR, statement by statement: each kernel expression is the
//! LLVM instruction or intrinsic of the same meaning. The cases LLVM leaves
//! undefined or poison (integer division by 0 or `MIN / -1`, shifts by the
//! width or more) cannot occur: lowering expanded them (`kiln_kernel::Expr`
//! states each precondition). What remains here is the choice of instruction:
//! `llvm.minimum` rather than `minnum`, `fptosi.sat` rather than `fptosi`,
//! no `nsw`/`nuw` and no fast-math flags. Nothing here decides what a graph
//! means: lowering did.
//!
//! Registers of dtype `bool` are `i1`; in memory and in the direct ABI a bool is
//! a byte holding 0 or 1 (any nonzero byte reads as true).

use crate::{CodegenError, CodegenResult};
use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::basic_block::BasicBlock;
use inkwell::builder::{Builder, BuilderError};
use inkwell::context::Context;
use inkwell::intrinsics::Intrinsic;
use inkwell::module::{Linkage, Module};
use inkwell::types::{BasicMetadataTypeEnum, BasicType, BasicTypeEnum, VectorType};
use inkwell::values::{
    AsValueRef, BasicMetadataValueEnum, BasicValue, BasicValueEnum, FloatValue, FunctionValue,
    InstructionValue, IntValue, PointerValue, VectorValue,
};
use inkwell::{AddressSpace, FloatPredicate, IntPredicate};
use kiln_ir::{BinaryOp, CmpOp, DType, EntityRef, Scalar, UnaryOp};
use kiln_kernel::abi::{self, NativeArg, NativePlace};
use kiln_kernel::iterations::IndexMap;
use kiln_kernel::transpose;
use kiln_kernel::{
    libcalls, Expr, Extent, Iterations, Kernel, MathCall, Param, ParamIdx, Reg, Stmt, Table, Var,
};

impl From<BuilderError> for CodegenError {
    fn from(e: BuilderError) -> Self {
        CodegenError::Invalid(format!("LLVM builder: {e}"))
    }
}

/// The register type of a dtype (`bool` is `i1`).
fn reg_type(cx: &Context, dtype: DType) -> BasicTypeEnum<'_> {
    match dtype {
        DType::Bool => cx.bool_type().into(),
        DType::I32 => cx.i32_type().into(),
        DType::I64 => cx.i64_type().into(),
        DType::F32 => cx.f32_type().into(),
        DType::F64 => cx.f64_type().into(),
    }
}

/// The memory and ABI type of a dtype (`bool` is a byte).
fn mem_type(cx: &Context, dtype: DType) -> BasicTypeEnum<'_> {
    match dtype {
        DType::Bool => cx.i8_type().into(),
        _ => reg_type(cx, dtype),
    }
}

/// Declares `kernel` in `module` under `symbol` with its native signature
/// (`docs/abi.md`), and returns the function and where each parameter went.
fn declare_kernel<'ctx>(
    cx: &'ctx Context,
    module: &Module<'ctx>,
    kernel: &Kernel,
    symbol: &str,
) -> (FunctionValue<'ctx>, Vec<NativePlace>) {
    let native = abi::signature(kernel);
    let ty = |t: NativeArg| -> BasicTypeEnum<'ctx> {
        match t {
            NativeArg::Pointer => cx.ptr_type(AddressSpace::default()).into(),
            NativeArg::I64 => cx.i64_type().into(),
            NativeArg::Value(dtype) => mem_type(cx, dtype),
        }
    };
    let params: Vec<BasicMetadataTypeEnum> = native.params.iter().map(|&t| ty(t).into()).collect();
    let ret = native.returns.map(ty);
    let fn_type = ret.unwrap_or(cx.i32_type().into()).fn_type(&params, false);
    let slots = native.places;
    let function = module.add_function(symbol, fn_type, Some(Linkage::External));
    function.add_attribute(AttributeLoc::Function, enum_attr(cx, "nounwind"));
    for (param, slot) in kernel.params.iter().zip(&slots) {
        let NativePlace::Arg(idx) = *slot else {
            continue;
        };
        let idx = idx as u32;
        if let Some(value) = function.get_nth_param(idx) {
            value.set_name(param_name(param));
        }
        let is_ptr = function
            .get_nth_param(idx)
            .is_some_and(|p| p.is_pointer_value());
        if is_ptr {
            // Buffers never overlap (docs/abi.md): this lets LLVM vectorize
            // without run-time alias checks.
            function.add_attribute(AttributeLoc::Param(idx), enum_attr(cx, "noalias"));
        } else if matches!(
            param,
            Param::ScalarIn {
                dtype: DType::Bool,
                ..
            }
        ) {
            function.add_attribute(AttributeLoc::Param(idx), enum_attr(cx, "zeroext"));
        }
    }
    // The returned value is a byte only for a `bool` output.
    if ret.is_some_and(|t| t.is_int_type() && t.into_int_type().get_bit_width() == 8) {
        function.add_attribute(AttributeLoc::Return, enum_attr(cx, "zeroext"));
    }
    (function, slots)
}

/// The name a parameter gets in the IR: the input's or output's name.
fn param_name(param: &Param) -> &str {
    match param {
        Param::ScalarIn { name, .. }
        | Param::ArrayIn { name, .. }
        | Param::BitmapIn { name }
        | Param::ConstIn { name, .. }
        | Param::ScalarOut { name, .. }
        | Param::ArrayOut { name, .. }
        | Param::SelectionOut { name, .. }
        | Param::SelectionCount { name } => name,
        Param::Extent { dim } => dim,
        Param::Scratch { .. } => "scratch",
    }
}

/// The most constant trips of a loop around an inner loop that codegen
/// keeps from being unrolled ([`FunctionCx::never_unroll`]): LLVM fully
/// unrolled a panel's `k` of up to 10 steps (not 12) before vectorizing.
const SHORT_NEST: u64 = 16;

/// Whether a loop body chooses between a value it loads and another (a
/// `Select` of a `Load`'s register): a panel's `k` block starting its sums
/// from the destination or from the identity. Kept from being unrolled
/// where it is short ([`FunctionCx::never_unroll`]): LLVM unrolled AVX2's
/// 16 columns of it before vectorizing, and `CodeGenPrepare` then made each
/// select of a load a branch around a scalar store (64 a block of 4 rows;
/// a 256 × 784 × 64 product in `k` blocks ran 3-5 % slower on a Zen 3
/// core, and a convolution of 128 channels so).
fn selects_loads(body: &[Stmt]) -> bool {
    let loaded: Vec<Reg> = body
        .iter()
        .filter_map(|s| match s {
            Stmt::Let(r, Expr::Load(..)) => Some(*r),
            _ => None,
        })
        .collect();
    body.iter().any(|s| {
        matches!(s, Stmt::Let(_, Expr::Select(_, x, y)) if loaded.contains(x) || loaded.contains(y))
    })
}

/// Calls the C math function `name` (declared on first use) on `args` of
/// one float type. The declaration is `nobuiltin`, so LLVM never folds or
/// rewrites it with another library's results (the in-process tier binds it
/// to the `libm` crate, as the interpreter uses); `memory(none)` lets LLVM
/// hoist, share and drop calls like any pure op.
pub(crate) fn build_libm_call<'ctx>(
    cx: &'ctx Context,
    module: &Module<'ctx>,
    builder: &Builder<'ctx>,
    name: &str,
    args: &[BasicValueEnum<'ctx>],
) -> CodegenResult<BasicValueEnum<'ctx>> {
    let ty = args[0].get_type();
    let function = module.get_function(name).unwrap_or_else(|| {
        let params: Vec<BasicMetadataTypeEnum> = args.iter().map(|_| ty.into()).collect();
        let f = module.add_function(name, ty.fn_type(&params, false), Some(Linkage::External));
        for attr in ["nobuiltin", "nounwind", "willreturn"] {
            f.add_attribute(AttributeLoc::Function, enum_attr(cx, attr));
        }
        f.add_attribute(AttributeLoc::Function, memory_none(cx));
        f
    });
    let args: Vec<BasicMetadataValueEnum> = args.iter().map(|&a| a.into()).collect();
    let call = builder.build_call(function, &args, name)?;
    // The call site too: `nobuiltin` on a call is what the optimizer checks.
    call.add_attribute(AttributeLoc::Function, enum_attr(cx, "nobuiltin"));
    call.try_as_basic_value()
        .basic()
        .ok_or_else(|| CodegenError::Invalid(format!("`{name}` returns nothing")))
}

/// `memory(none)`: the function neither reads nor writes memory.
pub(crate) fn memory_none(cx: &Context) -> Attribute {
    cx.create_enum_attribute(Attribute::get_named_enum_kind_id("memory"), 0)
}

pub(crate) fn enum_attr(cx: &Context, name: &str) -> Attribute {
    cx.create_enum_attribute(Attribute::get_named_enum_kind_id(name), 0)
}

/// Defines `kernel` in `module` as `symbol`, exported; with `wrapper`, and if
/// `abi::needs_wrapper`, also its uniform entry `i32 symbol__call(u64*
/// slots)`, which loads each parameter from an 8-byte slot.
pub fn define_kernel<'ctx>(
    cx: &'ctx Context,
    module: &Module<'ctx>,
    kernel: &Kernel,
    symbol: &str,
    wrapper: bool,
) -> CodegenResult<FunctionValue<'ctx>> {
    let (function, slots) = declare_kernel(cx, module, kernel, symbol);
    let builder = cx.create_builder();
    let entry = cx.append_basic_block(function, "entry");
    builder.position_at_end(entry);
    let mut fx = FunctionCx {
        cx,
        module,
        builder,
        kernel,
        function,
        slots: &slots,
        regs: vec![None; kernel.regs.len()],
        vars: Vec::new(),
        konst: kiln_kernel::iterations::constants(&kernel.body),
    };
    fx.codegen_body()?;
    if wrapper && abi::needs_wrapper(kernel) {
        define_wrapper(cx, module, function, &slots, &abi::wrapper_symbol(symbol))?;
    }
    Ok(function)
}

fn define_wrapper<'ctx>(
    cx: &'ctx Context,
    module: &Module<'ctx>,
    callee: FunctionValue<'ctx>,
    slots: &[NativePlace],
    name: &str,
) -> CodegenResult<()> {
    let ptr = cx.ptr_type(AddressSpace::default());
    let i32t = cx.i32_type();
    let function = module.add_function(
        name,
        i32t.fn_type(&[ptr.into()], false),
        Some(Linkage::External),
    );
    let builder = cx.create_builder();
    builder.position_at_end(cx.append_basic_block(function, "entry"));
    let base = function
        .get_nth_param(0)
        .expect("the wrapper takes the slot array")
        .into_pointer_value();
    let fn_type = callee.get_type();
    let param_types = fn_type.get_param_types();
    let mut args: Vec<BasicMetadataValueEnum> = Vec::new();
    let mut ret_ptr = None;
    for (idx, slot) in slots.iter().enumerate() {
        let index = cx.i64_type().const_int(idx as u64, false);
        // SAFETY (LLVM IR, not Rust): the caller passes one 8-byte slot per
        // kernel parameter, so slot `idx` is in bounds.
        let addr = unsafe { builder.build_in_bounds_gep(cx.i64_type(), base, &[index], "slot")? };
        match slot {
            NativePlace::Return => ret_ptr = Some(builder.build_load(ptr, addr, "ret")?),
            NativePlace::Arg(i) => {
                let ty = BasicTypeEnum::try_from(param_types[*i])
                    .map_err(|()| CodegenError::Invalid("non-basic parameter type".into()))?;
                args.push(builder.build_load(ty, addr, "arg")?.into());
            }
        }
    }
    let call = builder.build_call(callee, &args, "call")?;
    let result = call.try_as_basic_value().basic();
    let status = match (ret_ptr, result) {
        (Some(p), Some(value)) => {
            builder.build_store(p.into_pointer_value(), value)?;
            i32t.const_zero()
        }
        (None, Some(status)) => status.into_int_value(),
        _ => i32t.const_zero(),
    };
    builder.build_return(Some(&status))?;
    Ok(())
}

/// The function being built: `fx`, with `fx.builder` LLVM's IR builder.
struct FunctionCx<'a, 'ctx> {
    cx: &'ctx Context,
    module: &'a Module<'ctx>,
    builder: Builder<'ctx>,
    kernel: &'a Kernel,
    function: FunctionValue<'ctx>,
    slots: &'a [NativePlace],
    regs: Vec<Option<BasicValueEnum<'ctx>>>,
    /// Each variable's stack slot (promoted to SSA by `mem2reg` from -O1 up).
    vars: Vec<(PointerValue<'ctx>, BasicTypeEnum<'ctx>)>,
    /// The kernel's `i64` constants, for recognizing tile transposes.
    konst: IndexMap<Reg, i64>,
}

impl<'ctx> FunctionCx<'_, 'ctx> {
    fn codegen_body(&mut self) -> CodegenResult<()> {
        for init in &self.kernel.vars {
            let ty = reg_type(self.cx, init.dtype());
            let slot = self.builder.build_alloca(ty, "var")?;
            let value = self.codegen_const(*init);
            self.builder.build_store(slot, value)?;
            self.vars.push((slot, ty));
        }
        let mut ret = None;
        self.codegen_block(&self.kernel.body, &mut ret)?;
        match ret {
            Some(v) => {
                let v = self.store_bool(v);
                self.builder.build_return(Some(&v))?;
            }
            None if self.kernel.direct => {
                return Err(CodegenError::Invalid(
                    "a direct kernel must store its first output".into(),
                ))
            }
            None => {
                self.builder
                    .build_return(Some(&self.cx.i32_type().const_zero()))?;
            }
        }
        Ok(())
    }

    fn arg(&self, param: ParamIdx) -> BasicValueEnum<'ctx> {
        match self.slots[param.index()] {
            NativePlace::Arg(i) => self
                .function
                .get_nth_param(i as u32)
                .expect("one LLVM parameter per argument slot"),
            NativePlace::Return => unreachable!("the return slot is only stored to"),
        }
    }

    fn reg(&self, reg: Reg) -> BasicValueEnum<'ctx> {
        self.regs[reg.index()].expect("lowering defines registers before their uses")
    }

    fn int(&self, reg: Reg) -> IntValue<'ctx> {
        self.reg(reg).into_int_value()
    }

    /// A register value as memory holds it: bools widened to a 0/1 byte.
    fn store_bool(&self, v: BasicValueEnum<'ctx>) -> BasicValueEnum<'ctx> {
        let int = v.is_int_value().then(|| v.into_int_value());
        match int {
            Some(i) if i.get_type().get_bit_width() == 1 => self
                .builder
                .build_int_z_extend(i, self.cx.i8_type(), "byte")
                .expect("builder is positioned")
                .into(),
            _ => v,
        }
    }

    /// A value read from memory or the ABI as a register: any nonzero byte of
    /// a bool is true.
    fn load_bool(
        &self,
        v: BasicValueEnum<'ctx>,
        dtype: DType,
    ) -> CodegenResult<BasicValueEnum<'ctx>> {
        if dtype != DType::Bool {
            return Ok(v);
        }
        let byte = v.into_int_value();
        Ok(self
            .builder
            .build_int_compare(IntPredicate::NE, byte, byte.get_type().const_zero(), "bool")?
            .into())
    }

    fn codegen_block(
        &mut self,
        stmts: &[Stmt],
        ret: &mut Option<BasicValueEnum<'ctx>>,
    ) -> CodegenResult<()> {
        for stmt in stmts {
            match stmt {
                Stmt::Let(reg, expr) => {
                    let value = self.codegen_expr(expr, self.kernel.reg_type(*reg))?;
                    // Source names as value names: `%a = fadd double …` in dumps.
                    if let Some(Some(name)) = self.kernel.reg_names.get(reg.index()) {
                        if value.as_instruction_value().is_some() {
                            value.set_name(name);
                        }
                    }
                    self.regs[reg.index()] = Some(value);
                }
                Stmt::CheckNonZero(reg, check) => self.codegen_check(*reg, *check)?,
                Stmt::Loop {
                    extent,
                    row,
                    body,
                    iterations,
                } => {
                    if let Some(tile) =
                        transpose::tile(self.kernel, (*extent, *row, body), &self.konst)
                    {
                        self.codegen_transpose(&tile)?;
                        continue;
                    }
                    // A few steps carrying state around an inner loop (a
                    // panel's short `k` around its columns), or choosing
                    // loaded values (a `k` block's first sums).
                    let short = matches!(extent, Extent::Fixed(n) if *n <= SHORT_NEST);
                    let nest = body.iter().any(|s| matches!(s, Stmt::Loop { .. }));
                    let kept = short
                        && if nest {
                            *iterations == Iterations::Sequential
                        } else {
                            selects_loads(body)
                        };
                    self.codegen_loop(*extent, *row, body, ret, kept)?
                }
                Stmt::Set(var, reg) => {
                    let (slot, _) = self.vars[var.index()];
                    self.builder.build_store(slot, self.reg(*reg))?;
                }
                Stmt::Store(param, row, reg) => {
                    let value = self.reg(*reg);
                    if self.slots[param.index()] == NativePlace::Return {
                        *ret = Some(value);
                        continue;
                    }
                    let base = self.arg(*param).into_pointer_value();
                    let dtype = self.kernel.reg_type(*reg);
                    let addr = match row {
                        Some(r) => self.element_addr(base, self.int(*r), dtype)?,
                        None => base,
                    };
                    let store = self.builder.build_store(addr, self.store_bool(value))?;
                    store
                        .set_alignment(dtype.size_bytes() as u32)
                        .map_err(|e| CodegenError::Invalid(e.to_string()))?;
                }
                Stmt::KeepRow {
                    sel,
                    count,
                    row,
                    mask,
                } => self.codegen_select_push(*sel, *count, *row, *mask)?,
                Stmt::StoreCount(param, var) => {
                    let value = self.use_var(*var)?;
                    let base = self.arg(*param).into_pointer_value();
                    self.builder.build_store(base, value)?;
                }
                Stmt::Prefetch(param, row) => self.codegen_prefetch(*param, *row)?,
            }
        }
        Ok(())
    }

    /// A tile transpose ([`transpose::tile`]) as vectors: `T` loads along
    /// the tile's `a` (one for each of its `b`), the shuffles of
    /// [`transpose::network`], and `T` stores along its `b`. The indices
    /// are the nest's own arithmetic, evaluated at each vector's first
    /// element (points the nest itself runs), so the elements read and
    /// written are the nest's; every load comes before the first store,
    /// and the tile's source and destination are different buffers.
    fn codegen_transpose(&mut self, tile: &transpose::Tile<'_>) -> CodegenResult<()> {
        let t = tile.lanes;
        let i64t = self.cx.i64_type();
        let size = tile.dtype.size_bytes() as u32;
        let vector: BasicTypeEnum<'ctx> = match mem_type(self.cx, tile.dtype) {
            BasicTypeEnum::FloatType(f) => f.vec_type(t).into(),
            BasicTypeEnum::IntType(i) => i.vec_type(t).into(),
            _ => return Err(CodegenError::Invalid("a tile of a non-scalar type".into())),
        };
        let (a, b) = tile.rows;
        // The nest's index arithmetic at element (a, b): `want`'s value.
        let index_at =
            |fx: &mut Self, at: (u64, u64), want: Reg| -> CodegenResult<IntValue<'ctx>> {
                fx.regs[a.index()] = Some(i64t.const_int(at.0, false).into());
                fx.regs[b.index()] = Some(i64t.const_int(at.1, false).into());
                for s in &tile.lets {
                    if let Stmt::Let(r, e) = s {
                        let v = fx.codegen_expr(e, DType::I64)?;
                        fx.regs[r.index()] = Some(v);
                    }
                }
                Ok(fx.int(want))
            };
        let src = self.arg(tile.src.0).into_pointer_value();
        let mut rows = Vec::with_capacity(t as usize);
        for e in 0..u64::from(t) {
            let at = index_at(self, (0, e), tile.src.1)?;
            let addr = self.element_addr(src, at, tile.dtype)?;
            let v = self.builder.build_load(vector, addr, "tile")?;
            v.as_instruction_value()
                .expect("a load is an instruction")
                .set_alignment(size)
                .map_err(|e| CodegenError::Invalid(e.to_string()))?;
            rows.push(v.into_vector_value());
        }
        let cols = self.transpose_vectors(&rows)?;
        let dst = self.arg(tile.dst.0).into_pointer_value();
        for (k, col) in cols.into_iter().enumerate() {
            let at = index_at(self, (k as u64, 0), tile.dst.1)?;
            let addr = self.element_addr(dst, at, tile.dtype)?;
            let store = self.builder.build_store(addr, col)?;
            store
                .set_alignment(size)
                .map_err(|e| CodegenError::Invalid(e.to_string()))?;
        }
        Ok(())
    }

    /// `rows[i][j]` as `cols[j][i]`, through [`transpose::network`]'s
    /// shuffles.
    fn transpose_vectors(
        &self,
        rows: &[VectorValue<'ctx>],
    ) -> CodegenResult<Vec<VectorValue<'ctx>>> {
        let i32t = self.cx.i32_type();
        let shuffle = |x: VectorValue<'ctx>, y: VectorValue<'ctx>, mask: &[u32]| {
            let mask: Vec<IntValue> = mask
                .iter()
                .map(|&m| i32t.const_int(u64::from(m), false))
                .collect();
            self.builder
                .build_shuffle_vector(x, y, VectorType::const_vector(&mask), "tr")
        };
        transpose::network(rows, shuffle)?
            .ok_or_else(|| CodegenError::Invalid(format!("a tile of {} lanes", rows.len())))
    }

    /// `llvm.prefetch` of a read into every cache level (locality 3) of
    /// element `row` of `param`. The address is a plain `getelementptr`, not
    /// `inbounds`: the row may lie past the buffer, and a prefetch of any
    /// address has no effect on the program (LangRef).
    fn codegen_prefetch(&self, param: ParamIdx, row: Reg) -> CodegenResult<()> {
        let dtype = match &self.kernel.params[param.index()] {
            Param::ScalarIn { dtype, .. } | Param::ScalarOut { dtype, .. } => *dtype,
            p => p.array_type().map_or(DType::Bool, |t| t.dtype),
        };
        let base = self.arg(param).into_pointer_value();
        // SAFETY (LLVM IR, not Rust): a GEP without `inbounds` is defined
        // for any offset; only a dereference would not be.
        let addr = unsafe {
            self.builder
                .build_gep(mem_type(self.cx, dtype), base, &[self.int(row)], "ahead")?
        };
        let i32t = self.cx.i32_type();
        let function = Intrinsic::find("llvm.prefetch")
            .and_then(|i| i.get_declaration(self.module, &[addr.get_type().into()]))
            .ok_or_else(|| CodegenError::Invalid("no LLVM intrinsic `llvm.prefetch`".into()))?;
        let args = [
            addr.into(),
            i32t.const_zero().into(),
            i32t.const_int(3, false).into(),
            i32t.const_int(1, false).into(),
        ];
        self.builder.build_call(function, &args, "")?;
        Ok(())
    }

    fn use_var(&self, var: Var) -> CodegenResult<BasicValueEnum<'ctx>> {
        let (slot, ty) = self.vars[var.index()];
        Ok(self.builder.build_load(ty, slot, "v")?)
    }

    fn element_addr(
        &self,
        base: PointerValue<'ctx>,
        row: IntValue<'ctx>,
        dtype: DType,
    ) -> CodegenResult<PointerValue<'ctx>> {
        // SAFETY (LLVM IR, not Rust): rows are below the extent the caller sized
        // every buffer for (docs/abi.md).
        Ok(unsafe {
            self.builder
                .build_in_bounds_gep(mem_type(self.cx, dtype), base, &[row], "elem")?
        })
    }

    /// An element of `dtype` read from `addr`, aligned to its size.
    fn aligned_load(
        &self,
        addr: PointerValue<'ctx>,
        dtype: DType,
        name: &str,
    ) -> CodegenResult<BasicValueEnum<'ctx>> {
        let value = self
            .builder
            .build_load(mem_type(self.cx, dtype), addr, name)?;
        value
            .as_instruction_value()
            .expect("a load is an instruction")
            .set_alignment(dtype.size_bytes() as u32)
            .map_err(|e| CodegenError::Invalid(e.to_string()))?;
        Ok(value)
    }

    /// A constant table, a private constant global of the module defined
    /// by the first function that reads it.
    fn table(&self, table: &'static Table) -> PointerValue<'ctx> {
        if let Some(global) = self.module.get_global(table.name) {
            return global.as_pointer_value();
        }
        let values: Vec<FloatValue<'ctx>> = match table.dtype {
            DType::F32 => table
                .bits
                .iter()
                .map(|&b| {
                    let v = f32::from_bits(b as u32);
                    self.cx.f32_type().const_float(f64::from(v))
                })
                .collect(),
            _ => table
                .bits
                .iter()
                .map(|&b| self.cx.f64_type().const_float(f64::from_bits(b)))
                .collect(),
        };
        let ty = mem_type(self.cx, table.dtype).into_float_type();
        let array = ty.const_array(&values);
        let global = self.module.add_global(array.get_type(), None, table.name);
        global.set_initializer(&array);
        global.set_constant(true);
        global.set_linkage(Linkage::Private);
        global.set_unnamed_addr(true);
        global.set_alignment(table.dtype.size_bytes() as u32);
        global.as_pointer_value()
    }

    fn current_block(&self) -> BasicBlock<'ctx> {
        self.builder
            .get_insert_block()
            .expect("the builder is positioned")
    }

    /// `if divisor == 0 { return status }`.
    fn codegen_check(&mut self, reg: Reg, check: u32) -> CodegenResult<()> {
        let divisor = self.int(reg);
        let zero = divisor.get_type().const_zero();
        let is_zero = self
            .builder
            .build_int_compare(IntPredicate::EQ, divisor, zero, "divz")?;
        let fail = self
            .cx
            .append_basic_block(self.function, "division_by_zero");
        let cont = self.cx.append_basic_block(self.function, "checked");
        self.builder.build_conditional_branch(is_zero, fail, cont)?;
        self.builder.position_at_end(fail);
        let status = i64::from(abi::check_status(check));
        self.builder
            .build_return(Some(&self.cx.i32_type().const_int(status as u64, true)))?;
        self.builder.position_at_end(cont);
        Ok(())
    }

    fn codegen_loop(
        &mut self,
        extent: Extent,
        row: Reg,
        body: &[Stmt],
        ret: &mut Option<BasicValueEnum<'ctx>>,
        kept: bool,
    ) -> CodegenResult<()> {
        let n = self.codegen_extent(extent);
        let i64t = self.cx.i64_type();
        let preheader = self.current_block();
        let header = self.cx.append_basic_block(self.function, "loop");
        let body_block = self.cx.append_basic_block(self.function, "body");
        let exit = self.cx.append_basic_block(self.function, "exit");
        self.builder.build_unconditional_branch(header)?;
        self.builder.position_at_end(header);
        let phi = self.builder.build_phi(i64t, "row")?;
        let row_value = phi.as_basic_value().into_int_value();
        let more = self
            .builder
            .build_int_compare(IntPredicate::SLT, row_value, n, "more")?;
        self.builder
            .build_conditional_branch(more, body_block, exit)?;
        self.builder.position_at_end(body_block);
        self.regs[row.index()] = Some(row_value.into());
        self.codegen_block(body, ret)?;
        // `row < n <= i64::MAX`, so the increment cannot wrap.
        let next = self
            .builder
            .build_int_nsw_add(row_value, i64t.const_int(1, false), "next")?;
        let latch = self.current_block();
        let back = self.builder.build_unconditional_branch(header)?;
        if kept {
            self.never_unroll(back);
        }
        phi.add_incoming(&[(&i64t.const_zero(), preheader), (&next, latch)]);
        self.builder.position_at_end(exit);
        Ok(())
    }

    /// Marks the loop whose back edge is `back` `llvm.loop.unroll.disable`
    /// (`!llvm.loop !{self, !{!"llvm.loop.unroll.disable"}}`). For a loop
    /// of at most [`SHORT_NEST`] constant trips that carries state around
    /// an inner loop: LLVM fully unrolls such a nest before it vectorizes,
    /// and the inner loop's copies then stay scalar. A panel's `k` loop of
    /// 8 steps or fewer (10 without a prefetch) so ran its 4 × 16 columns
    /// as scalar fused multiply-adds: `[64, 4] @ [4, 256]` took 33.7 µs on
    /// a Zen 3 core, 5.0 marked (torch 5.5). Longer loops are left to
    /// LLVM, which unrolls a long `k` by two once its columns are vectors.
    fn never_unroll(&self, back: InstructionValue<'ctx>) {
        use inkwell::llvm_sys::{core, debuginfo};
        const DISABLE: &str = "llvm.loop.unroll.disable";
        const KIND: &str = "llvm.loop";
        // SAFETY: every reference is made in, and belongs to, `self.cx`; the
        // temporary node is replaced (and freed) by the node that names it,
        // which makes that node its own first operand, as a loop ID is.
        unsafe {
            let cx = self.cx.raw();
            let name = core::LLVMMDStringInContext2(cx, DISABLE.as_ptr().cast(), DISABLE.len());
            let mut property = [name];
            let property = core::LLVMMDNodeInContext2(cx, property.as_mut_ptr(), 1);
            let temporary = debuginfo::LLVMTemporaryMDNode(cx, std::ptr::null_mut(), 0);
            let mut operands = [temporary, property];
            let id = core::LLVMMDNodeInContext2(cx, operands.as_mut_ptr(), 2);
            debuginfo::LLVMMetadataReplaceAllUsesWith(temporary, id);
            let kind = core::LLVMGetMDKindIDInContext(cx, KIND.as_ptr().cast(), KIND.len() as u32);
            core::LLVMSetMetadata(back.as_value_ref(), kind, core::LLVMMetadataAsValue(cx, id));
        }
    }

    fn codegen_extent(&self, extent: Extent) -> IntValue<'ctx> {
        match extent {
            Extent::Fixed(n) => self.cx.i64_type().const_int(n, false),
            Extent::Param(p) => self.arg(p).into_int_value(),
            Extent::Reg(r) => self.reg(r).into_int_value(),
        }
    }

    /// `sel[count] = row; count += mask`, without a branch.
    fn codegen_select_push(
        &mut self,
        sel: ParamIdx,
        count: Var,
        row: Reg,
        mask: Reg,
    ) -> CodegenResult<()> {
        let n_kept = self.use_var(count)?.into_int_value();
        let base = self.arg(sel).into_pointer_value();
        let addr = self.element_addr(base, n_kept, DType::I32)?;
        let row32 = self
            .builder
            .build_int_truncate(self.int(row), self.cx.i32_type(), "row32")?;
        self.builder.build_store(addr, row32)?;
        let keep = self
            .builder
            .build_int_z_extend(self.int(mask), self.cx.i64_type(), "keep")?;
        let next = self.builder.build_int_add(n_kept, keep, "kept")?;
        let (slot, _) = self.vars[count.index()];
        self.builder.build_store(slot, next)?;
        Ok(())
    }

    fn codegen_const(&self, c: Scalar) -> BasicValueEnum<'ctx> {
        let cx = self.cx;
        match c {
            Scalar::Bool(b) => cx.bool_type().const_int(u64::from(b), false).into(),
            Scalar::I32(v) => cx.i32_type().const_int(v as u64, true).into(),
            Scalar::I64(v) => cx.i64_type().const_int(v as u64, true).into(),
            // Finite values, infinities and -0.0 are exact through f64; NaN
            // payloads are unspecified (docs/semantics.md).
            Scalar::F32(v) => cx.f32_type().const_float(f64::from(v)).into(),
            Scalar::F64(v) => cx.f64_type().const_float(v).into(),
        }
    }

    fn codegen_expr(&mut self, expr: &Expr, dtype: DType) -> CodegenResult<BasicValueEnum<'ctx>> {
        Ok(match expr {
            Expr::Input(p) if self.kernel.direct => self.load_bool(self.arg(*p), dtype)?,
            Expr::Input(p) => {
                let addr = self.arg(*p).into_pointer_value();
                let value = self
                    .builder
                    .build_load(mem_type(self.cx, dtype), addr, "in")?;
                self.load_bool(value, dtype)?
            }
            Expr::Load(p, row) => {
                let base = self.arg(*p).into_pointer_value();
                let addr = self.element_addr(base, self.int(*row), dtype)?;
                let value = self.aligned_load(addr, dtype, "load")?;
                self.load_bool(value, dtype)?
            }
            Expr::LoadBit(p, row) => {
                // byte = base[row >> 3]; bit = (byte >> (row & 7)) & 1
                let base = self.arg(*p).into_pointer_value();
                let row = self.int(*row);
                let i64t = self.cx.i64_type();
                let byte_idx =
                    self.builder
                        .build_right_shift(row, i64t.const_int(3, false), false, "byte")?;
                let addr = self.element_addr(base, byte_idx, DType::Bool)?;
                let byte = self
                    .builder
                    .build_load(self.cx.i8_type(), addr, "bits")?
                    .into_int_value();
                let bit = self
                    .builder
                    .build_and(row, i64t.const_int(7, false), "bit")?;
                let bit = self
                    .builder
                    .build_int_truncate(bit, self.cx.i8_type(), "bit")?;
                let shifted = self
                    .builder
                    .build_right_shift(byte, bit, false, "shifted")?;
                let one = self.builder.build_and(
                    shifted,
                    self.cx.i8_type().const_int(1, false),
                    "one",
                )?;
                self.load_bool(one.into(), DType::Bool)?
            }
            Expr::Const(c) => self.codegen_const(*c),
            Expr::ExtentValue(e) => self.codegen_extent(*e).into(),
            Expr::Var(v) => self.use_var(*v)?,
            Expr::Unary(op, a) => self.codegen_unary(*op, self.reg(*a), dtype)?,
            Expr::Binary(op, a, b) => {
                self.codegen_binary(*op, self.reg(*a), self.reg(*b), dtype)?
            }
            Expr::Compare(op, a, b) => {
                let operand = self.kernel.reg_type(*a);
                self.codegen_compare(*op, self.reg(*a), self.reg(*b), operand)?
            }
            Expr::Select(c, a, b) => {
                self.builder
                    .build_select(self.int(*c), self.reg(*a), self.reg(*b), "select")?
            }
            // `llvm.fma`, never `llvm.fmuladd` (which may round twice): the
            // FMA instruction where the CPU has one, else a call of `fmaf`/
            // `fma` (the JIT binds them to the `libm` crate's).
            Expr::MulAdd(a, b, c) => {
                let (a, b, c) = (self.reg(*a), self.reg(*b), self.reg(*c));
                self.intrinsic("llvm.fma", &[a, b, c], &[a.get_type()])?
            }
            Expr::Cast(to, a) => {
                let from = self.kernel.reg_type(*a);
                self.codegen_cast(self.reg(*a), from, *to)?
            }
            Expr::Bitcast(to, a) => {
                self.builder
                    .build_bit_cast(self.reg(*a), reg_type(self.cx, *to), "bits")?
            }
            Expr::Table(table, index) => {
                let base = self.table(table);
                let addr = self.element_addr(base, self.int(*index), dtype)?;
                self.aligned_load(addr, dtype, "entry")?
            }
            Expr::Fallback { call, rare, value } => {
                self.codegen_fallback(*call, self.reg(*rare), self.reg(*value), dtype)?
            }
        })
    }

    /// Calls an LLVM intrinsic overloaded on the type of its first argument.
    fn intrinsic(
        &self,
        name: &str,
        args: &[BasicValueEnum<'ctx>],
        overloads: &[BasicTypeEnum<'ctx>],
    ) -> CodegenResult<BasicValueEnum<'ctx>> {
        let function = Intrinsic::find(name)
            .and_then(|i| i.get_declaration(self.module, overloads))
            .ok_or_else(|| CodegenError::Invalid(format!("no LLVM intrinsic `{name}`")))?;
        let args: Vec<BasicMetadataValueEnum> = args.iter().map(|&a| a.into()).collect();
        self.builder
            .build_call(function, &args, name)?
            .try_as_basic_value()
            .basic()
            .ok_or_else(|| CodegenError::Invalid(format!("`{name}` returns nothing")))
    }

    /// Calls a C math function by name ([`build_libm_call`]).
    fn call_libm(
        &self,
        name: &str,
        args: &[BasicValueEnum<'ctx>],
    ) -> CodegenResult<BasicValueEnum<'ctx>> {
        build_libm_call(self.cx, self.module, &self.builder, name, args)
    }

    /// `if rare { call } else { value }`: a call to this module's helper
    /// for the function (`crate::fallback`), which the loop vectorizer
    /// replaces with its vector variant.
    fn codegen_fallback(
        &self,
        call: MathCall,
        rare: BasicValueEnum<'ctx>,
        value: BasicValueEnum<'ctx>,
        dtype: DType,
    ) -> CodegenResult<BasicValueEnum<'ctx>> {
        let name = call
            .name(dtype)
            .ok_or_else(|| CodegenError::Invalid(format!("{call:?} on {dtype}")))?;
        let args = call.args();
        let ty = value.get_type().into_float_type();
        let helper = crate::fallback::helper(self.cx, self.module, name, args.len(), ty)?;
        let flag = crate::fallback::flag_type(self.cx, ty);
        let rare = self
            .builder
            .build_int_z_extend(rare.into_int_value(), flag, "rare")?;
        let mut operands: Vec<BasicMetadataValueEnum> =
            args.into_iter().map(|a| self.reg(a).into()).collect();
        operands.extend::<[BasicMetadataValueEnum; 2]>([rare.into(), value.into()]);
        self.builder
            .build_call(helper, &operands, "fallback")?
            .try_as_basic_value()
            .basic()
            .ok_or_else(|| CodegenError::Invalid("a fallback returns nothing".into()))
    }

    fn codegen_unary(
        &self,
        op: UnaryOp,
        a: BasicValueEnum<'ctx>,
        dtype: DType,
    ) -> CodegenResult<BasicValueEnum<'ctx>> {
        let b = &self.builder;
        let ty = a.get_type();
        if !dtype.is_float() {
            let i = a.into_int_value();
            return Ok(match op {
                UnaryOp::Neg => b.build_int_neg(i, "neg")?.into(),
                // `i1 false`: abs(MIN) is MIN (wrapping), not poison.
                UnaryOp::Abs => {
                    let no_poison = self.cx.bool_type().const_zero().into();
                    self.intrinsic("llvm.abs", &[a, no_poison], &[ty])?
                }
                UnaryOp::BNot => b.build_not(i, "not")?.into(),
                _ => return Err(CodegenError::Invalid(format!("`{op}` on {dtype}"))),
            });
        }
        let intrinsic = match op {
            UnaryOp::Neg => return Ok(b.build_float_neg(a.into_float_value(), "neg")?.into()),
            UnaryOp::Abs => "llvm.fabs",
            UnaryOp::Sqrt => "llvm.sqrt",
            UnaryOp::Floor => "llvm.floor",
            UnaryOp::Ceil => "llvm.ceil",
            UnaryOp::Trunc => "llvm.trunc",
            // Round half to even.
            UnaryOp::Round => "llvm.roundeven",
            _ => {
                let name = libcalls::unary_name(op, dtype)
                    .ok_or_else(|| CodegenError::Invalid(format!("`{op}` on {dtype}")))?;
                return self.call_libm(name, &[a]);
            }
        };
        self.intrinsic(intrinsic, &[a], &[ty])
    }

    fn codegen_binary(
        &self,
        op: BinaryOp,
        a: BasicValueEnum<'ctx>,
        b: BasicValueEnum<'ctx>,
        dtype: DType,
    ) -> CodegenResult<BasicValueEnum<'ctx>> {
        if dtype.is_float() {
            return self.codegen_float_binary(
                op,
                a.into_float_value(),
                b.into_float_value(),
                dtype,
            );
        }
        let (x, y) = (a.into_int_value(), b.into_int_value());
        let bx = &self.builder;
        let ty = a.get_type();
        Ok(match op {
            // No `nsw`/`nuw`: integer arithmetic wraps.
            BinaryOp::Add => bx.build_int_add(x, y, "add")?.into(),
            BinaryOp::Sub => bx.build_int_sub(x, y, "sub")?.into(),
            BinaryOp::Mul => bx.build_int_mul(x, y, "mul")?.into(),
            // Lowering replaced 0 and -1 divisors: these are defined.
            BinaryOp::Div => bx.build_int_signed_div(x, y, "div")?.into(),
            BinaryOp::Rem => bx.build_int_signed_rem(x, y, "rem")?.into(),
            BinaryOp::Min => self.intrinsic("llvm.smin", &[a, b], &[ty])?,
            BinaryOp::Max => self.intrinsic("llvm.smax", &[a, b], &[ty])?,
            BinaryOp::And | BinaryOp::BAnd => bx.build_and(x, y, "and")?.into(),
            BinaryOp::Or | BinaryOp::BOr => bx.build_or(x, y, "or")?.into(),
            BinaryOp::Xor | BinaryOp::BXor => bx.build_xor(x, y, "xor")?.into(),
            // Lowering masked the amount below the width (LLVM makes a shift
            // by the width or more poison).
            BinaryOp::Shl => bx.build_left_shift(x, y, "shl")?.into(),
            BinaryOp::ShrArith => bx.build_right_shift(x, y, true, "sshr")?.into(),
            BinaryOp::ShrLogical => bx.build_right_shift(x, y, false, "ushr")?.into(),
            // Float-only ops, and ops lowering expands.
            _ => return Err(CodegenError::Invalid(format!("`{op}` on {dtype}"))),
        })
    }

    fn codegen_float_binary(
        &self,
        op: BinaryOp,
        a: FloatValue<'ctx>,
        b: FloatValue<'ctx>,
        dtype: DType,
    ) -> CodegenResult<BasicValueEnum<'ctx>> {
        let bx = &self.builder;
        let ty: BasicTypeEnum = a.get_type().into();
        // No fast-math flags anywhere: IEEE 754, round to nearest even, no
        // contraction into FMA, no reassociation.
        Ok(match op {
            BinaryOp::Add => bx.build_float_add(a, b, "fadd")?.into(),
            BinaryOp::Sub => bx.build_float_sub(a, b, "fsub")?.into(),
            BinaryOp::Mul => bx.build_float_mul(a, b, "fmul")?.into(),
            BinaryOp::Div => bx.build_float_div(a, b, "fdiv")?.into(),
            // IEEE 754-2019 minimum/maximum: NaN-propagating, -0.0 < +0.0
            // (`minnum` would not be).
            BinaryOp::Min => self.min_max("llvm.minimum", a, b)?,
            BinaryOp::Max => self.min_max("llvm.maximum", a, b)?,
            BinaryOp::Copysign => self.intrinsic("llvm.copysign", &[a.into(), b.into()], &[ty])?,
            _ => {
                let name = libcalls::binary_name(op, dtype)
                    .ok_or_else(|| CodegenError::Invalid(format!("`{op}` on {dtype}")))?;
                self.call_libm(name, &[a.into(), b.into()])?
            }
        })
    }

    /// `llvm.minimum`/`llvm.maximum` of `a` and `b`, and NaN (`a + b`) where
    /// either is NaN. The select restates what the intrinsic promises because
    /// LLVM 19's x86 lowering breaks the promise on AVX-512 (DQ) targets: when
    /// it proves one operand never NaN (an int → float cast), it classifies
    /// the other with `vfpclass` for quiet NaNs only, so a signaling NaN gives
    /// the number (`min(sNaN, 3.0) = 3.0`; found by the differential fuzzer,
    /// filetest `regressions/min_signaling_nan.kiln`).
    fn min_max(
        &self,
        intrinsic: &str,
        a: FloatValue<'ctx>,
        b: FloatValue<'ctx>,
    ) -> CodegenResult<BasicValueEnum<'ctx>> {
        let bx = &self.builder;
        let ty: BasicTypeEnum = a.get_type().into();
        let m = self.intrinsic(intrinsic, &[a.into(), b.into()], &[ty])?;
        let nan = bx.build_float_compare(FloatPredicate::UNO, a, b, "uno")?;
        let sum = bx.build_float_add(a, b, "nan")?;
        Ok(bx.build_select(nan, sum, m.into_float_value(), "minmax")?)
    }

    fn codegen_compare(
        &self,
        op: CmpOp,
        a: BasicValueEnum<'ctx>,
        b: BasicValueEnum<'ctx>,
        operand: DType,
    ) -> CodegenResult<BasicValueEnum<'ctx>> {
        if operand.is_float() {
            let predicate = match op {
                CmpOp::Eq => FloatPredicate::OEQ,
                // Unordered or not equal: true when either is NaN.
                CmpOp::Ne => FloatPredicate::UNE,
                CmpOp::Lt => FloatPredicate::OLT,
                CmpOp::Le => FloatPredicate::OLE,
                CmpOp::Gt => FloatPredicate::OGT,
                CmpOp::Ge => FloatPredicate::OGE,
            };
            return Ok(self
                .builder
                .build_float_compare(
                    predicate,
                    a.into_float_value(),
                    b.into_float_value(),
                    "fcmp",
                )?
                .into());
        }
        // Signed; lowering compares bools for equality only.
        let predicate = match op {
            CmpOp::Eq => IntPredicate::EQ,
            CmpOp::Ne => IntPredicate::NE,
            CmpOp::Lt => IntPredicate::SLT,
            CmpOp::Le => IntPredicate::SLE,
            CmpOp::Gt => IntPredicate::SGT,
            CmpOp::Ge => IntPredicate::SGE,
        };
        Ok(self
            .builder
            .build_int_compare(predicate, a.into_int_value(), b.into_int_value(), "icmp")?
            .into())
    }

    /// A conversion: from a 0/1 `bool`, or between numbers as Rust's `as`
    /// does (float to int saturates, NaN gives 0). Lowering turned
    /// conversions to `bool` into comparisons.
    fn codegen_cast(
        &self,
        a: BasicValueEnum<'ctx>,
        from: DType,
        to: DType,
    ) -> CodegenResult<BasicValueEnum<'ctx>> {
        let bx = &self.builder;
        let to_ty = reg_type(self.cx, to);
        Ok(match (from, to) {
            _ if from == to => a,
            (_, DType::Bool) => {
                return Err(CodegenError::Invalid(format!("a cast of {from} to bool")))
            }
            (DType::Bool, _) if to.is_float() => bx
                .build_unsigned_int_to_float(a.into_int_value(), to_ty.into_float_type(), "b2f")?
                .into(),
            (DType::Bool, _) => bx
                .build_int_z_extend(a.into_int_value(), to_ty.into_int_type(), "b2i")?
                .into(),
            (DType::F32, DType::F64) => bx
                .build_float_ext(a.into_float_value(), to_ty.into_float_type(), "fpext")?
                .into(),
            (DType::F64, DType::F32) => bx
                .build_float_trunc(a.into_float_value(), to_ty.into_float_type(), "fptrunc")?
                .into(),
            // Saturating, NaN → 0; plain `fptosi` would be poison out of range.
            _ if from.is_float() => {
                self.intrinsic("llvm.fptosi.sat", &[a], &[to_ty, a.get_type()])?
            }
            _ if to.is_float() => bx
                .build_signed_int_to_float(a.into_int_value(), to_ty.into_float_type(), "sitofp")?
                .into(),
            (DType::I64, DType::I32) => bx
                .build_int_truncate(a.into_int_value(), to_ty.into_int_type(), "trunc")?
                .into(),
            _ => bx
                .build_int_s_extend(a.into_int_value(), to_ty.into_int_type(), "sext")?
                .into(),
        })
    }
}
