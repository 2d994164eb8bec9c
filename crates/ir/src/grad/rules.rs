//! The local derivatives: for each argument of an elementwise node or a
//! reduction, the linear map a tangent (forward mode) or a cotangent
//! (reverse mode) goes through. An elementwise op's map is diagonal, so it
//! is its own adjoint and both modes apply the same [`Lin`].
//!
//! The formulas, and what they give where the function has no derivative,
//! are torch's (its `derivatives.yaml`), so that a model trained here and
//! in torch takes the same steps; docs/semantics.md lists them.

use super::{fail, reduction, Ad, GradResult};
use crate::entities::Value;
use crate::op::{BinaryOp, CmpOp, Op, ReduceOp, UnaryOp};
use crate::types::Dim;

/// A linear map of a tangent or cotangent `t`; its values broadcast against `t`.
pub(super) enum Lin {
    /// `t`.
    Same,
    /// `-t`.
    Neg,
    /// `t * v`.
    Mul(Value),
    /// `t / v`.
    Div(Value),
    /// `t / v * m` (torch's even split among the elements a max or min
    /// reduction found: `v` counts them, `m` is 1 where it found one).
    DivMul(Value, Value),
    /// `select(zero, 0, t * v)`: `t * v`, but 0 where `zero` holds even when
    /// `t * v` is infinite or NaN (torch's masked derivatives of `pow`).
    MulUnless(Value, Value),
    /// `select(zero, 0, select(tie, t / 2, t))`: one side of a binary `max`
    /// or `min`: all of `t` where it wins, half on a tie, none where it loses.
    Tie {
        /// Where the two sides are equal.
        tie: Value,
        /// Where this side loses.
        zero: Value,
    },
    /// `select(c, t, 0)`.
    Where(Value),
    /// `select(c, 0, t)`.
    WhereNot(Value),
}

impl Lin {
    /// Appends the nodes that compute the map of `t`.
    pub(super) fn apply(&self, ad: &mut Ad, t: Value) -> GradResult<Value> {
        match *self {
            Lin::Same => Ok(t),
            Lin::Neg => ad.unary(UnaryOp::Neg, t),
            Lin::Mul(v) => ad.mul(t, v),
            Lin::Div(v) => ad.div(t, v),
            Lin::DivMul(v, m) => {
                let q = ad.div(t, v)?;
                ad.mul(q, m)
            }
            Lin::MulUnless(v, zero) => {
                let p = ad.mul(t, v)?;
                ad.zero_where(zero, p)
            }
            Lin::Tie { tie, zero } => {
                let two = ad.konst(ad.dtype(t), 2.0);
                let half = ad.div(t, two)?;
                let split = ad.select(tie, half, t)?;
                ad.zero_where(zero, split)
            }
            Lin::Where(c) => ad.keep_where(c, t),
            Lin::WhereNot(c) => ad.zero_where(c, t),
        }
    }
}

/// The local derivatives of the elementwise node `y = op(args)`: one per
/// argument, `None` where the argument passes no derivative (a condition,
/// an integer, a rounding). Ops without a derivative are an error.
pub(super) fn elementwise(
    ad: &mut Ad,
    y: Value,
    op: &Op,
    args: &[Value],
) -> GradResult<Vec<Option<Lin>>> {
    Ok(match op {
        Op::Unary(u) => vec![unary(ad, y, *u, args[0])?],
        Op::Binary(b) => {
            let (l, r) = binary(ad, y, *b, args[0], args[1])?;
            vec![l, r]
        }
        Op::Select => vec![
            None,
            Some(Lin::Where(args[0])),
            Some(Lin::WhereNot(args[0])),
        ],
        Op::Compare(_) | Op::IsIn(_) => args.iter().map(|_| None).collect(),
        _ => return fail(Some(y), format!("`{}` is not elementwise", op.mnemonic())),
    })
}

