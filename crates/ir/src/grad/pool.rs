//! The derivatives of `max_pool2d` and `avg_pool2d`, tap by tap. A window's
//! tap `(a, b)` over every window at once is a strided slice of `x` padded
//! with zeros, `[n, c, oh, ow]` ([`tap`]); its adjoint puts such a tensor
//! back where the tap read it: spread by the stride, shifted to the tap's
//! offset and cut to `x`'s extent ([`place`]). So:
//!
//! - average: `∂x = Σ_taps place(t / count)`, `count` the window's divisor
//!   ([`Pool2d::count`]); forward mode is the pool of the tangent;
//! - max: each window's derivative goes to one tap, torch's: the first tap
//!   (row by row) equal to the maximum, or, where the maximum is NaN, the
//!   last NaN tap (torch's CPU kernel takes a tap that is greater than the
//!   one it holds or NaN). `∂x` is an `index_add` of each window's `t` at
//!   its taken tap, window by window ([`max_by_index`]); over a symbolic
//!   batch or channels `Σ_taps place(select(taken, t, 0))`; forward mode
//!   selects the taken tap's tangent.
//!
//! The taps' contributions are added in tap order (row by row), after the
//! first (average, and max over symbolic planes).

use super::{Ad, GradResult};
use crate::entities::Value;
use crate::op::{BinaryOp, CmpOp, Op, Pool2d, PoolKind, SliceRange, TensorConst};
use crate::scalar::Scalar;
use crate::types::{DType, Dim};
use std::sync::Arc;

/// The windows of a pool or a convolution along its two spatial axes,
/// and the taps of them all at once.
pub(super) struct Windows {
    kernel: [u64; 2],
    stride: [u64; 2],
    dilation: [u64; 2],
    /// `x`'s extents.
    extent: [u64; 2],
    /// The windows along each axis.
    windows: [u64; 2],
    /// Zeros before `x` in the tensor the taps are cut from (the padding
    /// in front) and after it (as many as the last window's last tap
    /// needs).
    before: [u64; 2],
    after: [u64; 2],
}

impl Windows {
    /// The windows of `kernel` over `x`'s plane that give `y`'s (both
    /// `[n, c, .., ..]`), with `stride`, `dilation` and `padding` (`[top,
    /// bottom, left, right]`).
    pub(super) fn new(
        ad: &Ad,
        (x, y): (Value, Value),
        kernel: [u64; 2],
        (stride, dilation, padding): ([u32; 2], [u32; 2], [u32; 4]),
    ) -> GradResult<Windows> {
        let fixed = |v: Value, axis: usize| match ad.shape(v)[axis] {
            Dim::Fixed(n) => Ok(n),
            Dim::Sym(_) => super::fail(
                ad.at,
                "cannot differentiate a window op over a symbolic plane".to_string(),
            ),
        };
        let mut w = Windows {
            kernel,
            stride: stride.map(u64::from),
            dilation: dilation.map(u64::from),
            extent: [0; 2],
            windows: [0; 2],
            before: [0; 2],
            after: [0; 2],
        };
        for axis in 0..2 {
            let (h, o) = (fixed(x, 2 + axis)?, fixed(y, 2 + axis)?);
            let front = u64::from(padding[2 * axis]);
            // The last tap of the last window, in padded coordinates.
            let reach = (o - 1) * w.stride[axis] + (kernel[axis] - 1) * w.dilation[axis] + 1;
            w.extent[axis] = h;
            w.windows[axis] = o;
            w.before[axis] = front;
            w.after[axis] = reach.saturating_sub(front + h);
        }
        Ok(w)
    }

    fn of_pool(ad: &Ad, x: Value, y: Value, attrs: &Pool2d) -> GradResult<Windows> {
        let kernel = attrs.kernel.map(u64::from);
        Windows::new(
            ad,
            (x, y),
            kernel,
            (attrs.stride, attrs.dilation, attrs.padding),
        )
    }

    /// Where tap `a` of window `o` reads along `axis`, `x`'s first element
    /// at 0 (negative in the padding in front).
    fn at(&self, axis: usize, o: u64, a: u64) -> i64 {
        (o * self.stride[axis] + a * self.dilation[axis]) as i64 - self.before[axis] as i64
    }

    /// The windows along each axis.
    pub(super) fn count(&self) -> [u64; 2] {
        self.windows
    }

