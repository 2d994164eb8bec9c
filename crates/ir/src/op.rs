//! The closed set of graph operations.
//!
//! Each variant documents its typing rule; [`crate::typing`] implements the rules
//! once. "Broadcast" below means: the operands have equal shapes, or some are
//! scalars and the rest share one shape; the result has that shape.

use crate::scalar::Scalar;
use crate::types::{DType, Shape};
use std::fmt;
use std::sync::Arc;

/// A graph operation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Input number `index` of the graph's signature. No arguments; its type is the
    /// declared type of the input.
    Input {
        /// Position in [`crate::Graph::inputs`].
        index: u32,
    },
    /// A scalar constant. No arguments; the type is the scalar's dtype, shape `[]`.
    Const(Scalar),
    /// An elementwise op of one argument; see [`UnaryOp`] for the dtypes it takes.
    /// The result has the argument's type.
    Unary(UnaryOp),
    /// An elementwise op of two arguments of one dtype, broadcast; see [`BinaryOp`]
    /// for the dtypes it takes. The result has that dtype.
    Binary(BinaryOp),
    /// A comparison of two arguments of one dtype (any dtype), broadcast. The result
    /// is `bool`.
    Compare(CmpOp),
    /// `select(cond, a, b)`: `cond` is `bool`, `a` and `b` share a dtype, all three
    /// broadcast. The result has the dtype of `a`. Both sides are evaluated.
    Select,
    /// Conversion of one argument of any dtype to the given dtype, same shape.
    Cast(DType),
    /// A reduction of a column (shape `[d]`) to a scalar; see [`ReduceOp`].
    Reduce(ReduceOp),
    /// `filter(mask)`: a `bool[d]` column to a selection vector `sel[d]` of the
    /// indices where the mask is true, ascending.
    Filter,
    /// A constant tensor (weights, TF `Const`). No arguments; the type is the
    /// tensor's dtype and fixed shape.
    Tensor(Arc<TensorConst>),
    /// `matmul(a, b)`, NumPy's `@`: `[m, k] @ [k, n] -> [m, n]`; a 1-D `a` is
    /// a row (`[k] @ [k, n] -> [n]`), a 1-D `b` a column (`[m, k] @ [k] ->
    /// [m]`); dims before the last two are batch dims and broadcast. One
    /// numeric dtype. Each element is a sum folded in `k` order from the
    /// identity (docs/semantics.md).
    MatMul,
    /// `transpose(a)` by a permutation of its axes: result axis `i` is axis
    /// `perm[i]` of `a` (torch `permute`, NumPy `transpose(a, perm)`).
    Transpose(Vec<u32>),
    /// `reshape(a)` to the given shape with the same number of elements, in
    /// row-major order (torch `reshape`/`view`, TF `Reshape`).
    Reshape(Shape),
    /// A reduction of a tensor over some of its axes (torch `sum(x, dim,
    /// keepdim)`, TF `Sum`): the reduced axes are removed, or kept with extent
    /// 1 when `keepdim`. Each result element folds its elements in row-major
    /// order of the reduced axes from the identity, as [`ReduceOp`] says.
    ReduceAxes {
        /// The reduction.
        op: ReduceOp,
        /// The axes reduced, ascending.
        axes: Vec<u32>,
        /// Keep the reduced axes with extent 1.
        keepdim: bool,
    },
    /// `concat(a, b, ...)` along `axis` (torch `cat`, TF `ConcatV2`): one or
    /// more tensors of one dtype and rank whose dims agree except along
    /// `axis`; the result's extent there is the sum, its elements the
    /// arguments' in order. The only variadic op.
    Concat(u32),
    /// `a[ranges]`: per axis, the whole axis (`None`) or a Python slice
    /// `start:stop:step` within a fixed extent (torch slicing and `split`,
    /// TF `Slice`, `Split`, `Unpack`, `StridedSlice`). At least one element
    /// is kept per axis.
    Slice(Vec<Option<SliceRange>>),
    /// `broadcast_to(a)` the given shape by NumPy's rule (torch `expand`,
    /// TF `BroadcastTo`): trailing axes aligned, a `1` or a missing axis
    /// repeats.
    BroadcastTo(Shape),
    /// `conv2d(x, w)`: 2-D convolution (cross-correlation, as torch and TF
    /// compute it) of `x: [n, c, h, w]` (NCHW) with weights `w: [o, c /
    /// groups, kh, kw]`, to `[n, o, oh, ow]`; one numeric dtype, every
    /// dimension but `n` fixed. Output channel `oc` of group `g = oc / (o /
    /// groups)` reads input channels `g * c / groups ..`. Each element is a
    /// sum folded from the identity over input channel, then kernel row,
    /// then kernel column, of `x * w`, `x` padded with zeros
    /// (docs/semantics.md).
    Conv2d(Conv2d),
    /// Max or average pooling of `x: [n, c, h, w]` (NCHW) over windows, to
    /// `[n, c, oh, ow]`; see [`Pool2d`]. Max: ints and floats, folded with
    /// [`BinaryOp::Max`] from the identity over the window's taps inside
    /// `x`, row by row. Average: floats, the sum of those taps in that order
    /// divided by the window's count.
    Pool2d(Pool2d),
    /// `gather(table, index)` along `axis`, NumPy's `take(table, index,
    /// axis)` (torch `embedding` and `index_select`, ONNX and TF `Gather`):
    /// `index` is an `i32` or `i64` tensor of any shape (a scalar too); the
    /// result's shape is `table`'s axes before `axis`, then `index`'s, then
    /// `table`'s after `axis`; its element at `(pre, at, post)` is
    /// `table[pre, index[at], post]`. An index outside `0..extent` of the
    /// axis (negative ones included) fails the call, as integer division by
    /// zero does: no element is read out of bounds.
    Gather(u32),
    /// `index_add(base, index, source)` along `axis`, `gather`'s adjoint
    /// (torch `index_add` with an index of any shape; the derivative of
    /// `embedding` and `index_select`): `base` is a numeric tensor, `index`
    /// an `i32` or `i64` tensor of any shape, `source` of `base`'s dtype and
    /// of the shape `gather(base, index)` along `axis` has. The result is
    /// `base` with each `source[pre, at, post]` added to the element
    /// `[pre, index[at], post]`; each element's additions run in the order
    /// of `at` (row-major over `index`), from `base`'s value, so a repeated
    /// index sums its rows in order. An index outside `0..extent` of the
    /// axis fails the call, as `gather`'s does.
    IndexAdd(u32),
    /// `trees(x)`: a tree ensemble ([`crate::trees`]) over rows of features.
    /// `x` is `f32` or `f64` `[rows, features]` with `features` fixed and
    /// equal to the ensemble's `n_features`; the result is the ensemble's
    /// dtype, `[rows, outputs]`. Row `r`, output `k` is `init[k]` plus the
    /// leaf each tree of output `k` reaches for row `r`, added in tree order
    /// in that dtype ([`crate::trees::TreeEnsemble::eval_row`]).
    Trees(Arc<crate::trees::TreeEnsemble>),
    /// `isin(x, set)`, elementwise: whether `x` equals a member of the
    /// constant `set` (NumPy's `isin`, SQL's `IN (list)`), as `eq` compares:
    /// `-0.0` is `0.0`, NaN is in no set. `x` is an int or float of any
    /// shape; the set holds values of `x`'s dtype, in the canonical form
    /// [`crate::semantics::isin_set`] gives (ascending, no duplicates, no NaN,
    /// no `-0.0`). The result is `bool` of `x`'s shape.
    IsIn(Arc<[Scalar]>),
}

