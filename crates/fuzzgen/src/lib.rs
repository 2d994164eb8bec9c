//! Random valid graphs and inputs from `arbitrary::Unstructured`, shared by the
//! property tests and the `differential` fuzz target, and [`differential`]: the
//! check that every engine agrees with the interpreter bit for bit.
//!
//! Graphs are valid by construction: every op goes through the builder, which
//! applies the typing rules, and an operand of the wrong dtype is first cast.
//! Nothing is made "safe": division by zero, shifts past the width, NaN and
//! out-of-range casts are generated on purpose; every engine must give the same
//! values, or the same error.

use arbitrary::{Result, Unstructured};
use kiln::ir::{
    BinaryOp, Builder, CmpOp, Conv2d, DType, Dim, Op, Pool2d, PoolKind, ReduceOp, SliceRange,
    TensorConst, TensorType, Type, UnaryOp, Value,
};
use kiln::{Buffer, CompileOptions, Data, DynEngine, ExecResult, Graph, Scalar};
use std::sync::Arc;

/// A generated graph and inputs for it.
#[derive(Clone, Debug)]
pub struct Case {
    /// The graph (valid by construction).
    pub graph: Graph,
    /// One input per graph input, in order.
    pub inputs: Vec<Data>,
}

const F64_EDGES: &[f64] = &[
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    2.0,
    3.0,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    5e-324,
    -2.2250738585072014e-308,
    f64::MAX,
    f64::MIN,
    9.223372036854776e18,
    -2147483649.0,
    2.5,
    -0.5,
    1e-300,
];
const F32_EDGES: &[f32] = &[
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    2.0,
    f32::NAN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    1e-45,
    f32::MAX,
    f32::MIN,
    2147483648.0,
    -3.5,
];
const I64_EDGES: &[i64] = &[
    0,
    0,
    1,
    -1,
    2,
    63,
    64,
    65,
    -64,
    i64::MIN,
    i64::MAX,
    i64::MIN + 1,
    3,
    -7,
];
const I32_EDGES: &[i32] = &[
    0,
    0,
    1,
    -1,
    2,
    31,
    32,
    33,
    -32,
    i32::MIN,
    i32::MAX,
    i32::MIN + 1,
    3,
    -7,
];

/// A scalar of `dtype`, biased toward edge values.
pub fn scalar(u: &mut Unstructured, dtype: DType) -> Result<Scalar> {
    let edge = u.ratio(3u8, 4u8)?;
    Ok(match dtype {
        DType::Bool => Scalar::Bool(u.arbitrary()?),
        DType::I32 => Scalar::I32(if edge {
            *u.choose(I32_EDGES)?
        } else {
            u.arbitrary()?
        }),
        DType::I64 => Scalar::I64(if edge {
            *u.choose(I64_EDGES)?
        } else {
            u.arbitrary()?
        }),
        DType::F32 => Scalar::F32(if edge {
            *u.choose(F32_EDGES)?
        } else {
            f32::from_bits(u.arbitrary()?)
        }),
        DType::F64 => Scalar::F64(if edge {
            *u.choose(F64_EDGES)?
        } else {
            f64::from_bits(u.arbitrary()?)
        }),
    })
}

/// The elements of a tensor (a constant or an input): as [`scalar`] draws
/// them while the case's bytes last. Past them every draw is the first
/// edge, 0: a large tensor (a product's `b` of thousands of elements, and
/// every input drawn after it) would be zeros past its first few hundred,
/// and its sums' order would show in no bit. Its elements past the bytes
/// come from [`filler`], seeded by those drawn before.
struct Elements {
    state: u64,
}

impl Elements {
    fn new(count: usize) -> Self {
        Elements {
            state: 0x9e37_79b9_7f4a_7c15 ^ count as u64,
        }
    }

    fn next(&mut self, u: &mut Unstructured, dtype: DType) -> Result<Scalar> {
        if u.is_empty() {
            return Ok(filler(&mut self.state, dtype));
        }
        let v = scalar(u, dtype)?;
        self.state = splitmix(self.state ^ v.bits());
        Ok(v)
    }
}

