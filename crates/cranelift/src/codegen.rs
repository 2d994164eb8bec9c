//! Kernel → CLIF, statement by statement: each kernel expression is the CLIF
//! instruction of the same meaning (`kiln_kernel::Expr` states the
//! preconditions lowering guarantees, such as divisors that cannot trap).
//! Nothing here decides what a graph means: that was lowering's job.

use crate::vector::{self, Routines};
use crate::{CodegenError, CodegenResult};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{self, types, AbiParam, InstBuilder, MemFlagsData, Signature};
use cranelift_codegen::isa::CallConv;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_module::{DataDescription, FuncOrDataId, Linkage, Module};
use kiln_ir::{BinaryOp, CmpOp, DType, EntityRef, Scalar, UnaryOp};
use kiln_kernel::abi::{self, NativeArg, NativePlace};
use kiln_kernel::{
    libcalls, Expr, Extent, Iterations, Kernel, MathCall, ParamIdx, Reg, Stmt, Table,
};
use std::collections::{HashMap, HashSet};

/// The CLIF type of a dtype (`bool` is an `i8` holding 0 or 1).
pub fn clif_type(dtype: DType) -> ir::Type {
    match dtype {
        DType::Bool => types::I8,
        DType::I32 => types::I32,
        DType::I64 => types::I64,
        DType::F32 => types::F32,
        DType::F64 => types::F64,
    }
}

/// The CLIF type of a native argument.
fn native_type(ty: NativeArg, ptr: ir::Type) -> ir::Type {
    match ty {
        NativeArg::Pointer => ptr,
        NativeArg::I64 => types::I64,
        NativeArg::Value(dtype) => clif_type(dtype),
    }
}

/// The CLIF signature of `kernel` (`kiln_kernel::abi::signature`).
pub fn signature(
    kernel: &Kernel,
    ptr: ir::Type,
    call_conv: CallConv,
) -> (Signature, Vec<NativePlace>) {
    let native = abi::signature(kernel);
    let mut sig = Signature::new(call_conv);
    for &ty in &native.params {
        sig.params.push(AbiParam::new(native_type(ty, ptr)));
    }
    let ret = native.returns.map_or(types::I32, |ty| native_type(ty, ptr));
    sig.returns.push(AbiParam::new(ret));
    (sig, native.places)
}

/// Declares and defines `kernel` (exported under its name) in `module`; with
/// `wrapper`, and if `abi::needs_wrapper`, also its local uniform entry
/// `i32 name__call(u64* slots)`, which loads each parameter from an 8-byte
/// slot and calls it. With `vectorize`, row loops the vectorizer takes run
/// in vectors ([`crate::vector`]), calling those vector math routines.
pub fn define_kernel<M: Module>(
    module: &mut M,
    kernel: &Kernel,
    symbol: &str,
    wrapper: bool,
    vectorize: Option<&Routines>,
) -> CodegenResult<(cranelift_module::FuncId, Option<cranelift_module::FuncId>)> {
    let ptr = module.target_config().pointer_type();
    let call_conv = module.target_config().default_call_conv;
    let (sig, slots) = signature(kernel, ptr, call_conv);
    let id = module.declare_function(symbol, Linkage::Export, &sig)?;
    let mut ctx = module.make_context();
    ctx.func.signature = sig.clone();
    build_function(module, &mut ctx.func, kernel, &slots, vectorize)?;
    module
        .define_function(id, &mut ctx)
        .map_err(|e| CodegenError::Cranelift(format!("{symbol}: {e:?}")))?;
    module.clear_context(&mut ctx);
    if !wrapper || !abi::needs_wrapper(kernel) {
        return Ok((id, None));
    }
    let wrapper_id = define_wrapper(module, id, &sig, &slots, &abi::wrapper_symbol(symbol))?;
    Ok((id, Some(wrapper_id)))
}

/// True when references between a module's own functions and data must be
/// absolute (an 8-byte address) rather than PC-relative: in the JIT (not
/// PIC), where cranelift-jit maps each function and data object where the
/// system puts it, which in a large process can be more than 2 GiB away
/// from the code that reads it (a ResNet-18 kernel's wrapper, in a process
/// with torch and LLVM-compiled models loaded, could not reach its kernel:
/// cranelift-jit panicked relocating the call). Objects (PIC) stay
/// PC-relative; the linker places them.
fn absolute_refs<M: Module>(module: &M) -> bool {
    !module.isa().flags().is_pic()
}

