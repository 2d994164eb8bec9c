//! The kernel: kiln's loop-level IR, the one thing backends translate
//! (`kiln-kernel`, between the graph IR of `kiln-ir` and the backends:
//! frontends and the interpreter never depend on it).
//!
//! A [`Kernel`] is a function with an ABI-ordered parameter list (inputs,
//! extents, outputs), a body of statements (straight-line SSA [`Reg`] definitions,
//! loops over extents, stores, accumulator updates, division checks), and
//! nothing else. Lowering ([`lower()`]) makes every semantic decision once:
//! fusion, hoisting, reduction order, where division can fail, and every case
//! where kiln's meaning of an op is not the machine's (integer floor division
//! and `MIN / -1`, shift amounts, `copysign` of a NaN, conversions to `bool`,
//! ordering of bools, logical `not`), which it expands into primitives. So a
//! backend translates statement by statement, each [`Expr`] into the machine
//! instruction of the same name, and makes no choice of its own; the
//! [`verify()`] checks the preconditions each expression states.
//!
//! Registers of dtype `bool` hold 0 or 1. At the ABI boundary a `bool` is a
//! byte, and any byte other than 0 is true: reading one ([`Expr::Input`],
//! [`Expr::Load`]) is the one conversion every backend does.
//!
//! Loops nest (a [`Stmt::Loop`] holds statements), so tensor loop nests need no
//! new constructs.

pub mod abi;
pub mod backend;
pub mod canon;
pub mod header;
pub mod iterations;
pub mod libcalls;
mod lower;
mod math;
mod pool;
mod print;
mod scratch;
pub mod stages;
mod tensor;
pub mod threads;
pub mod transpose;
mod verify;

pub use lower::{lower, math_kernel, LowerError, LowerOptions, ISIN_CHAIN, TREE_SELECTS};
pub use math::{EXP2F_TABLE, EXP2_TABLE};
pub use print::print;
pub use verify::{verify, KernelError};

use cranelift_entity::EntityRef;
use kiln_ir::entities::Value;

use kiln_ir::op::{BinaryOp, CmpOp, UnaryOp};
use kiln_ir::scalar::Scalar;
use kiln_ir::types::{DType, Dim, Shape, TensorType};

/// How hard a backend works on a kernel; every backend and the facade take
/// this one type. What a kernel computes never depends on it.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum OptLevel {
    /// No backend optimization (Cranelift `none`, LLVM `default<O0>`).
    O0,
    /// LLVM `default<O1>` (Cranelift `speed`).
    O1,
    /// LLVM `default<O2>`, with loop and SLP vectorization (Cranelift `speed`).
    O2,
    /// LLVM `default<O3>` (Cranelift `speed`): the default.
    #[default]
    O3,
}

impl OptLevel {
    /// The level for `-O n`, if `n` is 0 to 3.
    pub fn from_number(n: u8) -> Option<OptLevel> {
        Some(match n {
            0 => OptLevel::O0,
            1 => OptLevel::O1,
            2 => OptLevel::O2,
            3 => OptLevel::O3,
            _ => return None,
        })
    }
}

/// An SSA register (`r3`): defined once by [`Stmt::Let`], typed by
/// [`Kernel::regs`].
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reg(u32);
cranelift_entity::entity_impl!(Reg, "r");

/// A mutable variable (`var1`: accumulators, counters), typed by
/// [`Kernel::vars`].
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Var(u32);
cranelift_entity::entity_impl!(Var, "var");

/// A parameter (`p2`): an index into [`Kernel::params`].
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ParamIdx(u32);
cranelift_entity::entity_impl!(ParamIdx, "p");

impl ParamIdx {
    /// The parameter after this one (a selection's count follows it).
    pub fn next(self) -> ParamIdx {
        ParamIdx(self.0 + 1)
    }
}