/// The attributes of [`Op::Conv2d`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Conv2d {
    /// The step between windows along `h` and `w`; at least 1.
    pub stride: [u32; 2],
    /// Rows and columns of padding: `[top, bottom, left, right]` (TF's
    /// `SAME` may pad one more after than before).
    pub padding: [u32; 4],
    /// The step between a window's taps along `h` and `w`; at least 1.
    pub dilation: [u32; 2],
    /// Channel groups; divides `c` and `o` (`groups == c`: depthwise).
    pub groups: u32,
}

impl Default for Conv2d {
    fn default() -> Self {
        Conv2d {
            stride: [1, 1],
            padding: [0; 4],
            dilation: [1, 1],
            groups: 1,
        }
    }
}

/// The number of windows along one axis of extent `extent` padded by
/// `pads` (before, after): windows of `taps` taps `dilation` apart, starting
/// `stride` apart at `-pads.0`. Rounded down, or up with `ceil_mode` (but a
/// window must start before the after-padding, torch's rule). `None` when
/// not one window fits or the arithmetic overflows.
pub fn window_count(
    extent: u64,
    taps: u32,
    stride: u32,
    pads: (u32, u32),
    dilation: u32,
    ceil_mode: bool,
) -> Option<u64> {
    let padded = extent.checked_add(u64::from(pads.0) + u64::from(pads.1))?;
    let span = u64::from(taps.checked_sub(1)?) * u64::from(dilation) + 1;
    let room = padded.checked_sub(span)?;
    let stride = u64::from(stride.max(1));
    let mut count = if ceil_mode {
        room.div_ceil(stride) + 1
    } else {
        room / stride + 1
    };
    if ceil_mode && (count - 1) * stride >= extent + u64::from(pads.0) {
        count -= 1;
    }
    Some(count)
}