fn define_wrapper<M: Module>(
    module: &mut M,
    callee: cranelift_module::FuncId,
    callee_sig: &Signature,
    slots: &[NativePlace],
    name: &str,
) -> CodegenResult<cranelift_module::FuncId> {
    let ptr = module.target_config().pointer_type();
    let mut sig = Signature::new(module.target_config().default_call_conv);
    sig.params.push(AbiParam::new(ptr));
    sig.returns.push(AbiParam::new(types::I32));
    let id = module.declare_function(name, Linkage::Local, &sig)?;
    let mut ctx = module.make_context();
    ctx.func.signature = sig;
    let mut fbc = FunctionBuilderContext::new();
    {
        let mut bcx = FunctionBuilder::new(&mut ctx.func, &mut fbc);
        let entry = bcx.create_block();
        bcx.append_block_params_for_function_params(entry);
        bcx.switch_to_block(entry);
        bcx.seal_block(entry);
        let base = bcx.block_params(entry)[0];
        let flags = MemFlagsData::trusted();
        let mut args = Vec::new();
        let mut ret_ptr = None;
        for (idx, slot) in slots.iter().enumerate() {
            let offset = (idx * 8) as i32;
            match slot {
                NativePlace::Return => ret_ptr = Some(bcx.ins().load(ptr, flags, base, offset)),
                NativePlace::Arg(i) => {
                    let ty = callee_sig.params[*i].value_type;
                    args.push(bcx.ins().load(ty, flags, base, offset));
                }
            }
        }
        let fref = module.declare_func_in_func(callee, bcx.func);
        if absolute_refs(module) {
            bcx.func.dfg.ext_funcs[fref].colocated = false;
        }
        let call = bcx.ins().call(fref, &args);
        let result = bcx.inst_results(call)[0];
        let status = match ret_ptr {
            Some(p) => {
                bcx.ins().store(flags, result, p, 0);
                bcx.ins().iconst(types::I32, 0)
            }
            None => result,
        };
        bcx.ins().return_(&[status]);
        bcx.finalize(module.target_config());
    }
    module
        .define_function(id, &mut ctx)
        .map_err(|e| CodegenError::Cranelift(format!("{name}: {e:?}")))?;
    module.clear_context(&mut ctx);
    Ok(id)
}

/// The function being built: `fx`, with `fx.bcx` the Cranelift builder.
pub(crate) struct FunctionCx<'a, M: Module> {
    pub(crate) module: &'a mut M,
    pub(crate) bcx: FunctionBuilder<'a>,
    pub(crate) kernel: &'a Kernel,
    slots: &'a [NativePlace],
    /// Each register's scalar value (in a vector loop: the loop-invariant
    /// ones).
    pub(crate) regs: Vec<Option<ir::Value>>,
    vars: Vec<Variable>,
    args: Vec<ir::Value>,
    pub(crate) ptr: ir::Type,
    /// The vector math routines vector loops call, if this function
    /// vectorizes.
    pub(crate) vectorize: Option<&'a Routines>,
    /// The lanes of the vector loop being translated; 0 outside one.
    pub(crate) lanes: u8,
    /// In a vector loop: each register's vector.
    pub(crate) vregs: HashMap<Reg, ir::Value>,
    /// In a vector loop: the registers holding `row + offset`, by the
    /// scalar value of their first lane.
    pub(crate) unit: HashMap<Reg, ir::Value>,
    /// In a vector loop: loop-invariant registers spread over the lanes.
    pub(crate) splats: HashMap<Reg, ir::Value>,
    /// The constants among the loop-invariant registers.
    pub(crate) consts: HashMap<Reg, Scalar>,
    /// In a vector loop: where its buffers are read and written, when not
    /// at the parameters themselves (a short column's copies on the stack).
    pub(crate) bases: HashMap<ParamIdx, ir::Value>,
    /// The kernel's registers of the constant 1 (`vector::ones`), found at
    /// the first loop the vectorizer looks at.
    ones: Option<HashSet<Reg>>,
    /// In the outer loop of a [`vector::Promotion`]: the promotion, until
    /// its inner loop is translated.
    promotion: Option<vector::Promotion>,
    /// The variables holding each promoted buffer's vectors.
    pub(crate) promoted: HashMap<ParamIdx, Vec<Variable>>,
    /// Which of them the unrolled copy being translated uses.
    pub(crate) promoted_at: usize,
}

