//! Convolution and pooling: windows over the spatial axes of NCHW tensors.
//!
//! The verifier makes the channel and spatial extents fixed, so window
//! geometry is known here.
//!
//! A convolution reads a zero-padded copy of its input (the zeros the
//! semantics pads with), split into its stride phases, so every tap is
//! inside and reads with unit stride. It folds tap after tap, in (input
//! channel, kernel row, kernel column) order, into accumulators, so every
//! element sums in the order docs/semantics.md gives. An accumulator is a
//! plane of *wide rows*: `oh` rows of the phase width, the columns past `ow`
//! computed and dropped, the plane's length rounded up to a whole 512-bit
//! vector. One contiguous loop over the plane folds a whole kernel row of
//! taps, `acc[p] = ((acc[p] + x[shift_0 + p] * w_0) +
//! x[shift_1 + p] * w_1) + ..`, for a block of up to four output channels
//! sharing each input load: long enough to vectorize at any output width
//! (both tiers run it in vectors, with no remainder), and each accumulator
//! loaded and stored once per kernel row rather than once per tap. The
//! planes' valid columns are then copied out, computing the convolution's
//! elementwise epilogue (a batch norm's shift, a ReLU) in place if it has
//! one.
//!
//! A pool skips its padding taps: for each tap `(ky, kx)`, the outputs whose
//! tap is inside form a rectangle of rows and columns ([`inside`]), computed
//! now, and a *tap pass* folds the tap into that rectangle of the
//! destination (`max(dest, x)`, `dest + x`), with no test in any loop. The
//! innermost loop runs along output columns, reading the destination row
//! contiguously, so LLVM vectorizes it without reassociating a sum.

use super::matmul::{ConvTaps, Split};
use super::{Epilogue, Loc, View};
use crate::lower::{step_op, Lowerer};
use crate::{Expr, Extent, Param, ParamIdx, Reg, Stmt};
use cranelift_entity::EntityRef;
use kiln_ir::op::{BinaryOp, Conv2d, Pool2d, PoolKind, ReduceOp};
use kiln_ir::semantics::reduce_identity;
use kiln_ir::types::{DType, Dim};

/// The output indices `lo..hi` along one axis (of `outputs` outputs over an
/// input of `extent`) whose tap `tap` reads inside the input: input index
/// `o * stride + tap * dilation - pad` in `0..extent`. Empty as `lo >= hi`.
pub(super) fn inside(
    outputs: u64,
    extent: u64,
    tap: u32,
    (stride, pad, dilation): (u32, u32, u32),
) -> (u64, u64) {
    let (s, p) = (u64::from(stride), u64::from(pad));
    let offset = u64::from(tap) * u64::from(dilation);
    // o * s >= p - offset, and o * s <= extent - 1 + p - offset.
    let lo = p.saturating_sub(offset).div_ceil(s);
    let hi = match (extent + p).checked_sub(offset + 1) {
        Some(last) => (last / s + 1).min(outputs),
        None => 0,
    };
    (lo, hi.max(lo))
}

/// The geometry of a window op along both spatial axes.
#[derive(Copy, Clone)]
struct Geometry {
    stride: [u32; 2],
    /// Before-padding of rows and columns.
    pad: [u32; 2],
    dilation: [u32; 2],
    /// Input rows, columns.
    input: [u64; 2],
    /// Output rows, columns.
    output: [u64; 2],
}

impl Geometry {
    /// Tap `(ky, kx)`'s rectangle of outputs: rows, then columns.
    fn rect(&self, ky: u32, kx: u32) -> Option<[(u64, u64); 2]> {
        let axis = |a: usize, tap| {
            inside(
                self.output[a],
                self.input[a],
                tap,
                (self.stride[a], self.pad[a], self.dilation[a]),
            )
        };
        let (rows, cols) = (axis(0, ky), axis(1, kx));
        (rows.0 < rows.1 && cols.0 < cols.1).then_some([rows, cols])
    }
}

fn fixed(d: &Dim) -> u64 {
    match d {
        Dim::Fixed(n) => *n,
        Dim::Sym(_) => unreachable!("verified: fixed channel and spatial extents"),
    }
}