/// Which pooling a [`Pool2d`] computes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum PoolKind {
    /// The maximum of the window (`max_pool2d`).
    Max,
    /// The mean of the window (`avg_pool2d`).
    Avg,
}

/// The attributes of [`Op::Pool2d`], with torch's meanings.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Pool2d {
    /// Max or average.
    pub kind: PoolKind,
    /// The window's rows and columns; at least 1.
    pub kernel: [u32; 2],
    /// The step between windows; at least 1.
    pub stride: [u32; 2],
    /// `[top, bottom, left, right]`, each at most half the window's extent
    /// (so every window holds a tap inside `x`).
    pub padding: [u32; 4],
    /// The step between taps (max only; average takes `[1, 1]`).
    pub dilation: [u32; 2],
    /// Output extents rounded up, not down; a window that would start in
    /// the bottom or right padding is dropped (torch's `ceil_mode`).
    pub ceil_mode: bool,
    /// Average only: divide by the window's extent within the padded input
    /// (clipped at the bottom and right edges of the padding), not by the
    /// number of its taps inside `x` (torch's `count_include_pad`).
    pub count_include_pad: bool,
}

impl Pool2d {
    /// What an average window divides its sum by, along one axis (`axis` 0:
    /// rows, 1: columns) of extent `extent`, for the window starting at
    /// `start` (its first tap's index, padding counted negative): its taps
    /// inside the input, or, with `count_include_pad`, its extent clipped
    /// at the end of the after-padding. The divisor is the product of both
    /// axes' counts.
    pub fn count(&self, axis: usize, extent: u64, start: i64) -> u64 {
        let k = i64::from(self.kernel[axis]);
        let end = start + k;
        if self.count_include_pad {
            let limit = extent as i64 + i64::from(self.padding[2 * axis + 1]);
            (end.min(limit) - start) as u64
        } else {
            (end.min(extent as i64) - start.max(0)) as u64
        }
    }
}

/// One axis of a [`Op::Slice`]: the indices `start, start + |step|, ...`
/// below `stop`, with `start < stop <= extent` and `step != 0`; in that order
/// for a positive `step`, last first for a negative one (`0:4:-1` is
/// `3, 2, 1, 0`). The bounds always name the ascending progression, which is
/// not Python's reading of a negative step's bounds: importers normalize
/// (see [`SliceRange::python`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct SliceRange {
    /// The lowest index that may be kept.
    pub start: u64,
    /// One past the highest index that may be kept.
    pub stop: u64,
    /// The distance between kept indices; negative: in descending order.
    pub step: i64,
}

impl SliceRange {
    /// How many indices the range keeps.
    pub fn len(&self) -> u64 {
        self.stop
            .saturating_sub(self.start)
            .div_ceil(self.step.unsigned_abs().max(1))
    }

    /// True if it keeps none (which the verifier rejects).
    pub fn is_empty(&self) -> bool {
        self.stop <= self.start
    }

    /// The indices kept, in order.
    pub fn indices(&self) -> impl Iterator<Item = u64> {
        let (first, len, by) = (self.first(), self.len(), self.step);
        (0..len).map(move |k| first.wrapping_add_signed(k as i64 * by))
    }