    /// `x` padded with zeros as the taps need it.
    pub(super) fn padded(&self, ad: &mut Ad, x: Value) -> GradResult<Value> {
        let mut p = x;
        for axis in 0..2 {
            let (before, after) = (self.before[axis] as i64, self.after[axis] as i64);
            p = ad.pad(p, 2 + axis, before, after)?;
        }
        Ok(p)
    }

    /// Tap `(a, b)` of every window of the padded `p`: `[n, c, oh, ow]`.
    pub(super) fn tap(&self, ad: &mut Ad, p: Value, ab: [u64; 2]) -> GradResult<Value> {
        let mut ranges = vec![None, None];
        for (axis, a) in ab.into_iter().enumerate() {
            let start = a * self.dilation[axis];
            ranges.push(Some(SliceRange {
                start,
                stop: start + (self.windows[axis] - 1) * self.stride[axis] + 1,
                step: self.stride[axis] as i64,
            }));
        }
        ad.op(Op::Slice(ranges), &[p])
    }

    /// The adjoint of [`Self::tap`] followed by the cut of the padding:
    /// `c` (`[n, c, oh, ow]`) put where tap `(a, b)` read `x`, zeros
    /// elsewhere, `x`'s shape.
    fn place(&self, ad: &mut Ad, c: Value, ab: [u64; 2]) -> GradResult<Value> {
        let mut v = c;
        for (axis, a) in ab.into_iter().enumerate() {
            v = ad.spread(v, 2 + axis, self.stride[axis])?;
            let len = ((self.windows[axis] - 1) * self.stride[axis] + 1) as i64;
            let first = self.at(axis, 0, a);
            let after = self.extent[axis] as i64 - first - len;
            v = ad.pad(v, 2 + axis, first, after)?;
        }
        Ok(v)
    }

    /// The taps of a window, row by row.
    pub(super) fn taps(&self) -> Vec<[u64; 2]> {
        let [kh, kw] = self.kernel;
        (0..kh).flat_map(|a| (0..kw).map(move |b| [a, b])).collect()
    }
}

/// A constant `[oh, ow]` tensor of `f(oy, ox)`.
fn plane(
    ad: &mut Ad,
    geo: &Windows,
    dtype: DType,
    f: impl Fn(u64, u64) -> Scalar,
) -> GradResult<Value> {
    let [oh, ow] = geo.windows;
    let values = (0..oh).flat_map(|i| (0..ow).map(move |j| (i, j)));
    let values = values.map(|(i, j)| f(i, j)).collect();
    let t = TensorConst {
        dtype,
        dims: vec![oh, ow],
        values,
    };
    ad.op(Op::Tensor(Arc::new(t)), &[])
}

/// Each window's index within its plane (`row * width + column`) of tap
/// `ab`; for a tap in the padding, a number that may be another tap's.
fn tap_index(ad: &mut Ad, geo: &Windows, ab: [u64; 2]) -> GradResult<Value> {
    let width = geo.extent[1] as i64;
    plane(ad, geo, DType::I64, |i, j| {
        Scalar::I64(geo.at(0, i, ab[0]) * width + geo.at(1, j, ab[1]))
    })
}

/// Whether tap `ab` of each window is inside `x`, where some is not.
fn inside(ad: &mut Ad, geo: &Windows, ab: [u64; 2]) -> GradResult<Option<Value>> {
    let within = |axis: usize, o: u64| {
        let at = geo.at(axis, o, ab[axis]);
        at >= 0 && at < geo.extent[axis] as i64
    };
    let all =
        (0..geo.windows[0]).all(|i| within(0, i)) && (0..geo.windows[1]).all(|j| within(1, j));
    if all {
        return Ok(None);
    }
    let mask = plane(ad, geo, DType::Bool, |i, j| {
        Scalar::Bool(within(0, i) && within(1, j))
    })?;
    Ok(Some(mask))
}

/// A max pool's taps over every window, built once for the taken index
/// and the flags derived from it: each tap's values (`[n, c, oh, ow]`,
/// of `x` padded with zeros), its index within the plane, and whether it
/// is inside `x` where some window's is not.
struct Taps {
    values: Vec<Value>,
    at: Vec<Value>,
    inside: Vec<Option<Value>>,
}

impl Taps {
    fn of(ad: &mut Ad, x: Value, geo: &Windows) -> GradResult<Taps> {
        let p = geo.padded(ad, x)?;
        let mut taps = Taps {
            values: Vec::new(),
            at: Vec::new(),
            inside: Vec::new(),
        };
        for ab in geo.taps() {
            taps.values.push(geo.tap(ad, p, ab)?);
            taps.at.push(tap_index(ad, geo, ab)?);
            taps.inside.push(inside(ad, geo, ab)?);
        }
        Ok(taps)
    }
}