impl Lowerer<'_> {
    /// `d = conv2d(x, w)`: the input's zero-padded copy split into stride
    /// phases ([`Self::phases`]), then each kernel row's taps folded into
    /// planes of wide rows as one contiguous loop ([`Self::wide_taps`]), in
    /// (input channel, kernel row, kernel column) order, and the planes'
    /// valid columns copied to `d`.
    pub(super) fn conv2d(
        &mut self,
        out: &mut Vec<Stmt>,
        c: &Conv2d,
        (x, w, d): (&View, &View, &View),
        epi: Option<Epilogue<'_>>,
        dtype: DType,
    ) {
        let [kh, kw] = [fixed(&w.dims[2]) as u32, fixed(&w.dims[3]) as u32];
        let per_group = fixed(&w.dims[1]);
        let out_per_group = fixed(&d.dims[1]) / u64::from(c.groups);
        let output = [fixed(&d.dims[2]), fixed(&d.dims[3])];
        let ph = self.phases(out, x, c, [kh, kw], output[0], dtype);
        if let (Some(bytes), true) = (self.panels, self.conv_panels) {
            if out_per_group >= PANEL_CHANNELS {
                let m = self.conv_matrix(out, c, (&ph, w, d), [kh, kw]);
                let nr = u64::from(super::matmul::panel_width(bytes, dtype));
                // A batch of small planes: its columns gathered
                // ([`Self::conv2d_columns`]).
                if let Dim::Fixed(batch @ 2..) = d.dims[0] {
                    let positions = output[0] * output[1];
                    if positions * COLUMNS_PER_PLANE <= nr && batch * positions <= MAX_COLUMNS {
                        return self.conv2d_columns(out, m, (&ph, d), output, epi, (bytes, dtype));
                    }
                }
                return self.conv2d_panels(out, m, (&ph, d), output, epi, (bytes, dtype));
            }
        }
        // A block of output channels shares each input load: one
        // accumulator plane (`oh` rows of the phase width) per channel of
        // the block, each its own buffer.
        let block = [4u64, 2, 1]
            .into_iter()
            .find(|b| out_per_group.is_multiple_of(*b))
            .expect("1 divides");
        let len = ph.len;
        let accs: Vec<View> = (0..block)
            .map(|_| {
                let param = self.param(Param::Scratch {
                    dtype,
                    shape: vec![Dim::Fixed(len)],
                });
                self.dense(out, param, vec![Dim::Fixed(len)])
            })
            .collect();
        let batch = d.dims[0].clone();
        let identity = reduce_identity(ReduceOp::Sum, dtype);
        self.nest(out, &[batch], |lw, body, rows| {
            let b = rows[0];
            let g = lw.new_reg(DType::I64, Some("g"));
            let mut g_body = Vec::new();
            let ocb = lw.new_reg(DType::I64, Some("ocb"));
            let mut oc_body = Vec::new();
            // Output channel j of the block: g * out_per_group + ocb * block
            // + j; the group's first input channel is g * per_group.
            let gk = lw.i64_const(&mut oc_body, out_per_group as i64);
            let group_base = lw.mul(&mut oc_body, g, gk);
            let first = lw.affine(&mut oc_body, ocb, block as i64, group_base);
            let ocs: Vec<Reg> = (0..block)
                .map(|j| lw.offset(&mut oc_body, first, j as i64))
                .collect();
            let zero = lw.emit(&mut oc_body, dtype, Expr::Const(identity), None);
            for acc in &accs {
                lw.store_all(&mut oc_body, &[], &Loc::Scalar(zero), acc);
            }
            // A 1×1 kernel has one tap per input channel: a pass folds
            // `unroll` consecutive input channels' taps, which are
            // consecutive in the summation order too. Two, by measurement
            // (docs/performance.md, "CNNs, second step"): four were faster
            // on LLVM and slower than one on Cranelift.
            let unroll = match kh * kw {
                1 => [2u64, 1]
                    .into_iter()
                    .find(|u| per_group.is_multiple_of(*u))
                    .expect("1 divides"),
                _ => 1,
            };
            let icg = lw.new_reg(DType::I64, Some("ic"));
            let mut ic_body = Vec::new();
            let mut taps = Vec::new();
            for u in 0..unroll {
                // Input channel `icu` of the group, `ic` of the input.
                let k = lw.i64_const(&mut ic_body, u as i64);
                let icu = lw.affine(&mut ic_body, icg, unroll as i64, k);
                let ic = lw.affine(&mut ic_body, g, per_group as i64, icu);
                // Where plane (b, ic) of the phases starts; each tap reads
                // from a shift of it.
                let zero_row = lw.i64_const(&mut ic_body, 0);
                let plane = lw.flat(
                    &mut ic_body,
                    ph.view.offset,
                    &[b, ic, zero_row, zero_row],
                    &ph.view.strides,
                );
                for ky in 0..kh {
                    for kx in 0..kw {
                        let (ky_r, kx_r) = (
                            lw.i64_const(&mut ic_body, i64::from(ky)),
                            lw.i64_const(&mut ic_body, i64::from(kx)),
                        );
                        let weights: Vec<Reg> = ocs
                            .iter()
                            .map(|&oc| {
                                let at = lw.flat(
                                    &mut ic_body,
                                    w.offset,
                                    &[oc, icu, ky_r, kx_r],
                                    &w.strides,
                                );
                                lw.emit(&mut ic_body, dtype, Expr::Load(w.param, at), None)
                            })
                            .collect();
                        taps.push(WideTap {
                            plane,
                            shift: ph.shift(ky * c.dilation[0], kx * c.dilation[1]),
                            weights,
                        });
                    }
                }
            }
            // One pass over the planes per kernel row (per `unroll` input
            // channels of a 1×1 kernel).
            for taps in taps.chunks((kw as u64 * unroll) as usize) {
                lw.wide_taps(&mut ic_body, &accs, ph.view.param, taps, dtype);
            }
            oc_body.push(Stmt::loop_of(
                Extent::Fixed(per_group / unroll),
                icg,
                ic_body,
            ));
            for (acc, &oc) in accs.iter().zip(&ocs) {
                lw.unwiden(&mut oc_body, acc, (d, epi), [b, oc], output, ph.width);
            }
            g_body.push(Stmt::loop_of(
                Extent::Fixed(out_per_group / block),
                ocb,
                oc_body,
            ));
            body.push(Stmt::loop_of(Extent::Fixed(u64::from(c.groups)), g, g_body));
        });
    }

    /// `d = conv2d(x, w)` as a matmul per batch element and group, in
    /// the panels of [`crate::LowerOptions::panels`]: the weights `[g, oc,
    /// ic * kh * kw]` times the implicit matrix whose row `(ic, ky, kx)` is
    /// the run of the phases that tap reads ([`ConvTaps`]), into planes of
    /// wide rows (one scratch `[n, c_out, len]`), whose valid columns are
    /// then copied to `d` with the epilogue. Each element still folds its
    /// taps in (input channel, kernel row, kernel column) order from the
    /// identity: the matmul's `k` order.
    fn conv2d_panels(
        &mut self,
        out: &mut Vec<Stmt>,
        m: ConvMatrix,
        (ph, d): (&Phases, &View),
        output: [u64; 2],
        epi: Option<Epilogue<'_>>,
        (bytes, dtype): (u32, DType),
    ) {
        let ConvMatrix {
            groups,
            per_group,
            c_out,
            out_per_group,
            a,
            weights,
            shifts,
        } = m;
        let batch = d.dims[0].clone();
        let planes = vec![
            batch.clone(),
            Dim::Fixed(groups),
            Dim::Fixed(out_per_group),
            Dim::Fixed(ph.len),
        ];
        let param = self.param(Param::Scratch {
            dtype,
            shape: planes.clone(),
        });
        let acc = self.dense(out, param, planes);
        let taps = ConvTaps {
            src: ph.view.clone(),
            per_group,
            shifts,
        };
        let strides = [
            vec![None, a.strides[0]],
            vec![a.strides[1], a.strides[2]],
            vec![None, None],
            vec![None, None],
        ];
        self.matmul_panels(
            out,
            (&a, &ph.view, &acc),
            &strides,
            bytes,
            None,
            dtype,
            (Some(&taps), weights),
        );
        // Each plane's valid columns to `d`, with the epilogue.
        self.nest(out, &[batch, Dim::Fixed(c_out)], |lw, body, r| {
            let count = lw.i64_const(body, c_out as i64);
            let len = lw.i64_const(body, ph.len as i64);
            let plane = lw.mul(body, r[0], count);
            let plane = lw.i64_binary(body, BinaryOp::Add, plane, r[1]);
            let start = lw.mul(body, plane, len);
            let view = View {
                param,
                dims: vec![Dim::Fixed(ph.len)],
                offset: Some(start),
                strides: vec![None],
                dense: false,
            };
            lw.unwiden(body, &view, (d, epi), [r[0], r[1]], output, ph.width);
        });
    }

    /// A convolution as a matmul ([`ConvMatrix`]): its weights `w` as the
    /// `a`, `[groups, out_per_group, k]`: dense, `k` one stride; else (a
    /// gradient's flipped, channel-swapped weights) `k` split into (input
    /// channel, kernel row, kernel column), each read by its own stride
    /// ([`Split`]); and where each tap starts reading a plane of `ph`.
    fn conv_matrix(
        &mut self,
        out: &mut Vec<Stmt>,
        c: &Conv2d,
        (ph, w, d): (&Phases, &View, &View),
        [kh, kw]: [u32; 2],
    ) -> ConvMatrix {
        let groups = u64::from(c.groups);
        let per_group = fixed(&w.dims[1]);
        let c_out = fixed(&d.dims[1]);
        let out_per_group = c_out / groups;
        let k = per_group * u64::from(kh) * u64::from(kw);
        let shifts = (0..kh)
            .flat_map(|ky| (0..kw).map(move |kx| (ky, kx)))
            .map(|(ky, kx)| ph.shift(ky * c.dilation[0], kx * c.dilation[1]))
            .collect();
        let dims = vec![Dim::Fixed(groups), Dim::Fixed(out_per_group), Dim::Fixed(k)];
        let (a, weights) = if w.dense && w.offset.is_none() {
            let strides = [out_per_group * k, k, 1].map(|v| Some(self.i64_const(out, v as i64)));
            let a = View {
                param: w.param,
                dims,
                offset: None,
                strides: strides.to_vec(),
                dense: true,
            };
            (a, None)
        } else {
            let per = self.i64_const(out, out_per_group as i64);
            let group = w.strides[0].map(|s| self.mul(out, s, per));
            let a = View {
                param: w.param,
                dims,
                offset: w.offset,
                strides: vec![group, w.strides[0], None],
                dense: false,
            };
            let split = Split {
                kernel: [kh, kw],
                strides: [w.strides[1], w.strides[2], w.strides[3]],
            };
            (a, Some(split))
        };
        ConvMatrix {
            groups,
            per_group,
            c_out,
            out_per_group,
            a,
            weights,
            shifts,
        }
    }

    /// A convolution over a batch of small planes (ResNet's last stage: 2×2
    /// at 64×64 inputs) as one matmul whose columns are every batch
    /// element's output positions, gathered from the padded input first
    /// (`[groups, k, n·oh·ow]`, `k` in the taps' order, so each sum runs as
    /// the convolution's does). Each element's own panels would read all
    /// the weights once per element, with few columns to share them: four
    /// times 9.4 MB for a 512-channel 3×3 layer at batch 4 (2.9 ms against
    /// torch's 1.6).
    fn conv2d_columns(
        &mut self,
        out: &mut Vec<Stmt>,
        m: ConvMatrix,
        (ph, d): (&Phases, &View),
        output: [u64; 2],
        epi: Option<Epilogue<'_>>,
        (bytes, dtype): (u32, DType),
    ) {
        let ConvMatrix {
            groups,
            per_group,
            c_out,
            out_per_group,
            a,
            weights,
            shifts,
        } = m;
        let batch = fixed(&d.dims[0]);
        let positions = output[0] * output[1];
        let cols = batch * positions;
        let n_taps = shifts.len() as u64;
        let k = per_group * n_taps;
        // b[g, ic·T + t, (n·oh + y)·ow + x] = the phases' plane (n, g·pg +
        // ic) at tap t's shift + y·width + x.
        let b_dims = vec![Dim::Fixed(groups), Dim::Fixed(k), Dim::Fixed(cols)];
        let b_param = self.param(Param::Scratch {
            dtype,
            shape: b_dims.clone(),
        });
        let b = self.dense(out, b_param, b_dims);
        let src = ph.view.clone();
        let gather = [groups, per_group, batch, output[0], output[1]].map(Dim::Fixed);
        self.nest(out, &gather, |lw, body, r| {
            let (g, ic, n, y, x) = (r[0], r[1], r[2], r[3], r[4]);
            let pg = lw.i64_const(body, per_group as i64);
            let channel = lw.mul(body, g, pg);
            let channel = lw.i64_binary(body, BinaryOp::Add, channel, ic);
            let zero = lw.i64_const(body, 0);
            let plane = lw.flat(body, src.offset, &[n, channel, zero, zero], &src.strides);
            let pitch = lw.i64_const(body, ph.width as i64);
            let row = lw.mul(body, y, pitch);
            let at = lw.i64_binary(body, BinaryOp::Add, plane, row);
            let at = lw.i64_binary(body, BinaryOp::Add, at, x);
            let oh = lw.i64_const(body, output[0] as i64);
            let ow = lw.i64_const(body, output[1] as i64);
            let col = lw.mul(body, n, oh);
            let col = lw.i64_binary(body, BinaryOp::Add, col, y);
            let col = lw.mul(body, col, ow);
            let col = lw.i64_binary(body, BinaryOp::Add, col, x);
            let t_count = lw.i64_const(body, n_taps as i64);
            let first = lw.mul(body, ic, t_count);
            for (t, &shift) in shifts.iter().enumerate() {
                let shift = lw.i64_const(body, shift);
                let from = lw.i64_binary(body, BinaryOp::Add, at, shift);
                let value = lw.emit(body, dtype, Expr::Load(src.param, from), None);
                let t = lw.i64_const(body, t as i64);
                let kk = lw.i64_binary(body, BinaryOp::Add, first, t);
                let to = lw.flat(body, None, &[g, kk, col], &b.strides);
                body.push(Stmt::Store(b_param, Some(to), value));
            }
        });
        // The sums, `[groups, out_per_group, n·oh·ow]`.
        let c_dims = vec![
            Dim::Fixed(groups),
            Dim::Fixed(out_per_group),
            Dim::Fixed(cols),
        ];
        let c_param = self.param(Param::Scratch {
            dtype,
            shape: c_dims.clone(),
        });
        let sums = self.dense(out, c_param, c_dims);
        let strides = [
            vec![a.strides[0]],
            vec![a.strides[1], a.strides[2]],
            vec![b.strides[0]],
            vec![b.strides[1], b.strides[2]],
        ];
        self.matmul_panels(
            out,
            (&a, &b, &sums),
            &strides,
            bytes,
            None,
            dtype,
            (None, weights),
        );
        // Each batch element's plane of each channel to `d`, with the
        // epilogue: channel `co`'s columns from `n·oh·ow` on.
        self.nest(
            out,
            &[Dim::Fixed(batch), Dim::Fixed(c_out)],
            |lw, body, r| {
                let width = lw.i64_const(body, cols as i64);
                let start = lw.mul(body, r[1], width);
                let per = lw.i64_const(body, positions as i64);
                let first = lw.mul(body, r[0], per);
                let start = lw.i64_binary(body, BinaryOp::Add, start, first);
                let view = View {
                    param: c_param,
                    dims: vec![Dim::Fixed(positions)],
                    offset: Some(start),
                    strides: vec![None],
                    dense: false,
                };
                lw.unwiden(body, &view, (d, epi), [r[0], r[1]], output, output[1]);
            },
        );
    }

    /// The input of a convolution, zero-padded and split into its stride
    /// phases: phase `(a, b)` of a plane holds the padded input's rows `a,
    /// a + sh, ..` and columns `b, b + sw, ..`, so a tap at `(ey, ex)` (its
    /// offset times the dilation) reads phase `(ey % sh, ex % sw)` from row
    /// `ey / sh`, column `ex / sw`, with unit stride along the output's rows
    /// and columns. Each plane (`n`, `c`) stacks its `sh * sw` phases of
    /// `ceil(hp / sh) + 1` rows (one zero row more, which the wide rows'
    /// dropped columns read) and `ceil(wp / sw)` columns, then enough zero
    /// rows for the reads of the columns the planes' rounding adds. Stride
    /// 1: one phase, the zero-padded input itself.
    fn phases(
        &mut self,
        out: &mut Vec<Stmt>,
        x: &View,
        c: &Conv2d,
        [kh, kw]: [u32; 2],
        oh: u64,
        dtype: DType,
    ) -> Phases {
        let [top, bottom, left, right] = c.padding.map(u64::from);
        let [sh, sw] = c.stride.map(u64::from);
        let (h, w) = (fixed(&x.dims[2]), fixed(&x.dims[3]));
        let (hp, wp) = (h + top + bottom, w + left + right);
        let rows = hp.div_ceil(sh) + 1;
        let width = wp.div_ceil(sw);
        let len = (oh * width).next_multiple_of(PLANE_BYTES / dtype.size_bytes() as u64);
        // Rows of zeros after the phases, for the taps' reads past the
        // last phase's end (into columns the planes' rounding adds).
        let reach = (0..kh)
            .flat_map(|ky| (0..kw).map(move |kx| (ky, kx)))
            .map(|(ky, kx)| {
                let tap = [ky * c.dilation[0], kx * c.dilation[1]];
                phase_shift([sh, sw], rows, width, tap) as u64
            })
            .max()
            .unwrap_or(0)
            + len;
        let slack = reach.saturating_sub(sh * sw * rows * width).div_ceil(width);
        let dims = vec![
            x.dims[0].clone(),
            x.dims[1].clone(),
            Dim::Fixed(sh * sw * rows + slack),
            Dim::Fixed(width),
        ];
        let param = self.param(Param::Scratch {
            dtype,
            shape: dims.clone(),
        });
        let view = self.dense(out, param, dims);
        let zero = self.emit(
            out,
            dtype,
            Expr::Const(kiln_ir::scalar::Scalar::zero(dtype)),
            None,
        );
        self.store_all(out, &[], &Loc::Scalar(zero), &view);
        // Phase (a, b)'s element (i, j) is the padded input's (i * sh + a,
        // j * sw + b): the input's where that is inside it.
        let inside = |extent: u64, pad: u64, step: u64, phase: u64| {
            let lo = pad.saturating_sub(phase).div_ceil(step);
            let hi = (extent + pad).saturating_sub(phase).div_ceil(step);
            (lo, hi.max(lo))
        };
        for a in 0..sh {
            for b in 0..sw {
                let (i0, i1) = inside(h, top, sh, a);
                let (j0, j1) = inside(w, left, sw, b);
                if i0 == i1 || j0 == j1 {
                    continue;
                }
                let dims = [
                    x.dims[0].clone(),
                    x.dims[1].clone(),
                    Dim::Fixed(i1 - i0),
                    Dim::Fixed(j1 - j0),
                ];
                let first_row = (a * sw + b) * rows;
                self.nest(out, &dims, |lw, body, r| {
                    // Input row (i0 + r) * sh + a - top, column likewise.
                    let y = lw.scaled(body, r[2], sh as u32, (i0 * sh + a) as i64 - top as i64);
                    let xx = lw.scaled(body, r[3], sw as u32, (j0 * sw + b) as i64 - left as i64);
                    let from = lw.flat(body, x.offset, &[r[0], r[1], y, xx], &x.strides);
                    let value = lw.emit(body, dtype, Expr::Load(x.param, from), None);
                    let i = lw.offset(body, r[2], (first_row + i0) as i64);
                    let j = lw.offset(body, r[3], j0 as i64);
                    let to = lw.flat(body, view.offset, &[r[0], r[1], i, j], &view.strides);
                    body.push(Stmt::Store(view.param, Some(to), value));
                });
            }
        }
        Phases {
            view,
            rows,
            width,
            stride: [sh, sw],
            len,
        }
    }

    /// Consecutive taps over wide rows, for a block of output channels: for
    /// every `p` of the accumulator planes (`oh` rows of the phase width,
    /// the columns past `ow` computed and dropped),
    /// `acc_j[p] = ((acc_j[p] + src[plane, shift_0 + p] * weight_j0) +
    /// src[plane, shift_1 + p] * weight_j1) + ..`: one contiguous loop
    /// whatever the output's width, each input element loaded once for the
    /// block, each accumulator loaded and stored once for all the taps.
    fn wide_taps(
        &mut self,
        body: &mut Vec<Stmt>,
        accs: &[View],
        src: ParamIdx,
        taps: &[WideTap],
        dtype: DType,
    ) {
        let starts: Vec<Reg> = taps
            .iter()
            .map(|tap| self.offset(body, tap.plane, tap.shift))
            .collect();
        let p = self.new_reg(DType::I64, Some("p"));
        let mut p_body = Vec::new();
        let values: Vec<Reg> = starts
            .iter()
            .map(|&start| {
                let from = self.emit(
                    &mut p_body,
                    DType::I64,
                    Expr::Binary(BinaryOp::Add, start, p),
                    None,
                );
                self.emit(&mut p_body, dtype, Expr::Load(src, from), None)
            })
            .collect();
        for (j, acc) in accs.iter().enumerate() {
            let mut sum = self.emit(&mut p_body, dtype, Expr::Load(acc.param, p), None);
            for (tap, &value) in taps.iter().zip(&values) {
                sum = self.mul_add(&mut p_body, dtype, value, tap.weights[j], sum);
            }
            p_body.push(Stmt::Store(acc.param, Some(p), sum));
        }
        body.push(Stmt::loop_of(
            Extent::Fixed(fixed(&accs[0].dims[0])),
            p,
            p_body,
        ));
    }

    /// `d[plane.., y, x] = acc[y * wp + x]`: the wide rows' valid columns,
    /// then the epilogue's value there, in place.
    fn unwiden(
        &mut self,
        body: &mut Vec<Stmt>,
        acc: &View,
        (d, epi): (&View, Option<Epilogue<'_>>),
        plane: [Reg; 2],
        output: [u64; 2],
        wp: u64,
    ) {
        let dims = [Dim::Fixed(output[0]), Dim::Fixed(output[1])];
        let dtype = self.param_dtype(d.param).expect("a tensor buffer");
        self.nest(body, &dims, |lw, inner, yx| {
            let pitch = lw.i64_const(inner, wp as i64);
            let row = lw.mul(inner, yx[0], pitch);
            let p = lw.emit(
                inner,
                DType::I64,
                Expr::Binary(BinaryOp::Add, row, yx[1]),
                None,
            );
            let p = match acc.offset {
                Some(start) => lw.i64_binary(inner, BinaryOp::Add, start, p),
                None => p,
            };
            let value = lw.emit(inner, dtype, Expr::Load(acc.param, p), None);
            lw.store_plane(inner, d, plane, yx, value);
            if let Some(epi) = epi {
                lw.epilogue_at(inner, epi, d, &[plane[0], plane[1], yx[0], yx[1]]);
            }
        });
    }

    /// `d[plane.., yx..] = value`.
    fn store_plane(
        &mut self,
        body: &mut Vec<Stmt>,
        d: &View,
        plane: [Reg; 2],
        yx: &[Reg],
        value: Reg,
    ) {
        let at = self.flat(
            body,
            d.offset,
            &[plane[0], plane[1], yx[0], yx[1]],
            &d.strides,
        );
        body.push(Stmt::Store(d.param, Some(at), value));
    }

    /// `d = max_pool2d(x)` or `avg_pool2d(x)`.
    pub(super) fn pool2d(
        &mut self,
        out: &mut Vec<Stmt>,
        p: &Pool2d,
        (x, d): (&View, &View),
        dtype: DType,
    ) {
        let geo = Geometry {
            stride: p.stride,
            pad: [p.padding[0], p.padding[2]],
            dilation: p.dilation,
            input: [fixed(&x.dims[2]), fixed(&x.dims[3])],
            output: [fixed(&d.dims[2]), fixed(&d.dims[3])],
        };
        let reduce = match p.kind {
            PoolKind::Max => ReduceOp::Max,
            PoolKind::Avg => ReduceOp::Sum,
        };
        let step = step_op(reduce).expect("a folding reduction");
        let plane_dims = [d.dims[0].clone(), d.dims[1].clone()];
        self.nest(out, &plane_dims, |lw, body, rows| {
            let plane = [rows[0], rows[1]];
            let identity = lw.emit(
                body,
                dtype,
                Expr::Const(reduce_identity(reduce, dtype)),
                None,
            );
            lw.fill_plane(body, d, plane, geo.output, identity);
            for ky in 0..p.kernel[0] {
                for kx in 0..p.kernel[1] {
                    let Some(rect) = geo.rect(ky, kx) else {
                        continue;
                    };
                    let pass = TapPass {
                        src: x,
                        dest: d,
                        planes: (plane, plane),
                        taps: [ky, kx],
                        rect,
                        fold: step,
                    };
                    lw.tap_pass(body, &geo, pass, dtype);
                }
            }
            if p.kind == PoolKind::Avg {
                lw.divide_by_counts(body, p, &geo, d, plane, dtype);
            }
        });
    }

    /// `base * scale + index` as an `i64` register.
    fn affine(&mut self, body: &mut Vec<Stmt>, base: Reg, scale: i64, index: Reg) -> Reg {
        let k = self.i64_const(body, scale);
        let first = self.mul(body, base, k);
        self.emit(
            body,
            DType::I64,
            Expr::Binary(BinaryOp::Add, first, index),
            None,
        )
    }

    /// `d[plane.., y, x] = value` for the whole plane.
    fn fill_plane(
        &mut self,
        body: &mut Vec<Stmt>,
        d: &View,
        plane: [Reg; 2],
        dims: [u64; 2],
        value: Reg,
    ) {
        let dims = [Dim::Fixed(dims[0]), Dim::Fixed(dims[1])];
        self.nest(body, &dims, |lw, inner, yx| {
            lw.store_plane(inner, d, plane, yx, value)
        });
    }

    /// One tap pass (see the module docs): for each output `(y, x)` of the
    /// tap's rectangle, `dest[y, x] = fold(dest[y, x], src[iy, ix])`.
    fn tap_pass(&mut self, body: &mut Vec<Stmt>, geo: &Geometry, pass: TapPass<'_>, dtype: DType) {
        let TapPass {
            src,
            dest,
            planes,
            taps,
            rect,
            fold,
        } = pass;
        // Input index = output index * stride + (tap * dilation - pad).
        let shift =
            |a: usize| i64::from(taps[a]) * i64::from(geo.dilation[a]) - i64::from(geo.pad[a]);
        let (shift_y, shift_x) = (shift(0), shift(1));
        let ry = self.new_reg(DType::I64, Some("y"));
        let mut y_body = Vec::new();
        let y = self.offset(&mut y_body, ry, rect[0].0 as i64);
        let iy = self.scaled(&mut y_body, y, geo.stride[0], shift_y);
        let rx = self.new_reg(DType::I64, Some("x"));
        let mut x_body = Vec::new();
        let x = self.offset(&mut x_body, rx, rect[1].0 as i64);
        let ix = self.scaled(&mut x_body, x, geo.stride[1], shift_x);
        let from = self.flat(
            &mut x_body,
            src.offset,
            &[planes.0[0], planes.0[1], iy, ix],
            &src.strides,
        );
        let to = self.flat(
            &mut x_body,
            dest.offset,
            &[planes.1[0], planes.1[1], y, x],
            &dest.strides,
        );
        let value = self.emit(&mut x_body, dtype, Expr::Load(src.param, from), None);
        let acc = self.emit(&mut x_body, dtype, Expr::Load(dest.param, to), None);
        let next = self.emit(&mut x_body, dtype, Expr::Binary(fold, acc, value), None);
        x_body.push(Stmt::Store(dest.param, Some(to), next));
        y_body.push(Stmt::loop_of(
            Extent::Fixed(rect[1].1 - rect[1].0),
            rx,
            x_body,
        ));
        body.push(Stmt::loop_of(
            Extent::Fixed(rect[0].1 - rect[0].0),
            ry,
            y_body,
        ));
    }

    /// `row + k` (just `row` for 0).
    fn offset(&mut self, body: &mut Vec<Stmt>, row: Reg, k: i64) -> Reg {
        if k == 0 {
            return row;
        }
        let k = self.i64_const(body, k);
        self.emit(body, DType::I64, Expr::Binary(BinaryOp::Add, row, k), None)
    }

    /// `row * stride + shift`.
    fn scaled(&mut self, body: &mut Vec<Stmt>, row: Reg, stride: u32, shift: i64) -> Reg {
        let scaled = if stride == 1 {
            row
        } else {
            let s = self.i64_const(body, i64::from(stride));
            self.mul(body, row, s)
        };
        self.offset(body, scaled, shift)
    }

    /// An average pool's division: each element of the plane divided by its
    /// window's count ([`Pool2d::count`]), the product of a row count and
    /// a column count, computed from the window's start as the interpreter
    /// does: `min(start + k, limit) - max(start, 0)`, or `- start` with
    /// `count_include_pad` (where `limit` is then the after-padding's end).
    fn divide_by_counts(
        &mut self,
        body: &mut Vec<Stmt>,
        p: &Pool2d,
        geo: &Geometry,
        d: &View,
        plane: [Reg; 2],
        dtype: DType,
    ) {
        let dims = [Dim::Fixed(geo.output[0]), Dim::Fixed(geo.output[1])];
        let count = |lw: &mut Self, inner: &mut Vec<Stmt>, o: Reg, a: usize| {
            let start = lw.scaled(inner, o, p.stride[a], -i64::from(p.padding[2 * a]));
            let k = lw.i64_const(inner, i64::from(p.kernel[a]));
            let end = lw.emit(
                inner,
                DType::I64,
                Expr::Binary(BinaryOp::Add, start, k),
                None,
            );
            let mut limit = geo.input[a] as i64;
            if p.count_include_pad {
                limit += i64::from(p.padding[2 * a + 1]);
            }
            let limit = lw.i64_const(inner, limit);
            let end = lw.emit(
                inner,
                DType::I64,
                Expr::Binary(BinaryOp::Min, end, limit),
                None,
            );
            let first = if p.count_include_pad {
                start
            } else {
                let zero = lw.i64_const(inner, 0);
                lw.emit(
                    inner,
                    DType::I64,
                    Expr::Binary(BinaryOp::Max, start, zero),
                    None,
                )
            };
            lw.emit(
                inner,
                DType::I64,
                Expr::Binary(BinaryOp::Sub, end, first),
                None,
            )
        };
        self.nest(body, &dims, |lw, inner, yx| {
            let rows = count(lw, inner, yx[0], 0);
            let cols = count(lw, inner, yx[1], 1);
            let n = lw.mul(inner, rows, cols);
            let divisor = lw.emit(inner, dtype, Expr::Cast(dtype, n), None);
            let at = lw.flat(
                inner,
                d.offset,
                &[plane[0], plane[1], yx[0], yx[1]],
                &d.strides,
            );
            let sum = lw.emit(inner, dtype, Expr::Load(d.param, at), None);
            let mean = lw.emit(
                inner,
                dtype,
                Expr::Binary(BinaryOp::Div, sum, divisor),
                None,
            );
            inner.push(Stmt::Store(d.param, Some(at), mean));
        });
    }
}

