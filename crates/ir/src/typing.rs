//! The typing rules of [`Op`], implemented once: the builder uses them to compute
//! result types and the verifier to check declared ones.

use crate::op::{window_count, BinaryOp, Conv2d, Op, Pool2d, PoolKind, ReduceOp, UnaryOp};
use crate::types::{DType, Dim, Shape, TensorType, Type};

/// Why an op does not accept its arguments.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TypeError {
    /// What is wrong, naming the op and the offending types.
    pub message: String,
}

/// Result of a typing rule.
pub type TypeResult<T> = Result<T, TypeError>;

fn fail<T>(message: String) -> TypeResult<T> {
    Err(TypeError { message })
}

/// Which dtypes an op accepts.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DTypeClass {
    /// Any dtype.
    Any,
    /// `bool` only.
    Bool,
    /// `i32`, `i64`.
    Int,
    /// `f32`, `f64`.
    Float,
    /// Ints and floats.
    Numeric,
}

impl DTypeClass {
    /// True when `dtype` is in the class.
    pub fn accepts(self, dtype: DType) -> bool {
        match self {
            DTypeClass::Any => true,
            DTypeClass::Bool => dtype == DType::Bool,
            DTypeClass::Int => dtype.is_int(),
            DTypeClass::Float => dtype.is_float(),
            DTypeClass::Numeric => dtype.is_numeric(),
        }
    }

    fn describe(self) -> &'static str {
        match self {
            DTypeClass::Any => "any dtype",
            DTypeClass::Bool => "bool",
            DTypeClass::Int => "ints (i32, i64)",
            DTypeClass::Float => "floats (f32, f64)",
            DTypeClass::Numeric => "ints or floats",
        }
    }
}

/// The dtypes a unary op accepts.
pub fn unary_class(op: UnaryOp) -> DTypeClass {
    match op {
        UnaryOp::Neg | UnaryOp::Abs => DTypeClass::Numeric,
        UnaryOp::Not => DTypeClass::Bool,
        UnaryOp::BNot => DTypeClass::Int,
        _ => DTypeClass::Float,
    }
}

/// The dtypes a binary op accepts.
pub fn binary_class(op: BinaryOp) -> DTypeClass {
    use BinaryOp::*;
    match op {
        Add | Sub | Mul | Div | Rem | FloorDiv | Mod | Min | Max => DTypeClass::Numeric,
        Pow | Copysign | Atan2 | Hypot | NextAfter => DTypeClass::Float,
        And | Or | Xor => DTypeClass::Bool,
        BAnd | BOr | BXor | Shl | ShrArith | ShrLogical => DTypeClass::Int,
    }
}

/// The dtypes a reduction accepts.
pub fn reduce_class(op: ReduceOp) -> DTypeClass {
    match op {
        ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Min | ReduceOp::Max => DTypeClass::Numeric,
        ReduceOp::Mean => DTypeClass::Float,
        ReduceOp::Count => DTypeClass::Any,
    }
}

/// The shape elementwise operands broadcast to (NumPy's rule): shapes are
/// aligned at their last dimension; two dimensions agree when they are equal
/// or one of them is `1`; missing leading dimensions count as `1`. A scalar
/// broadcasts against anything.
pub fn broadcast_shapes<'a>(
    op: &str,
    shapes: impl IntoIterator<Item = &'a TensorType>,
) -> TypeResult<Shape> {
    let mut result: Shape = Vec::new();
    let mut first: Option<&TensorType> = None;
    for t in shapes {
        if t.is_scalar() {
            continue;
        }
        let Some(prev) = first else {
            first = Some(t);
            result = t.shape.clone();
            continue;
        };
        // The same shape again (every operand of a column expression).
        if t.shape == result {
            continue;
        }
        let rank = result.len().max(t.shape.len());
        let mut merged = Vec::with_capacity(rank);
        for axis in 0..rank {
            let dim_of = |shape: &[Dim]| {
                (axis + shape.len())
                    .checked_sub(rank)
                    .map(|i| shape[i].clone())
                    .unwrap_or(Dim::Fixed(1))
            };
            let (a, b) = (dim_of(&result), dim_of(&t.shape));
            merged.push(match (&a, &b) {
                _ if a == b => a,
                (Dim::Fixed(1), _) => b,
                (_, Dim::Fixed(1)) => a,
                _ => {
                    return fail(format!("`{op}`: shapes of {prev} and {t} do not broadcast"));
                }
            });
        }
        result = merged;
    }
    Ok(result)
}