/// `1 - x*x`, `x*x + 1` and the like: `x * x` then `op` with `k` on the side
/// `k_first` says.
fn square_with(ad: &mut Ad, x: Value, op: BinaryOp, k: f64, k_first: bool) -> GradResult<Value> {
    let sq = ad.mul(x, x)?;
    let k = ad.konst(ad.dtype(x), k);
    if k_first {
        ad.binary(op, k, sq)
    } else {
        ad.binary(op, sq, k)
    }
}

fn unary(ad: &mut Ad, y: Value, op: UnaryOp, x: Value) -> GradResult<Option<Lin>> {
    use UnaryOp::*;
    let dtype = ad.dtype(x);
    let k = |ad: &mut Ad, v: f64| ad.konst(dtype, v);
    Ok(Some(match op {
        Neg => Lin::Neg,
        // torch: `grad * self.sgn()`, and the sign of 0 and of NaN is 0.
        Abs => {
            let (pos, neg) = (ad.cmp_k(CmpOp::Gt, x, 0.0)?, ad.cmp_k(CmpOp::Lt, x, 0.0)?);
            let (one, minus, zero) = (k(ad, 1.0), k(ad, -1.0), k(ad, 0.0));
            let low = ad.select(neg, minus, zero)?;
            Lin::Mul(ad.select(pos, one, low)?)
        }
        Floor | Ceil | Trunc | Round => return Ok(None),
        Not | BNot => return Ok(None),
        // torch: `grad / (2 * result)`: infinite at 0.
        Sqrt => {
            let two = k(ad, 2.0);
            Lin::Div(ad.mul(two, y)?)
        }
        Sin => Lin::Mul(ad.unary(Cos, x)?),
        Cos => {
            let s = ad.unary(Sin, x)?;
            Lin::Mul(ad.unary(Neg, s)?)
        }
        // torch: `grad * (1 + result**2)`.
        Tan => Lin::Mul(square_with(ad, y, BinaryOp::Add, 1.0, true)?),
        Asin => {
            let r = square_with(ad, x, BinaryOp::Sub, 1.0, true)?;
            Lin::Div(ad.unary(Sqrt, r)?)
        }
        Acos => {
            let r = square_with(ad, x, BinaryOp::Sub, 1.0, true)?;
            let s = ad.unary(Sqrt, r)?;
            Lin::Div(ad.unary(Neg, s)?)
        }
        Atan => Lin::Div(square_with(ad, x, BinaryOp::Add, 1.0, false)?),
        Sinh => Lin::Mul(ad.unary(Cosh, x)?),
        Cosh => Lin::Mul(ad.unary(Sinh, x)?),
        // torch's `tanh_backward`: `grad * (1 - y*y)`.
        Tanh => Lin::Mul(square_with(ad, y, BinaryOp::Sub, 1.0, true)?),
        Exp => Lin::Mul(y),
        Exp2 => {
            let ln2 = k(ad, std::f64::consts::LN_2);
            Lin::Mul(ad.mul(y, ln2)?)
        }
        Expm1 => {
            let one = k(ad, 1.0);
            Lin::Mul(ad.add(y, one)?)
        }
        Log => Lin::Div(x),
        Log2 => {
            let ln2 = k(ad, std::f64::consts::LN_2);
            Lin::Div(ad.mul(x, ln2)?)
        }
        Log10 => {
            let ln10 = k(ad, std::f64::consts::LN_10);
            Lin::Div(ad.mul(x, ln10)?)
        }
        Log1p => {
            let one = k(ad, 1.0);
            Lin::Div(ad.add(x, one)?)
        }
        // d/dx x^(1/3) = 1 / (3 y^2).
        Cbrt => {
            let three = k(ad, 3.0);
            let sq = ad.mul(y, y)?;
            Lin::Div(ad.mul(three, sq)?)
        }
        Asinh => {
            let r = square_with(ad, x, BinaryOp::Add, 1.0, false)?;
            Lin::Div(ad.unary(Sqrt, r)?)
        }
        Acosh => {
            let r = square_with(ad, x, BinaryOp::Sub, 1.0, false)?;
            Lin::Div(ad.unary(Sqrt, r)?)
        }
        Atanh => Lin::Div(square_with(ad, x, BinaryOp::Sub, 1.0, true)?),
        // 2/sqrt(pi) * exp(-x*x), negated for erfc.
        Erf | Erfc => {
            let sq = ad.mul(x, x)?;
            let minus = ad.unary(Neg, sq)?;
            let e = ad.unary(Exp, minus)?;
            let c = if op == Erf {
                std::f64::consts::FRAC_2_SQRT_PI
            } else {
                -std::f64::consts::FRAC_2_SQRT_PI
            };
            let c = k(ad, c);
            Lin::Mul(ad.mul(c, e)?)
        }
    }))
}