/// One parameter of the kernel's native signature, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Param {
    /// A scalar input: by value in a direct kernel (`bool` as a `u8` 0/1), else
    /// a pointer to it, like every other input.
    ScalarIn {
        /// The input's name.
        name: String,
        /// Its dtype.
        dtype: DType,
    },
    /// A column or tensor input: a pointer to its first element (row-major,
    /// contiguous).
    ArrayIn {
        /// The input's name.
        name: String,
        /// Its element dtype.
        dtype: DType,
        /// Its dimensions (for the C header and the dump).
        shape: Shape,
    },
    /// A `bool` column input passed packed, as an Arrow validity bitmap is:
    /// a pointer to bytes where row `i` is bit `i % 8` (least significant
    /// first) of byte `i / 8`. Only when [`LowerOptions::packed_bools`] asks.
    BitmapIn {
        /// The input's name.
        name: String,
    },
    /// The extent of a symbolic dimension: an `int64_t` row count.
    Extent {
        /// The dimension's name.
        dim: String,
    },
    /// A scalar output: a pointer the kernel writes one element to. (In the
    /// direct signature, the first output is the return value instead.)
    ScalarOut {
        /// The output's name.
        name: String,
        /// Its dtype.
        dtype: DType,
    },
    /// A column or tensor output: a pointer to room for its elements
    /// (row-major, contiguous).
    ArrayOut {
        /// The output's name.
        name: String,
        /// Its element dtype.
        dtype: DType,
        /// Its dimensions (for the C header and the dump).
        shape: Shape,
    },
    /// A selection output: a `uint32_t` pointer with room for one index per row.
    SelectionOut {
        /// The output's name.
        name: String,
        /// The dimension of the rows it selects from (its capacity).
        dim: Dim,
    },
    /// Where a selection's length is written: an `int64_t` pointer.
    SelectionCount {
        /// The selection output's name.
        name: String,
    },
    /// A constant tensor of the graph (weights), passed by the caller: a
    /// pointer to its elements, row-major. The safe API passes it itself.
    ConstIn {
        /// The constant's source name, or `const` and its node.
        name: String,
        /// The elements.
        tensor: std::sync::Arc<kiln_ir::op::TensorConst>,
    },
    /// Scratch room for one intermediate tensor that no loop can fuse: a
    /// pointer to room for its elements (the product of `shape` with the
    /// extents bound), which the caller allocates; the kernel never
    /// allocates.
    Scratch {
        /// The element dtype.
        dtype: DType,
        /// The tensor's shape.
        shape: Shape,
    },
}

impl Param {
    /// The dtype and shape of the array a pointer parameter points to (an
    /// input, output, constant or scratch tensor); `None` for scalars,
    /// bitmaps, extents and selections.
    pub fn array_type(&self) -> Option<TensorType> {
        let (dtype, shape) = match self {
            Param::ArrayIn { dtype, shape, .. }
            | Param::ArrayOut { dtype, shape, .. }
            | Param::Scratch { dtype, shape } => (*dtype, shape.clone()),
            Param::ConstIn { tensor, .. } => (
                tensor.dtype,
                tensor.dims.iter().map(|&d| Dim::Fixed(d)).collect(),
            ),
            _ => return None,
        };
        Some(TensorType { dtype, shape })
    }
}

/// A loop extent.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Extent {
    /// A fixed trip count.
    Fixed(u64),
    /// The value of an [`Param::Extent`] parameter.
    Param(ParamIdx),
    /// The value of an `i64` register defined before the loop (a count of
    /// a matmul's row or column blocks, a remainder); never negative.
    Reg(Reg),
}

