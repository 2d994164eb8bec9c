//! Tile transposes: the loop nest `for a in 0..T { for b in 0..T { dst[d(a,
//! b)] = src[s(a, b)] } }` whose source index steps by one element along
//! `a` and whose destination index steps by one along `b`, a `T × T` tile
//! copied across its diagonal. Lowering writes such nests where it packs a
//! `b` read across (a transposed dense weight, `x @ w.T`:
//! [`crate::LowerOptions::transpose_tiles`]). As loops they are scalar
//! copies, one strided load an element, and every backend may run them so;
//! a backend with vector shuffles recognizes them ([`tile`]) and loads `T`
//! vectors along `a`, transposes them in registers and stores `T` vectors
//! along `b` (LLVM: 24 shuffles for 8 × 8 `f32` on AVX2, where its loop
//! vectorizer made the strided loads 8 scalar inserts each). A copy
//! changes no bits, so the kernel computes the same either way.

use crate::iterations::{strides, IndexMap};
use crate::{Expr, Extent, Kernel, ParamIdx, Reg, Stmt};
use kiln_ir::{DType, EntityRef, Scalar};

/// The lanes of a tile of `dtype`: 32 bytes of elements (a 256-bit vector)
/// for 4- and 8-byte dtypes; `None` for the others.
pub fn lanes(dtype: DType) -> Option<u32> {
    match dtype.size_bytes() {
        4 => Some(8),
        8 => Some(4),
        _ => None,
    }
}

/// A recognized tile transpose (see the module's documentation).
pub struct Tile<'k> {
    /// `T`: both loops' trip count ([`lanes`] of `dtype`).
    pub lanes: u32,
    /// The outer loop's row (`a`) and the inner loop's (`b`).
    pub rows: (Reg, Reg),
    /// The index arithmetic, in order: the outer body's lets, then the
    /// inner body's but for its load. Evaluated at any `(a, b)`, it leaves
    /// that element's source and destination indices in `src.1` and
    /// `dst.1`.
    pub lets: Vec<&'k Stmt>,
    /// The element type.
    pub dtype: DType,
    /// The buffer read and its element index (one element a step of `a`).
    pub src: (ParamIdx, Reg),
    /// The buffer written and its element index (one element a step of `b`).
    pub dst: (ParamIdx, Reg),
}

/// `Some` where the loop `for row in 0..extent { body }` is a tile
/// transpose: both loops of `T` constant trips ([`lanes`] of the element
/// type), the outer body only `i64` lets and then the inner loop, the
/// inner body only `i64` lets, one load of the source and, last, the store
/// of that value to another buffer; the load's index steps by one along
/// the outer row and the store's by one along the inner row
/// ([`strides`], with `konst` the kernel's `i64` constants).
pub fn tile<'k>(
    kernel: &'k Kernel,
    (extent, row, body): (Extent, Reg, &'k [Stmt]),
    konst: &IndexMap<Reg, i64>,
) -> Option<Tile<'k>> {
    let (
        Stmt::Loop {
            extent: inner_extent,
            row: inner,
            body: inner_body,
            ..
        },
        outer_lets,
    ) = body.split_last()?
    else {
        return None;
    };
    let (Stmt::Store(dst, Some(dst_index), value), rest) = inner_body.split_last()? else {
        return None;
    };
    let index_let = |s: &Stmt| {
        matches!(s, Stmt::Let(r, e) if kernel.reg_type(*r) == DType::I64
            && matches!(e, Expr::Const(Scalar::I64(_)) | Expr::Binary(..)))
    };
    let mut load = None;
    let mut lets: Vec<&Stmt> = outer_lets.iter().collect();
    for s in rest {
        match s {
            Stmt::Let(r, Expr::Load(src, at)) if r == value && load.is_none() => {
                load = Some((*src, *at));
            }
            s if index_let(s) => lets.push(s),
            _ => return None,
        }
    }
    let (src, src_index) = load?;
    let dtype = kernel.reg_type(*value);
    let t = lanes(dtype)?;
    let fixed = Extent::Fixed(u64::from(t));
    if extent != fixed
        || *inner_extent != fixed
        || src == *dst
        || !outer_lets.iter().all(index_let)
        || lets.iter().any(|s| s.operands().contains(value))
        || [src, *dst]
            .iter()
            .any(|p| kernel.params[p.index()].array_type().map(|a| a.dtype) != Some(dtype))
    {
        return None;
    }
    let flat: Vec<Stmt> = lets.iter().map(|s| (*s).clone()).collect();
    let along_outer = strides(row, &flat, konst, &kernel.regs);
    let along_inner = strides(*inner, &flat, konst, &kernel.regs);
    if along_outer.get(&src_index) != Some(&1) || along_inner.get(dst_index) != Some(&1) {
        return None;
    }
    Some(Tile {
        lanes: t,
        rows: (row, *inner),
        lets,
        dtype,
        src: (src, src_index),
        dst: (*dst, *dst_index),
    })
}