/// One step of SplitMix64 on `state`.
fn splitmix(state: u64) -> u64 {
    let mut z = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// An element of a tensor past the case's bytes ([`Elements`]): floats
/// uniform in [-2, 2) with every mantissa
/// bit drawn (so that a sum in another order rounds to other bits),
/// integers in [-1000, 1000], from SplitMix64 on `state`.
fn filler(state: &mut u64, dtype: DType) -> Scalar {
    *state = splitmix(*state);
    let unit = (*state >> 11) as f64 / (1u64 << 53) as f64;
    let int = (*state % 2001) as i64 - 1000;
    match dtype {
        DType::Bool => Scalar::Bool(*state & 1 == 1),
        DType::I32 => Scalar::I32(int as i32),
        DType::I64 => Scalar::I64(int),
        DType::F32 => Scalar::F32((unit * 4.0 - 2.0) as f32),
        DType::F64 => Scalar::F64(unit * 4.0 - 2.0),
    }
}

/// An `f64` as [`scalar`] draws one.
fn any_f64(u: &mut Unstructured) -> Result<f64> {
    match scalar(u, DType::F64)? {
        Scalar::F64(v) => Ok(v),
        _ => unreachable!("an f64 scalar"),
    }
}

struct Gen<'a, 'b> {
    u: &'a mut Unstructured<'b>,
    b: Builder,
    /// Values operands may be taken from (not selections).
    pool: Vec<Value>,
    outputs: Vec<Value>,
    /// Tensor mode: inputs of small fixed shapes, and tensor steps
    /// (constant tensors, matmul, transpose, reshape, broadcasting).
    tensors: bool,
    /// Window mode (tensor mode too): half the steps tensor steps, half of
    /// those convolutions and pools ([`generate_windows`]).
    windows: bool,
}

impl Gen<'_, '_> {
    fn dtype(&mut self) -> Result<DType> {
        self.u.choose(&DType::ALL).copied()
    }

    /// An operand, biased toward recent values (long chains) but able to reach
    /// any (fan-out).
    fn pick(&mut self) -> Result<Value> {
        let n = self.pool.len();
        let idx = if self.u.ratio(1u8, 2u8)? {
            n - 1 - self.u.int_in_range(0..=(n - 1).min(3))?
        } else {
            self.u.choose_index(n)?
        };
        Ok(self.pool[idx])
    }

    /// An operand of `dtype`: an existing one, a new constant, or a cast.
    fn operand(&mut self, dtype: DType) -> Result<Value> {
        let candidate = self.pick()?;
        if self.b.dtype(candidate) == Some(dtype) && self.u.ratio(4u8, 5u8)? {
            return Ok(candidate);
        }
        if self.u.ratio(1u8, 3u8)? {
            if self.tensors && self.u.ratio(1u8, 2u8)? {
                // A constant tensor of the candidate's shape, or of its last
                // dimension (a bias that broadcasts).
                let dims = self.fixed_dims(candidate);
                let dims = match dims.split_last() {
                    Some((last, _)) if self.u.ratio(1u8, 2u8)? => vec![*last],
                    _ => dims,
                };
                return self.tensor_const(dtype, &dims);
            }
            let c = scalar(self.u, dtype)?;
            return Ok(self.b.constant(c));
        }
        Ok(self
            .b
            .cast(candidate, dtype)
            .expect("every dtype casts to every dtype"))
    }

    /// The fixed dimensions of a value (tensor mode has no symbolic ones).
    /// `v` reshaped: flattened where it has two axes or more, else given a
    /// leading axis of 1; `None` for a scalar or a symbolic shape.
    fn reshaped(&mut self, v: Value) -> Option<Value> {
        let t = self.b.ty(v).as_tensor()?.clone();
        if t.shape.is_empty() || t.shape.iter().any(|d| matches!(d, Dim::Sym(_))) {
            return None;
        }
        let dims = self.fixed_dims(v);
        let shape = if dims.len() >= 2 {
            vec![Dim::Fixed(dims.iter().product())]
        } else {
            vec![Dim::Fixed(1), Dim::Fixed(dims[0])]
        };
        self.b.op(Op::Reshape(shape), &[v]).ok()
    }

    fn fixed_dims(&self, v: Value) -> Vec<u64> {
        self.b
            .ty(v)
            .as_tensor()
            .map(|t| {
                t.shape
                    .iter()
                    .map(|d| match d {
                        Dim::Fixed(n) => *n,
                        Dim::Sym(_) => 1,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn tensor_const(&mut self, dtype: DType, dims: &[u64]) -> Result<Value> {
        let count = dims.iter().product::<u64>() as usize;
        let mut values = Vec::with_capacity(count);
        let mut draw = Elements::new(count);
        for _ in 0..count {
            values.push(draw.next(self.u, dtype)?);
        }
        let t = TensorConst {
            dtype,
            dims: dims.to_vec(),
            values,
        };
        Ok(self
            .b
            .op(Op::Tensor(Arc::new(t)), &[])
            .expect("a constant of its own shape"))
    }

    /// A constant of `rows` × `k` plus `a`'s sum (`a` of rank `rank`), so
    /// that nothing folds: the left operand of the tensor steps' products.
    fn rows_plus_sum(
        &mut self,
        a: Value,
        rank: usize,
        dtype: DType,
        (rows, k): (u64, u64),
    ) -> Result<Option<Value>> {
        let c = self.tensor_const(dtype, &[rows, k])?;
        Ok(self
            .sum_all(a, rank)
            .and_then(|s| self.b.binary(BinaryOp::Add, c, s).ok()))
    }

    /// A window step on `a` (reshaped to `[n, c, rows, columns]` unless it
    /// is 4-D: a batch of one or, where its elements divide, now and then
    /// two or three, whose small planes the LLVM tier's convolutions
    /// gather into one matmul's columns; one channel or, where its
    /// elements divide, two or three, which grouped convolutions split): a
    /// convolution with
    /// constant weights (now and then scaled by a scalar of the graph) or
    /// a pool, each attribute random (stride,
    /// asymmetric padding, dilation, groups, ceil_mode,
    /// count_include_pad); attributes the typing rejects give nothing.
    fn window_step(&mut self, a: Value, dims: &[u64], dtype: DType) -> Result<Option<Value>> {
        let (a, dims) = if dims.len() == 4 {
            (a, dims.to_vec())
        } else {
            let all: u64 = dims.iter().product();
            let batch = match self.u.int_in_range(0..=3u8)? {
                2 if all.is_multiple_of(2) => 2,
                3 if all.is_multiple_of(3) => 3,
                _ => 1,
            };
            let all = all / batch;
            let chans = match self.u.int_in_range(0..=3u8)? {
                2 if all.is_multiple_of(2) => 2,
                3 if all.is_multiple_of(3) => 3,
                _ => 1,
            };
            let count = all / chans;
            let rows = (1..=count)
                .rev()
                .find(|r| count.is_multiple_of(*r) && r * r <= count)
                .unwrap_or(1);
            let shape = vec![batch, chans, rows, count / rows];
            let fixed = shape.iter().map(|&d| Dim::Fixed(d)).collect();
            match self.b.op(Op::Reshape(fixed), &[a]) {
                Ok(r) => (r, shape),
                Err(_) => return Ok(None),
            }
        };
        let dtype = if dtype.is_numeric() {
            dtype
        } else {
            DType::F32
        };
        let a = self.b.cast(a, dtype).expect("casts are valid");
        let pair = |u: &mut Unstructured<'_>, lo: u32, hi: u32| -> Result<[u32; 2]> {
            Ok([u.int_in_range(lo..=hi)?, u.int_in_range(lo..=hi)?])
        };
        let stride = pair(self.u, 1, 2)?;
        let dilation = pair(self.u, 1, 2)?;
        let mut padding = [0u32; 4];
        for p in &mut padding {
            *p = self.u.int_in_range(0..=2)?;
        }
        if self.u.ratio(1u8, 2u8)? {
            let chans = dims[1];
            // Now and then weights scaled by a scalar of the graph (an
            // input's function), so that derivatives reach the weights; in
            // window mode always, by the sum of `a` where no scalar is at
            // hand, and then mostly with one group, as most layers are.
            let scalars: Vec<Value> = self
                .pool
                .iter()
                .copied()
                .filter(|&v| {
                    self.b.dtype(v) == Some(dtype)
                        && self.b.ty(v).as_tensor().is_some_and(|t| t.is_scalar())
                })
                .collect();
            let scale = if !scalars.is_empty() && (self.windows || self.u.arbitrary()?) {
                Some(*self.u.choose(&scalars)?)
            } else if self.windows && dtype.is_float() {
                self.sum_all(a, 4)
            } else {
                None
            };
            let grouped = chans > 1 && self.u.arbitrary()?;
            let groups = if grouped && !(self.windows && scale.is_some() && self.u.arbitrary()?) {
                chans
            } else {
                1
            };
            // Now and then (in window mode often) 8 or more output
            // channels a group, which the JIT tiers run as matmul panels
            // over the taps, and whose weights' adjoint is a matmul a tap.
            let wide = if self.windows { 2u8 } else { 4u8 };
            let per_group = if self.u.ratio(1u8, wide)? {
                self.u.int_in_range(8..=10u64)?
            } else {
                self.u.int_in_range(1..=3u64)?
            };
            let out = groups * per_group;
            let k = pair(self.u, 1, 3)?;
            let taps = [u64::from(k[0]), u64::from(k[1])];
            let w = if groups == 1 && per_group >= 8 && self.u.ratio(1u8, 3u8)? {
                // Now and then a strided view of the weights, their channel
                // axes swapped (as a gradient's are), which the LLVM tier's
                // panels read by its strides.
                let c = self.tensor_const(dtype, &[chans, out, taps[0], taps[1]])?;
                self.b
                    .op(Op::Transpose(vec![1, 0, 2, 3]), &[c])
                    .unwrap_or(c)
            } else {
                self.tensor_const(dtype, &[out, chans / groups, taps[0], taps[1]])?
            };
            let w = match scale {
                Some(s) => self.b.op(Op::Binary(BinaryOp::Mul), &[w, s]).unwrap_or(w),
                None => w,
            };
            let attrs = Conv2d {
                stride,
                padding,
                dilation,
                groups: groups as u32,
            };
            return Ok(self.b.op(Op::Conv2d(attrs), &[a, w]).ok());
        }
        let avg = dtype.is_float() && self.u.arbitrary()?;
        let kernel = pair(self.u, 1, 3)?;
        let pool = Pool2d {
            kind: if avg { PoolKind::Avg } else { PoolKind::Max },
            kernel,
            stride,
            padding: padding.map(|p| p.min(kernel[0].min(kernel[1]) / 2)),
            dilation: if avg { [1, 1] } else { dilation },
            ceil_mode: self.u.arbitrary()?,
            count_include_pad: avg && self.u.arbitrary()?,
        };
        Ok(self.b.op(Op::Pool2d(pool), &[a]).ok())
    }

    /// A gather from `a` along a random axis, by a constant index (of
    /// rank 0 to 2, now and then an index outside the axis, often
    /// repeating one) or by another pool value cast to an integer, mostly
    /// taken `mod` the axis' extent (so in range), sometimes as it is (so
    /// it may fail). Half the time, of a numeric `a`, an `index_add` into
    /// `a` at that index instead, of a source shaped as the gather: another
    /// pool value of that shape, a constant, or the gather itself (a
    /// gradient's pattern).
    fn gather_step(&mut self, a: Value, dims: &[u64]) -> Result<Option<Value>> {
        let axis = self.u.int_in_range(0..=dims.len() - 1)?;
        let extent = dims[axis] as i64;
        let dtype = *self.u.choose(&[DType::I32, DType::I64])?;
        let other = self.pick()?;
        let small = self.fixed_dims(other).iter().product::<u64>() <= 64;
        let index = if small && self.u.ratio(1u8, 2u8)? {
            let index = self.b.cast(other, dtype).expect("casts are valid");
            if self.u.ratio(4u8, 5u8)? {
                let m = self
                    .b
                    .constant(kiln::ir::semantics::cast(Scalar::I64(extent), dtype));
                self.b
                    .binary(BinaryOp::Mod, index, m)
                    .expect("a mod of one dtype")
            } else {
                index
            }
        } else {
            let rank = self.u.int_in_range(0..=2u8)?;
            let mut shape = Vec::new();
            for _ in 0..rank {
                shape.push(self.u.int_in_range(1..=3u64)?);
            }
            let mut values = Vec::new();
            for _ in 0..shape.iter().product::<u64>() {
                let k = if self.u.ratio(1u8, 16u8)? {
                    *self.u.choose(&[-1, extent])?
                } else {
                    self.u.int_in_range(0..=extent - 1)?
                };
                values.push(kiln::ir::semantics::cast(Scalar::I64(k), dtype));
            }
            let t = TensorConst {
                dtype,
                dims: shape,
                values,
            };
            self.b
                .op(Op::Tensor(Arc::new(t)), &[])
                .expect("a constant of its own shape")
        };
        let dtype = self.b.dtype(a).expect("pool values are tensors");
        if dtype == DType::Bool || !self.u.arbitrary()? {
            return Ok(self.b.op(Op::Gather(axis as u32), &[a, index]).ok());
        }
        let mut shape = dims[..axis].to_vec();
        shape.extend(self.fixed_dims(index));
        shape.extend_from_slice(&dims[axis + 1..]);
        let other = self.pick()?;
        let source = if self.fixed_dims(other) == shape && self.b.dtype(other) == Some(dtype) {
            other
        } else if shape.iter().product::<u64>() <= 64 && self.u.arbitrary()? {
            self.tensor_const(dtype, &shape)?
        } else {
            match self.b.op(Op::Gather(axis as u32), &[a, index]) {
                Ok(g) => g,
                Err(_) => return Ok(None),
            }
        };
        Ok(self
            .b
            .op(Op::IndexAdd(axis as u32), &[a, index, source])
            .ok())
    }

    /// A tree ensemble over `a` taken as rows of features (cast to `f32`
    /// or `f64`, reshaped to 2-D with a random divisor of its size as the
    /// feature count, so that up to 27 rows make full and partial blocks
    /// of a walk's rows): a few small random trees with every test,
    /// missing rule and default side, thresholds at the edges the rules
    /// single out, `f32` or `f64` sums over 1 to 3 outputs.
    fn trees_step(&mut self, a: Value, dims: &[u64]) -> Result<Option<Value>> {
        use kiln::ir::trees::{Child, Missing, SplitTest, Tree, TreeEnsemble, TreeNode};
        let count = dims.iter().product::<u64>();
        if count == 0 {
            return Ok(None);
        }
        let divisors: Vec<u64> = (1..=count).filter(|d| count % d == 0).collect();
        let n_features = *self.u.choose(&divisors)?;
        let rows = count / n_features;
        let in_dtype = *self.u.choose(&[DType::F32, DType::F64])?;
        let x = if self.b.dtype(a) == Some(in_dtype) {
            a
        } else {
            self.b.cast(a, in_dtype).expect("casts are valid")
        };
        let shape = vec![Dim::Fixed(rows), Dim::Fixed(n_features)];
        let Ok(x) = self.b.op(Op::Reshape(shape), &[x]) else {
            return Ok(None);
        };
        let n_outputs = self.u.int_in_range(1..=3u32)?;
        let mut ensemble = TreeEnsemble {
            n_features: n_features as u32,
            dtype: *self.u.choose(&[DType::F32, DType::F64])?,
            init: Vec::new(),
            trees: Vec::new(),
        };
        for _ in 0..n_outputs {
            ensemble.init.push(any_f64(self.u)?);
        }
        const EDGES: &[f64] = &[0.0, -0.0, 1e-36, -1e-35, 0.5, 1.0, -1.0, 2.0, 3.5, 1e300];
        for _ in 0..self.u.int_in_range(0..=4u8)? {
            let mut nodes: Vec<TreeNode> = Vec::new();
            // Grow by splitting a random leaf; leaves are numbered after.
            let mut slots = vec![None::<(usize, bool)>];
            for _ in 0..self.u.int_in_range(0..=6u8)? {
                let pick = self.u.choose_index(slots.len())?;
                let parent = slots.swap_remove(pick);
                let here = nodes.len() as u32;
                if let Some((p, left)) = parent {
                    let side = if left {
                        &mut nodes[p].left
                    } else {
                        &mut nodes[p].right
                    };
                    *side = Child::Node(here);
                }
                let test = match self.u.int_in_range(0..=2u8)? {
                    0 => SplitTest::Le(self.threshold(EDGES)?),
                    1 => SplitTest::Lt(self.threshold(EDGES)?),
                    _ => {
                        let n_words = self.u.int_in_range(1..=2usize)?;
                        let mut words = Vec::with_capacity(n_words);
                        for _ in 0..n_words {
                            words.push(self.u.arbitrary()?);
                        }
                        SplitTest::In(words)
                    }
                };
                let missing = *self
                    .u
                    .choose(&[Missing::None, Missing::Zero, Missing::Nan])?;
                nodes.push(TreeNode {
                    feature: self.u.int_in_range(0..=n_features as u32 - 1)?,
                    test,
                    missing,
                    default_left: self.u.arbitrary()?,
                    left: Child::Leaf(0),
                    right: Child::Leaf(0),
                });
                slots.push(Some((here as usize, true)));
                slots.push(Some((here as usize, false)));
            }
            let mut leaves = Vec::new();
            for slot in slots.into_iter().flatten() {
                let (p, left) = slot;
                let side = if left {
                    &mut nodes[p].left
                } else {
                    &mut nodes[p].right
                };
                *side = Child::Leaf(leaves.len() as u32);
                leaves.push(any_f64(self.u)?);
            }
            if nodes.is_empty() {
                leaves.push(any_f64(self.u)?);
            }
            ensemble.trees.push(Tree {
                output: self.u.int_in_range(0..=n_outputs - 1)?,
                nodes,
                leaves,
            });
        }
        Ok(self.b.op(Op::Trees(Arc::new(ensemble)), &[x]).ok())
    }

    /// A threshold: an edge value, an arbitrary double, or an f32's value.
    fn threshold(&mut self, edges: &[f64]) -> Result<f64> {
        Ok(match self.u.int_in_range(0..=2u8)? {
            0 => *self.u.choose(edges)?,
            1 => any_f64(self.u)?,
            _ => f64::from(f32::from_bits(self.u.arbitrary()?)),
        })
    }

    /// `x @ b` of a float `x` of 5 to 20 rows and `k` steps (a constant
    /// plus `a`'s sum, so nothing folds) and a dense constant `b` exactly
    /// one panel wide: 64 `f32` or 32 `f64` columns (AVX-512's 256-byte
    /// panels), 16 or 8 (64-byte panels), 8 or 4 (Cranelift's 32 bytes).
    /// The JIT tiers' row blocks read such a `b` in place, each `k` block
    /// at its offset, rather than packing it.
    fn one_panel_matmul(&mut self, a: Value, rank: usize, k: u64) -> Result<Option<Value>> {
        let dtype = *self.u.choose(&[DType::F32, DType::F64])?;
        // AVX-512's width half the time: the machines CI runs on.
        let bytes = *self.u.choose(&[256u64, 256, 64, 32])?;
        let cols = bytes / dtype.size_bytes() as u64;
        let rows = self.u.int_in_range(5..=20u64)?;
        let a = self.b.cast(a, dtype).expect("casts are valid");
        let c = self.tensor_const(dtype, &[rows, k])?;
        let Some(x) = self
            .sum_all(a, rank)
            .and_then(|s| self.b.binary(BinaryOp::Add, c, s).ok())
        else {
            return Ok(None);
        };
        let b = self.tensor_const(dtype, &[k, cols])?;
        Ok(self.b.op(Op::MatMul, &[x, b]).ok())
    }

    /// `x @ b` of a column program's rows: `x` one to three float columns
    /// of `n` rows side by side (`[n, k]`, `n` symbolic), `b` a constant of
    /// 1 to 70 columns. The JIT tiers' panels then have a symbolic `m`,
    /// whose rows past the last block of 4 LLVM's 64-byte panels run as one
    /// padded block, stored only where a row is real (0 to 9 rows mostly).
    /// Half the time `b` is `w.T` of a constant `[n, k]` (a `Linear`'s
    /// weight), which LLVM packs in tiles it transposes in registers (`k`
    /// of 1 to 3: no whole tile, so the steps run one by one; and of 9 to
    /// 20 columns side by side: a tile and more). Later steps may combine
    /// the product with another of its shape (an epilogue) or leave it.
    fn column_matmul(&mut self) -> Result<Option<Value>> {
        let dtype = *self.u.choose(&[DType::F32, DType::F64])?;
        let k = self.u.int_in_range(1..=3u64)?;
        let mut cols = Vec::with_capacity(k as usize);
        // The rows' (symbolic) dimension: the columns'.
        let mut rows = None;
        for _ in 0..k {
            let c = self.pick()?;
            let Some(TensorType { shape, .. }) = self.b.ty(c).as_tensor().cloned() else {
                return Ok(None);
            };
            let [n @ Dim::Sym(_)] = &shape[..] else {
                return Ok(None);
            };
            let c = self.b.cast(c, dtype).expect("casts are valid");
            let Ok(c) = self.b.op(Op::Reshape(vec![n.clone(), Dim::Fixed(1)]), &[c]) else {
                return Ok(None);
            };
            rows = Some(n.clone());
            cols.push(c);
        }
        let Some(rows) = rows else { return Ok(None) };
        let x = match &cols[..] {
            [x] => *x,
            _ => match self.b.op(Op::Concat(1), &cols) {
                Ok(x) => x,
                Err(_) => return Ok(None),
            },
        };
        let n = *self.u.choose(&[1u64, 5, 8, 16, 21, 70])?;
        if self.u.arbitrary()? {
            // `x` widened to 9 to 20 columns by a constant broadcast down
            // its rows, times `w.T`.
            let (x, k) = if self.u.arbitrary()? {
                let more = self.u.int_in_range(9..=20u64)? - k;
                let c = self.tensor_const(dtype, &[1, more])?;
                let wide = vec![rows, Dim::Fixed(more)];
                let Ok(c) = self.b.op(Op::BroadcastTo(wide), &[c]) else {
                    return Ok(None);
                };
                match self.b.op(Op::Concat(1), &[x, c]) {
                    Ok(x) => (x, k + more),
                    Err(_) => return Ok(None),
                }
            } else {
                (x, k)
            };
            let w = self.tensor_const(dtype, &[n, k])?;
            let Ok(wt) = self.b.op(Op::Transpose(vec![1, 0]), &[w]) else {
                return Ok(None);
            };
            return Ok(self.b.op(Op::MatMul, &[x, wt]).ok());
        }
        let b = self.tensor_const(dtype, &[k, n])?;
        Ok(self.b.op(Op::MatMul, &[x, b]).ok())
    }

    /// A tensor step: matmul with a constant, transpose, reshape, a
    /// reduction over axes, a slice, a concat, a broadcast_to, a gather, or
    /// a window op.
    fn tensor_step(&mut self) -> Result<Option<Value>> {
        let a = self.pick()?;
        let dims = self.fixed_dims(a);
        let dtype = self.b.dtype(a).expect("pool values are tensors");
        if self.windows && !dims.is_empty() && self.u.arbitrary()? {
            return self.window_step(a, &dims, dtype);
        }
        Ok(match self.u.int_in_range(0..=9u8)? {
            9 if !dims.is_empty() => return self.trees_step(a, &dims),
            7 if !dims.is_empty() => return self.window_step(a, &dims, dtype),
            8 if !dims.is_empty() => return self.gather_step(a, &dims),
            4 if !dims.is_empty() => {
                // Per axis: whole, or start:stop:step within it.
                let mut ranges = Vec::with_capacity(dims.len());
                for &d in &dims {
                    ranges.push(if self.u.ratio(1u8, 3u8)? {
                        None
                    } else {
                        let start = self.u.int_in_range(0..=d - 1)?;
                        let stop = self.u.int_in_range(start + 1..=d)?;
                        let step = *self.u.choose(&[1i64, 2, -1, -2])?;
                        Some(SliceRange { start, stop, step })
                    });
                }
                self.b.op(Op::Slice(ranges), &[a]).ok()
            }
            5 if !dims.is_empty() && dims.iter().product::<u64>() <= 64 => {
                // `a` with itself, another pool value of its shape, or a
                // constant differing along the axis.
                let axis = self.u.int_in_range(0..=dims.len() - 1)?;
                let mut args = vec![a];
                for _ in 0..self.u.int_in_range(1..=2u8)? {
                    let other = self.pick()?;
                    args.push(
                        if self.fixed_dims(other) == dims && self.b.dtype(other) == Some(dtype) {
                            other
                        } else {
                            let mut c = dims.clone();
                            c[axis] = self.u.int_in_range(1..=2u64)?;
                            self.tensor_const(dtype, &c)?
                        },
                    );
                }
                self.b.op(Op::Concat(axis as u32), &args).ok()
            }
            6 if dims.len() < 4 && dims.iter().product::<u64>() <= 32 => {
                // A new leading axis (or, for a scalar, sometimes none),
                // and each 1 possibly widened.
                let mut shape = if dims.is_empty() && self.u.ratio(1u8, 4u8)? {
                    Vec::new()
                } else {
                    vec![self.u.int_in_range(1..=3u64)?]
                };
                for &d in &dims {
                    shape.push(if d == 1 {
                        self.u.int_in_range(1..=3u64)?
                    } else {
                        d
                    });
                }
                let shape = shape.into_iter().map(Dim::Fixed).collect();
                self.b.op(Op::BroadcastTo(shape), &[a]).ok()
            }
            3 if !dims.is_empty() => {
                // Now and then a long last axis (32 to 40 constants after
                // `a`'s elements), where `reduce_min`/`reduce_max` fold in
                // lanes (a running key on LLVM).
                let last = dims.len() - 1;
                let a = if dims.iter().product::<u64>() <= 64 && self.u.ratio(1u8, 4u8)? {
                    let mut c = dims.clone();
                    c[last] = self.u.int_in_range(32..=40u64)?;
                    let tail = self.tensor_const(dtype, &c)?;
                    self.b.op(Op::Concat(last as u32), &[a, tail]).unwrap_or(a)
                } else {
                    a
                };
                // A reduction over a random non-empty set of axes.
                let mut axes: Vec<u32> = (0..dims.len() as u32)
                    .filter(|_| self.u.ratio(1u8, 2u8).unwrap_or(false))
                    .collect();
                if axes.is_empty() {
                    axes.push(self.u.int_in_range(0..=dims.len() as u32 - 1)?);
                }
                let op = *self.u.choose(ReduceOp::ALL)?;
                let keepdim = self.u.arbitrary()?;
                let a = match kiln::ir::typing::reduce_class(op) {
                    class if class.accepts(dtype) => a,
                    _ if op == ReduceOp::Mean => {
                        self.b.cast(a, DType::F64).expect("casts are valid")
                    }
                    _ => self.b.cast(a, DType::I64).expect("casts are valid"),
                };
                self.b.op(Op::ReduceAxes { op, axes, keepdim }, &[a]).ok()
            }
            0 if !dims.is_empty() => {
                let dtype = if dtype.is_numeric() {
                    dtype
                } else {
                    DType::I32
                };
                let a = self.b.cast(a, dtype).expect("casts are valid");
                if self.u.ratio(1u8, 6u8)? {
                    // In one `k` block or, past 128 steps, several.
                    let k = if self.u.arbitrary()? {
                        self.u.int_in_range(129..=150u64)?
                    } else {
                        self.u.int_in_range(1..=16u64)?
                    };
                    return self.one_panel_matmul(a, dims.len(), k);
                }
                let size = dtype.size_bytes() as u64;
                if size >= 4 && self.u.ratio(1u8, 4u8)? {
                    // 1 to 4 rows (a constant plus `a`'s sum, so nothing
                    // folds) by a constant `b` as written past 1 MiB, `k`
                    // 136 to 160 steps, a multiple of 8: the panel tiers
                    // stream `b`, 16 steps a block (8 where `k` is not a
                    // multiple of 16) across chunks of its columns, the last
                    // chunk now and then past the last panel.
                    let rows = self.u.int_in_range(1..=4u64)?;
                    let k = 8 * self.u.int_in_range(17..=20u64)?;
                    let cols = (1 << 20) / (k * size) + self.u.int_in_range(1..=40u64)?;
                    let Some(x) = self.rows_plus_sum(a, dims.len(), dtype, (rows, k))? else {
                        return Ok(None);
                    };
                    let y = self.tensor_const(dtype, &[k, cols])?;
                    return Ok(self.b.op(Op::MatMul, &[x, y]).ok());
                }
                if self.u.ratio(1u8, 6u8)? {
                    // A small batch through a `Linear`: 1 to 16 rows (a
                    // constant plus `a`'s sum, so nothing folds) times
                    // `w.T` of a constant `w` `[n, k]` larger than them,
                    // which LLVM multiplies as written up to 8 rows (12 on
                    // AVX-512), `w.T` packed in tiles it transposes in
                    // registers, and as `(w @ x.T).T` past them (as the
                    // other tiers do).
                    let rows = self.u.int_in_range(1..=16u64)?;
                    let k = self.u.int_in_range(8..=80u64)?;
                    let cols = self.u.int_in_range(17..=130u64)?;
                    let Some(x) = self.rows_plus_sum(a, dims.len(), dtype, (rows, k))? else {
                        return Ok(None);
                    };
                    let w = self.tensor_const(dtype, &[cols, k])?;
                    let y = self.b.op(Op::Transpose(vec![1, 0]), &[w]).ok();
                    return Ok(y.and_then(|y| self.b.op(Op::MatMul, &[x, y]).ok()));
                }
                if self.u.ratio(1u8, 10u8)? {
                    // A sum of 129 to 150 steps (now and then past 2048),
                    // which the JIT tiers' panels fold in `k` blocks (128
                    // steps of AVX-512's panels), each block's sums
                    // starting from what the block before stored: a
                    // constant of 1 to 20 rows plus `a`'s sum (so nothing
                    // folds), times a constant as written or as `x @ w.T`.
                    // A third of them 1 to 4 rows: LLVM multiplies up to 8
                    // (12 on AVX-512) by a `w.T` as written, packing it in
                    // tiles it transposes in registers
                    // (`LowerOptions::transpose_tiles`).
                    let rows = if self.u.ratio(1u8, 3u8)? {
                        self.u.int_in_range(1..=4u64)?
                    } else {
                        self.u.int_in_range(1..=20u64)?
                    };
                    let (k, cols) = if self.u.ratio(1u8, 2u8)? {
                        // Past 2048 steps and 4 panels wide (where the
                        // columns are past 96): `a` streamed, its tiles
                        // running chunks of column blocks in each `k`
                        // block.
                        (
                            self.u.int_in_range(2049..=2080u64)?,
                            self.u.int_in_range(20..=300u64)?,
                        )
                    } else if self.u.ratio(1u8, 3u8)? {
                        (
                            self.u.int_in_range(129..=150u64)?,
                            self.u.int_in_range(30..=70u64)?,
                        )
                    } else {
                        (
                            self.u.int_in_range(129..=150u64)?,
                            self.u.int_in_range(1..=20u64)?,
                        )
                    };
                    // Drawn before the constants, whose elements use up
                    // the bytes (past them every draw is `false`: not one
                    // of 600 cases took `w.T` when it came after them).
                    let transposed = self.u.arbitrary()?;
                    let Some(x) = self.rows_plus_sum(a, dims.len(), dtype, (rows, k))? else {
                        return Ok(None);
                    };
                    let y = if transposed {
                        let w = self.tensor_const(dtype, &[cols, k])?;
                        self.b.op(Op::Transpose(vec![1, 0]), &[w]).ok()
                    } else {
                        Some(self.tensor_const(dtype, &[k, cols])?)
                    };
                    return Ok(y.and_then(|y| self.b.op(Op::MatMul, &[x, y]).ok()));
                }
                if dims.len() == 2 && self.u.ratio(1u8, 4u8)? {
                    // A constant of 5 to 20 rows times `a.T` or every other
                    // column of `a`: a strided `b`, which the JIT tiers'
                    // panels pack by its strides.
                    let rows = self.u.int_in_range(5..=20u64)?;
                    let (b, k) = if self.u.arbitrary()? {
                        (self.b.op(Op::Transpose(vec![1, 0]), &[a]).ok(), dims[1])
                    } else {
                        let every_other = Some(SliceRange {
                            start: 0,
                            stop: dims[1],
                            step: 2,
                        });
                        (
                            self.b.op(Op::Slice(vec![None, every_other]), &[a]).ok(),
                            dims[0],
                        )
                    };
                    let Some(b) = b else { return Ok(None) };
                    let c = self.tensor_const(dtype, &[rows, k])?;
                    return Ok(self.b.op(Op::MatMul, &[c, b]).ok());
                }
                if dims.len() == 2 && self.u.ratio(1u8, 5u8)? {
                    // `a.T` times a constant of 17 to 70 columns: where `a`
                    // is a dense matrix of more than 4 columns and the
                    // product is wider than a panel, the JIT tiers copy
                    // `a.T` densely first (a weight gradient's `g.T @ x`).
                    let cols = self.u.int_in_range(17..=70u64)?;
                    let Some(at) = self.b.op(Op::Transpose(vec![1, 0]), &[a]).ok() else {
                        return Ok(None);
                    };
                    let c = self.tensor_const(dtype, &[dims[0], cols])?;
                    return Ok(self.b.op(Op::MatMul, &[at, c]).ok());
                }
                if dims.len() >= 2 && self.u.ratio(1u8, 3u8)? {
                    // A constant of up to 19 rows on the left: full blocks of
                    // 4 rows in panels, stacks of 4 blocks where the columns
                    // are narrower than a panel, and their remainders.
                    let rows = self.u.int_in_range(1..=19u64)?;
                    let c = self.tensor_const(dtype, &[rows, dims[dims.len() - 2]])?;
                    return Ok(self.b.op(Op::MatMul, &[c, a]).ok());
                }
                let k = *dims.last().expect("rank >= 1");
                // Now and then as wide as a panel (64 f32 or 32 f64
                // columns) and more, so LLVM's panels, their packed `b`
                // and their remainders run; now and then `a @ w.T` of a
                // `w` larger than `a`, which lowering computes as
                // `(w @ a.T).T`.
                let cols = if self.u.ratio(1u8, 6u8)? {
                    self.u.int_in_range(30..=70u64)?
                } else {
                    self.u.int_in_range(1..=5u64)?
                };
                if dims.len() == 2 && self.u.ratio(1u8, 6u8)? {
                    let w = self.tensor_const(dtype, &[cols, k])?;
                    let wt = self.b.op(Op::Transpose(vec![1, 0]), &[w]).ok();
                    return Ok(wt.and_then(|wt| self.b.op(Op::MatMul, &[a, wt]).ok()));
                }
                let b_dims = if self.u.ratio(1u8, 4u8)? {
                    vec![k]
                } else {
                    vec![k, cols]
                };
                let b = self.tensor_const(dtype, &b_dims)?;
                let (x, y) = if self.u.ratio(1u8, 5u8)? && b_dims.len() == 1 {
                    (b, a)
                } else {
                    (a, b)
                };
                self.b.op(Op::MatMul, &[x, y]).ok()
            }
            1 if !dims.is_empty()
                && matches!(dtype, DType::F32 | DType::F64 | DType::I32 | DType::I64)
                && self.u.ratio(1u8, 2u8)? =>
            {
                // A transposed constant of 16 to 20 rows and columns plus
                // `a`'s sum: the JIT tiers read it across its contiguous
                // axis in tiles of 16 rows (`store_all`), with the rows past
                // the last tile after them.
                let rows = self.u.int_in_range(16..=20u64)?;
                let cols = self.u.int_in_range(16..=20u64)?;
                let c = self.tensor_const(dtype, &[cols, rows])?;
                let t = self.b.op(Op::Transpose(vec![1, 0]), &[c]).ok();
                let s = self.sum_all(a, dims.len());
                t.zip(s)
                    .and_then(|(t, s)| self.b.binary(BinaryOp::Add, t, s).ok())
            }
            1 if dims.len() != 1 => {
                let mut perm: Vec<u32> = (0..dims.len() as u32).collect();
                for i in (1..perm.len()).rev() {
                    let j = self.u.int_in_range(0..=i)?;
                    perm.swap(i, j);
                }
                self.b.op(Op::Transpose(perm), &[a]).ok()
            }
            _ => {
                let count: u64 = dims.iter().product();
                let shape: Vec<u64> = match self.u.int_in_range(0..=2u8)? {
                    0 => vec![count],
                    1 => vec![1, count],
                    _ => dims.iter().rev().copied().collect(),
                };
                let shape = shape.into_iter().map(Dim::Fixed).collect();
                self.b.op(Op::Reshape(shape), &[a]).ok()
            }
        })
    }

    /// The sum of all `rank` axes of `a`: a scalar that keeps a constant
    /// operand from folding.
    fn sum_all(&mut self, a: Value, rank: usize) -> Option<Value> {
        let sum = Op::ReduceAxes {
            op: ReduceOp::Sum,
            axes: (0..rank as u32).collect(),
            keepdim: false,
        };
        self.b.op(sum, &[a]).ok()
    }

    fn column_operand(&mut self) -> Result<Option<Value>> {
        let columns: Vec<Value> = self
            .pool
            .iter()
            .copied()
            .filter(|&v| self.b.ty(v).as_tensor().is_some_and(|t| !t.is_scalar()))
            .collect();
        if columns.is_empty() {
            return Ok(None);
        }
        Ok(Some(*self.u.choose(&columns)?))
    }

    fn step(&mut self) -> Result<()> {
        let share = if self.windows { 2u8 } else { 4u8 };
        if self.tensors && self.u.ratio(1u8, share)? {
            if let Some(v) = self.tensor_step()? {
                self.pool.push(v);
            }
            return Ok(());
        }
        if !self.tensors && self.u.ratio(1u8, 16u8)? {
            if let Some(v) = self.column_matmul()? {
                self.pool.push(v);
            }
            return Ok(());
        }
        let value = match self.u.int_in_range(0..=9u8)? {
            0 | 1 => {
                let a = self.pick()?;
                let dtype = self.b.dtype(a).expect("pool values are tensors");
                let ops: Vec<UnaryOp> = UnaryOp::ALL
                    .iter()
                    .copied()
                    .filter(|&op| kiln::ir::typing::unary_class(op).accepts(dtype))
                    .collect();
                if ops.is_empty() {
                    return Ok(());
                }
                let op = *self.u.choose(&ops)?;
                // Half the time a sine's cosine too (or a cosine's sine):
                // the pair the VM runs as one routine (`sincos`).
                let partner = match op {
                    UnaryOp::Sin => Some(UnaryOp::Cos),
                    UnaryOp::Cos => Some(UnaryOp::Sin),
                    _ => None,
                };
                if let Some(partner) = partner {
                    if self.u.ratio(1u8, 2u8)? {
                        if let Ok(v) = self.b.unary(partner, a) {
                            self.pool.push(v);
                        }
                    }
                }
                self.b.unary(op, a)
            }
            2..=4 => {
                let op = *self.u.choose(BinaryOp::ALL)?;
                let class = kiln::ir::typing::binary_class(op);
                let dtypes: Vec<DType> = DType::ALL
                    .into_iter()
                    .filter(|&d| class.accepts(d))
                    .collect();
                let dtype = *self.u.choose(&dtypes)?;
                let a = self.operand(dtype)?;
                let b = self.operand(dtype)?;
                self.b.binary(op, a, b)
            }
            5 if self.u.ratio(1u8, 3u8)? => {
                // isin: sets either side of the chain's limit, drawn from
                // the edge values inputs are biased toward (so rows hit).
                let dtype = *self
                    .u
                    .choose(&[DType::I32, DType::I64, DType::F32, DType::F64])?;
                let a = self.operand(dtype)?;
                let len = match self.u.int_in_range(0..=2u8)? {
                    0 => self.u.int_in_range(0..=4usize)?,
                    // Either side of each tier's chain limit (12, 16, 32).
                    1 => self.u.int_in_range(10..=34usize)?,
                    _ => self.u.int_in_range(20..=70usize)?,
                };
                let mut values = Vec::with_capacity(len);
                for _ in 0..len {
                    values.push(scalar(self.u, dtype)?);
                }
                let set = kiln::ir::semantics::isin_set(values, dtype);
                self.b.op(Op::IsIn(set.into()), &[a])
            }
            5 => {
                let dtype = self.dtype()?;
                let (a, b) = (self.operand(dtype)?, self.operand(dtype)?);
                let op = *self.u.choose(CmpOp::ALL)?;
                self.b.compare(op, a, b)
            }
            6 => {
                let dtype = self.dtype()?;
                let c = self.operand(DType::Bool)?;
                let (a, b) = (self.operand(dtype)?, self.operand(dtype)?);
                self.b.select(c, a, b)
            }
            7 => {
                let a = self.pick()?;
                let to = self.dtype()?;
                self.b.cast(a, to)
            }
            8 => {
                let Some(col) = self.column_operand()? else {
                    return Ok(());
                };
                let op = *self.u.choose(ReduceOp::ALL)?;
                let dtype = self.b.dtype(col).expect("columns are tensors");
                let col = match kiln::ir::typing::reduce_class(op) {
                    class if class.accepts(dtype) => col,
                    _ if op == ReduceOp::Mean => {
                        self.b.cast(col, DType::F64).expect("casts are valid")
                    }
                    _ => self.b.cast(col, DType::I64).expect("casts are valid"),
                };
                self.b.reduce(op, col)
            }
            _ => {
                // A filter can only be an output; or a duplicate node, for CSE.
                if self.u.ratio(1u8, 2u8)? {
                    let Some(col) = self.column_operand()? else {
                        return Ok(());
                    };
                    let mask = self.b.cast(col, DType::Bool).expect("casts are valid");
                    // A tensor of rank 2 does not filter: skip it.
                    if let Ok(sel) = self.b.filter(mask) {
                        self.outputs.push(sel);
                    }
                    return Ok(());
                }
                let a = self.pick()?;
                let node = self.b.graph().node(a).clone();
                if node.args.is_empty() {
                    return Ok(());
                }
                self.b.op(node.op, &node.args)
            }
        };
        if let Ok(v) = value {
            self.pool.push(v);
        }
        Ok(())
    }
}

/// The cases drawn from `tries` byte strings of `len` bytes that xorshift
/// makes from `seed` (a nonzero one), leaving out the draws that make no
/// graph: a fixed stream of graphs (up to 24 operations) for tests that
/// run outside proptest.
pub fn seeded(seed: u64, tries: usize, len: usize) -> impl Iterator<Item = Case> {
    seeded_by(seed, tries, len, generate)
}

/// [`seeded`] from the window mode ([`generate_windows`]).
pub fn seeded_windows(seed: u64, tries: usize, len: usize) -> impl Iterator<Item = Case> {
    seeded_by(seed, tries, len, generate_windows)
}

fn seeded_by(
    mut seed: u64,
    tries: usize,
    len: usize,
    generate: fn(&mut Unstructured, usize) -> Result<Case>,
) -> impl Iterator<Item = Case> {
    (0..tries).filter_map(move |_| {
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        generate(&mut Unstructured::new(&bytes), 24).ok()
    })
}

/// The derivatives of `case`'s graph, over the same inputs: the gradient
/// (reverse mode, `kiln::ir::grad::gradient`) of its first float output
/// with respect to every float input, or, when `jacobian` and the graph has
/// scalar float inputs, every output's Jacobian (forward mode) with respect
/// to them. `None` when there is nothing to differentiate or the graph has
/// an op kiln does not differentiate. The derivative graph is an ordinary
/// graph that every engine must run as the interpreter does.
pub fn derivative(case: &Case, jacobian: bool) -> Option<Case> {
    let verified = kiln::verify(case.graph.clone()).ok()?;
    let g = verified.graph();
    let float = |v| g.ty(v).dtype().is_some_and(DType::is_float);
    let graph = if jacobian {
        if !g.outputs().iter().all(|o| float(o.value)) {
            return None;
        }
        let params: Vec<&str> = g
            .inputs()
            .iter()
            .filter(|i| float(i.value) && g.ty(i.value).as_tensor().is_some_and(|t| t.is_scalar()))
            .map(|i| i.name.as_str())
            .collect();
        if params.is_empty() {
            return None;
        }
        kiln::ir::grad::jacobian(&verified, &params).ok()?
    } else {
        let of = g.outputs().iter().find(|o| float(o.value))?;
        let wrt: Vec<&str> = g
            .inputs()
            .iter()
            .filter(|i| float(i.value))
            .map(|i| i.name.as_str())
            .collect();
        if wrt.is_empty() {
            return None;
        }
        kiln::ir::grad::gradient(&verified, Some(&of.name), &wrt, false).ok()?
    };
    Some(Case {
        graph,
        inputs: case.inputs.clone(),
    })
}

/// `case` split by [`kiln::ir::hoist::hoist`] at the values that do not
/// depend on its scalar inputs (a fit's constants; its first input where
/// it has no scalar one): the rest of the graph, with inputs for the
/// hoisted values that the interpreter computes from the invariant part,
/// and the whole graph's outputs on the interpreter, which the rest's must
/// equal bit for bit. `None` where nothing is hoisted or the whole graph
/// fails on the interpreter (errors are the differential test's).
pub fn hoisted(case: &Case) -> Option<(Case, Vec<Data>)> {
    let verified = kiln::verify(case.graph.clone()).ok()?;
    let g = verified.graph();
    let scalar = |v| g.ty(v).as_tensor().is_some_and(|t| t.is_scalar());
    let mut varying: Vec<&str> = g
        .inputs()
        .iter()
        .filter(|i| scalar(i.value))
        .map(|i| i.name.as_str())
        .collect();
    if varying.is_empty() {
        varying.push(g.inputs().first()?.name.as_str());
    }
    let split = kiln::ir::hoist::hoist(g, &varying, |ty| matches!(ty, Type::Tensor(_)))?;
    let whole = kiln::interp::run(&verified, &case.inputs).ok()?;
    let given = |name: &str| {
        g.inputs()
            .iter()
            .position(|i| i.name == name)
            .map(|k| case.inputs[k].clone())
    };
    let invariant = kiln::verify(split.invariant).ok()?;
    // Computed once for every value of the varying inputs: it cannot read one.
    for input in invariant.graph().inputs() {
        assert!(
            !varying.contains(&input.name.as_str()),
            "the hoisted part reads `{}`, which varies",
            input.name
        );
    }
    let reads: Vec<Data> = invariant
        .graph()
        .inputs()
        .iter()
        .map(|i| given(&i.name))
        .collect::<Option<_>>()?;
    let values = kiln::interp::run(&invariant, &reads).ok()?;
    let outputs = invariant.graph().outputs();
    let inputs = split
        .rest
        .inputs()
        .iter()
        .map(|i| {
            given(&i.name).or_else(|| {
                let k = outputs.iter().position(|o| o.name == i.name)?;
                Some(values[k].clone())
            })
        })
        .collect::<Option<_>>()?;
    Some((
        Case {
            graph: split.rest,
            inputs,
        },
        whole,
    ))
}

/// A random valid graph with up to `max_ops` operations, and inputs for it.
pub fn generate(u: &mut Unstructured, max_ops: usize) -> Result<Case> {
    generate_with(u, max_ops, false)
}

/// A random valid tensor graph in which convolutions (grouped too) and
/// pools are frequent: what the derivative test draws half its cases from,
/// since [`generate`]'s window steps are rare and few of them end up on a
/// differentiable path.
pub fn generate_windows(u: &mut Unstructured, max_ops: usize) -> Result<Case> {
    generate_with(u, max_ops, true)
}

fn generate_with(u: &mut Unstructured, max_ops: usize, windows: bool) -> Result<Case> {
    let tensors = windows || u.ratio(1u8, 4u8)?;
    let columns = !tensors && u.ratio(2u8, 3u8)?;
    // Mostly short columns; one in eight spans several of the VM's blocks
    // of rows and a partial one.
    let n_rows = if !columns {
        0
    } else if u.ratio(1u8, 8u8)? {
        u.int_in_range(0..=700usize)?
    } else {
        u.int_in_range(0..=9usize)?
    };
    let mut gen = Gen {
        u,
        b: Builder::new("fuzz"),
        pool: Vec::new(),
        outputs: Vec::new(),
        tensors,
        windows,
    };
    let n_inputs = gen.u.int_in_range(1..=4usize)?;
    for input_idx in 0..n_inputs {
        let dtype = gen.dtype()?;
        let shape = if tensors {
            // Small fixed shapes of rank 0..=3, with 1s that broadcast.
            let rank = gen.u.int_in_range(0..=3usize)?;
            (0..rank)
                .map(|_| gen.u.int_in_range(1..=3u64).map(Dim::Fixed))
                .collect::<Result<Vec<_>>>()?
        } else if columns && gen.u.ratio(3u8, 4u8)? {
            vec![Dim::Sym("n".into())]
        } else {
            Vec::new()
        };
        let v = gen.b.input(
            &format!("in{input_idx}"),
            Type::Tensor(TensorType { dtype, shape }),
        );
        gen.pool.push(v);
    }
    let n_ops = gen.u.int_in_range(1..=max_ops.max(1))?;
    for _ in 0..n_ops {
        if gen.u.is_empty() {
            break;
        }
        gen.step()?;
    }
    let n_outputs = gen.u.int_in_range(1..=3usize)?;
    for _ in 0..n_outputs {
        let mut v = gen.pick()?;
        // Now and then a reshape of it, as aot_autograd returns the
        // activations it saves for the backward: lowering stores such a
        // value in the reshape's output buffer, where later nodes read it.
        if tensors && gen.u.ratio(1u8, 4u8)? {
            if let Some(r) = gen.reshaped(v) {
                v = r;
            }
        }
        gen.outputs.push(v);
    }
    let Gen {
        u, mut b, outputs, ..
    } = gen;
    for (out_idx, v) in outputs.into_iter().enumerate() {
        b.output(&format!("out{out_idx}"), v);
    }
    let graph = b.finish();
    let mut inputs = Vec::with_capacity(graph.inputs().len());
    for input in graph.inputs() {
        let t = graph
            .ty(input.value)
            .as_tensor()
            .expect("inputs are tensors")
            .clone();
        // A column has `n_rows` elements; a tensor the product of its dims.
        let len = t
            .shape
            .iter()
            .map(|d| match d {
                Dim::Fixed(k) => *k as usize,
                Dim::Sym(_) => n_rows,
            })
            .product();
        inputs.push(if t.is_scalar() {
            Data::Scalar(scalar(u, t.dtype)?)
        } else {
            let mut buf = Buffer::with_capacity(t.dtype, len);
            let mut draw = Elements::new(len);
            for _ in 0..len {
                buf.push(draw.next(u, t.dtype)?);
            }
            Data::Column(buf)
        });
    }
    Ok(Case { graph, inputs })
}

/// The case as a ready-to-commit filetest: the graph in the text format and a
/// `# run:` line with the interpreter's result.
pub fn filetest(case: &Case) -> String {
    let mut text = String::from("# Found by kiln-fuzzgen; expected values from the interpreter.\n");
    text.push_str(&kiln::ir::text::print(&case.graph));
    let inputs: Vec<String> = case
        .graph
        .inputs()
        .iter()
        .zip(&case.inputs)
        .map(|(i, d)| format!("{}={d}", i.name))
        .collect();
    let expect = match interpret(&case.graph, &case.inputs) {
        Ok(Ok(outs)) => case
            .graph
            .outputs()
            .iter()
            .zip(outs)
            .map(|(o, d)| format!("{}={d}", o.name))
            .collect::<Vec<_>>()
            .join(", "),
        Ok(Err(e)) => format!("error: {}", error_kind(&e)),
        Err(e) => format!("error: {e}"),
    };

    text.push_str(&format!("# run: {} => {expect}\n", inputs.join(", ")));
    text
}

/// Runs `graph` as written on the interpreter.
fn interpret(graph: &Graph, inputs: &[Data]) -> Result<ExecResult<Vec<Data>>, kiln::CompileError> {
    let graph = kiln::verify(graph.clone())?;
    Ok(kiln::interp::run(&graph, inputs))
}

fn error_kind(e: &kiln::ExecError) -> String {
    match e {
        // Which failing check a run reports (of several divisions and
        // gathers) is unspecified (docs/semantics.md).
        kiln::ExecError::DivisionByZero { .. } | kiln::ExecError::IndexOutOfRange { .. } => {
            "a failed run-time check".to_string()
        }
        other => other.to_string(),
    }
}

/// Whether two runs agree as the differential test requires: the same bits
/// (every NaN equal), or errors of the same kind (which division by zero or
/// index out of range a fused loop reports first is unspecified).
pub fn same(a: &ExecResult<Vec<Data>>, b: &ExecResult<Vec<Data>>) -> bool {
    match (a, b) {
        (Ok(x), Ok(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.same_data(q)),
        (Err(x), Err(y)) => error_kind(x) == error_kind(y),
        _ => false,
    }
}

/// Runs `case` on the interpreter (the oracle, graph as written) and on every
/// engine of this build, as written and optimized, each in every mode of
/// `kiln::threads::TESTED` with every loop cut (the grain is 0 for the
/// process), and through an `auto` program's switch from Cranelift to LLVM
/// ([`Switching`]); also checks that the text format round-trips. On a
/// mismatch, returns a report ending in a filetest.
pub fn differential(case: &Case) -> std::result::Result<(), String> {
    let mut engines = kiln::engines();
    if let Ok(llvm) = kiln::Tier::Llvm.backend() {
        engines.push(Box::new(Switching));
        let trees = case
            .graph
            .nodes()
            .any(|(_, node)| matches!(node.op, Op::Trees(_)));
        if trees {
            engines.push(Box::new(WalkingTrees(llvm)));
        }
    }
    differential_with(case, &engines)
}

/// A backend with every tree ensemble walked (`LowerOptions::tree_selects`
/// 0): the LLVM tier walks only past 20,000 nodes, which the generator's
/// small ensembles never reach, so its walk (rows side by side, selects
/// LLVM must keep branch-free) runs here on the generator's trees.
pub struct WalkingTrees(pub &'static dyn kiln::kernel::backend::Backend);

impl kiln::kernel::backend::Backend for WalkingTrees {
    fn name(&self) -> &'static str {
        "llvm (trees walked)"
    }

    fn lower_options(&self) -> kiln::kernel::LowerOptions {
        kiln::kernel::LowerOptions {
            tree_selects: 0,
            ..self.0.lower_options()
        }
    }

    fn compile_kernels(
        &self,
        kernels: Vec<kiln::kernel::Kernel>,
        options: &kiln::kernel::backend::BackendOptions,
        symbols: kiln::kernel::backend::Symbols<'_>,
    ) -> kiln::kernel::backend::BackendResult<Vec<kiln::kernel::abi::CompiledKernel>> {
        self.0.compile_kernels(kernels, options, symbols)
    }
}

/// The `auto` tier's switch as an engine: each program starts on Cranelift
/// and asks for LLVM at its first call (code cache off, so it compiles);
/// a run calls it, waits for the switch, calls it again on LLVM's code,
/// and fails unless both calls agree and the second ran on LLVM.
pub struct Switching;

/// A [`Switching`] program.
pub struct SwitchingProgram(kiln::TieredProgram);

impl kiln::Engine for Switching {
    type Program = SwitchingProgram;

    fn name(&self) -> &'static str {
        "auto (switching)"
    }

    fn compile_batch(
        &self,
        graphs: &[kiln::Verified],
        options: &CompileOptions,
    ) -> kiln::CompileResult<Vec<SwitchingProgram>> {
        let options = CompileOptions {
            cache: false,
            ..options.clone()
        };
        let rule = kiln::TierUp::After(std::time::Duration::ZERO);
        graphs
            .iter()
            .map(|g| kiln::TieredProgram::compile(g, &options, rule).map(SwitchingProgram))
            .collect()
    }
}

impl kiln::Program for SwitchingProgram {
    fn verified(&self) -> &kiln::Verified {
        self.0.verified()
    }

    fn run_refs(&self, inputs: &[&Data]) -> ExecResult<Vec<Data>> {
        let unsupported = kiln::ExecError::Unsupported;
        let before = self.0.run_refs(inputs);
        if !self.0.wait(std::time::Duration::from_secs(300)) {
            return Err(unsupported("the tier-up did not finish in 300 s".into()));
        }
        if self.0.tier() != kiln::Tier::Llvm {
            return Err(unsupported(format!(
                "no switch to LLVM: {:?}",
                self.0.stats().state
            )));
        }
        let after = self.0.run_refs(inputs);
        if !same(&before, &after) {
            return Err(unsupported(format!(
                "the switch changed the result: {before:?} before, {after:?} after"
            )));
        }
        before
    }
}

/// [`differential`] on the given engines (for pseudo-engines of the tests,
/// such as wasm modules under an interpreter).
pub fn differential_with(
    case: &Case,
    engines: &[Box<dyn DynEngine>],
) -> std::result::Result<(), String> {
    let graph = &case.graph;
    let printed = kiln::ir::text::print(graph);
    match kiln::ir::text::parse(&printed) {
        Ok(reparsed) if &reparsed == graph => {}
        Ok(_) => return Err(format!("print/parse changed the graph:\n{printed}")),
        Err(e) => return Err(format!("printed graph does not parse: {e}\n{printed}")),
    }
    let oracle = interpret(graph, &case.inputs)
        .map_err(|e| format!("generated graph is invalid: {e}\n{printed}"))?;
    let verified = kiln::verify(graph.clone()).expect("the interpreter verified it");
    kiln::threads::set_grain(0);
    // A crash (a signal) ends the process before any report: with
    // KILN_CASE_DIR set, each case is written there first, one file per
    // test thread, so the last one names the culprit.
    if let Some(dir) = std::env::var_os("KILN_CASE_DIR") {
        let name = format!("case-{:?}.kiln", std::thread::current().id());
        let _ = std::fs::write(std::path::Path::new(&dir).join(name), filetest(case));
    }
    for engine in engines {
        for optimize in [false, true] {
            let options = CompileOptions {
                optimize,
                ..CompileOptions::default()
            };
            let program = engine.compile_dyn(&verified, &options).map_err(|e| {
                format!("{} cannot compile: {e}\n{}", engine.name(), filetest(case))
            })?;
            // Every mode of TESTED, the last one chunks run last first on
            // this thread: a loop claimed independent that is not gives
            // other bits there every time, where threads would only race.
            for (mode, got) in kiln::threads::in_tested_modes(|| program.run(&case.inputs)) {
                if !same(&oracle, &got) {
                    return Err(format!(
                        "{} (optimize: {optimize}, {mode}) disagrees with the interpreter:\n  interpreter: {}\n  {}: {}\n\n{}",
                        engine.name(),
                        show(graph, &oracle),
                        engine.name(),
                        show(graph, &got),
                        filetest(case)
                    ));
                }
            }
        }
    }
    Ok(())
}

fn show(graph: &Graph, r: &ExecResult<Vec<Data>>) -> String {
    match r {
        Ok(outs) => graph
            .outputs()
            .iter()
            .zip(outs)
            .map(|(o, d)| format!("{}={d}", o.name))
            .collect::<Vec<_>>()
            .join(", "),
        Err(e) => format!("error: {e}"),
    }
}