/// A convolution as a matmul ([`Lowerer::conv_matrix`]).
struct ConvMatrix {
    groups: u64,
    per_group: u64,
    c_out: u64,
    out_per_group: u64,
    /// The weights, `[groups, out_per_group, k]`.
    a: View,
    /// Their `k` read by three strides, where they are not dense.
    weights: Option<Split>,
    /// Where each tap starts reading a plane of the phases.
    shifts: Vec<i64>,
}

/// A convolution's input split into stride phases ([`Lowerer::phases`]).
struct Phases {
    view: View,
    /// Rows per phase.
    rows: u64,
    /// Columns per phase (the wide rows' pitch).
    width: u64,
    stride: [u64; 2],
    /// The accumulator planes' length: `oh` wide rows, rounded up to a
    /// multiple of [`PLANE_BYTES`].
    len: u64,
}

/// The accumulator planes' length is a multiple of this many bytes (a
/// 512-bit vector), so every tier's vector loop over them has no scalar
/// remainder: on ResNet-18's 7×7 planes (63 elements) the remainder took
/// more time than the vectors (docs/performance.md, "CNNs, second step").
const PLANE_BYTES: u64 = 64;

/// The fewest output channels per group that a convolution runs in matmul
/// panels ([`Lowerer::conv2d_panels`]); fewer (a depthwise convolution's
/// one) keep the wide-row taps, which share each input load among a block
/// of channels instead.
const PANEL_CHANNELS: u64 = 8;