/// The shuffles that transpose `T` vectors of `T` lanes, `T` 8 or 4
/// (`None` for other counts): `rows[i][j]` comes out as `cols[j][i]`.
/// `shuffle(x, y, mask)` picks lane `m` of `x` followed by `y` for each
/// `m` of `mask` (LLVM's `shufflevector`). The masks are AVX2's
/// instructions: for 8 lanes `unpcklps`/`unpckhps`, `shufps` and
/// `vperm2f128` (24 shuffles); for 4 `unpcklpd`/`unpckhpd` and
/// `vperm2f128` (8). Other targets' back ends lower them as they can.
pub fn network<V: Copy, E>(
    rows: &[V],
    mut shuffle: impl FnMut(V, V, &[u32]) -> Result<V, E>,
) -> Result<Option<Vec<V>>, E> {
    let r = rows;
    let mut out = Vec::with_capacity(r.len());
    match r.len() {
        8 => {
            const LO: [u32; 8] = [0, 8, 1, 9, 4, 12, 5, 13];
            const HI: [u32; 8] = [2, 10, 3, 11, 6, 14, 7, 15];
            const PAIRS_LO: [u32; 8] = [0, 1, 8, 9, 4, 5, 12, 13];
            const PAIRS_HI: [u32; 8] = [2, 3, 10, 11, 6, 7, 14, 15];
            const HALF_LO: [u32; 8] = [0, 1, 2, 3, 8, 9, 10, 11];
            const HALF_HI: [u32; 8] = [4, 5, 6, 7, 12, 13, 14, 15];
            let mut u = Vec::with_capacity(8);
            for i in 0..4 {
                u.push(shuffle(r[2 * i], r[2 * i + 1], &LO)?);
                u.push(shuffle(r[2 * i], r[2 * i + 1], &HI)?);
            }
            let mut s = Vec::with_capacity(8);
            for h in [0, 4] {
                s.push(shuffle(u[h], u[h + 2], &PAIRS_LO)?);
                s.push(shuffle(u[h], u[h + 2], &PAIRS_HI)?);
                s.push(shuffle(u[h + 1], u[h + 3], &PAIRS_LO)?);
                s.push(shuffle(u[h + 1], u[h + 3], &PAIRS_HI)?);
            }
            for mask in [&HALF_LO, &HALF_HI] {
                for i in 0..4 {
                    out.push(shuffle(s[i], s[i + 4], mask)?);
                }
            }
        }
        4 => {
            const LO: [u32; 4] = [0, 4, 2, 6];
            const HI: [u32; 4] = [1, 5, 3, 7];
            const HALF_LO: [u32; 4] = [0, 1, 4, 5];
            const HALF_HI: [u32; 4] = [2, 3, 6, 7];
            let u = [
                shuffle(r[0], r[1], &LO)?,
                shuffle(r[0], r[1], &HI)?,
                shuffle(r[2], r[3], &LO)?,
                shuffle(r[2], r[3], &HI)?,
            ];
            for mask in [&HALF_LO, &HALF_HI] {
                out.push(shuffle(u[0], u[2], mask)?);
                out.push(shuffle(u[1], u[3], mask)?);
            }
        }
        _ => return Ok(None),
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::{network, tile};
    use crate::{iterations, lower, LowerOptions, Stmt};

    /// How many loops of `src`'s kernel (lowered with `options`) are tile
    /// transposes.
    fn tiles(src: &str, options: &LowerOptions) -> usize {
        let graph = kiln_ir::text::parse(src).expect("the test graph parses");
        let graph = kiln_ir::verify(graph).expect("the test graph verifies");
        let kernel = lower(&graph, options).expect("lowers");
        let konst = iterations::constants(&kernel.body);
        let mut found = 0;
        let mut stack = vec![kernel.body.as_slice()];
        while let Some(body) = stack.pop() {
            for stmt in body {
                if let Stmt::Loop {
                    extent, row, body, ..
                } = stmt
                {
                    if tile(&kernel, (*extent, *row, body), &konst).is_some() {
                        found += 1;
                    } else {
                        stack.push(body);
                    }
                }
            }
        }
        found
    }

    #[test]
    fn a_few_rows_by_a_transposed_weight_pack_it_in_tiles() {
        // A batch of 1 to 8 through a `Linear` (`x @ w.T`, `w` `[128,
        // 100]`), 1 to 12 on AVX-512's 256-byte panels
        // (`matmul::rows_by_transposed_tiles`): with the option one nest of
        // tiles in the pack of `w.T` (100 steps: 12 tiles and 4 rows past
        // them); without it (`(w @ x.T).T`, Cranelift's and the VM's
        // lowering), none. A batch past them is `(w @ x.T).T` either way.
        let linear = |dtype: &str, m: u64| {
            format!(
                "v0: {dtype}[{m}, 100] = input \"x\"\nv1: {dtype}[128, 100] = input \"w\"\n\
                 v2: {dtype}[100, 128] = transpose v1 [1, 0]\n\
                 v3: {dtype}[{m}, 128] = matmul v0, v2\noutput \"y\" = v3\n"
            )
        };
        let llvm = |bytes| LowerOptions {
            panels: Some(bytes),
            padded_rest_rows: bytes <= 64,
            transpose_tiles: true,
            ..LowerOptions::default()
        };
        let without = LowerOptions {
            transpose_tiles: false,
            ..llvm(64)
        };
        for dtype in ["f32", "f64", "i32", "i64"] {
            for (bytes, most) in [(64, 8), (256, 12)] {
                for m in [1, 4, 6, most] {
                    assert_eq!(
                        tiles(&linear(dtype, m), &llvm(bytes)),
                        1,
                        "{dtype} {bytes} {m}"
                    );
                }
                assert_eq!(
                    tiles(&linear(dtype, most + 1), &llvm(bytes)),
                    0,
                    "{dtype} {bytes}"
                );
            }
            assert_eq!(tiles(&linear(dtype, 1), &without), 0, "{dtype}");
        }
        // Bools (bytes) have no tiles.
        let mask = "v0: bool[40, 16] = input \"m\"\nv1: bool[16, 40] = transpose v0 [1, 0]\n\
                    output \"t\" = v1\n";
        assert_eq!(tiles(mask, &llvm(64)), 0);
    }

    /// The network on vectors of `(row, lane)` labels (interned, so that
    /// they are `Copy`): lane `j` of output `i` is input `j`'s lane `i`.
    #[test]
    fn the_shuffle_network_transposes() {
        for t in [4usize, 8] {
            let mut vectors: Vec<Vec<(usize, usize)>> =
                (0..t).map(|i| (0..t).map(|j| (i, j)).collect()).collect();
            let rows: Vec<usize> = (0..t).collect();
            let cols = network(&rows, |x, y, mask| {
                let both: Vec<(usize, usize)> =
                    vectors[x].iter().chain(&vectors[y]).copied().collect();
                vectors.push(mask.iter().map(|&m| both[m as usize]).collect());
                Ok::<_, ()>(vectors.len() - 1)
            })
            .unwrap()
            .expect("4 and 8 lanes have a network");
            for (i, &c) in cols.iter().enumerate() {
                let want: Vec<(usize, usize)> = (0..t).map(|j| (j, i)).collect();
                assert_eq!(vectors[c], want, "{t} lanes, output {i}");
            }
        }
        assert!(network(&[0, 1], |x, _, _| Ok::<_, ()>(x))
            .unwrap()
            .is_none());
    }
}