impl<'a, M: Module> FunctionCx<'a, M> {
    fn new(
        module: &'a mut M,
        bcx: FunctionBuilder<'a>,
        kernel: &'a Kernel,
        slots: &'a [NativePlace],
    ) -> Self {
        FunctionCx {
            ptr: module.target_config().pointer_type(),
            module,
            bcx,
            kernel,
            slots,
            regs: vec![None; kernel.regs.len()],
            vars: Vec::new(),
            args: Vec::new(),
            vectorize: None,
            lanes: 0,
            vregs: HashMap::new(),
            unit: HashMap::new(),
            splats: HashMap::new(),
            consts: HashMap::new(),
            bases: HashMap::new(),
            ones: None,
            promotion: None,
            promoted: HashMap::new(),
            promoted_at: 0,
        }
    }

    fn codegen_body(&mut self) -> CodegenResult<()> {
        let entry = self.bcx.create_block();
        self.bcx.append_block_params_for_function_params(entry);
        self.bcx.switch_to_block(entry);
        self.bcx.seal_block(entry);
        self.args = self.bcx.block_params(entry).to_vec();
        for init in &self.kernel.vars {
            let var = self.bcx.declare_var(clif_type(init.dtype()));
            let value = self.codegen_const(*init);
            self.bcx.def_var(var, value);
            self.vars.push(var);
        }
        let mut ret = None;
        self.codegen_block(&self.kernel.body, &mut ret)?;
        let results = match ret {
            Some(v) => vec![v],
            None if self.kernel.direct => {
                return Err(CodegenError::Invalid(
                    "a direct kernel must store its first output".into(),
                ))
            }
            None => vec![self.bcx.ins().iconst(types::I32, 0)],
        };
        self.bcx.ins().return_(&results);
        Ok(())
    }

    pub(crate) fn arg(&self, param: ParamIdx) -> ir::Value {
        if let Some(&base) = self.bases.get(&param) {
            return base;
        }
        match self.slots[param.index()] {
            NativePlace::Arg(i) => self.args[i],
            NativePlace::Return => unreachable!("the return slot is only stored to"),
        }
    }

    pub(crate) fn reg(&self, reg: Reg) -> ir::Value {
        self.regs[reg.index()].expect("lowering defines registers before their uses")
    }

    fn codegen_block(&mut self, stmts: &[Stmt], ret: &mut Option<ir::Value>) -> CodegenResult<()> {
        for stmt in stmts {
            match stmt {
                Stmt::Let(reg, expr) => {
                    let value = self.codegen_expr(expr, self.kernel.reg_type(*reg))?;
                    self.regs[reg.index()] = Some(value);
                }
                Stmt::CheckNonZero(reg, check) => self.codegen_check(*reg, *check),
                Stmt::Loop {
                    extent,
                    row,
                    body,
                    iterations,
                } => self.codegen_loop(*extent, *row, body, *iterations, ret)?,
                Stmt::Set(var, reg) => {
                    let value = self.reg(*reg);
                    self.bcx.def_var(self.vars[var.index()], value);
                }
                Stmt::Store(param, row, reg) => {
                    let value = self.reg(*reg);
                    if self.slots[param.index()] == NativePlace::Return {
                        *ret = Some(value);
                        continue;
                    }
                    let base = self.arg(*param);
                    let addr = match row {
                        Some(r) => {
                            let row = self.reg(*r);
                            self.element_addr(base, row, self.kernel.reg_type(*reg))
                        }
                        None => base,
                    };
                    self.bcx
                        .ins()
                        .store(MemFlagsData::trusted(), value, addr, 0);
                }
                Stmt::KeepRow {
                    sel,
                    count,
                    row,
                    mask,
                } => self.codegen_select_push(*sel, *count, *row, *mask),
                Stmt::StoreCount(param, var) => {
                    let value = self.bcx.use_var(self.vars[var.index()]);
                    let base = self.arg(*param);
                    self.bcx
                        .ins()
                        .store(MemFlagsData::trusted(), value, base, 0);
                }
                // Cranelift has no prefetch instruction: the hint is dropped.
                Stmt::Prefetch(..) => {}
            }
        }
        Ok(())
    }

    pub(crate) fn element_addr(
        &mut self,
        base: ir::Value,
        row: ir::Value,
        dtype: DType,
    ) -> ir::Value {
        let offset = self.bcx.ins().imul_imm_s(row, dtype.size_bytes() as i64);
        let offset = if self.ptr == types::I64 {
            offset
        } else {
            self.bcx.ins().ireduce(self.ptr, offset)
        };
        self.bcx.ins().iadd(base, offset)
    }