type Pair = (Option<Lin>, Option<Lin>);

fn binary(ad: &mut Ad, y: Value, op: BinaryOp, a: Value, b: Value) -> GradResult<Pair> {
    use BinaryOp::*;
    if !ad.dtype(y).is_float() {
        return Ok((None, None));
    }
    let dtype = ad.dtype(y);
    Ok(match op {
        Add => (Some(Lin::Same), Some(Lin::Same)),
        Sub => (Some(Lin::Same), Some(Lin::Neg)),
        Mul => (Some(Lin::Mul(b)), Some(Lin::Mul(a))),
        // torch: `grad / other` and `-grad * self / (other * other)`.
        Div => {
            let bb = ad.mul(b, b)?;
            let q = ad.div(a, bb)?;
            (Some(Lin::Div(b)), Some(Lin::Mul(ad.unary(UnaryOp::Neg, q)?)))
        }
        // fmod and Python's remainder: `a - trunc(a/b)*b` and
        // `a - floor(a/b)*b` away from their jumps.
        Rem | Mod => {
            let q = ad.div(a, b)?;
            let round = if op == Rem {
                UnaryOp::Trunc
            } else {
                UnaryOp::Floor
            };
            let q = ad.unary(round, q)?;
            (Some(Lin::Same), Some(Lin::Mul(ad.unary(UnaryOp::Neg, q)?)))
        }
        FloorDiv => (None, None),
        // torch's `pow_backward_self` and `pow_backward_exponent`: 0 where
        // the exponent is 0, and for the exponent where the base is 0 and
        // the exponent not negative.
        Pow => {
            let one = ad.konst(dtype, 1.0);
            let bm1 = ad.sub(b, one)?;
            let p = ad.binary(Pow, a, bm1)?;
            let da = ad.mul(b, p)?;
            let b_zero = ad.cmp_k(CmpOp::Eq, b, 0.0)?;
            let ln = ad.unary(UnaryOp::Log, a)?;
            let db = ad.mul(y, ln)?;
            let a_zero = ad.cmp_k(CmpOp::Eq, a, 0.0)?;
            let b_pos = ad.cmp_k(CmpOp::Ge, b, 0.0)?;
            let masked = ad.binary(And, a_zero, b_pos)?;
            (
                Some(Lin::MulUnless(da, b_zero)),
                Some(Lin::MulUnless(db, masked)),
            )
        }
        // torch's `maximum`/`minimum`: the winner takes it, a tie splits it,
        // and a NaN (no order) passes it to both.
        Max | Min => {
            let tie = ad.cmp(CmpOp::Eq, a, b)?;
            let a_loses = ad.cmp(if op == Max { CmpOp::Lt } else { CmpOp::Gt }, a, b)?;
            let b_loses = ad.cmp(if op == Max { CmpOp::Gt } else { CmpOp::Lt }, a, b)?;
            (
                Some(Lin::Tie { tie, zero: a_loses }),
                Some(Lin::Tie { tie, zero: b_loses }),
            )
        }
        // torch: `grad * result / self`, 0 where `self` is 0; none to the sign.
        Copysign => {
            let r = ad.div(y, a)?;
            let a_zero = ad.cmp_k(CmpOp::Eq, a, 0.0)?;
            (Some(Lin::Mul(ad.zero_where(a_zero, r)?)), None)
        }
        // torch's `atan2_backward`: `b / (a² + b²)` and `-a / (a² + b²)`.
        Atan2 => {
            let aa = ad.mul(a, a)?;
            let bb = ad.mul(b, b)?;
            let r = ad.add(aa, bb)?;
            let da = ad.div(b, r)?;
            let na = ad.unary(UnaryOp::Neg, a)?;
            let db = ad.div(na, r)?;
            (Some(Lin::Mul(da)), Some(Lin::Mul(db)))
        }
        // torch: `grad * self / result`, `grad * other / result`.
        Hypot => (
            Some(Lin::Mul(ad.div(a, y)?)),
            Some(Lin::Mul(ad.div(b, y)?)),
        ),
        NextAfter => {
            return fail(
                Some(y),
                format!("cannot differentiate `{}`: it has no derivative (torch does not define one either)", op.name()),
            )
        }
        And | Or | Xor | BAnd | BOr | BXor | Shl | ShrArith | ShrLogical => (None, None),
    })
}