/// A value computed from registers; its meaning is [`kiln_ir::semantics`].
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A scalar input parameter's value (a `bool` byte is true when not 0).
    Input(ParamIdx),
    /// Element `row` of an array parameter (a `bool` byte is true when not
    /// 0).
    Load(ParamIdx, Reg),
    /// Bit `row` of a [`Param::BitmapIn`] parameter, as a `bool`.
    LoadBit(ParamIdx, Reg),
    /// A constant.
    Const(Scalar),
    /// An extent as an `i64` row count.
    ExtentValue(Extent),
    /// A variable's current value.
    Var(Var),
    /// An elementwise unary op; never logical `not` (lowered to `xor true`).
    Unary(UnaryOp, Reg),
    /// A binary op, as the machine computes it, with the preconditions
    /// lowering guarantees: an integer `div`/`rem` truncates and its divisor
    /// is neither 0 nor -1; a shift amount is below the width; `copysign`
    /// copies the sign bit even of a NaN; float `min`/`max` are IEEE
    /// 754-2019 `minimum`/`maximum`. `floordiv` and `mod` never appear.
    Binary(BinaryOp, Reg, Reg),
    /// A comparison, giving `bool`: integers signed, floats ordered except
    /// `ne` (true when either is NaN); bools only for `eq`/`ne`.
    Compare(CmpOp, Reg, Reg),
    /// `select(cond, a, b)`.
    Select(Reg, Reg, Reg),
    /// `a * b + c` of floats rounded once: IEEE 754's `fusedMultiplyAdd`
    /// (Rust's `mul_add`), a machine's FMA instruction, else a correctly
    /// rounded software fma (the C name `fma`/`fmaf`). A `matmul`'s and a
    /// convolution's sums step so (`kiln_ir::semantics::mul_add`).
    MulAdd(Reg, Reg, Reg),
    /// A conversion: from a 0/1 `bool`, or between numbers as Rust's `as`
    /// does (float to int saturates, NaN gives 0); never from a number to
    /// `bool` (lowered to a comparison with zero).
    Cast(DType, Reg),
    /// The same bits as another dtype of the same width (`f64` and `i64`,
    /// `f32` and `i32`): Rust's `to_bits`/`from_bits`. Inline math
    /// (`kernel::math`) takes floats apart with it.
    Bitcast(DType, Reg),
    /// Element `index` (an `i64` register, `0 <= index < len`, which the
    /// lowering guarantees by masking) of a constant table: `exp2`'s values
    /// of 2^(i/256). A backend emits each table once per module, under its
    /// name.
    Table(&'static Table, Reg),
    /// `op(args)` by the scalar math function (the call [`Expr::Unary`] or
    /// [`Expr::Binary`] makes) where the `bool` `rare` is true, `value`
    /// elsewhere. Inline math
    /// (`kernel::math`) computes a function's common path itself and leaves
    /// a rare path it does not port (the Payne–Hanek reduction of huge
    /// `sin`/`cos` arguments) to the `libm` function; backends call it only
    /// for the rows that need it, so the common path stays call-free.
    Fallback {
        /// The math function and its arguments.
        call: MathCall,
        /// Where the function must be called.
        rare: Reg,
        /// The result everywhere else.
        value: Reg,
    },
}

impl Expr {
    /// The registers the expression reads, in order.
    pub fn operands(&self) -> Vec<Reg> {
        match *self {
            Expr::Input(_) | Expr::Const(_) | Expr::Var(_) => Vec::new(),
            Expr::ExtentValue(Extent::Reg(r)) => vec![r],
            Expr::ExtentValue(_) => Vec::new(),
            Expr::Load(_, r)
            | Expr::LoadBit(_, r)
            | Expr::Unary(_, r)
            | Expr::Cast(_, r)
            | Expr::Bitcast(_, r)
            | Expr::Table(_, r) => vec![r],
            Expr::Binary(_, a, b) | Expr::Compare(_, a, b) => vec![a, b],
            Expr::Select(c, a, b) | Expr::MulAdd(c, a, b) => vec![c, a, b],
            Expr::Fallback { call, rare, value } => {
                let mut regs = call.args();
                regs.extend([rare, value]);
                regs
            }
        }
    }
}

/// A constant table of inline math ([`Expr::Table`]): its symbol (unique,
/// so every kernel of a module shares one copy), dtype and values' bits.
#[derive(Debug, PartialEq)]
pub struct Table {
    /// The symbol the backends define it under (local to the module).
    pub name: &'static str,
    /// A float dtype.
    pub dtype: DType,
    /// The values, as their bits (`f64::to_bits`, `f32::to_bits` widened).
    pub bits: &'static [u64],
}

impl Table {
    /// The table's bytes in memory: little-endian values of its dtype.
    pub fn bytes(&self) -> Vec<u8> {
        let width = self.dtype.size_bytes();
        self.bits
            .iter()
            .flat_map(|b| b.to_le_bytes().into_iter().take(width))
            .collect()
    }
}