    /// `if divisor == 0 { return status }`.
    fn codegen_check(&mut self, reg: Reg, check: u32) {
        let divisor = self.reg(reg);
        let fail = self.bcx.create_block();
        let cont = self.bcx.create_block();
        self.bcx.set_cold_block(fail);
        self.bcx.ins().brif(divisor, cont, &[], fail, &[]);
        self.bcx.switch_to_block(fail);
        self.bcx.seal_block(fail);
        let status = self
            .bcx
            .ins()
            .iconst(types::I32, i64::from(abi::check_status(check)));
        self.bcx.ins().return_(&[status]);
        self.bcx.switch_to_block(cont);
        self.bcx.seal_block(cont);
    }

    fn codegen_loop(
        &mut self,
        extent: Extent,
        row: Reg,
        body: &[Stmt],
        iterations: Iterations,
        ret: &mut Option<ir::Value>,
    ) -> CodegenResult<()> {
        if let Some(promotion) = self.promotion.take_if(|p| p.inner == row) {
            return self.codegen_unrolled(&promotion, body);
        }
        let n = self.codegen_extent(extent);
        let kernel = self.kernel;
        let (plan, promotion) = match self.vectorize {
            Some(routines) => {
                let one = self.ones.get_or_insert_with(|| {
                    let mut one = HashSet::new();
                    vector::ones(&kernel.body, &mut one);
                    one
                });
                // Rows in vectors need rows that do not depend on each other.
                let plan = (iterations == Iterations::Independent)
                    .then(|| vector::plan(kernel, row, body, routines, one))
                    .flatten();
                let promotion = vector::promotion(kernel, body, routines, one);
                (plan, promotion)
            }
            None => (None, None),
        };
        // Rows an inner loop updates in place, in registers across this one.
        let promoted = promotion.as_ref().map(|p| {
            self.load_promoted(p);
            p.buffers.clone()
        });
        self.promotion = promotion;
        let start = match plan {
            // Vectors first; the scalar loop runs what they leave (the last
            // `n % lanes` rows), if anything.
            Some(plan) => match self.codegen_vector_loop(n, row, body, &plan)? {
                Some(end) => end,
                None => return Ok(()),
            },
            None => self.bcx.ins().iconst(types::I64, 0),
        };
        // Rotated: one guard before the loop, then a body that ends in the
        // test (one branch per iteration instead of a test and a jump).
        let body_block = self.bcx.create_block();
        let exit = self.bcx.create_block();
        self.bcx.append_block_param(body_block, types::I64);
        let any = self.bcx.ins().icmp(IntCC::SignedLessThan, start, n);
        self.bcx
            .ins()
            .brif(any, body_block, &[ir::BlockArg::Value(start)], exit, &[]);
        self.bcx.switch_to_block(body_block);
        let row_value = self.bcx.block_params(body_block)[0];
        self.regs[row.index()] = Some(row_value);
        self.codegen_block(body, ret)?;
        let next = self.bcx.ins().iadd_imm_s(row_value, 1);
        let more = self.bcx.ins().icmp(IntCC::SignedLessThan, next, n);
        self.bcx
            .ins()
            .brif(more, body_block, &[ir::BlockArg::Value(next)], exit, &[]);
        self.bcx.seal_block(body_block);
        self.bcx.switch_to_block(exit);
        self.bcx.seal_block(exit);
        if let Some(buffers) = promoted {
            self.store_promoted(&buffers);
        }
        Ok(())
    }

    fn codegen_extent(&mut self, extent: Extent) -> ir::Value {
        match extent {
            Extent::Fixed(n) => self.bcx.ins().iconst(types::I64, n as i64),
            Extent::Param(p) => self.arg(p),
            Extent::Reg(r) => self.reg(r),
        }
    }

    /// `sel[count] = row; count += mask`, without a branch.
    fn codegen_select_push(&mut self, sel: ParamIdx, count: kiln_kernel::Var, row: Reg, mask: Reg) {
        let var = self.vars[count.index()];
        let n_kept = self.bcx.use_var(var);
        let base = self.arg(sel);
        let addr = self.element_addr(base, n_kept, DType::I32);
        let (row, mask) = (self.reg(row), self.reg(mask));
        let row32 = self.bcx.ins().ireduce(types::I32, row);
        self.bcx
            .ins()
            .store(MemFlagsData::trusted(), row32, addr, 0);
        let keep = self.bcx.ins().uextend(types::I64, mask);
        let next = self.bcx.ins().iadd(n_kept, keep);
        self.bcx.def_var(var, next);
    }