/// Each window's taken tap of a max pool `y` of `x`, as its index within
/// the plane (`[n, c, oh, ow]` `i64`): the first tap (row by row) inside
/// `x` equal to the maximum (`-0.0` equals `0.0`), or, where the maximum
/// is NaN, the last NaN tap (torch's CPU kernel takes a tap that is
/// greater than the one it holds or NaN). Nested selects, each tap's
/// comparison reading only its own tap and `y`: one loop, where flags
/// made exclusive tap by tap were a chain of values each read twice,
/// each stored on its own.
fn taken_index(ad: &mut Ad, x: Value, y: Value, taps: &Taps) -> GradResult<Value> {
    let mut first = ad.b.constant(Scalar::I64(0));
    let mut last_nan = first;
    let each = || taps.values.iter().zip(&taps.at).zip(&taps.inside);
    // The first equal tap outermost: built from the last tap out.
    for ((&xt, &at), &inside) in each().rev() {
        let mut eq = ad.cmp(CmpOp::Eq, xt, y)?;
        if let Some(inside) = inside {
            eq = ad.binary(BinaryOp::And, eq, inside)?;
        }
        first = ad.select(eq, at, first)?;
    }
    if !ad.dtype(x).is_float() {
        return Ok(first);
    }
    // The last NaN tap outermost: built from the first tap on. Zeros of
    // the padding are never NaN.
    for ((&xt, &at), _) in each() {
        let nan = ad.cmp(CmpOp::Ne, xt, xt)?;
        last_nan = ad.select(nan, at, last_nan)?;
    }
    let y_nan = ad.cmp(CmpOp::Ne, y, y)?;
    ad.select(y_nan, last_nan, first)
}

/// For each tap of a max pool `y` of `x`, whether the window's derivative
/// goes to it (`[n, c, oh, ow]` bools, one true per window).
fn taken(ad: &mut Ad, x: Value, y: Value, geo: &Windows) -> GradResult<Vec<Value>> {
    let taps = Taps::of(ad, x, geo)?;
    let index = taken_index(ad, x, y, &taps)?;
    let mut flags = Vec::new();
    for (&at, &inside) in taps.at.iter().zip(&taps.inside) {
        let mut flag = ad.cmp(CmpOp::Eq, index, at)?;
        // A tap in the padding past a row's end has the index of the next
        // row's first element, which the window may take.
        if let Some(inside) = inside {
            flag = ad.binary(BinaryOp::And, flag, inside)?;
        }
        flags.push(flag);
    }
    Ok(flags)
}

/// Each window's divisor, `[oh, ow]` in `dtype`.
fn counts(ad: &mut Ad, attrs: &Pool2d, geo: &Windows, dtype: DType) -> GradResult<Value> {
    let scalar = |n: u64| match dtype {
        DType::F32 => Scalar::F32(n as f32),
        _ => Scalar::F64(n as f64),
    };
    let count = |axis: usize, o: u64| attrs.count(axis, geo.extent[axis], geo.at(axis, o, 0));
    plane(ad, geo, dtype, |i, j| scalar(count(0, i) * count(1, j)))
}

/// `∂x` of `y = pool2d(x)` for `y`'s full adjoint `g`.
pub(super) fn adjoint(
    ad: &mut Ad,
    x: Value,
    y: Value,
    attrs: &Pool2d,
    g: Value,
) -> GradResult<Value> {
    if attrs.kind == PoolKind::Max {
        if let Some(dx) = max_by_index(ad, x, y, attrs, g)? {
            return Ok(dx);
        }
    }
    let geo = Windows::of_pool(ad, x, y, attrs)?;
    let parts = match attrs.kind {
        PoolKind::Avg => {
            let count = counts(ad, attrs, &geo, ad.dtype(g))?;
            let each = ad.div(g, count)?;
            vec![each; geo.taps().len()]
        }
        PoolKind::Max => {
            let mut parts = Vec::new();
            for t in taken(ad, x, y, &geo)? {
                parts.push(ad.keep_where(t, g)?);
            }
            parts
        }
    };
    let mut sum: Option<Value> = None;
    for (c, ab) in parts.into_iter().zip(geo.taps()) {
        let c = geo.place(ad, c, ab)?;
        sum = Some(match sum {
            Some(s) => ad.add(s, c)?,
            None => c,
        });
    }
    Ok(sum.expect("a window has a tap"))
}