/// A math function of the IR that inline math may compute: a unary or a
/// binary op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MathFn {
    /// `sin`, `exp`, …
    Unary(UnaryOp),
    /// `pow`, `atan2`, `hypot`.
    Binary(BinaryOp),
}

impl MathFn {
    /// How many arguments it takes.
    pub fn arity(self) -> usize {
        match self {
            MathFn::Unary(_) => 1,
            MathFn::Binary(_) => 2,
        }
    }
}

impl std::fmt::Display for MathFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MathFn::Unary(op) => write!(f, "{op}"),
            MathFn::Binary(op) => write!(f, "{op}"),
        }
    }
}

/// A call of a math function of the IR, as [`Expr::Unary`] or
/// [`Expr::Binary`] makes it: what an [`Expr::Fallback`] calls.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MathCall {
    /// `op(a)` (`sin`, `sinf`, …).
    Unary(UnaryOp, Reg),
    /// `op(a, b)` (`pow`, `atan2f`, …).
    Binary(BinaryOp, Reg, Reg),
}

impl MathCall {
    /// The function's C name for `dtype` ([`libcalls`]), if it has one.
    pub fn name(self, dtype: DType) -> Option<&'static str> {
        match self {
            MathCall::Unary(op, _) => libcalls::unary_name(op, dtype),
            MathCall::Binary(op, ..) => libcalls::binary_name(op, dtype),
        }
    }

    /// The arguments, in order.
    pub fn args(self) -> Vec<Reg> {
        match self {
            MathCall::Unary(_, a) => vec![a],
            MathCall::Binary(_, a, b) => vec![a, b],
        }
    }
}

/// A statement.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// Defines a register.
    Let(Reg, Expr),
    /// Fails the kernel with status `1 | (check << 8)` if the integer `Reg` is
    /// zero; `check` indexes [`Kernel::checks`].
    CheckNonZero(Reg, u32),
    /// `for row in 0..extent { body }`, with `row` an `i64` register.
    Loop {
        /// The trip count.
        extent: Extent,
        /// The row index register, defined by the loop.
        row: Reg,
        /// The loop body.
        body: Vec<Stmt>,
        /// What the iterations may assume of each other (recorded by
        /// lowering, [`iterations::mark`]; checked by the verifier).
        iterations: Iterations,
    },
    /// Sets a variable.
    Set(Var, Reg),
    /// Writes a register to an output parameter: element `row` of a column, or
    /// the scalar when `row` is `None`.
    Store(ParamIdx, Option<Reg>, Reg),
    /// Keeps `row` in a selection if `mask` is true: `sel[count] = row; count
    /// += mask` (the store is unconditional; the buffer has room for every row).
    KeepRow {
        /// The [`Param::SelectionOut`] parameter.
        sel: ParamIdx,
        /// The `i64` variable counting the rows kept so far.
        count: Var,
        /// The row index.
        row: Reg,
        /// The `bool` condition.
        mask: Reg,
    },
    /// Writes a variable's value to a [`Param::SelectionCount`] parameter.
    StoreCount(ParamIdx, Var),
    /// A hint that element `row` of an array parameter will be read soon:
    /// a backend with a prefetch instruction issues it (LLVM), the others
    /// drop it. `row` may lie outside the buffer (the row block after the
    /// last); the hint never reads, writes or fails, so it changes nothing a
    /// kernel computes ([`LowerOptions::prefetch`]).
    Prefetch(ParamIdx, Reg),
}

impl Stmt {
    /// `for row in 0..extent { body }` as lowering writes it: `Sequential`
    /// until its last step ([`iterations::mark`]) records what the
    /// iterations may assume of each other.
    pub fn loop_of(extent: Extent, row: Reg, body: Vec<Stmt>) -> Stmt {
        Stmt::Loop {
            extent,
            row,
            body,
            iterations: Iterations::Sequential,
        }
    }