/// The result shape of `matmul(a, b)`.
fn matmul_shape(op: &str, a: &TensorType, b: &TensorType) -> TypeResult<Shape> {
    let mismatch = || {
        fail(format!(
            "`{op}`: {a} and {b} do not multiply (the last dimension of the first must equal the first of the last two of the second)"
        ))
    };
    if a.is_scalar() || b.is_scalar() {
        return fail(format!(
            "`{op}` takes tensors of rank 1 or more, got {a} and {b}"
        ));
    }
    let (ra, rb) = (a.shape.len(), b.shape.len());
    let k_a = &a.shape[ra - 1];
    let k_b = if rb == 1 {
        &b.shape[0]
    } else {
        &b.shape[rb - 2]
    };
    if k_a != k_b {
        if let (Dim::Sym(s), Dim::Fixed(k)) | (Dim::Fixed(k), Dim::Sym(s)) = (k_a, k_b) {
            // kiln does not unify a symbolic dimension with a fixed one: say
            // which meets which, and how to make the input's length known.
            return fail(format!(
                "`{op}`: {a} and {b} do not multiply: the symbolic dimension `{s}` meets the \
                 fixed {k}; give the input its exact shape (`{}[{k}]`, as data of that \
                 shape does on the command line)",
                a.dtype
            ));
        }
        return mismatch();
    }
    let batch_a = &a.shape[..ra.saturating_sub(2)];
    let batch_b = &b.shape[..rb.saturating_sub(2)];
    let batch = broadcast_shapes(
        op,
        [
            &TensorType {
                dtype: a.dtype,
                shape: batch_a.to_vec(),
            },
            &TensorType {
                dtype: b.dtype,
                shape: batch_b.to_vec(),
            },
        ],
    )?;
    let mut shape = batch;
    if ra >= 2 {
        shape.push(a.shape[ra - 2].clone());
    }
    if rb >= 2 {
        shape.push(b.shape[rb - 1].clone());
    }
    Ok(shape)
}

/// The number of elements of a shape, when every dimension is fixed, and the
/// symbolic dimensions it mentions.
/// `concat` along `axis`: one dtype and rank, the axis fixed in every
/// argument, every other axis equal.
fn concat_type(op: &str, axis: u32, args: &[&TensorType]) -> TypeResult<Type> {
    let first = args[0];
    let axis = axis as usize;
    if axis >= first.shape.len() {
        return fail(format!(
            "`{op}` of {first} along axis {axis}: it has {} axes",
            first.shape.len()
        ));
    }
    let mut total: u64 = 0;
    for t in args {
        same_dtype(op, first, t)?;
        let agrees = t.shape.len() == first.shape.len()
            && t.shape
                .iter()
                .zip(&first.shape)
                .enumerate()
                .all(|(a, (x, y))| a == axis || x == y);
        if !agrees {
            return fail(format!(
                "`{op}` along axis {axis}: {first} and {t} differ in another axis"
            ));
        }
        let Dim::Fixed(n) = t.shape[axis] else {
            return fail(format!(
                "`{op}` along axis {axis}: {t} has a symbolic extent there"
            ));
        };
        total = total.checked_add(n).ok_or_else(|| TypeError {
            message: format!("`{op}` along axis {axis}: the extents overflow"),
        })?;
    }
    let mut shape = first.shape.clone();
    shape[axis] = Dim::Fixed(total);
    Ok(Type::Tensor(TensorType {
        dtype: first.dtype,
        shape,
    }))
}

/// `gather(table, index)` along `axis`: `table`'s axes before `axis`,
/// `index`'s axes, `table`'s axes after `axis`.
fn gather_type(axis: u32, table: &TensorType, index: &TensorType) -> TypeResult<Type> {
    Ok(Type::Tensor(TensorType {
        dtype: table.dtype,
        shape: gathered("`gather` of", axis, table, index)?,
    }))
}

/// The shape of `table` gathered at `index` along `axis`: `table`'s axes
/// before `axis`, `index`'s, `table`'s after it (`what`: the op and its
/// preposition, for the errors).
fn gathered(what: &str, axis: u32, table: &TensorType, index: &TensorType) -> TypeResult<Shape> {
    let axis = axis as usize;
    if axis >= table.shape.len() {
        return fail(format!(
            "{what} {table} along axis {axis}: it has {} axes",
            table.shape.len()
        ));
    }
    if !matches!(index.dtype, DType::I32 | DType::I64) {
        let op = what.split(' ').next().unwrap_or(what);
        return fail(format!("{op} takes an i32 or i64 index, got {index}"));
    }
    let mut shape = table.shape[..axis].to_vec();
    shape.extend(index.shape.iter().cloned());
    shape.extend(table.shape[axis + 1..].iter().cloned());
    Ok(shape)
}