    /// The index the range keeps first (its highest for a negative step).
    pub fn first(&self) -> u64 {
        if self.step < 0 {
            self.start + self.len().saturating_sub(1) * self.step.unsigned_abs()
        } else {
            self.start
        }
    }

    /// Python's slice `start:stop:step` of an axis of `extent` (each bound
    /// optional, negatives counted from the end, clamped) as a range, or
    /// `None` when it keeps nothing or `step` is 0. `x[::-1]` is
    /// `0:extent:-1`; `x[5:1:-2]` keeps 5 and 3, `3:6:-2`.
    pub fn python(
        start: Option<i64>,
        stop: Option<i64>,
        step: i64,
        extent: u64,
    ) -> Option<SliceRange> {
        if step == 0 {
            return None;
        }
        let n = i64::try_from(extent).unwrap_or(i64::MAX);
        // CPython's `PySlice_AdjustIndices`.
        let (lower, upper) = if step < 0 { (-1, n - 1) } else { (0, n) };
        let bound = |k: Option<i64>, default: i64| match k {
            None => default,
            Some(k) if k < 0 => k.saturating_add(n).max(lower),
            Some(k) => k.min(upper),
        };
        let (first, end) = if step < 0 {
            (bound(start, upper), bound(stop, lower))
        } else {
            (bound(start, lower), bound(stop, upper))
        };
        let span = if step < 0 { first - end } else { end - first };
        if span <= 0 {
            return None;
        }
        let by = step.unsigned_abs();
        let len = (span as u64).div_ceil(by);
        Some(if step < 0 {
            let low = first as u64 - (len - 1) * by;
            SliceRange {
                start: low,
                stop: first as u64 + 1,
                step,
            }
        } else {
            SliceRange {
                start: first as u64,
                stop: end as u64,
                step,
            }
        })
    }
}

impl fmt::Display for SliceRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.start, self.stop)?;
        if self.step != 1 {
            write!(f, ":{}", self.step)?;
        }
        Ok(())
    }
}

/// The elements of a constant tensor, row-major, and its shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorConst {
    /// The element dtype.
    pub dtype: DType,
    /// The fixed dimensions.
    pub dims: Vec<u64>,
    /// `dims.iter().product()` elements of `dtype`, row-major.
    pub values: Vec<Scalar>,
}

/// How many elements of a constant tensor its hash reads.
const HASHED_ELEMENTS: usize = 64;

/// Hashes the dtype, the dims and at most [`HASHED_ELEMENTS`] elements,
/// evenly spaced (which ones depends only on the length, so equal tensors
/// hash equal): CSE keys every node by its op, and hashing each of a
/// ResNet's 11.7M weights took a third of its compile time. Tensors that
/// differ only elsewhere collide and are told apart by `==`.
impl std::hash::Hash for TensorConst {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.dtype.hash(state);
        self.dims.hash(state);
        let n = self.values.len();
        n.hash(state);
        let step = n.div_ceil(HASHED_ELEMENTS).max(1);
        for v in self.values.iter().step_by(step) {
            v.hash(state);
        }
    }
}