    pub(crate) fn codegen_const(&mut self, c: Scalar) -> ir::Value {
        match c {
            Scalar::Bool(b) => self.bcx.ins().iconst(types::I8, i64::from(b)),
            Scalar::I32(v) => self.bcx.ins().iconst(types::I32, i64::from(v)),
            Scalar::I64(v) => self.bcx.ins().iconst(types::I64, v),
            Scalar::F32(v) => self.bcx.ins().f32const(v),
            Scalar::F64(v) => self.bcx.ins().f64const(v),
        }
    }

    pub(crate) fn codegen_expr(&mut self, expr: &Expr, dtype: DType) -> CodegenResult<ir::Value> {
        Ok(match expr {
            Expr::Input(p) if self.kernel.direct => {
                let value = self.arg(*p);
                self.abi_to_reg(value, dtype)
            }
            Expr::Input(p) => {
                let addr = self.arg(*p);
                self.load(addr, dtype)
            }
            Expr::Load(p, row) => {
                let (base, row) = (self.arg(*p), self.reg(*row));
                let addr = self.element_addr(base, row, dtype);
                self.load(addr, dtype)
            }
            Expr::LoadBit(p, row) => {
                // byte = base[row >> 3]; bit = (byte >> (row & 7)) & 1
                let (base, row) = (self.arg(*p), self.reg(*row));
                let byte_idx = self.bcx.ins().ushr_imm_u(row, 3);
                let addr = self.element_addr(base, byte_idx, DType::Bool);
                let byte = self.bcx.ins().load(
                    types::I8,
                    MemFlagsData::trusted().with_readonly(),
                    addr,
                    0,
                );
                let shift = self.bcx.ins().band_imm_u(row, 7);
                let shifted = self.bcx.ins().ushr(byte, shift);
                self.bcx.ins().band_imm_u(shifted, 1)
            }
            Expr::Const(c) => self.codegen_const(*c),
            Expr::ExtentValue(e) => self.codegen_extent(*e),
            Expr::Var(v) => self.bcx.use_var(self.vars[v.index()]),
            Expr::Unary(op, a) => {
                let a = self.reg(*a);
                self.codegen_unary(*op, a, dtype)?
            }
            Expr::Binary(op, a, b) => {
                let (a, b) = (self.reg(*a), self.reg(*b));
                self.codegen_binary(*op, a, b, dtype)?
            }
            Expr::Compare(op, a, b) => {
                let operand = self.kernel.reg_type(*a);
                let (a, b) = (self.reg(*a), self.reg(*b));
                self.codegen_compare(*op, a, b, operand)
            }
            Expr::Select(c, a, b) => {
                let (c, a, b) = (self.reg(*c), self.reg(*a), self.reg(*b));
                self.bcx.ins().select(c, a, b)
            }
            // The FMA instruction where the ISA has one, else Cranelift's
            // libcall of `fmaf`/`fma` (bound to the `libm` crate's).
            Expr::MulAdd(a, b, c) => {
                let (a, b, c) = (self.reg(*a), self.reg(*b), self.reg(*c));
                self.bcx.ins().fma(a, b, c)
            }
            Expr::Cast(to, a) => {
                let from = self.kernel.reg_type(*a);
                let a = self.reg(*a);
                self.codegen_cast(a, from, *to)?
            }
            Expr::Bitcast(to, a) => {
                let a = self.reg(*a);
                self.bcx
                    .ins()
                    .bitcast(clif_type(*to), MemFlagsData::new(), a)
            }
            Expr::Table(table, index) => {
                let index = self.reg(*index);
                let base = self.table_address(table)?;
                let addr = self.element_addr(base, index, table.dtype);
                let flags = MemFlagsData::trusted().with_readonly();
                self.bcx.ins().load(clif_type(dtype), flags, addr, 0)
            }
            Expr::Fallback { call, rare, value } => {
                self.codegen_fallback(*call, *rare, *value, dtype)?
            }
        })
    }

    /// An element of `dtype` read from `addr` (inputs are never written).
    fn load(&mut self, addr: ir::Value, dtype: DType) -> ir::Value {
        let flags = MemFlagsData::trusted().with_readonly();
        let value = self.bcx.ins().load(clif_type(dtype), flags, addr, 0);
        self.abi_to_reg(value, dtype)
    }

    /// A value as the ABI passes it (an argument, or memory) made a register:
    /// a `bool` byte is true when it is not zero (`kiln_kernel::abi`),
    /// so registers hold 0 or 1.
    fn abi_to_reg(&mut self, value: ir::Value, dtype: DType) -> ir::Value {
        if dtype == DType::Bool {
            self.bcx.ins().icmp_imm_s(IntCC::NotEqual, value, 0)
        } else {
            value
        }
    }