/// `index_add(base, index, source)` along `axis`: `base`'s type, with
/// `source` shaped as `gather(base, index)` along `axis`.
fn index_add_type(
    axis: u32,
    base: &TensorType,
    index: &TensorType,
    source: &TensorType,
) -> TypeResult<Type> {
    let name = "index_add";
    check_class(name, DTypeClass::Numeric, base)?;
    same_dtype(name, base, source)?;
    let shape = gathered("`index_add` into", axis, base, index)?;
    if source.shape != shape {
        let want = TensorType {
            dtype: base.dtype,
            shape,
        };
        return fail(format!(
            "`{name}` into {base} at {index} along axis {axis} adds a source of {want}, got {source}"
        ));
    }
    Ok(Type::Tensor(base.clone()))
}

fn trees_type(ensemble: &crate::trees::TreeEnsemble, x: &TensorType) -> TypeResult<Type> {
    let problems = ensemble.check();
    if !problems.is_empty() {
        return fail(format!("`trees`: {}", problems.join("; ")));
    }
    let features = Dim::Fixed(u64::from(ensemble.n_features));
    match x.shape.as_slice() {
        [rows, f] if *f == features && matches!(x.dtype, DType::F32 | DType::F64) => {
            Ok(Type::Tensor(TensorType {
                dtype: ensemble.dtype,
                shape: vec![rows.clone(), Dim::Fixed(ensemble.n_outputs() as u64)],
            }))
        }
        _ => fail(format!(
            "`trees` takes f32 or f64 rows of {} features, [rows, {}], got {x}",
            ensemble.n_features, ensemble.n_features
        )),
    }
}

/// `[n, c, h, w]` of an NCHW argument, with `c`, `h`, `w` fixed.
fn nchw(op: &str, t: &TensorType) -> TypeResult<(Dim, [u64; 3])> {
    let fixed = |d: &Dim| match d {
        Dim::Fixed(n) => Some(*n),
        Dim::Sym(_) => None,
    };
    match t.shape.as_slice() {
        [n, c, h, w] => match (fixed(c), fixed(h), fixed(w)) {
            (Some(c), Some(h), Some(w)) => Ok((n.clone(), [c, h, w])),
            _ => fail(format!(
                "`{op}` of {t}: the channel and spatial extents must be fixed"
            )),
        },
        _ => fail(format!(
            "`{op}` takes a 4-D NCHW tensor [n, c, h, w], got {t}"
        )),
    }
}

/// Strides and dilations of at least 1.
fn steps(op: &str, what: &str, steps: [u32; 2]) -> TypeResult<()> {
    if steps.contains(&0) {
        return fail(format!(
            "`{op}`: a {what} of 0 ({steps:?}); it must be at least 1"
        ));
    }
    Ok(())
}

/// The output extents of windows of `taps` over `[h, w]`.
#[allow(clippy::too_many_arguments)]
fn windows(
    op: &str,
    t: &TensorType,
    hw: [u64; 2],
    taps: [u32; 2],
    stride: [u32; 2],
    padding: [u32; 4],
    dilation: [u32; 2],
    ceil_mode: bool,
) -> TypeResult<[u64; 2]> {
    let mut out = [0; 2];
    for axis in 0..2 {
        let pads = (padding[2 * axis], padding[2 * axis + 1]);
        out[axis] = window_count(hw[axis], taps[axis], stride[axis], pads, dilation[axis], ceil_mode)
            .filter(|_| taps[axis] > 0)
            .ok_or_else(|| TypeError {
                message: format!(
                    "`{op}` of {t}: a window of {taps:?} taps (dilation {dilation:?}) does not fit the padded input ({} {} with padding {padding:?})",
                    ["rows", "columns"][axis],
                    hw[axis]
                ),
            })?;
    }
    Ok(out)
}