    /// The registers the statement itself reads, in order (a loop's
    /// register extent; not its body's).
    pub fn operands(&self) -> Vec<Reg> {
        match self {
            Stmt::Let(_, expr) => expr.operands(),
            Stmt::CheckNonZero(r, _) | Stmt::Set(_, r) => vec![*r],
            Stmt::Loop { extent, .. } => match extent {
                Extent::Reg(r) => vec![*r],
                _ => Vec::new(),
            },
            Stmt::Store(_, row, r) => row.iter().copied().chain([*r]).collect(),
            Stmt::KeepRow { row, mask, .. } => vec![*row, *mask],
            Stmt::StoreCount(..) => Vec::new(),
            Stmt::Prefetch(_, row) => vec![*row],
        }
    }
}

/// What a loop's iterations may assume of each other: how a backend or the
/// runtime may reorder, batch or split them without changing a bit.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Iterations {
    /// Each iteration may read what an earlier one wrote (an accumulator, a
    /// store read back at another index) or holds a loop: run them in
    /// order, one at a time.
    Sequential,
    /// No iteration reads what another writes and none carries a value to
    /// the next: any order, any batching, any split into chunks gives the
    /// same bits (a division check stops the kernel at the first failing
    /// row in order wherever it runs).
    Independent,
    /// Independent but for `KeepRow`s, which keep rows in iteration order: a
    /// block of rows may run at once if its kept rows are appended in
    /// order; chunks may run apart if their selections are joined in order.
    Selecting,
}

impl Iterations {
    /// Whether rows may run in any order and in batches (a selection's
    /// rows appended in order).
    pub fn independent(self) -> bool {
        self != Iterations::Sequential
    }

    /// The name the kernel dump prints.
    pub fn name(self) -> &'static str {
        match self {
            Iterations::Sequential => "sequential",
            Iterations::Independent => "independent",
            Iterations::Selecting => "selecting",
        }
    }
}

/// A kernel: what backends compile.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    /// The exported symbol's name.
    pub name: String,
    /// The native parameters, in order.
    pub params: Vec<Param>,
    /// The dtype of each register.
    pub regs: Vec<DType>,
    /// The dtype and initial value of each variable.
    pub vars: Vec<Scalar>,
    /// The statements.
    pub body: Vec<Stmt>,
    /// For each check ([`Stmt::CheckNonZero`]), the graph node it guards:
    /// an integer division (its divisor is not zero) or a `gather` (its
    /// index is inside the axis).
    pub checks: Vec<Value>,
    /// True when every input and output is a scalar and nothing can fail: the
    /// kernel then has the direct C signature (`double f(double x)`; first output
    /// returned, later ones through out-pointers, no status).
    pub direct: bool,
    /// The source name of the value each register holds, for dumps.
    pub reg_names: Vec<Option<String>>,
}

impl Kernel {
    /// The node a nonzero status refers to: the division or `gather` whose
    /// check failed.
    pub fn failed_check(&self, status: i32) -> Option<Value> {
        self.checks.get(abi::failed_check(status)?).copied()
    }

    /// The error this kernel's nonzero `status` stands for, naming the node
    /// of `graph` (the graph it was lowered from) whose check failed.
    pub fn status_error(&self, graph: &kiln_ir::Graph, status: i32) -> kiln_ir::ExecError {
        kiln_ir::ExecError::from_status(graph, self.failed_check(status), status)
    }

    /// A new register of `dtype`, named after a source value if `name` is
    /// given.
    pub fn new_reg(&mut self, dtype: DType, name: Option<&str>) -> Reg {
        self.regs.push(dtype);
        self.reg_names.push(name.map(str::to_string));
        Reg((self.regs.len() - 1) as u32)
    }

    /// Appends `let r = expr` to `out` for a new register `r` of `dtype`.
    pub fn push_let(&mut self, out: &mut Vec<Stmt>, dtype: DType, expr: Expr) -> Reg {
        let reg = self.new_reg(dtype, None);
        out.push(Stmt::Let(reg, expr));
        reg
    }

    /// The dtype of a register.
    pub fn reg_type(&self, reg: Reg) -> DType {
        self.regs[reg.index()]
    }
}