    pub(crate) fn call_libm(
        &mut self,
        name: &str,
        args: &[ir::Value],
        ty: ir::Type,
    ) -> CodegenResult<ir::Value> {
        let mut sig = Signature::new(self.module.target_config().default_call_conv);
        for _ in args {
            sig.params.push(AbiParam::new(ty));
        }
        sig.returns.push(AbiParam::new(ty));
        let id = self.module.declare_function(name, Linkage::Import, &sig)?;
        let fref = self.module.declare_func_in_func(id, self.bcx.func);
        let call = self.bcx.ins().call(fref, args);
        Ok(self.bcx.inst_results(call)[0])
    }

    /// The address of a constant table, defined in the module (read-only
    /// data, local to it) by the first function that reads it.
    fn table_address(&mut self, table: &'static Table) -> CodegenResult<ir::Value> {
        let id = match self.module.get_name(table.name) {
            Some(FuncOrDataId::Data(id)) => id,
            Some(FuncOrDataId::Func(_)) => {
                return Err(CodegenError::Invalid(format!(
                    "table `{}` is named like a function",
                    table.name
                )))
            }
            None => {
                let id = self
                    .module
                    .declare_data(table.name, Linkage::Local, false, false)?;
                let mut data = DataDescription::new();
                data.define(table.bytes().into_boxed_slice());
                data.set_align(table.dtype.size_bytes() as u64);
                self.module.define_data(id, &data)?;
                id
            }
        };
        let global = self.module.declare_data_in_func(id, self.bcx.func);
        if absolute_refs(self.module) {
            if let ir::GlobalValueData::Symbol { colocated, .. } =
                &mut self.bcx.func.global_values[global]
            {
                *colocated = false;
            }
        }
        Ok(self.bcx.ins().symbol_value(self.ptr, global))
    }

    /// `if rare { call } else { value }`: the call in a cold block, so rows
    /// on the common path pay one branch.
    fn codegen_fallback(
        &mut self,
        call: MathCall,
        rare: Reg,
        value: Reg,
        dtype: DType,
    ) -> CodegenResult<ir::Value> {
        let args: Vec<ir::Value> = call.args().into_iter().map(|a| self.reg(a)).collect();
        let (rare, value) = (self.reg(rare), self.reg(value));
        let ty = clif_type(dtype);
        self.cold_path(
            rare,
            value,
            |fx, name| fx.call_libm(name, &args, ty),
            call,
            dtype,
        )
    }

    /// `if taken { slow(libm name of call) } else { common }`, with the slow
    /// side in a cold block: the one shape of every `Expr::Fallback`.
    pub(crate) fn cold_path(
        &mut self,
        taken: ir::Value,
        common: ir::Value,
        slow: impl FnOnce(&mut Self, &str) -> CodegenResult<ir::Value>,
        call: MathCall,
        dtype: DType,
    ) -> CodegenResult<ir::Value> {
        let ty = self.bcx.func.dfg.value_type(common);
        let slow_block = self.bcx.create_block();
        let join = self.bcx.create_block();
        self.bcx.set_cold_block(slow_block);
        let result = self.bcx.append_block_param(join, ty);
        self.bcx
            .ins()
            .brif(taken, slow_block, &[], join, &[ir::BlockArg::Value(common)]);
        self.bcx.switch_to_block(slow_block);
        self.bcx.seal_block(slow_block);
        let name = call
            .name(dtype)
            .ok_or_else(|| CodegenError::Invalid(format!("{call:?} on {dtype}")))?;
        let called = slow(self, name)?;
        self.bcx.ins().jump(join, &[ir::BlockArg::Value(called)]);
        self.bcx.switch_to_block(join);
        self.bcx.seal_block(join);
        Ok(result)
    }

    fn codegen_unary(
        &mut self,
        op: UnaryOp,
        a: ir::Value,
        dtype: DType,
    ) -> CodegenResult<ir::Value> {
        let ins = self.bcx.ins();
        Ok(match (op, dtype.is_float()) {
            (UnaryOp::Neg, false) => ins.ineg(a),
            (UnaryOp::Neg, true) => ins.fneg(a),
            (UnaryOp::Abs, false) => ins.iabs(a),
            (UnaryOp::Abs, true) => ins.fabs(a),
            (UnaryOp::BNot, _) => ins.bnot(a),
            (UnaryOp::Sqrt, _) => ins.sqrt(a),
            (UnaryOp::Floor, _) => ins.floor(a),
            (UnaryOp::Ceil, _) => ins.ceil(a),
            (UnaryOp::Trunc, _) => ins.trunc(a),
            (UnaryOp::Round, _) => ins.nearest(a),
            _ => {
                let name = libcalls::unary_name(op, dtype)
                    .ok_or_else(|| CodegenError::Invalid(format!("`{op}` on {dtype}")))?;
                self.call_libm(name, &[a], clif_type(dtype))?
            }
        })
    }

