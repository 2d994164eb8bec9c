//! TensorFlow's convolutional ops: `Conv2D`, `DepthwiseConv2dNative`,
//! `MaxPool`, `AvgPool`, `FusedBatchNorm`/`V2`/`V3` (inference), `Pad`.
//! NHWC (TF's default) is transposed to kiln's NCHW around each window op
//! (views; a transpose back and forth is not written); `data_format:
//! "NCHW"` is taken as it is. `padding` is `VALID`, `SAME` (TF's rule: the
//! extra row or column after) or `EXPLICIT` (`explicit_paddings`).

use super::{const_ints, te, Tf};
use crate::cnn::{self, BatchNorm, Layout};
use crate::tf::proto::{attr_value::Value as AV, NodeDef};
use kiln_ir::{Conv2d, Dim, Op, Pool2d, PoolKind, Scalar, Value};

/// The node's `data_format`: NHWC unless it says NCHW.
fn layout(n: &NodeDef) -> Result<Layout, String> {
    match n.attr.get("data_format").and_then(|v| v.value.as_ref()) {
        None => Ok(Layout::Nhwc),
        Some(AV::S(s)) if s.as_slice() == b"NHWC" => Ok(Layout::Nhwc),
        Some(AV::S(s)) if s.as_slice() == b"NCHW" => Ok(Layout::Nchw),
        Some(AV::S(s)) => Err(format!(
            "unsupported data_format {:?}",
            String::from_utf8_lossy(s)
        )),
        Some(_) => Err("attr `data_format` must be a string".into()),
    }
}

/// A list-of-ints attr with one entry per axis of a 4-D tensor, as the
/// spatial pair `[h, w]` (the batch and channel entries must be 1).
fn spatial(n: &NodeDef, key: &str, layout: Layout, default: u32) -> Result<[u32; 2], String> {
    let list = match n.attr.get(key).and_then(|v| v.value.as_ref()) {
        None => return Ok([default, default]),
        Some(AV::List(l)) if l.i.is_empty() => return Ok([default, default]),
        Some(AV::List(l)) => l.i.clone(),
        Some(_) => return Err(format!("attr `{key}` must be a list of ints")),
    };
    let [a, b, c, d] = list[..] else {
        return Err(format!(
            "attr `{key}` must have 4 entries, has {}",
            list.len()
        ));
    };
    let (batch, channel, h, w) = match layout {
        Layout::Nhwc => (a, d, b, c),
        Layout::Nchw => (a, b, c, d),
    };
    if batch != 1 || channel != 1 {
        return Err(format!(
            "unsupported: attr `{key}` {list:?} moves along the batch or channel axis"
        ));
    }
    let conv = |k: i64| {
        u32::try_from(k)
            .ok()
            .filter(|&k| k >= 1)
            .ok_or_else(|| format!("attr `{key}` {list:?}: entries must be positive"))
    };
    Ok([conv(h)?, conv(w)?])
}

/// `[top, bottom, left, right]` for `padding` over an NCHW input of `hw`
/// with windows of `taps`, `stride`, `dilation`.
fn padding(
    n: &NodeDef,
    layout: Layout,
    hw: [u64; 2],
    taps: [u64; 2],
    stride: [u32; 2],
    dilation: [u32; 2],
) -> Result<[u32; 4], String> {
    let mode = match n.attr.get("padding").and_then(|v| v.value.as_ref()) {
        Some(AV::S(s)) => s.clone(),
        _ => return Err("missing attr `padding`".into()),
    };
    let narrow = |v: u64| u32::try_from(v).map_err(|_| "padding too large".to_string());
    match mode.as_slice() {
        b"VALID" => Ok([0; 4]),
        b"SAME" => {
            let mut out = [0; 4];
            for axis in 0..2 {
                let (before, after) = cnn::same_padding(
                    hw[axis],
                    taps[axis],
                    u64::from(stride[axis]),
                    u64::from(dilation[axis]),
                );
                out[2 * axis] = narrow(before)?;
                out[2 * axis + 1] = narrow(after)?;
            }
            Ok(out)
        }
        b"EXPLICIT" => {
            let list = match n
                .attr
                .get("explicit_paddings")
                .and_then(|v| v.value.as_ref())
            {
                Some(AV::List(l)) => l.i.clone(),
                _ => return Err("EXPLICIT padding without `explicit_paddings`".into()),
            };
            if list.len() != 8 || list.iter().any(|&p| p < 0) {
                return Err(format!(
                    "`explicit_paddings` must be 8 non-negative ints, got {list:?}"
                ));
            }
            let (h, w) = match layout {
                Layout::Nhwc => (2, 4),
                Layout::Nchw => (4, 6),
            };
            if list
                .iter()
                .enumerate()
                .any(|(i, &p)| p != 0 && i != h && i != h + 1 && i != w && i != w + 1)
            {
                return Err(format!(
                    "unsupported: padding of the batch or channel axis ({list:?})"
                ));
            }
            let u = |i: usize| narrow(list[i] as u64);
            Ok([u(h)?, u(h + 1)?, u(w)?, u(w + 1)?])
        }
        other => Err(format!(
            "unknown padding {:?}",
            String::from_utf8_lossy(other)
        )),
    }
}