/// A batch's convolution gathers its columns ([`Lowerer::conv2d_columns`])
/// where an element's output positions fill at most this fraction of a
/// panel's columns...
const COLUMNS_PER_PLANE: u64 = 4;

/// ...and the batch's columns are at most this many (the gathered input,
/// `k` × these, stays small beside the weights it saves reading again).
const MAX_COLUMNS: u64 = 512;

impl Phases {
    /// Where, within a plane, a tap at offset `(ey, ex)` (kernel index times
    /// dilation) starts reading.
    fn shift(&self, ey: u32, ex: u32) -> i64 {
        phase_shift(self.stride, self.rows, self.width, [ey, ex])
    }
}

/// Where a tap at offset `(ey, ex)` starts reading within a plane of
/// `[sh, sw]` stride phases of `rows` rows and `width` columns each.
fn phase_shift([sh, sw]: [u64; 2], rows: u64, width: u64, [ey, ex]: [u32; 2]) -> i64 {
    let (ey, ex) = (u64::from(ey), u64::from(ex));
    let phase = (ey % sh) * sw + ex % sw;
    ((phase * rows + ey / sh) * width + ex / sw) as i64
}

/// One tap of a wide-row convolution: where the plane (batch, input
/// channel) it reads starts, its offset from there, and its weight for each
/// output channel of the block.
struct WideTap {
    plane: Reg,
    shift: i64,
    weights: Vec<Reg>,
}

