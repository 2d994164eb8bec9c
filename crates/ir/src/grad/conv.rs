//! The adjoint of `conv2d`, in `conv2d`s: for `y = conv2d(x, w)` with the
//! adjoint `g` of `y`, `∂x` is `g` spread by the stride, padded, and
//! convolved with `w` flipped and its channel axes swapped (a transposed
//! convolution, dilated as the forward one); `∂w` is `x` convolved with
//! `g`, batch and channel axes swapped, the stride and the dilation
//! trading places. Groups stay groups: the swaps happen within each
//! (`conv2d`'s `groups` carries over). Both are sums in the order `conv2d` folds them
//! (docs/semantics.md), so every tier gives the same bits.

use super::pool::Windows;
use super::{fail, Ad, GradResult};
use crate::entities::Value;
use crate::op::{Conv2d, Op, SliceRange};
use crate::types::Dim;

/// `(∂x, ∂w)` of `y = conv2d(x, w)` for `y`'s full adjoint `g`, each when
/// asked for.
pub(super) fn conv2d(
    ad: &mut Ad,
    x: Value,
    w: Value,
    attrs: &Conv2d,
    g: Value,
    want_x: bool,
    want_w: bool,
) -> GradResult<(Option<Value>, Option<Value>)> {
    let dx = if want_x {
        Some(input_adjoint(ad, x, w, attrs, g)?)
    } else {
        None
    };
    let dw = if want_w {
        Some(weight_adjoint(ad, x, w, attrs, g)?)
    } else {
        None
    };
    Ok((dx, dw))
}

fn fixed(ad: &Ad, v: Value, axis: usize) -> GradResult<u64> {
    match ad.shape(v)[axis] {
        Dim::Fixed(n) => Ok(n),
        Dim::Sym(_) => fail(
            ad.at,
            "cannot differentiate `conv2d`'s weights over a symbolic batch".to_string(),
        ),
    }
}

/// `∂x[n, c, h, w] = Σ_{o,a,b} G[n, o, h + pt - a·d, ..] · w[o, c, a, b]`,
/// `G` being `g` spread by the stride: a convolution of `G` padded by
/// `(k-1)·d - pt` in front with `w` flipped, `[c, o, kh, kw]`, dilation `d`.
fn input_adjoint(ad: &mut Ad, x: Value, w: Value, attrs: &Conv2d, g: Value) -> GradResult<Value> {
    let mut spread = g;
    for axis in 0..2 {
        let (h, k) = (
            fixed(ad, x, 2 + axis)? as i64,
            fixed(ad, w, 2 + axis)? as i64,
        );
        let (s, d) = (
            u64::from(attrs.stride[axis]),
            i64::from(attrs.dilation[axis]),
        );
        let front = i64::from(attrs.padding[2 * axis]);
        spread = ad.spread(spread, 2 + axis, s)?;
        let len = fixed(ad, spread, 2 + axis)? as i64;
        // The convolution's output is `len + before + after - (k-1)·d`
        // long, which must be `h`.
        let before = (k - 1) * d - front;
        let after = h - len + front;
        spread = ad.pad(spread, 2 + axis, before, after)?;
    }
    // w [o, c/G, kh, kw] -> [c, o/G, kh, kw] (within each of the G groups,
    // its output and input channels trade places), flipped along kh and kw.
    let groups = u64::from(attrs.groups);
    let (o, per_group) = (fixed(ad, w, 0)?, fixed(ad, w, 1)?);
    let (kh, kw) = (fixed(ad, w, 2)?, fixed(ad, w, 3)?);
    let swapped = if groups == 1 {
        ad.op(Op::Transpose(vec![1, 0, 2, 3]), &[w])?
    } else {
        let split = [groups, o / groups, per_group, kh, kw].map(Dim::Fixed);
        let split = ad.reshape(w, &split.to_vec())?;
        let swapped = ad.op(Op::Transpose(vec![0, 2, 1, 3, 4]), &[split])?;
        let merged = [groups * per_group, o / groups, kh, kw].map(Dim::Fixed);
        ad.reshape(swapped, &merged.to_vec())?
    };
    let flip = |k| {
        Some(SliceRange {
            start: 0,
            stop: k,
            step: -1,
        })
    };
    let flipped = ad.op(Op::Slice(vec![None, None, flip(kh), flip(kw)]), &[swapped])?;
    let back = Conv2d {
        stride: [1, 1],
        padding: [0; 4],
        dilation: attrs.dilation,
        groups: attrs.groups,
    };
    ad.op(Op::Conv2d(back), &[spread, flipped])
}