    fn codegen_binary(
        &mut self,
        op: BinaryOp,
        a: ir::Value,
        b: ir::Value,
        dtype: DType,
    ) -> CodegenResult<ir::Value> {
        if dtype.is_float() {
            return self.codegen_float_binary(op, a, b, dtype);
        }
        let ins = self.bcx.ins();
        Ok(match op {
            BinaryOp::Add => ins.iadd(a, b),
            BinaryOp::Sub => ins.isub(a, b),
            BinaryOp::Mul => ins.imul(a, b),
            // Lowering replaced 0 and -1 divisors: these do not trap.
            BinaryOp::Div => ins.sdiv(a, b),
            BinaryOp::Rem => ins.srem(a, b),
            BinaryOp::Min => ins.smin(a, b),
            BinaryOp::Max => ins.smax(a, b),
            BinaryOp::And | BinaryOp::BAnd => ins.band(a, b),
            BinaryOp::Or | BinaryOp::BOr => ins.bor(a, b),
            BinaryOp::Xor | BinaryOp::BXor => ins.bxor(a, b),
            BinaryOp::Shl => ins.ishl(a, b),
            BinaryOp::ShrArith => ins.sshr(a, b),
            BinaryOp::ShrLogical => ins.ushr(a, b),
            // Float-only ops, and ops lowering expands.
            _ => return Err(CodegenError::Invalid(format!("`{op}` on {dtype}"))),
        })
    }

    fn codegen_float_binary(
        &mut self,
        op: BinaryOp,
        a: ir::Value,
        b: ir::Value,
        dtype: DType,
    ) -> CodegenResult<ir::Value> {
        let ins = self.bcx.ins();
        Ok(match op {
            BinaryOp::Add => ins.fadd(a, b),
            BinaryOp::Sub => ins.fsub(a, b),
            BinaryOp::Mul => ins.fmul(a, b),
            BinaryOp::Div => ins.fdiv(a, b),
            BinaryOp::Min => ins.fmin(a, b),
            BinaryOp::Max => ins.fmax(a, b),
            BinaryOp::Copysign => ins.fcopysign(a, b),
            _ => {
                let name = libcalls::binary_name(op, dtype)
                    .ok_or_else(|| CodegenError::Invalid(format!("`{op}` on {dtype}")))?;
                self.call_libm(name, &[a, b], clif_type(dtype))?
            }
        })
    }

    pub(crate) fn codegen_compare(
        &mut self,
        op: CmpOp,
        a: ir::Value,
        b: ir::Value,
        operand: DType,
    ) -> ir::Value {
        if operand.is_float() {
            let cc = match op {
                CmpOp::Eq => FloatCC::Equal,
                // Unordered or not equal: true when either is NaN.
                CmpOp::Ne => FloatCC::NotEqual,
                CmpOp::Lt => FloatCC::LessThan,
                CmpOp::Le => FloatCC::LessThanOrEqual,
                CmpOp::Gt => FloatCC::GreaterThan,
                CmpOp::Ge => FloatCC::GreaterThanOrEqual,
            };
            return self.bcx.ins().fcmp(cc, a, b);
        }
        // Signed; lowering compares bools for equality only.
        let cc = match op {
            CmpOp::Eq => IntCC::Equal,
            CmpOp::Ne => IntCC::NotEqual,
            CmpOp::Lt => IntCC::SignedLessThan,
            CmpOp::Le => IntCC::SignedLessThanOrEqual,
            CmpOp::Gt => IntCC::SignedGreaterThan,
            CmpOp::Ge => IntCC::SignedGreaterThanOrEqual,
        };
        self.bcx.ins().icmp(cc, a, b)
    }