fn conv2d_type(op: &str, c: &Conv2d, x: &TensorType, w: &TensorType) -> TypeResult<Type> {
    same_dtype(op, x, w)?;
    check_class(op, DTypeClass::Numeric, x)?;
    let (n, [chans, h, wd]) = nchw(op, x)?;
    let dims: Option<Vec<u64>> = w
        .shape
        .iter()
        .map(|d| match d {
            Dim::Fixed(n) => Some(*n),
            Dim::Sym(_) => None,
        })
        .collect();
    let Some([out_ch, per_group, kh, kw]) =
        dims.as_deref().and_then(|d| <[u64; 4]>::try_from(d).ok())
    else {
        return fail(format!(
            "`{op}` takes weights [out, in / groups, kh, kw] of fixed extents, got {w}"
        ));
    };
    steps(op, "stride", c.stride)?;
    steps(op, "dilation", c.dilation)?;
    let groups = u64::from(c.groups);
    if groups == 0 || chans % groups != 0 || out_ch % groups != 0 {
        return fail(format!(
            "`{op}` of {x} with weights {w}: {} groups must divide both the {chans} input and the {out_ch} output channels",
            c.groups
        ));
    }
    if per_group != chans / groups {
        return fail(format!(
            "`{op}` of {x} with weights {w}: the weights' second extent must be the input channels per group, {}",
            chans / groups
        ));
    }
    let taps = [u32::try_from(kh), u32::try_from(kw)];
    let [Ok(th), Ok(tw)] = taps else {
        return fail(format!("`{op}`: the kernel of {w} is too large"));
    };
    let [oh, ow] = windows(
        op,
        x,
        [h, wd],
        [th, tw],
        c.stride,
        c.padding,
        c.dilation,
        false,
    )?;
    Ok(Type::Tensor(TensorType {
        dtype: x.dtype,
        shape: vec![n, Dim::Fixed(out_ch), Dim::Fixed(oh), Dim::Fixed(ow)],
    }))
}

fn pool2d_type(op: &str, p: &Pool2d, x: &TensorType) -> TypeResult<Type> {
    let class = match p.kind {
        PoolKind::Max => DTypeClass::Numeric,
        PoolKind::Avg => DTypeClass::Float,
    };
    check_class(op, class, x)?;
    let (n, [chans, h, w]) = nchw(op, x)?;
    steps(op, "stride", p.stride)?;
    steps(op, "dilation", p.dilation)?;
    if p.kind == PoolKind::Avg && p.dilation != [1, 1] {
        return fail(format!("`{op}` has no dilation, got {:?}", p.dilation));
    }
    if p.kind == PoolKind::Max && p.count_include_pad {
        return fail(format!("`{op}` takes no `count_include_pad`"));
    }
    for axis in 0..2 {
        let span = u64::from(p.kernel[axis].saturating_sub(1)) * u64::from(p.dilation[axis]) + 1;
        let most = span / 2;
        let pads = [p.padding[2 * axis], p.padding[2 * axis + 1]];
        if pads.iter().any(|&pad| u64::from(pad) > most) {
            return fail(format!(
                "`{op}` of {x}: padding {:?} exceeds half the window's {} ({most})",
                p.padding,
                ["rows", "columns"][axis]
            ));
        }
    }
    let [oh, ow] = windows(
        op,
        x,
        [h, w],
        p.kernel,
        p.stride,
        p.padding,
        p.dilation,
        p.ceil_mode,
    )?;
    Ok(Type::Tensor(TensorType {
        dtype: x.dtype,
        shape: vec![n, Dim::Fixed(chans), Dim::Fixed(oh), Dim::Fixed(ow)],
    }))
}

fn size_and_symbols(shape: &[Dim]) -> (u128, Vec<&str>) {
    let mut size: u128 = 1;
    let mut syms = Vec::new();
    for d in shape {
        match d {
            Dim::Fixed(n) => size = size.saturating_mul(u128::from(*n)),
            Dim::Sym(s) => syms.push(&**s),
        }
    }
    syms.sort_unstable();
    (size, syms)
}

fn tensor<'a>(op: &str, ty: &'a Type) -> TypeResult<&'a TensorType> {
    ty.as_tensor().ok_or_else(|| TypeError {
        message: format!(
            "`{op}` does not take a selection vector ({ty}); selections can only be outputs"
        ),
    })
}

fn check_class(op: &str, class: DTypeClass, t: &TensorType) -> TypeResult<()> {
    if class.accepts(t.dtype) {
        Ok(())
    } else {
        fail(format!("`{op}` takes {}, got {t}", class.describe()))
    }
}

fn same_dtype(op: &str, a: &TensorType, b: &TensorType) -> TypeResult<()> {
    if a.dtype == b.dtype {
        Ok(())
    } else {
        fail(format!(
            "`{op}` takes operands of one dtype, got {a} and {b}; insert a `cast`"
        ))
    }
}

fn column_dim<'a>(op: &str, t: &'a TensorType) -> TypeResult<&'a Dim> {
    match t.shape.as_slice() {
        [dim] => Ok(dim),
        _ => fail(format!("`{op}` takes a column (one dimension), got {t}")),
    }
}

/// A placeholder for [`result_type`]'s argument slots.
static SCALAR_F64: TensorType = TensorType {
    dtype: DType::F64,
    shape: Vec::new(),
};