/// The local derivative of a reduction node `y = reduce(x)` with respect
/// to `x`, its values in the shape the reduction has with `keepdim` (so they
/// broadcast against `x`), and `y` in that shape. `None` for `count`.
pub(super) fn reduction_lin(ad: &mut Ad, y: Value, op: &Op, x: Value) -> GradResult<Option<Lin>> {
    let (r, axes, keepdim) = reduction(op).expect("a reduction node");
    let dtype = ad.dtype(x);
    let kept = ad.kept_shape(x, &axes);
    let y_kept = if keepdim || ad.shape(y).is_empty() {
        y
    } else {
        ad.reshape(y, &kept)?
    };
    let reduce = |ad: &mut Ad, r: ReduceOp, v: Value| -> GradResult<Value> {
        if matches!(op, Op::Reduce(_)) {
            ad.op(Op::Reduce(r), &[v])
        } else {
            ad.reduce_axes(r, v, axes.clone(), true)
        }
    };
    Ok(Some(match r {
        ReduceOp::Count => return Ok(None),
        ReduceOp::Sum => Lin::Same,
        // torch: `grad / numel`.
        ReduceOp::Mean => {
            let dims = ad.shape(x);
            let fixed: Option<u64> = axes
                .iter()
                .map(|&a| match dims[a as usize] {
                    Dim::Fixed(n) => Some(n),
                    Dim::Sym(_) => None,
                })
                .product();
            let count = match fixed {
                Some(n) => ad.konst(dtype, n as f64),
                None => {
                    let c = reduce(ad, ReduceOp::Count, x)?;
                    ad.cast(c, dtype)?
                }
            };
            Lin::Div(count)
        }
        // torch's `amax`/`amin`: an even split among the elements equal to
        // the result (`grad / count * mask`: NaN where the result is NaN).
        ReduceOp::Max | ReduceOp::Min => {
            let mask = ad.cmp(CmpOp::Eq, x, y_kept)?;
            let m = ad.cast(mask, dtype)?;
            let count = reduce(ad, ReduceOp::Sum, m)?;
            Lin::DivMul(count, m)
        }
        // torch's `prod_backward`: `result / x` without zeros; with one zero,
        // the product of the others at the zero and 0 elsewhere; with more, 0.
        ReduceOp::Prod => {
            let zero = ad.cmp_k(CmpOp::Eq, x, 0.0)?;
            let zf = ad.cast(zero, dtype)?;
            let n_zeros = reduce(ad, ReduceOp::Sum, zf)?;
            let one = ad.konst(dtype, 1.0);
            let others = ad.select(zero, one, x)?;
            let others = reduce(ad, ReduceOp::Prod, others)?;
            let none = ad.cmp_k(CmpOp::Eq, n_zeros, 0.0)?;
            let single = ad.cmp_k(CmpOp::Eq, n_zeros, 1.0)?;
            let at_single = ad.binary(BinaryOp::And, single, zero)?;
            let ratio = ad.div(y_kept, x)?;
            let lone = ad.keep_where(at_single, others)?;
            Lin::Mul(ad.select(none, ratio, lone)?)
        }
    }))
}