    /// A conversion: from a 0/1 `bool`, or between numbers as Rust's `as`
    /// does (float to int saturates, NaN gives 0). Lowering turned
    /// conversions to `bool` into comparisons.
    fn codegen_cast(&mut self, a: ir::Value, from: DType, to: DType) -> CodegenResult<ir::Value> {
        let to_ty = clif_type(to);
        let ins = self.bcx.ins();
        Ok(match (from, to) {
            _ if from == to => a,
            (_, DType::Bool) => {
                return Err(CodegenError::Invalid(format!("a cast of {from} to bool")))
            }
            (DType::Bool, _) if to.is_float() => ins.fcvt_from_uint(to_ty, a),
            (DType::Bool, _) => ins.uextend(to_ty, a),
            (DType::F32, DType::F64) => ins.fpromote(to_ty, a),
            (DType::F64, DType::F32) => ins.fdemote(to_ty, a),
            _ if from.is_float() => ins.fcvt_to_sint_sat(to_ty, a),
            _ if to.is_float() => ins.fcvt_from_sint(to_ty, a),
            (DType::I64, DType::I32) => ins.ireduce(to_ty, a),
            _ => ins.sextend(to_ty, a),
        })
    }
}

/// Translates `kernel` into `func` (whose signature is set), and returns the
/// CLIF value each register got.
fn build_function<M: Module>(
    module: &mut M,
    func: &mut ir::Function,
    kernel: &Kernel,
    slots: &[NativePlace],
    vectorize: Option<&Routines>,
) -> CodegenResult<Vec<Option<ir::Value>>> {
    let mut fbc = FunctionBuilderContext::new();
    let mut fx = FunctionCx::new(module, FunctionBuilder::new(func, &mut fbc), kernel, slots);
    fx.vectorize = vectorize;
    fx.codegen_body()?;
    let config = fx.module.target_config();
    fx.bcx.finalize(config);
    Ok(fx.regs)
}

/// Defines `name(v) -> v`, the vector math routine computing the direct
/// math kernel `kernel` (`kiln_kernel::math_kernel`) on the first
/// `lanes` lanes of its dtype's 128-bit vector.
pub(crate) fn define_routine<M: Module>(
    module: &mut M,
    kernel: &Kernel,
    name: &str,
    lanes: u8,
) -> CodegenResult<cranelift_module::FuncId> {
    let dtype = match kernel.params.first() {
        Some(kiln_kernel::Param::ScalarIn { dtype, .. }) => *dtype,
        _ => return Err(CodegenError::Invalid(format!("{name}: not a math kernel"))),
    };
    let ty = vector::vector_of(dtype);
    let arity = kernel
        .params
        .iter()
        .filter(|p| matches!(p, kiln_kernel::Param::ScalarIn { .. }))
        .count();
    let mut sig = Signature::new(module.target_config().default_call_conv);
    for _ in 0..arity {
        sig.params.push(AbiParam::new(ty));
    }
    sig.returns.push(AbiParam::new(ty));
    let id = module.declare_function(name, Linkage::Export, &sig)?;
    let mut ctx = module.make_context();
    ctx.func.signature = sig;
    let mut fbc = FunctionBuilderContext::new();
    {
        let mut fx = FunctionCx::new(
            module,
            FunctionBuilder::new(&mut ctx.func, &mut fbc),
            kernel,
            &[],
        );
        let entry = fx.bcx.create_block();
        fx.bcx.append_block_params_for_function_params(entry);
        fx.bcx.switch_to_block(entry);
        fx.bcx.seal_block(entry);
        let args = fx.bcx.block_params(entry).to_vec();
        let result = fx.codegen_routine_body(&args, lanes)?;
        fx.bcx.ins().return_(&[result]);
        let config = fx.module.target_config();
        fx.bcx.finalize(config);
    }
    module
        .define_function(id, &mut ctx)
        .map_err(|e| CodegenError::Cranelift(format!("{name}: {e:?}")))?;
    module.clear_context(&mut ctx);
    Ok(id)
}

/// The CLIF text of `kernel` before compilation, as `kiln ir --emit clif`
/// shows it (with `vectorize`, as the JIT vectorizes it).
pub fn clif_text<M: Module>(
    module: &mut M,
    kernel: &Kernel,
    vectorize: Option<&Routines>,
) -> CodegenResult<String> {
    let ptr = module.target_config().pointer_type();
    let (sig, slots) = signature(kernel, ptr, module.target_config().default_call_conv);
    let mut func =
        ir::Function::with_name_signature(ir::UserFuncName::testcase(kernel.name.as_bytes()), sig);
    let regs = build_function(module, &mut func, kernel, &slots, vectorize)?;
    // Source names as comments: which CLIF value holds which graph value.
    let mut text = String::new();
    for (name, value) in kernel.reg_names.iter().zip(&regs) {
        if let (Some(name), Some(value)) = (name, value) {
            text.push_str(&format!("; {value} = {name}\n"));
        }
    }
    text.push_str(&func.display().to_string());
    Ok(text)
}