/// The result type of `op` applied to arguments of types `args`.
///
/// `Input` has no rule (its type is declared); it is reported as an error here.
pub fn result_type(op: &Op, args: &[&Type]) -> TypeResult<Type> {
    let name = op.mnemonic();
    match op.arity() {
        Some(n) if args.len() != n => {
            return fail(format!(
                "`{name}` takes {n} argument(s), got {}",
                args.len()
            ));
        }
        None if args.is_empty() => {
            return fail(format!("`{name}` takes one or more arguments, got none"));
        }
        _ => {}
    }
    // The arguments as tensors: on the stack for the few most ops take
    // (typing runs for every node the builder adds and the verifier checks).
    let mut few = [&SCALAR_F64; 4];
    let many: Vec<&TensorType>;
    let tensors: &[&TensorType] = if args.len() <= few.len() {
        for (slot, ty) in few.iter_mut().zip(args) {
            *slot = tensor(name, ty)?;
        }
        &few[..args.len()]
    } else {
        many = args
            .iter()
            .map(|ty| tensor(name, ty))
            .collect::<TypeResult<Vec<_>>>()?;
        &many
    };
    let elementwise = |dtype: DType| -> TypeResult<Type> {
        Ok(Type::Tensor(TensorType {
            dtype,
            shape: broadcast_shapes(name, tensors.iter().copied())?,
        }))
    };
    match op {
        Op::Input { .. } => fail("`input` has no typing rule; its type is declared".to_string()),
        Op::Const(c) => Ok(Type::scalar(c.dtype())),
        Op::Unary(u) => {
            check_class(name, unary_class(*u), tensors[0])?;
            Ok(Type::Tensor(tensors[0].clone()))
        }
        Op::Binary(b) => {
            same_dtype(name, tensors[0], tensors[1])?;
            check_class(name, binary_class(*b), tensors[0])?;
            elementwise(tensors[0].dtype)
        }
        Op::Compare(_) => {
            same_dtype(name, tensors[0], tensors[1])?;
            elementwise(DType::Bool)
        }
        Op::Select => {
            if tensors[0].dtype != DType::Bool {
                return fail(format!(
                    "`select` takes a bool condition, got {}",
                    tensors[0]
                ));
            }
            same_dtype(name, tensors[1], tensors[2])?;
            elementwise(tensors[1].dtype)
        }
        Op::Cast(to) => Ok(Type::Tensor(TensorType {
            dtype: *to,
            shape: tensors[0].shape.clone(),
        })),
        Op::Reduce(r) => {
            column_dim(name, tensors[0])?;
            check_class(name, reduce_class(*r), tensors[0])?;
            let dtype = if *r == ReduceOp::Count {
                DType::I64
            } else {
                tensors[0].dtype
            };
            Ok(Type::scalar(dtype))
        }
        Op::Filter => {
            check_class(name, DTypeClass::Bool, tensors[0])?;
            Ok(Type::Selection(column_dim(name, tensors[0])?.clone()))
        }
        Op::Tensor(t) => {
            let count = t
                .dims
                .iter()
                .try_fold(1u64, |acc, &d| acc.checked_mul(d))
                .and_then(|n| usize::try_from(n).ok());
            if count != Some(t.values.len()) {
                return fail(format!(
                    "`tensor` of shape {:?} needs {} elements, has {}",
                    t.dims,
                    count.map_or("too many".to_string(), |c| c.to_string()),
                    t.values.len()
                ));
            }
            if let Some(bad) = t.values.iter().find(|v| v.dtype() != t.dtype) {
                return fail(format!(
                    "`tensor` of {} holds a {} element",
                    t.dtype,
                    bad.dtype()
                ));
            }
            Ok(Type::Tensor(TensorType {
                dtype: t.dtype,
                shape: t.dims.iter().map(|&d| Dim::Fixed(d)).collect(),
            }))
        }
        Op::MatMul => {
            same_dtype(name, tensors[0], tensors[1])?;
            check_class(name, DTypeClass::Numeric, tensors[0])?;
            Ok(Type::Tensor(TensorType {
                dtype: tensors[0].dtype,
                shape: matmul_shape(name, tensors[0], tensors[1])?,
            }))
        }
        Op::Transpose(perm) => {
            let t = tensors[0];
            let mut seen = vec![false; t.shape.len()];
            let valid = perm.len() == t.shape.len()
                && perm.iter().all(|&p| {
                    let fresh = seen.get(p as usize).is_some_and(|s| !s);
                    if fresh {
                        seen[p as usize] = true;
                    }
                    fresh
                });
            if !valid {
                return fail(format!(
                    "`transpose` of {t} needs a permutation of its {} axes, got {perm:?}",
                    t.shape.len()
                ));
            }
            Ok(Type::Tensor(TensorType {
                dtype: t.dtype,
                shape: perm.iter().map(|&p| t.shape[p as usize].clone()).collect(),
            }))
        }
        Op::ReduceAxes { op, axes, keepdim } => {
            let t = tensors[0];
            check_class(name, reduce_class(*op), t)?;
            let ascending = axes.windows(2).all(|w| w[0] < w[1]);
            if axes.is_empty() || !ascending || axes.iter().any(|&a| a as usize >= t.shape.len()) {
                return fail(format!(
                    "`reduce_axes` of {t} needs ascending axes below {}, got {axes:?}",
                    t.shape.len()
                ));
            }
            let mut shape = Vec::with_capacity(t.shape.len());
            for (axis, d) in t.shape.iter().enumerate() {
                if !axes.contains(&(axis as u32)) {
                    shape.push(d.clone());
                } else if *keepdim {
                    shape.push(Dim::Fixed(1));
                }
            }
            let dtype = if *op == ReduceOp::Count {
                DType::I64
            } else {
                t.dtype
            };
            Ok(Type::Tensor(TensorType { dtype, shape }))
        }
        Op::Concat(axis) => concat_type(name, *axis, tensors),
        Op::Slice(ranges) => {
            let t = tensors[0];
            if ranges.len() != t.shape.len() {
                return fail(format!(
                    "`slice` of {t} needs a range for each of its {} axes, got {}",
                    t.shape.len(),
                    ranges.len()
                ));
            }
            let mut shape = Vec::with_capacity(ranges.len());
            for (axis, (d, range)) in t.shape.iter().zip(ranges).enumerate() {
                shape.push(match (range, d) {
                    (None, _) => d.clone(),
                    (Some(r), Dim::Fixed(n)) if !r.is_empty() && r.step != 0 && r.stop <= *n => {
                        Dim::Fixed(r.len())
                    }
                    (Some(r), _) => {
                        return fail(format!(
                            "`slice` of {t}: {r} on axis {axis} (extent {d}) keeps nothing or reaches past the end; a range needs start < stop <= a fixed extent and a step other than 0"
                        ))
                    }
                });
            }
            Ok(Type::Tensor(TensorType {
                dtype: t.dtype,
                shape,
            }))
        }
        Op::BroadcastTo(shape) => {
            let t = tensors[0];
            let to = TensorType {
                dtype: t.dtype,
                shape: shape.clone(),
            };
            let fits = t.shape.len() <= shape.len()
                && broadcast_shapes(name, [t, &to]).is_ok_and(|s| s == *shape);
            if !fits {
                return fail(format!("`broadcast_to`: {t} does not broadcast to {to}"));
            }
            Ok(Type::Tensor(to))
        }
        Op::Conv2d(c) => conv2d_type(name, c, tensors[0], tensors[1]),
        Op::Pool2d(p) => pool2d_type(name, p, tensors[0]),
        Op::Gather(axis) => gather_type(*axis, tensors[0], tensors[1]),
        Op::IndexAdd(axis) => index_add_type(*axis, tensors[0], tensors[1], tensors[2]),
        Op::Trees(e) => trees_type(e, tensors[0]),
        Op::IsIn(set) => {
            let x = tensors[0];
            check_class(name, DTypeClass::Numeric, x)?;
            if let Some(v) = set.iter().find(|v| v.dtype() != x.dtype) {
                return fail(format!("`isin` of {x} holds {v}, a {}", v.dtype()));
            }
            if crate::semantics::isin_set(set.iter().copied(), x.dtype) != **set {
                return fail(
                    "`isin`'s set is ascending, without duplicates, NaN or -0.0 \
                     (kiln_ir::semantics::isin_set)"
                        .to_string(),
                );
            }
            Ok(Type::Tensor(TensorType {
                dtype: DType::Bool,
                shape: x.shape.clone(),
            }))
        }
        Op::Reshape(shape) => {
            let t = tensors[0];
            if size_and_symbols(&t.shape) != size_and_symbols(shape) {
                let to = TensorType {
                    dtype: t.dtype,
                    shape: shape.clone(),
                };
                return fail(format!(
                    "`reshape` of {t} to {to}: the number of elements differs"
                ));
            }
            Ok(Type::Tensor(TensorType {
                dtype: t.dtype,
                shape: shape.clone(),
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(op: Op, args: Vec<Type>, expect: &str) {
        let refs: Vec<&Type> = args.iter().collect();
        let got = match result_type(&op, &refs) {
            Ok(t) => t.to_string(),
            Err(e) => format!("error: {e}"),
        };
        assert_eq!(got, expect);
    }

    #[test]
    fn typing_rules() {
        let f = Type::scalar(DType::F64);
        let fcol = Type::column(DType::F64, "n");
        let icol = Type::column(DType::I64, "n");
        let bcol = Type::column(DType::Bool, "n");
        check(
            Op::Binary(BinaryOp::Add),
            vec![fcol.clone(), f.clone()],
            "f64[n]",
        );
        check(
            Op::Binary(BinaryOp::Add),
            vec![fcol.clone(), icol.clone()],
            "error: `add` takes operands of one dtype, got f64[n] and i64[n]; insert a `cast`",
        );
        check(
            Op::Binary(BinaryOp::Add),
            vec![fcol.clone(), Type::column(DType::F64, "m")],
            "error: `add`: shapes of f64[n] and f64[m] do not broadcast",
        );
        check(
            Op::Binary(BinaryOp::Shl),
            vec![fcol.clone(), fcol.clone()],
            "error: `shl` takes ints (i32, i64), got f64[n]",
        );
        check(
            Op::Compare(crate::op::CmpOp::Lt),
            vec![icol.clone(), Type::scalar(DType::I64)],
            "bool[n]",
        );
        check(
            Op::Select,
            vec![bcol.clone(), f.clone(), fcol.clone()],
            "f64[n]",
        );
        check(Op::Reduce(ReduceOp::Count), vec![bcol.clone()], "i64");
        check(
            Op::Reduce(ReduceOp::Mean),
            vec![icol.clone()],
            "error: `mean` takes floats (f32, f64), got i64[n]",
        );
        check(
            Op::Reduce(ReduceOp::Sum),
            vec![f.clone()],
            "error: `sum` takes a column (one dimension), got f64",
        );
        check(Op::Filter, vec![bcol.clone()], "sel[n]");
        let t = |dims: &[u64]| {
            Type::Tensor(TensorType {
                dtype: DType::F32,
                shape: dims.iter().map(|&d| Dim::Fixed(d)).collect(),
            })
        };
        let add = Op::Binary(BinaryOp::Add);
        check(add.clone(), vec![t(&[4, 3]), t(&[3])], "f32[4, 3]");
        check(add.clone(), vec![t(&[4, 1]), t(&[1, 3])], "f32[4, 3]");
        check(add.clone(), vec![t(&[2, 1, 3]), t(&[5, 1])], "f32[2, 5, 3]");
        check(
            add,
            vec![t(&[4, 3]), t(&[4])],
            "error: `add`: shapes of f32[4, 3] and f32[4] do not broadcast",
        );
        check(Op::MatMul, vec![t(&[4, 3]), t(&[3, 5])], "f32[4, 5]");
        let column = Type::Tensor(TensorType {
            dtype: DType::F32,
            shape: vec![Dim::Sym("n".into())],
        });
        check(
            Op::MatMul,
            vec![column, t(&[4, 3])],
            "error: `matmul`: f32[n] and f32[4, 3] do not multiply: the symbolic dimension `n` meets the fixed 4; give the input its exact shape (`f32[4]`, as data of that shape does on the command line)",
        );
        check(Op::MatMul, vec![t(&[4]), t(&[4, 3])], "f32[3]");
        check(Op::MatMul, vec![t(&[4, 3]), t(&[3])], "f32[4]");
        check(Op::MatMul, vec![t(&[3]), t(&[3])], "f32");
        check(Op::MatMul, vec![t(&[7, 4, 3]), t(&[3, 2])], "f32[7, 4, 2]");
        check(
            Op::MatMul,
            vec![t(&[4, 3]), t(&[4, 3])],
            "error: `matmul`: f32[4, 3] and f32[4, 3] do not multiply (the last dimension of the first must equal the first of the last two of the second)",
        );
        check(Op::Transpose(vec![1, 0]), vec![t(&[4, 3])], "f32[3, 4]");
        check(
            Op::Transpose(vec![0, 0]),
            vec![t(&[4, 3])],
            "error: `transpose` of f32[4, 3] needs a permutation of its 2 axes, got [0, 0]",
        );
        check(
            Op::Reshape(vec![Dim::Fixed(12)]),
            vec![t(&[4, 3])],
            "f32[12]",
        );
        let sum = |axes: Vec<u32>, keepdim| Op::ReduceAxes {
            op: ReduceOp::Sum,
            axes,
            keepdim,
        };
        check(sum(vec![1], false), vec![t(&[4, 3])], "f32[4]");
        check(sum(vec![0, 1], false), vec![t(&[4, 3])], "f32");
        check(sum(vec![1], true), vec![t(&[4, 3])], "f32[4, 1]");
        check(
            sum(vec![2], false),
            vec![t(&[4, 3])],
            "error: `reduce_axes` of f32[4, 3] needs ascending axes below 2, got [2]",
        );
        check(
            Op::Reshape(vec![Dim::Fixed(5)]),
            vec![t(&[4, 3])],
            "error: `reshape` of f32[4, 3] to f32[5]: the number of elements differs",
        );
        check(Op::Concat(1), vec![t(&[4, 3]), t(&[4, 2])], "f32[4, 5]");
        let index = |dims: &[u64]| {
            Type::Tensor(TensorType {
                dtype: DType::I64,
                shape: dims.iter().map(|&d| Dim::Fixed(d)).collect(),
            })
        };
        check(
            Op::Gather(0),
            vec![t(&[10, 4]), index(&[2, 3])],
            "f32[2, 3, 4]",
        );
        check(
            Op::Gather(1),
            vec![t(&[10, 4, 5]), index(&[7])],
            "f32[10, 7, 5]",
        );
        check(Op::Gather(1), vec![t(&[10, 4]), index(&[])], "f32[10]");
        check(
            Op::Gather(2),
            vec![t(&[10, 4]), index(&[3])],
            "error: `gather` of f32[10, 4] along axis 2: it has 2 axes",
        );
        check(
            Op::Gather(0),
            vec![t(&[10, 4]), t(&[3])],
            "error: `gather` takes an i32 or i64 index, got f32[3]",
        );
        check(
            Op::IndexAdd(1),
            vec![t(&[10, 4, 5]), index(&[2, 3]), t(&[10, 2, 3, 5])],
            "f32[10, 4, 5]",
        );
        check(
            Op::IndexAdd(0),
            vec![t(&[10, 4]), index(&[3]), t(&[3, 5])],
            "error: `index_add` into f32[10, 4] at i64[3] along axis 0 adds a source of f32[3, 4], got f32[3, 5]",
        );
        check(
            Op::IndexAdd(2),
            vec![t(&[10, 4]), index(&[3]), t(&[3])],
            "error: `index_add` into f32[10, 4] along axis 2: it has 2 axes",
        );
        check(
            Op::IndexAdd(0),
            vec![t(&[10, 4]), t(&[3]), t(&[3, 4])],
            "error: `index_add` takes an i32 or i64 index, got f32[3]",
        );
        check(
            Op::Concat(0),
            vec![t(&[4, 3]), t(&[4, 2])],
            "error: `concat` along axis 0: f32[4, 3] and f32[4, 2] differ in another axis",
        );
        check(
            Op::Concat(2),
            vec![t(&[4, 3])],
            "error: `concat` of f32[4, 3] along axis 2: it has 2 axes",
        );
        check(
            Op::Concat(0),
            vec![],
            "error: `concat` takes one or more arguments, got none",
        );
        let r = |start, stop, step| Some(crate::op::SliceRange { start, stop, step });
        check(
            Op::Slice(vec![None, r(1, 3, 1)]),
            vec![t(&[4, 3])],
            "f32[4, 2]",
        );
        check(
            Op::Slice(vec![r(0, 4, 3), None]),
            vec![t(&[4, 3])],
            "f32[2, 3]",
        );
        check(
            Op::Slice(vec![r(0, 4, -3), r(0, 3, -1)]),
            vec![t(&[4, 3])],
            "f32[2, 3]",
        );
        check(
            Op::Slice(vec![r(0, 4, 0), None]),
            vec![t(&[4, 3])],
            "error: `slice` of f32[4, 3]: 0:4:0 on axis 0 (extent 4) keeps nothing or reaches past the end; a range needs start < stop <= a fixed extent and a step other than 0",
        );
        check(
            Op::Slice(vec![None, r(1, 4, 1)]),
            vec![t(&[4, 3])],
            "error: `slice` of f32[4, 3]: 1:4 on axis 1 (extent 3) keeps nothing or reaches past the end; a range needs start < stop <= a fixed extent and a step other than 0",
        );
        let shape = |dims: &[u64]| dims.iter().map(|&d| Dim::Fixed(d)).collect::<Shape>();
        check(
            Op::BroadcastTo(shape(&[2, 4, 3])),
            vec![t(&[4, 1])],
            "f32[2, 4, 3]",
        );
        check(
            Op::BroadcastTo(shape(&[3])),
            vec![t(&[4, 3])],
            "error: `broadcast_to`: f32[4, 3] does not broadcast to f32[3]",
        );
        let sel = Type::Selection(Dim::Sym("n".into()));
        check(Op::Unary(UnaryOp::Neg), vec![sel], "error: `neg` does not take a selection vector (sel[n]); selections can only be outputs");
        check(
            Op::Unary(UnaryOp::Sin),
            vec![f.clone(), f],
            "error: `sin` takes 1 argument(s), got 2",
        );
    }
}