/// `∂w[o, c, a, b] = Σ_{n,i,j} g[n, o, i, j] · x̂[n, c', i·s + a·d - pt, ..]`
/// (`c'` is input channel `c` of `o`'s group): a convolution of `x` as
/// `[c/G, G·n, h, w]` (group `q`'s channel `c` of batch row `n` at
/// `[c, q·n_total + n]`) with `g` as `[o, n, oh, ow]` in the forward's `G`
/// groups, stride `d` and dilation `s`, the forward padding, cut to
/// `[kh, kw]`. With one group that is `x` as `[c, n, h, w]`.
fn weight_adjoint(ad: &mut Ad, x: Value, w: Value, attrs: &Conv2d, g: Value) -> GradResult<Value> {
    let n = fixed(ad, x, 0)?;
    let groups = u64::from(attrs.groups);
    let (o, per_group) = (fixed(ad, w, 0)?, fixed(ad, w, 1)?);
    if (o / groups) * per_group >= TAPS_AS_MATMUL {
        return weight_adjoint_by_taps(ad, x, w, attrs, g);
    }
    let xt = if attrs.groups == 1 {
        ad.op(Op::Transpose(vec![1, 0, 2, 3]), &[x])?
    } else {
        let (h, wd) = (fixed(ad, x, 2)?, fixed(ad, x, 3)?);
        let split = [n, groups, per_group, h, wd].map(Dim::Fixed);
        let split = ad.reshape(x, &split.to_vec())?;
        let swapped = ad.op(Op::Transpose(vec![2, 1, 0, 3, 4]), &[split])?;
        let merged = [per_group, groups * n, h, wd].map(Dim::Fixed);
        ad.reshape(swapped, &merged.to_vec())?
    };
    let gt = ad.op(Op::Transpose(vec![1, 0, 2, 3]), &[g])?;
    let swapped = Conv2d {
        stride: attrs.dilation,
        padding: attrs.padding,
        dilation: attrs.stride,
        groups: attrs.groups,
    };
    let mut dw = ad.op(Op::Conv2d(swapped), &[xt, gt])?;
    for axis in 2..4 {
        let k = fixed(ad, w, axis)?;
        if fixed(ad, dw, axis)? != k {
            dw = ad.crop(dw, axis, 0, k)?;
        }
    }
    // [c/G, o, kh, kw] -> [o, c/G, kh, kw]
    ad.op(Op::Transpose(vec![1, 0, 2, 3]), &[dw])
}

/// The output × input channels of a group from which [`weight_adjoint`]
/// is a matmul per tap ([`weight_adjoint_by_taps`]) rather than one
/// convolution: that convolution's kernel is `g`'s whole plane and its
/// output the few taps of `w`, which the convolution nests run at a
/// fraction of a matmul's speed (ResNet-18's training step spent about
/// half its time there), while a depthwise layer's matmuls would be dot
/// products.
const TAPS_AS_MATMUL: u64 = 16;

/// [`weight_adjoint`] as matmuls: for each tap `(a, b)`, `∂w[.., .., a, b]`
/// is `g` as `[G, o/G, n·oh·ow]` times the tap's strided slice of `x`
/// (padded with zeros) as `[G, n·oh·ow, c/G]`. Each sum runs over `n`,
/// then `i`, then `j`: the order of the convolution it replaces.
fn weight_adjoint_by_taps(
    ad: &mut Ad,
    x: Value,
    w: Value,
    attrs: &Conv2d,
    g: Value,
) -> GradResult<Value> {
    let groups = u64::from(attrs.groups);
    let [n, c] = [0, 1].map(|a| fixed(ad, x, a));
    let [o, per_group, kh, kw] = [0, 1, 2, 3].map(|a| fixed(ad, w, a));
    let (n, c, o, per_group) = (n?, c?, o?, per_group?);
    let kernel = [kh?, kw?];
    let geometry = (attrs.stride, attrs.dilation, attrs.padding);
    let windows = Windows::new(ad, (x, g), kernel, geometry)?;
    let [oh, ow] = windows.count();
    let rows = n * oh * ow;
    // Each tap [n, c, oh, ow] -> [n, G, c/G, oh, ow] -> [1, G, n, oh, ow, c/G]:
    // all of them [T, G, n·oh·ow, c/G].
    let xp = windows.padded(ad, x)?;
    let mut taps = Vec::new();
    for ab in windows.taps() {
        let tap = windows.tap(ad, xp, ab)?;
        let split = [n, groups, c / groups, oh, ow].map(Dim::Fixed);
        let split = ad.reshape(tap, &split.to_vec())?;
        let moved = ad.op(Op::Transpose(vec![1, 0, 3, 4, 2]), &[split])?;
        let flat = [1, groups, rows, c / groups].map(Dim::Fixed);
        taps.push(ad.reshape(moved, &flat.to_vec())?);
    }
    let taps = if taps.len() == 1 {
        taps[0]
    } else {
        ad.op(Op::Concat(0), &taps)?
    };
    // g [n, o, oh, ow] -> [G, o/G, n, oh, ow] -> [G, o/G, n·oh·ow].
    let split = [n, groups, o / groups, oh, ow].map(Dim::Fixed);
    let split = ad.reshape(g, &split.to_vec())?;
    let moved = ad.op(Op::Transpose(vec![1, 2, 0, 3, 4]), &[split])?;
    let gm = ad.reshape(moved, &[groups, o / groups, rows].map(Dim::Fixed).to_vec())?;
    // [T, G, o/G, c/G] -> [G, o/G, c/G, T] -> [o, c/G, kh, kw].
    let dw = ad.op(Op::MatMul, &[gm, taps])?;
    let dw = ad.op(Op::Transpose(vec![1, 2, 3, 0]), &[dw])?;
    ad.reshape(
        dw,
        &[o, per_group, kernel[0], kernel[1]]
            .map(Dim::Fixed)
            .to_vec(),
    )
}