impl Tf<'_> {
    fn fixed_dims(&self, v: Value) -> Result<Vec<u64>, String> {
        let t = self.b.ty(v).as_tensor().ok_or("a selection")?;
        t.shape
            .iter()
            .map(|d| match d {
                Dim::Fixed(n) => Ok(*n),
                Dim::Sym(s) => Err(format!("a tensor of symbolic extent `{s}`")),
            })
            .collect()
    }

    /// `x` in NCHW, and its spatial extents.
    fn nchw(&mut self, x: Value, layout: Layout) -> Result<(Value, [u64; 2]), String> {
        let x = match layout {
            Layout::Nhwc => cnn::to_nchw(&mut self.b, x)?,
            Layout::Nchw => x,
        };
        let shape = self
            .b
            .ty(x)
            .as_tensor()
            .map(|t| t.shape.clone())
            .unwrap_or_default();
        let extent = |d: Option<&Dim>| match d {
            Some(Dim::Fixed(n)) => Ok(*n),
            _ => Err(format!(
                "a 4-D input with fixed spatial extents, got {}",
                self.b.ty(x)
            )),
        };
        Ok((x, [extent(shape.get(2))?, extent(shape.get(3))?]))
    }

    /// `y` (NCHW) back in the node's layout.
    fn back(&mut self, y: Value, layout: Layout) -> Result<Value, String> {
        match layout {
            Layout::Nhwc => cnn::to_nhwc(&mut self.b, y),
            Layout::Nchw => Ok(y),
        }
    }

    /// `Conv2D(input, filter)` with a filter `[kh, kw, in, out]`, and
    /// `DepthwiseConv2dNative(input, filter)` with a filter `[kh, kw, in,
    /// multiplier]` (output channel `c * multiplier + m`).
    pub(super) fn conv(&mut self, n: &NodeDef, a: &[Value]) -> Result<Value, String> {
        let layout = layout(n)?;
        let stride = spatial(n, "strides", layout, 1)?;
        let dilation = spatial(n, "dilations", layout, 1)?;
        let dims = self.fixed_dims(a[1])?;
        let [kh, kw, cin, cout] = dims[..] else {
            return Err(format!(
                "a filter [kh, kw, in, out], got {}",
                self.b.ty(a[1])
            ));
        };
        let (x, hw) = self.nchw(a[0], layout)?;
        let b = &mut self.b;
        let depthwise = n.op == "DepthwiseConv2dNative";
        // OIHW weights: transposed (and for a depthwise filter, its in and
        // multiplier axes merged first); constant folding moves them once.
        let (w, groups) = if depthwise {
            let merged = vec![Dim::Fixed(kh), Dim::Fixed(kw), Dim::Fixed(cin * cout)];
            let w = b.op(Op::Reshape(merged), &[a[1]]).map_err(te)?;
            let w = b.op(Op::Transpose(vec![2, 0, 1]), &[w]).map_err(te)?;
            let shape = vec![
                Dim::Fixed(cin * cout),
                Dim::Fixed(1),
                Dim::Fixed(kh),
                Dim::Fixed(kw),
            ];
            let w = b.op(Op::Reshape(shape), &[w]).map_err(te)?;
            let groups = u32::try_from(cin).map_err(|_| "too many channels")?;
            (w, groups)
        } else {
            let w = b.op(Op::Transpose(vec![3, 2, 0, 1]), &[a[1]]).map_err(te)?;
            // Input channels / filter's `in`: groups (TF's grouped Conv2D).
            let chans = match b.ty(x).as_tensor().and_then(|t| t.shape.get(1).cloned()) {
                Some(Dim::Fixed(c)) => c,
                _ => return Err("an input of unknown channels".into()),
            };
            if cin == 0 || chans % cin != 0 {
                return Err(format!("{chans} input channels for a filter of {cin}"));
            }
            (
                w,
                u32::try_from(chans / cin).map_err(|_| "too many groups")?,
            )
        };
        let pad = padding(n, layout, hw, [kh, kw], stride, dilation)?;
        let attrs = Conv2d {
            stride,
            padding: pad,
            dilation,
            groups,
        };
        let y = cnn::conv2d(b, x, w, None, attrs)?;
        self.back(y, layout)
    }

    /// `MaxPool` and `AvgPool` (`ksize`, `strides`, `padding`): TF's average
    /// divides by the taps inside the input.
    pub(super) fn pool(&mut self, n: &NodeDef, a: &[Value]) -> Result<Value, String> {
        let layout = layout(n)?;
        let kernel = spatial(n, "ksize", layout, 1)?;
        let stride = spatial(n, "strides", layout, 1)?;
        let (x, hw) = self.nchw(a[0], layout)?;
        let taps = [u64::from(kernel[0]), u64::from(kernel[1])];
        let pad = padding(n, layout, hw, taps, stride, [1, 1])?;
        let pool = Pool2d {
            kind: if n.op == "MaxPool" {
                PoolKind::Max
            } else {
                PoolKind::Avg
            },
            kernel,
            stride,
            padding: pad,
            dilation: [1, 1],
            ceil_mode: false,
            count_include_pad: false,
        };
        let y = self.b.op(Op::Pool2d(pool), &[x]).map_err(te)?;
        self.back(y, layout)
    }

    /// `FusedBatchNorm`/`V2`/`V3(x, scale, offset, mean, variance)` in
    /// inference (`is_training` false): its first output.
    pub(super) fn batch_norm(&mut self, n: &NodeDef, a: &[Value]) -> Result<Value, String> {
        if matches!(
            n.attr.get("is_training").and_then(|v| v.value.as_ref()),
            Some(AV::B(true))
        ) {
            return Err(
                "unsupported: batch norm in training mode (freeze the graph for inference)".into(),
            );
        }
        let layout = layout(n)?;
        let eps = super::attr_float(n, "epsilon", 1e-4)?;
        let p = BatchNorm {
            gamma: Some(a[1]),
            beta: Some(a[2]),
            mean: a[3],
            var: a[4],
            eps,
        };
        cnn::batch_norm(&mut self.b, a[0], &p, layout)
    }

    /// `Pad(input, paddings)` with constant `paddings` `[rank, 2]`: zeros
    /// around the input, as a concatenation with zero tensors per axis.
    pub(super) fn pad(&mut self, a: &[Value]) -> Result<Value, String> {
        let pads = const_ints(&self.b, a[1])?;
        let dims = self.fixed_dims(a[0])?;
        if pads.len() != 2 * dims.len() || pads.iter().any(|&p| p < 0) {
            return Err(format!(
                "`Pad` of a rank-{} tensor needs [{}, 2] non-negative paddings, got {pads:?}",
                dims.len(),
                dims.len()
            ));
        }
        let dtype = crate::eltwise::dtype(&self.b, a[0]);
        let mut x = a[0];
        let mut shape = dims.clone();
        for axis in 0..dims.len() {
            let (before, after) = (pads[2 * axis] as u64, pads[2 * axis + 1] as u64);
            if before == 0 && after == 0 {
                continue;
            }
            let mut parts = Vec::new();
            for (count, first) in [(before, true), (after, false)] {
                if count == 0 {
                    continue;
                }
                let mut zeros = shape.clone();
                zeros[axis] = count;
                let size: u64 = zeros.iter().product();
                if size > 1 << 28 {
                    return Err("`Pad` too large".into());
                }
                let t = kiln_ir::TensorConst {
                    dtype,
                    dims: zeros,
                    values: vec![Scalar::zero(dtype); size as usize],
                };
                let z = self
                    .b
                    .op(Op::Tensor(std::sync::Arc::new(t)), &[])
                    .map_err(te)?;
                parts.push((z, first));
            }
            let mut args: Vec<Value> = parts.iter().filter(|p| p.1).map(|p| p.0).collect();
            args.push(x);
            args.extend(parts.iter().filter(|p| !p.1).map(|p| p.0));
            x = self.b.op(Op::Concat(axis as u32), &args).map_err(te)?;
            shape[axis] += before + after;
        }
        Ok(x)
    }
}