/// `∂x` of a max pool `y` of `x` for `y`'s adjoint `g` where `x`'s planes
/// are counted (a fixed batch and channels): each window's `g` added to
/// its taken tap's element, window by window in row-major order over `[n,
/// c, oh, ow]`, one `index_add` into the flattened zeros at
/// [`indices`] plus each plane's start, which is how torch's CPU kernel
/// adds them. One gather-like loop where the taps put back one at a time
/// were a few hundred layout nodes (a 3×3 pool of stride 2 compiled for
/// seconds on the LLVM tier). `None` for a symbolic batch or channels.
fn max_by_index(
    ad: &mut Ad,
    x: Value,
    y: Value,
    attrs: &Pool2d,
    g: Value,
) -> GradResult<Option<Value>> {
    let Some(planes) = counted(&ad.shape(x)) else {
        return Ok(None);
    };
    let index = indices(ad, x, y, attrs)?;
    scatter_to_planes(ad, planes, index, g).map(Some)
}

/// `[n, c, h, w]` where every extent of a pool's input is fixed.
pub(super) fn counted(shape: &[Dim]) -> Option<[u64; 4]> {
    match shape[..] {
        [Dim::Fixed(n), Dim::Fixed(c), Dim::Fixed(h), Dim::Fixed(w)] => Some([n, c, h, w]),
        _ => None,
    }
}

/// `g` (`[n, c, oh, ow]`) added into zeros of `[n, c, h, w]` at `index`,
/// each element's index within its plane, in row-major order over `g`: a
/// max pool's adjoint from its indices.
pub(super) fn scatter_to_planes(
    ad: &mut Ad,
    [n, c, h, w]: [u64; 4],
    index: Value,
    g: Value,
) -> GradResult<Value> {
    // Each plane's first element in the flattened `x`: `(i * c + j) * h * w`
    // for batch `i` and channel `j`, as a `[n, 1, 1, 1]` and a `[1, c, 1, 1]`
    // constant.
    let plane = h.saturating_mul(w);
    let starts = |ad: &mut Ad, count: u64, step: u64, axis: usize| {
        let mut dims = vec![1; 4];
        dims[axis] = count;
        let values = (0..count)
            .map(|i| Scalar::I64(i.saturating_mul(step) as i64))
            .collect();
        let t = TensorConst {
            dtype: DType::I64,
            dims,
            values,
        };
        ad.op(Op::Tensor(Arc::new(t)), &[])
    };
    let batch = starts(ad, n, c.saturating_mul(plane), 0)?;
    let channel = starts(ad, c, plane, 1)?;
    let index = ad.add(index, batch)?;
    let index = ad.add(index, channel)?;
    let total = n.saturating_mul(c).saturating_mul(plane);
    let zeros = ad.zeros(ad.dtype(g), &vec![Dim::Fixed(total)])?;
    let dx = ad.op(Op::IndexAdd(0), &[zeros, index, g])?;
    ad.reshape(dx, &[n, c, h, w].map(Dim::Fixed).to_vec())
}

/// The tangent of `y = pool2d(x)` for `x`'s full tangent `t`.
pub(super) fn tangent(
    ad: &mut Ad,
    x: Value,
    y: Value,
    attrs: &Pool2d,
    t: Value,
) -> GradResult<Value> {
    if attrs.kind == PoolKind::Avg {
        return ad.op(Op::Pool2d(*attrs), &[t]);
    }
    let geo = Windows::of_pool(ad, x, y, attrs)?;
    let taken = taken(ad, x, y, &geo)?;
    let p = geo.padded(ad, t)?;
    // Nested selects, last tap innermost: exactly the taken tap's tangent.
    let mut out = ad.zeros(ad.dtype(t), &ad.shape(y))?;
    for (flag, ab) in taken.into_iter().zip(geo.taps()).rev() {
        let tt = geo.tap(ad, p, ab)?;
        out = ad.select(flag, tt, out)?;
    }
    Ok(out)
}

/// For each window of the max pool `y` of `x`, the index within its plane
/// (`row * width + column`) of the tap its derivative goes to: torch's
/// `max_pool2d_with_indices`' indices, `i64`.
pub(super) fn indices(ad: &mut Ad, x: Value, y: Value, attrs: &Pool2d) -> GradResult<Value> {
    let geo = Windows::of_pool(ad, x, y, attrs)?;
    let taps = Taps::of(ad, x, &geo)?;
    taken_index(ad, x, y, &taps)
}