/// One pool tap pass's operands: the source and destination views, the
/// plane (batch, channel) each is read at, the tap, its rectangle and the
/// fold.
struct TapPass<'v> {
    src: &'v View,
    dest: &'v View,
    planes: ([Reg; 2], [Reg; 2]),
    taps: [u32; 2],
    rect: [(u64, u64); 2],
    /// `dest = fold(dest, x)`: `max`, or `add`.
    fold: BinaryOp,
}

/// Lowering a window op's node.
impl Lowerer<'_> {
    /// Where `value = op(args)` lives, for a convolution or a pool.
    pub(super) fn window_node(
        &mut self,
        st: &mut super::Nest,
        value: kiln_ir::entities::Value,
        op: &kiln_ir::op::Op,
        args: &[Loc],
        dims: kiln_ir::types::Shape,
    ) -> Option<Loc> {
        let dtype = self.graph.ty(value).dtype().expect("a tensor");
        let out = &mut st.out;
        let x = self.as_view(out, &st.loc, &args[0], false);
        let w = match op {
            kiln_ir::op::Op::Conv2d(_) => Some(self.as_view(out, &st.loc, &args[1], false)),
            _ => None,
        };
        if let (Some(w), Some(e)) = (&w, st.fusion.epilogue[value.index()]) {
            // Computed with its epilogue, where the epilogue is.
            st.pending[e.index()] = Some((x, w.clone(), value));
            return None;
        }
        let dest = self.dest(value, &dims, &mut st.claimed);
        let d = self.dense(out, dest, dims);
        match op {
            kiln_ir::op::Op::Conv2d(c) => {
                let w = w.expect("a convolution's weights");
                self.conv2d(out, c, (&x, &w, &d), None, dtype);
            }
            kiln_ir::op::Op::Pool2d(p) => self.pool2d(out, p, (&x, &d), dtype),
            _ => unreachable!("a window op"),
        }
        Some(Loc::View(d))
    }
}

#[cfg(test)]
mod tests {
    use super::inside;

    /// `inside` keeps exactly the outputs whose tap index is in bounds.
    #[test]
    fn tap_rectangles_are_the_in_bounds_outputs() {
        for extent in 1..9u64 {
            for stride in 1..4u32 {
                for dilation in 1..4u32 {
                    for pad in 0..5u32 {
                        for tap in 0..4u32 {
                            let outputs = 12;
                            let (lo, hi) = inside(outputs, extent, tap, (stride, pad, dilation));
                            for o in 0..outputs {
                                let i = (o * u64::from(stride) + u64::from(tap * dilation)) as i64
                                    - i64::from(pad);
                                let expect = (0..extent as i64).contains(&i);
                                assert_eq!(
                                    (lo..hi).contains(&o),
                                    expect,
                                    "extent {extent} stride {stride} dilation {dilation} pad {pad} tap {tap} output {o}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