macro_rules! op_names {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)*
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The mnemonic the text format uses.
            pub fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }

            /// Parses a mnemonic as [`Self::name`] writes it.
            pub fn from_name(text: &str) -> Option<Self> {
                match text {
                    $($text => Some($name::$variant),)*
                    _ => None,
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

op_names! {
    /// Elementwise ops of one argument.
    UnaryOp {
        /// Negation; ints and floats. Ints wrap (`-MIN == MIN`).
        Neg = "neg",
        /// Absolute value; ints and floats. Ints wrap (`abs(MIN) == MIN`).
        Abs = "abs",
        /// Logical not; `bool` only.
        Not = "not",
        /// Bitwise not; ints only.
        BNot = "bnot",
        /// Square root; floats only.
        Sqrt = "sqrt",
        /// Round toward -inf; floats only.
        Floor = "floor",
        /// Round toward +inf; floats only.
        Ceil = "ceil",
        /// Round toward zero; floats only.
        Trunc = "trunc",
        /// Round half to even; floats only.
        Round = "round",
        /// Sine; floats only (like every transcendental below).
        Sin = "sin",
        /// Cosine.
        Cos = "cos",
        /// Tangent.
        Tan = "tan",
        /// Arc sine.
        Asin = "asin",
        /// Arc cosine.
        Acos = "acos",
        /// Arc tangent.
        Atan = "atan",
        /// Hyperbolic sine.
        Sinh = "sinh",
        /// Hyperbolic cosine.
        Cosh = "cosh",
        /// Hyperbolic tangent.
        Tanh = "tanh",
        /// e to the x.
        Exp = "exp",
        /// 2 to the x.
        Exp2 = "exp2",
        /// e to the x, minus 1.
        Expm1 = "expm1",
        /// Natural logarithm.
        Log = "log",
        /// Base-2 logarithm.
        Log2 = "log2",
        /// Base-10 logarithm.
        Log10 = "log10",
        /// Natural logarithm of 1 + x.
        Log1p = "log1p",
        /// Cube root.
        Cbrt = "cbrt",
        /// Inverse hyperbolic sine.
        Asinh = "asinh",
        /// Inverse hyperbolic cosine (NaN below 1).
        Acosh = "acosh",
        /// Inverse hyperbolic tangent (±inf at ±1, NaN beyond).
        Atanh = "atanh",
        /// The error function.
        Erf = "erf",
        /// The complementary error function, 1 - erf(x) without cancellation.
        Erfc = "erfc",
    }
}

op_names! {
    /// Elementwise ops of two arguments of one dtype.
    BinaryOp {
        /// Addition; ints (wrapping) and floats.
        Add = "add",
        /// Subtraction; ints (wrapping) and floats.
        Sub = "sub",
        /// Multiplication; ints (wrapping) and floats.
        Mul = "mul",
        /// Division; floats: IEEE; ints: truncating, error on zero divisor.
        Div = "div",
        /// Remainder of `div`: sign of the dividend; ints and floats (C `fmod`).
        Rem = "rem",
        /// Flooring division (Python `//`); ints and floats.
        FloorDiv = "floordiv",
        /// Remainder of `floordiv`: sign of the divisor (Python `%`); ints and floats.
        Mod = "mod",
        /// `a` to the power `b`; floats only.
        Pow = "pow",
        /// Minimum; ints and floats (NaN-propagating, -0.0 < +0.0).
        Min = "min",
        /// Maximum; ints and floats (NaN-propagating, -0.0 < +0.0).
        Max = "max",
        /// Magnitude of `a` with the sign of `b`; floats only.
        Copysign = "copysign",
        /// Arc tangent of `a / b` by quadrant; floats only.
        Atan2 = "atan2",
        /// `sqrt(a*a + b*b)` without undue overflow; floats only.
        Hypot = "hypot",
        /// The next representable value after `a` towards `b` (C `nextafter`:
        /// `b` if they are equal, NaN if either is); floats only.
        NextAfter = "nextafter",
        /// Logical and; `bool` only.
        And = "and",
        /// Logical or; `bool` only.
        Or = "or",
        /// Logical exclusive or; `bool` only.
        Xor = "xor",
        /// Bitwise and; ints only.
        BAnd = "band",
        /// Bitwise or; ints only.
        BOr = "bor",
        /// Bitwise exclusive or; ints only.
        BXor = "bxor",
        /// Shift left; ints only, amount modulo the width.
        Shl = "shl",
        /// Arithmetic (sign-filling) shift right; ints only, amount modulo the width.
        ShrArith = "shr_arith",
        /// Logical (zero-filling) shift right; ints only, amount modulo the width.
        ShrLogical = "shr_logical",
    }
}

op_names! {
    /// Comparisons; the result is `bool`.
    CmpOp {
        /// Equal (false if either is NaN).
        Eq = "eq",
        /// Not equal (true if either is NaN).
        Ne = "ne",
        /// Less than.
        Lt = "lt",
        /// Less than or equal.
        Le = "le",
        /// Greater than.
        Gt = "gt",
        /// Greater than or equal.
        Ge = "ge",
    }
}

op_names! {
    /// Reductions of a column to a scalar, folded in row order from the identity.
    ReduceOp {
        /// Sum; ints (wrapping) and floats. Empty: 0.
        Sum = "sum",
        /// Product; ints (wrapping) and floats. Empty: 1.
        Prod = "prod",
        /// Minimum as [`BinaryOp::Min`]; ints and floats. Empty: the dtype's largest value (+inf).
        Min = "reduce_min",
        /// Maximum as [`BinaryOp::Max`]; ints and floats. Empty: the dtype's smallest value (-inf).
        Max = "reduce_max",
        /// Sum divided by the row count; floats only, same dtype. Empty: NaN.
        Mean = "mean",
        /// Number of rows, any dtype; the result is `i64`.
        Count = "count",
    }
}

impl BinaryOp {
    /// True for the integer ops that fail on a zero divisor.
    pub fn divides(self) -> bool {
        matches!(
            self,
            BinaryOp::Div | BinaryOp::Rem | BinaryOp::FloorDiv | BinaryOp::Mod
        )
    }

    /// True when `a op b == b op a` for every dtype the op accepts (used by CSE).
    pub fn is_commutative(self) -> bool {
        use BinaryOp::*;
        matches!(
            self,
            Add | Mul | Min | Max | Hypot | And | Or | Xor | BAnd | BOr | BXor
        )
    }
}

impl Op {
    /// How many arguments the op takes; `None` for `concat`, which takes one
    /// or more.
    pub fn arity(&self) -> Option<usize> {
        Some(match self {
            Op::Concat(_) => return None,
            Op::Input { .. } | Op::Const(_) | Op::Tensor(_) => 0,
            Op::Unary(_)
            | Op::Cast(_)
            | Op::Reduce(_)
            | Op::Filter
            | Op::Transpose(_)
            | Op::Reshape(_)
            | Op::ReduceAxes { .. }
            | Op::Slice(_)
            | Op::BroadcastTo(_)
            | Op::Pool2d(_)
            | Op::Trees(_)
            | Op::IsIn(_) => 1,
            Op::Binary(_) | Op::Compare(_) | Op::MatMul | Op::Conv2d(_) | Op::Gather(_) => 2,
            Op::Select | Op::IndexAdd(_) => 3,
        })
    }

    /// True for the elementwise ops: each result element is computed from the
    /// arguments' elements it broadcasts from alone.
    pub fn is_elementwise(&self) -> bool {
        matches!(
            self,
            Op::Unary(_) | Op::Binary(_) | Op::Compare(_) | Op::Select | Op::Cast(_) | Op::IsIn(_)
        )
    }

    /// True for the ops only tensor lowering (loop nests) handles: tensor
    /// constants, `matmul`, convolution, pooling, axis reductions and the
    /// layout ops.
    pub fn is_tensor_op(&self) -> bool {
        matches!(
            self,
            Op::Tensor(_)
                | Op::MatMul
                | Op::Transpose(_)
                | Op::Reshape(_)
                | Op::ReduceAxes { .. }
                | Op::Concat(_)
                | Op::Slice(_)
                | Op::BroadcastTo(_)
                | Op::Conv2d(_)
                | Op::Pool2d(_)
                | Op::Gather(_)
                | Op::IndexAdd(_)
                | Op::Trees(_)
        )
    }

    /// The mnemonic the text format uses.
    pub fn mnemonic(&self) -> &'static str {
        match self {
            Op::Input { .. } => "input",
            Op::Const(_) => "const",
            Op::Unary(op) => op.name(),
            Op::Binary(op) => op.name(),
            Op::Compare(op) => op.name(),
            Op::Select => "select",
            Op::Cast(_) => "cast",
            Op::Reduce(op) => op.name(),
            Op::Filter => "filter",
            Op::Tensor(_) => "tensor",
            Op::MatMul => "matmul",
            Op::Transpose(_) => "transpose",
            Op::Reshape(_) => "reshape",
            Op::ReduceAxes { .. } => "reduce_axes",
            Op::Concat(_) => "concat",
            Op::Slice(_) => "slice",
            Op::BroadcastTo(_) => "broadcast_to",
            Op::Conv2d(_) => "conv2d",
            Op::Gather(_) => "gather",
            Op::IndexAdd(_) => "index_add",
            Op::Trees(_) => "trees",
            Op::IsIn(_) => "isin",
            Op::Pool2d(p) => match p.kind {
                PoolKind::Max => "max_pool2d",
                PoolKind::Avg => "avg_pool2d",
            },
        }
    }
}

/// The one table of the math functions kiln computes by the `libm` crate's
/// algorithms, or by its own (`erf` of `f32`, named `kiln_erff`): each op's
/// variant and its C (and [`crate::math`]) names for `f64` and `f32`, unary
/// then binary (float `rem` is C's `fmod`).
/// `for_each_math_fn!(m, extra…)` expands to `m! { (extra…) unary: [Op
/// f64name f32name, …] binary: [Op f64name f32name, …] }`, as wasmparser's
/// `for_each_operator!` does, so every list of them (the interpreter's
/// semantics, the kernel's C names in `kiln_kernel::libcalls`, the
/// facade's symbol bindings, the VM's calls, the wasm host's imports) is
/// generated from here and none can miss one.
#[macro_export]
macro_rules! for_each_math_fn {
    ($m:ident $(, $extra:tt)*) => {
        $m! {
            ($($extra),*)
            unary: [
                Sin sin sinf, Cos cos cosf, Tan tan tanf,
                Asin asin asinf, Acos acos acosf, Atan atan atanf,
                Sinh sinh sinhf, Cosh cosh coshf, Tanh tanh tanhf,
                Exp exp expf, Exp2 exp2 exp2f, Expm1 expm1 expm1f,
                Log log logf, Log2 log2 log2f, Log10 log10 log10f,
                Log1p log1p log1pf, Cbrt cbrt cbrtf,
                Asinh asinh asinhf, Acosh acosh acoshf, Atanh atanh atanhf,
                Erf erf kiln_erff, Erfc erfc erfcf
            ]
            binary: [
                Pow pow powf, Atan2 atan2 atan2f, Hypot hypot hypotf,
                Rem fmod fmodf, NextAfter nextafter nextafterf
            ]
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn mnemonics_are_unique_and_parse_back() {
        let mut seen = HashSet::new();
        let fixed = [
            "input",
            "const",
            "select",
            "cast",
            "filter",
            "tensor",
            "matmul",
            "transpose",
            "reshape",
            "reduce_axes",
            "concat",
            "slice",
            "broadcast_to",
            "conv2d",
            "max_pool2d",
            "avg_pool2d",
        ];
        let names = UnaryOp::ALL
            .iter()
            .map(|o| o.name())
            .chain(BinaryOp::ALL.iter().map(|o| o.name()))
            .chain(CmpOp::ALL.iter().map(|o| o.name()))
            .chain(ReduceOp::ALL.iter().map(|o| o.name()))
            .chain(fixed);
        for name in names {
            assert!(seen.insert(name), "duplicate mnemonic {name}");
        }
        for op in BinaryOp::ALL {
            assert_eq!(BinaryOp::from_name(op.name()), Some(*op));
        }
    }

    /// `SliceRange::python` keeps what `list(range(n))[start:stop:step]`
    /// keeps; the expectations are CPython's.
    #[test]
    fn python_slices_keep_what_python_keeps() {
        let kept = |start, stop, step, n| {
            SliceRange::python(start, stop, step, n).map(|r| r.indices().collect::<Vec<u64>>())
        };
        assert_eq!(kept(None, None, -1, 4), Some(vec![3, 2, 1, 0]));
        assert_eq!(kept(Some(5), Some(1), -2, 10), Some(vec![5, 3]));
        assert_eq!(kept(Some(-1), Some(-5), -1, 6), Some(vec![5, 4, 3, 2]));
        assert_eq!(kept(Some(100), Some(-100), -3, 7), Some(vec![6, 3, 0]));
        assert_eq!(kept(None, None, -3, 4), Some(vec![3, 0]));
        assert_eq!(kept(Some(1), None, 2, 6), Some(vec![1, 3, 5]));
        assert_eq!(kept(Some(-2), None, 1, 6), Some(vec![4, 5]));
        assert_eq!(kept(Some(0), Some(2), -1, 4), None);
        assert_eq!(kept(Some(2), Some(2), 1, 4), None);
        assert_eq!(kept(None, None, 0, 4), None);
        assert_eq!(
            SliceRange::python(Some(5), Some(1), -2, 10),
            Some(SliceRange {
                start: 3,
                stop: 6,
                step: -2
            })
        );
    }
}
