//! Lowering of `matmul` to loop nests: the i, k, j nest that accumulates
//! each result row in place (the VM's), and panels of 4 rows × a backend's
//! width of columns (256 bytes for AVX-512), whose column loop a vectorizer
//! runs in vector registers (the JIT tiers', [`crate::LowerOptions::panels`]).
//!
//! Both keep the semantics' order: every result element folds its products
//! in `k` order from the identity, each step `acc + a * b` a fused
//! multiply-add of floats ([`Lowerer::mul_add`], docs/semantics.md).
//! Neither reassociates a sum to go faster.

use super::{Epilogue, Loc, View};
use crate::lower::Lowerer;
use crate::{Expr, Extent, Param, ParamIdx, Reg, Stmt};
use kiln_ir::op::{BinaryOp, CmpOp, ReduceOp};
use kiln_ir::scalar::Scalar;
use kiln_ir::semantics::reduce_identity;
use kiln_ir::types::{DType, Dim};

/// Rows of a panel ([`crate::LowerOptions::panels`]).
pub(super) const PANEL_ROWS: u32 = 4;
/// The most rows of `x @ w.T` (`w` a dense `[n, k]` weight: torch's
/// `Linear`) that a backend which transposes tiles in registers
/// ([`crate::LowerOptions::transpose_tiles`]) multiplies as written, `w.T`
/// packed in tiles, rather than as `(w @ x.T).T`, on panels `panel_bytes`
/// wide. `(w @ x.T).T`'s `b` is `x.T`: `m` real columns, a narrow block of
/// one vector a row where `m` is at most 16 (8 on 64-byte panels), so its
/// 4 sums wait on the fused multiply-add's latency, each `k` step 4
/// broadcasts of `w`. As written, 16 sums (8 on 64-byte panels) run at full
/// rate, for a pack of `w.T` and one pass a block of 4 rows. On a Zen 5
/// core (AVX-512, one thread, µs, `(w @ x.T).T` → as written): `[8, 3072]
/// @ w[768, 3072].T` 847 → 356, `[12, 3072]` 845 → 435, `[16, 3072]` 843 →
/// 509, but `[16, 768] @ w[3072, 768].T` 434 → 560 and `[16, 784] @ w[256,
/// 784].T` 37 → 41; `[12, 768] @ w[768, 768].T` 137 → 121. On 64-byte
/// panels 9 to 16 rows are two vectors a row, 8 sums: `(w @ x.T).T` runs at
/// full rate there (a Zen 3 core's `Linear(768, 3072)` took 974–1,015 µs
/// at batch 1, 976–980 at batch 8 that way; 554–604 at batch 4 as written,
/// so about 800 at batch 8).
pub(super) fn rows_by_transposed_tiles(panel_bytes: u32) -> u64 {
    let blocks = if panel_bytes >= 256 { 3 } else { 2 };
    blocks * u64::from(PANEL_ROWS)
}
/// The most row blocks a padded rest block narrower than a panel runs at
/// once (16 rows: its 16 sums a vector each, as many as a full panel's).
const MAX_STACK: u32 = 4;
/// Log2 of the row blocks of a panel tile (32 blocks: 128 rows), which
/// pack their column block of `b` once. Measured on 512³ f32 (Zen 5, one
/// thread): 64-row tiles ran 8 % slower than packing once per column
/// block, 128-row tiles 2 %, 256-row tiles alike; 128 rows still cut a
/// `Linear(768, 3072)`'s `(w @ x.T).T` into 24 groups of rows.
const ROW_GROUP_LOG: i64 = 5;
/// The fewest tiles of a matrix's rest block (the columns past the last
/// full block) where its rows allow (row groups of 32 to 128 rows): as
/// many as a 16-core machine's threads. They all read one rest panel,
/// packed before them (`Panel::Prepacked`): packed in each tile instead,
/// `[48, 768] @ w[768, 768].T` took 394 µs on one Zen 5 thread, 353 as one
/// loop, 362 so.
const REST_TILES: u64 = 16;
/// Log2 of the row blocks of a tile where there are fewer than 4 column
/// blocks (8 blocks: 32 rows), so that the tiles still split many ways:
/// ResNet-18 (its 7×7 and 14×14 planes are one to four column blocks) ran
/// in 16.7–17.9 ms on two Zen 5 threads with them, 20.9–22.7 with 128-row
/// tiles.
const FEW_COLUMNS_GROUP_LOG: i64 = 3;

/// Where a row group's rows of `a` over all of `k` outgrow this many bytes
/// (about a core's L2: 1 MiB on Zen 4, 2 MiB on Emerald Rapids), `a` is
/// *streamed*: a tile runs several column blocks inside each `k` block,
/// rather than every `k` block inside each column block, so that its `k`
/// block of `a` is read from memory once for them all. GPT-2's LM head's
/// `g @ w` (`[256, 50257] @ [50257, 768]`, f32) read its 51 MB `g` twelve
/// times (once a column block) and packed its 154 MB `w` twice (once a row
/// group of 128 rows).
const STREAMED_A_BYTES: u64 = 1 << 20;
/// Log2 of the most row blocks of a streamed `a`'s row group (512 rows:
/// 256 KiB of `a` a `k` block in f32 on AVX-512), each group packing every
/// block of `b` it reads.
const STREAM_GROUP_LOG: i64 = 7;
/// The most column blocks a streamed `a`'s tile runs in each `k` block:
/// their sums wait in `d` between blocks (512 rows × 4 blocks of 256
/// bytes: 512 KiB).
const STREAM_SPAN: i64 = 4;
/// Where a fixed `m` of at most [`PANEL_ROWS`] rows multiplies a dense `b`
/// of more than this many bytes (more than a core's L2 keeps from one call
/// to the next), `b` is *streamed*: read where it is, in `k` blocks of
/// [`STREAMED_B_STEPS`] steps, each run across a chunk of column blocks
/// ([`STREAMED_B_SPAN_BYTES`]), the sums waiting in `d` between blocks.
/// A column block over all of `k` loads one line of `b` a `k` step, each a
/// row of `b` apart, which no prefetcher follows (two lines where `b` is
/// not 64-byte aligned, as NumPy's are not): `[1, 768] @ [768, 3072]`
/// (GPT-2's `Conv1D` at one token, f32, NumPy's arrays) took 826 µs on one
/// Zen 3 thread that way, 274 streamed in chunks of 8 KiB (MKL 204).
const STREAMED_B_BYTES: u64 = 1 << 20;
/// The `k` steps of a streamed `b`'s block: that many rows of `b`, each
/// read in one run across the chunk's columns; half as many where `b`'s
/// rows are a multiple of [`SET_STRIDE_BYTES`] apart, whose lines all fall
/// in one L1 set (8 ways on Zen 3 and 4). On one Zen 3 thread (µs, LLVM,
/// 16 steps against 8): `[4, 3072] @ [3072, 768]` 362–371 against 449–479,
/// `[4, 768] @ [768, 2304]` 277–295 against 337–358; `[1, 768] @ [768,
/// 3072]`, rows 12 KiB apart, 656–662 against 306–332.
const STREAMED_B_STEPS: u64 = 16;
/// The bytes between rows whose lines share an L1 set (a 32 KiB, 8-way
/// L1's way: 4 KiB).
const SET_STRIDE_BYTES: u64 = 4 << 10;
/// The most bytes of a row of `b` a streamed `b`'s chunk spans (its
/// columns): a `b` wider than [`STREAM_TILES`] of them is cut into chunks
/// this wide, else into as many as leave each at least
/// [`STREAMED_B_MIN_SPAN_BYTES`] of a row. Chunks are tiles that threads
/// share, and a thread reads its chunk's rows in runs as long as the
/// chunk is wide: on one Zen 3 thread (µs, LLVM, chunks of 8 KiB against
/// 2 KiB) `[1, 768] @ [768, 3072]` 270–296 against 322–324, `[4, 3072] @
/// [3072, 768]` 337–358 against 364–407; on two threads one chunk of a
/// 768-column `b` ran on one thread, 2 KiB chunks on both: `[4, 3072] @
/// [3072, 768]` 342–363 against 225–252 (the old column-block tiles: 242–
/// 256).
const STREAMED_B_SPAN_BYTES: i64 = 8 << 10;
/// The least bytes of a row a streamed `b`'s chunk spans where `b` is
/// narrower than [`STREAM_TILES`] chunks of [`STREAMED_B_SPAN_BYTES`].
const STREAMED_B_MIN_SPAN_BYTES: i64 = 2 << 10;
/// The fewest tiles a streamed `a`'s product is cut into where its column
/// blocks allow, so that it still splits across threads. Fewer tiles read
/// `a` fewer times: GPT-2's `g @ w` (one row group, 12 column blocks) took
/// 128 ms on one Emerald Rapids thread in 2 tiles, 136 in 4, 145 in 8 and
/// 161 in 12 (torch 117-123); in tiles of 128 rows × 1 block, 180.
const STREAM_TILES: i64 = 8;

/// The bytes of a packed panel (`k` steps × the panel's row of `bytes`):
/// past it, a column block runs in `k` blocks, each packing its rows, and
/// the sums wait in the destination between them (a convolution's blocks
/// are whole input channels of taps, at least one). 32 KiB is a Zen 4
/// core's L1 data cache (an Emerald Rapids core has 48): a block's panel
/// stays in L1 while every row block of the tile reads it, where a whole
/// panel streams from L2 for each (its 256 bytes a `k` step for 16 fused
/// multiply-adds, more than an Intel core's L2 gives at that rate).
/// AVX-512's panels of 256 bytes fold 128 steps a block: on an Emerald
/// Rapids core (one thread, best calls) a `Linear(768, 3072)` on 128 rows
/// went from 112 to 127 GFLOP/s, the batch-64 MLP from 103 to 147,
/// ResNet-18's 3×3 layer from 95 to 134 (docs/performance.md); the models
/// did not move measurably on that noisy machine. Cranelift's panels of 32
/// bytes fold 1024 (their sums stay in L1 either way: blocks of 256 took
/// its 512³ from 40 to 27 GFLOP/s on Zen 5).
const PANEL_BLOCK_BYTES: u64 = 32 << 10;

/// The `k` steps one panel folds: all of them (`k0` none), or the block of
/// `extent` steps from `k0`, whose sums start from the identity in the
/// first block (`k0` 0) and from what the block before stored in the
/// destination in the others.
#[derive(Clone, Copy)]
struct Steps {
    k0: Option<Reg>,
    extent: Extent,
    /// `a`'s `k` as a convolution's (input channel, kernel row, kernel
    /// column), each with its own stride ([`ConvTaps::weights`]).
    split: Option<Split>,
}

/// A convolution's weights read where they are, `[out, in, kh, kw]` with
/// any strides: step `k = (ic * kh + ky) * kw + kx` of a panel row is at
/// `ic`, `ky` and `kx` times their strides (`None`: an axis of extent 1),
/// the `k` loop three loops. A gradient's flipped, channel-swapped weights
/// are such a view; a dense copy of them cost 7 % of ResNet-18's training
/// step (LLVM ran it in gathers and scatters).
#[derive(Clone, Copy)]
pub(super) struct Split {
    pub(super) kernel: [u32; 2],
    pub(super) strides: [Option<Reg>; 3],
}

/// Which rows of a panel's block are its own, to store: the first `n`, or
/// the first as many as a register holds (1 to 3, a symbolic `m`'s rows
/// past its last block). The others are a padded rest block's repeats of
/// its last real row, read and never stored
/// ([`crate::LowerOptions::padded_rest_rows`]).
#[derive(Clone, Copy)]
enum Stored {
    First(usize),
    Upto(Reg),
}

/// A panel's rows and which of them it stores, where its columns start in
/// `b` and in `d`, and its width and the columns it stores
/// ([`Lowerer::panel`]).
type PanelAt<'r> = ((&'r [Reg], Stored), (Reg, Reg), (Extent, Extent));

/// Where a panel tile reads its column block of `b` from.
#[derive(Clone, Copy)]
enum Panel {
    /// Copied to this scratch `[k, w]` panel first (`w` columns).
    Packed(ParamIdx, u32),
    /// `b` itself: dense and one panel wide.
    InPlace,
    /// This scratch `[k, w]` panel, packed over all of `k` before the
    /// tiles (a matrix's rest block, whose tiles all read it).
    Prepacked(ParamIdx, u32),
}

/// A matmul's row blocks in groups of `2^log` ([`Lowerer::row_groups`]):
/// the log as a register, how many groups (at least one, for the rows past
/// the last block) and the last one's index.
struct RowGroups {
    log: Reg,
    groups: Reg,
    last: Reg,
}

/// A convolution's `b` as a matmul sees it, never built: row
/// `k = ic * T + t` (input channel `ic` of the group, tap `t` of the
/// kernel's `T` in row-major order) of batch rows `(n, g)` is the
/// contiguous run of `src` from plane `(n, g * per_group + ic)`'s start
/// plus `shifts[t]`: the wide rows a tap reads ([`super::window`]).
/// Packing a column block copies those runs.
pub(super) struct ConvTaps {
    /// The convolution's zero-padded input in stride phases, `[n, c, .., ..]`.
    pub(super) src: View,
    /// Input channels per group.
    pub(super) per_group: u64,
    /// Where each tap starts reading within a plane.
    pub(super) shifts: Vec<i64>,
}

/// A panel's columns of `dtype` for panels of `bytes`: at least one
/// element a row, a power of two (its log shifts).
pub(super) fn panel_width(bytes: u32, dtype: DType) -> u32 {
    (bytes.next_power_of_two() / dtype.size_bytes() as u32).max(1)
}

impl Lowerer<'_> {
    /// `dest = a @ b`: for every result element, a sum over `k` in order from
    /// the identity, `acc = fma(a, b, acc)` (docs/semantics.md).
    pub(super) fn matmul(
        &mut self,
        out: &mut Vec<Stmt>,
        (av, bv, d): (&View, &View, &View),
        epi: Option<Epilogue<'_>>,
        dtype: DType,
    ) {
        let (a, da, sa) = (av.param, &av.dims, &av.strides);
        let (b, db, sb) = (bv.param, &bv.dims, &bv.strides);
        let (dest, dims) = (d.param, &d.dims);
        let (a_mat, b_mat) = (da.len() >= 2, db.len() >= 2);
        let k_dim = da[da.len() - 1].clone();
        let batch = dims.len() - usize::from(a_mat) - usize::from(b_mat);
        // Batch strides of each operand against the result's batch axes.
        // Batch axes step over whole matrices: each operand's own (full)
        // strides, aligned to the result's batch axes, `None` where it
        // broadcasts (a missing axis or a 1).
        let batch_strides = |own: &[Option<Reg>], src: &[Dim]| -> Vec<Option<Reg>> {
            let n_src = src.len().saturating_sub(2);
            let lead = batch - n_src;
            (0..batch)
                .map(|axis| match axis.checked_sub(lead) {
                    Some(a) if src[a] != Dim::Fixed(1) => own[a],
                    _ => None,
                })
                .collect()
        };
        let a_batch = batch_strides(sa, da);
        let b_batch = batch_strides(sb, db);
        let (a_i, a_k) = (a_mat.then(|| sa[da.len() - 2]).flatten(), sa[da.len() - 1]);
        let (b_k, b_j) = if b_mat {
            (sb[db.len() - 2], sb[db.len() - 1])
        } else {
            (sb[0], None)
        };
        // Where `a[batch.., i, k]` is: its index registers and their strides
        // (`rest[0]` is the result's i axis when `a` is a matrix).
        let a_index = |batch_rows: &[Reg], rest: &[Reg], k: Reg| {
            let mut rows = batch_rows.to_vec();
            let mut strides = a_batch.clone();
            if a_mat {
                rows.push(rest[0]);
                strides.push(a_i);
            }
            rows.push(k);
            strides.push(a_k);
            (rows, strides)
        };
        let out_strides = d.strides.clone();
        let identity = self.emit(
            out,
            dtype,
            Expr::Const(reduce_identity(ReduceOp::Sum, dtype)),
            None,
        );
        if let (true, true, Some(bytes)) = (a_mat, b_mat, self.panels) {
            let strides = [a_batch, vec![a_i, a_k], b_batch, vec![b_k, b_j]];
            self.matmul_panels(out, (av, bv, d), &strides, bytes, epi, dtype, (None, None));
            return;
        }
        debug_assert!(epi.is_none() || b_mat, "epilogues need a matrix b");
        if !b_mat {
            // `[.., m, k] @ [k]`: each element's sum in a register, k innermost
            // (both operands are read contiguously).
            let var = self.new_var(reduce_identity(ReduceOp::Sum, dtype));
            self.nest(out, dims, |lw, body, rows| {
                let (batch_rows, rest) = rows.split_at(batch);
                body.push(Stmt::Set(var, identity));
                let k = lw.new_reg(DType::I64, Some("k"));
                let mut inner = Vec::new();
                let (a_rows, a_strides) = a_index(batch_rows, rest, k);
                let mut b_rows: Vec<Reg> = batch_rows.to_vec();
                let mut b_strides = b_batch.clone();
                b_rows.push(k);
                b_strides.push(b_k);
                let ia = lw.flat(&mut inner, av.offset, &a_rows, &a_strides);
                let ib = lw.flat(&mut inner, bv.offset, &b_rows, &b_strides);
                let x = lw.emit(&mut inner, dtype, Expr::Load(a, ia), None);
                let y = lw.emit(&mut inner, dtype, Expr::Load(b, ib), None);
                let acc = lw.emit(&mut inner, dtype, Expr::Var(var), None);
                let next = lw.mul_add(&mut inner, dtype, x, y, acc);
                inner.push(Stmt::Set(var, next));
                let extent = lw.extent(&k_dim);
                body.push(Stmt::loop_of(extent, k, inner));
                let result = lw.emit(body, dtype, Expr::Var(var), None);
                let to = lw.flat(body, None, rows, &out_strides);
                body.push(Stmt::Store(dest, Some(to), result));
            });
            return;
        }
        // `.. @ [.., k, n]`: i, k, j order, each result row accumulated in
        // the destination: `dest[i, j] = dest[i, j] + a[i, k] * b[k, j]` for k
        // in order. Every element still sums in k order from the identity,
        // and the innermost loop (j) reads b and dest contiguously, so it
        // vectorizes across j without reassociating anything.
        let j_dim = dims[dims.len() - 1].clone();
        let outer = &dims[..dims.len() - 1];
        let d_strides = out_strides.clone();
        self.nest(out, outer, |lw, body, rows| {
            let (batch_rows, rest) = rows.split_at(batch);
            let j_extent = lw.extent(&j_dim);
            // dest[.., i, :] = identity
            let j0 = lw.new_reg(DType::I64, Some("j"));
            let mut init = Vec::new();
            let mut d_rows = rows.to_vec();
            d_rows.push(j0);
            let to = lw.flat(&mut init, None, &d_rows, &d_strides);
            init.push(Stmt::Store(dest, Some(to), identity));
            body.push(Stmt::loop_of(j_extent, j0, init));
            let k = lw.new_reg(DType::I64, Some("k"));
            let mut k_body = Vec::new();
            let (a_rows, a_strides) = a_index(batch_rows, rest, k);
            let ia = lw.flat(&mut k_body, av.offset, &a_rows, &a_strides);
            let x = lw.emit(&mut k_body, dtype, Expr::Load(a, ia), None);
            let j = lw.new_reg(DType::I64, Some("j"));
            let mut j_body = Vec::new();
            let mut b_rows: Vec<Reg> = batch_rows.to_vec();
            let mut b_strides = b_batch.clone();
            b_rows.extend([k, j]);
            b_strides.extend([b_k, b_j]);
            let ib = lw.flat(&mut j_body, bv.offset, &b_rows, &b_strides);
            let y = lw.emit(&mut j_body, dtype, Expr::Load(b, ib), None);
            let mut d_rows = rows.to_vec();
            d_rows.push(j);
            let to = lw.flat(&mut j_body, None, &d_rows, &d_strides);
            let acc = lw.emit(&mut j_body, dtype, Expr::Load(dest, to), None);
            let next = lw.mul_add(&mut j_body, dtype, x, y, acc);
            j_body.push(Stmt::Store(dest, Some(to), next));
            k_body.push(Stmt::loop_of(j_extent, j, j_body));
            let k_extent = lw.extent(&k_dim);
            body.push(Stmt::loop_of(k_extent, k, k_body));
            // The row is complete: its epilogue, in place.
            if let Some(epi) = epi {
                let j = lw.new_reg(DType::I64, Some("j"));
                let mut e_body = Vec::new();
                let mut e_rows = rows.to_vec();
                e_rows.push(j);
                lw.epilogue_at(&mut e_body, epi, d, &e_rows);
                body.push(Stmt::loop_of(j_extent, j, e_body));
            }
        });
    }

    /// `d[rows] = epilogue(...)`, reading the matmul's (or convolution's)
    /// element there.
    pub(super) fn epilogue_at(
        &mut self,
        body: &mut Vec<Stmt>,
        epi: Epilogue<'_>,
        d: &View,
        rows: &[Reg],
    ) {
        let whole = Loc::Fused {
            value: epi.value,
            dims: d.dims.clone(),
        };
        let rows: Vec<Option<Reg>> = rows.iter().copied().map(Some).collect();
        let x = self.read(body, epi.locs, &whole, &rows);
        let at = self.view_index(body, d, &rows);
        body.push(Stmt::Store(d.param, Some(at), x));
    }

    /// `dest = a @ b` for matrices (with batch axes) in panels
    /// ([`crate::LowerOptions::panels`]): for each block of `nr` columns
    /// (`bytes` of them), each block of [`PANEL_ROWS`] rows (then each
    /// remaining row) is one [`Self::panel`], in tiles of row groups ×
    /// column blocks; the columns past the last full block are one padded
    /// block (a fixed `n`) or a block of their own width. Every element
    /// folds in `k` order from the identity.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn matmul_panels(
        &mut self,
        out: &mut Vec<Stmt>,
        (a, b, d): (&View, &View, &View),
        strides: &[Vec<Option<Reg>>; 4],
        bytes: u32,
        epi: Option<Epilogue<'_>>,
        dtype: DType,
        (taps, split): (Option<&ConvTaps>, Option<Split>),
    ) {
        let dims = d.dims.clone();
        let batch = dims.len() - 2;
        let k_dim = a.dims[a.dims.len() - 1].clone();
        let (m_dim, n_dim) = (dims[batch].clone(), dims[batch + 1].clone());
        let nr = panel_width(bytes, dtype);
        let (nr_log, mr_log) = (
            nr.trailing_zeros() as i64,
            PANEL_ROWS.trailing_zeros() as i64,
        );
        let i64_op = |lw: &mut Self, body: &mut Vec<Stmt>, op: BinaryOp, x: Reg, y: i64| {
            let y = lw.i64_const(body, y);
            lw.emit(body, DType::I64, Expr::Binary(op, x, y), None)
        };
        // The block's rows, each its own `[nr]` buffer (a loop storing to
        // one buffer at one place per row is what a vectorizer takes).
        let mut acc: Vec<ParamIdx> = (0..PANEL_ROWS)
            .map(|_| {
                self.param(Param::Scratch {
                    dtype,
                    shape: vec![Dim::Fixed(u64::from(nr))],
                })
            })
            .collect();
        // A column block of `b` is copied to a dense `[k, nr]` panel first
        // where more than one block of rows reads it: `b`'s own rows are a
        // whole row of `b` apart, often a power of two of bytes, and such
        // strides fall into a handful of cache sets. A `b` read across
        // (`x @ w.T`) is packed for a few rows too where the backend
        // transposes its tiles ([`crate::LowerOptions::transpose_tiles`]):
        // read where it is, each column of a `k` step is a row of `w` apart.
        let pack = match m_dim {
            _ if taps.is_some() => true,
            Dim::Fixed(m) => {
                m > u64::from(PANEL_ROWS) || (self.transpose_tiles && self.across(&strides[3]))
            }
            Dim::Sym(_) => true,
        };
        // A few rows by a large dense `b`, streamed ([`STREAMED_B_BYTES`]):
        // the steps of its `k` blocks, which divide `k`, and the column
        // blocks of its chunks, [`STREAM_TILES`] where each then spans
        // STREAMED_B_MIN_SPAN_BYTES to STREAMED_B_SPAN_BYTES of a row (a
        // power of two, as STREAM_SPAN is).
        let streamed_b = match (&k_dim, &n_dim) {
            (Dim::Fixed(k), Dim::Fixed(n))
                if !pack
                    && batch == 0
                    && taps.is_none()
                    && split.is_none()
                    && b.dense
                    && *n >= 2 * u64::from(nr)
                    && k.saturating_mul(*n)
                        .saturating_mul(dtype.size_bytes() as u64)
                        > STREAMED_B_BYTES =>
            {
                let row_bytes = n.saturating_mul(dtype.size_bytes() as u64);
                let first = if row_bytes % SET_STRIDE_BYTES == 0 {
                    STREAMED_B_STEPS / 2
                } else {
                    STREAMED_B_STEPS
                };
                let per = i64::from(bytes.next_power_of_two());
                let even = (n >> nr_log)
                    .div_ceil(STREAM_TILES as u64)
                    .next_power_of_two();
                let span = (even as i64).clamp(
                    (STREAMED_B_MIN_SPAN_BYTES / per).max(1),
                    (STREAMED_B_SPAN_BYTES / per).max(1),
                );
                [first, STREAMED_B_STEPS / 2]
                    .into_iter()
                    .find(|&s| *k > s && k % s == 0)
                    .map(|steps| (steps, span))
            }
            _ => None,
        };
        let pack = pack || streamed_b.is_some();
        // k blocks where the panel would outgrow L1: `kc` steps (a
        // multiple of a convolution's taps).
        let steps = (PANEL_BLOCK_BYTES / (u64::from(nr) * dtype.size_bytes() as u64)).max(1);
        // A convolution's `k` (taps, or weights read by their own strides)
        // is blocked in whole input channels of taps.
        let taps_per_channel = match (taps, split) {
            (Some(taps), _) => Some(taps.shifts.len() as u64),
            (
                None,
                Some(Split {
                    kernel: [kh, kw], ..
                }),
            ) => Some(u64::from(kh * kw)),
            (None, None) => None,
        };
        let kc = match (&k_dim, taps_per_channel) {
            _ if !pack => None,
            _ if streamed_b.is_some() => streamed_b.map(|(steps, _)| steps),
            (Dim::Fixed(k), Some(t)) => {
                let block = (steps / t).max(1) * t;
                (*k > block).then_some(block)
            }
            (Dim::Fixed(k), None) => (*k > steps).then_some(steps),
            (Dim::Sym(_), _) => Some(steps),
        };
        let panel_rows = kc.map_or(k_dim.clone(), Dim::Fixed);
        let few_columns = matches!(n_dim, Dim::Fixed(n) if n.div_ceil(u64::from(nr)) < 4);
        let group_log = if few_columns {
            FEW_COLUMNS_GROUP_LOG
        } else {
            ROW_GROUP_LOG
        };
        // A row group's `a` past L2 over all of `k`: its tiles run several
        // column blocks in each `k` block ([`STREAMED_A_BYTES`]).
        let streamed = streamed_b.is_some()
            || kc.is_some()
                && taps.is_none()
                && split.is_none()
                && match k_dim {
                    Dim::Fixed(k) => {
                        let group_rows = u64::from(PANEL_ROWS) << group_log;
                        group_rows * k * dtype.size_bytes() as u64 > STREAMED_A_BYTES
                    }
                    Dim::Sym(_) => false,
                };
        // Where `b` is dense and one block wide (`n` is `nr`: a batch-64
        // `Linear`'s `(w @ x.T).T` in f32 on AVX-512, `x.T` copied densely
        // first), each of its `k` blocks already is the packed panel, rows
        // `nr` apart: the tiles read it in place rather than each copying
        // it (eight copies of 200 KB a call for the MLP's first layer).
        let in_place = streamed_b.is_some()
            || taps.is_none() && split.is_none() && b.dense && n_dim == Dim::Fixed(u64::from(nr));
        let packed = pack.then(|| {
            if in_place {
                return Panel::InPlace;
            }
            Panel::Packed(
                self.param(Param::Scratch {
                    dtype,
                    shape: vec![panel_rows.clone(), Dim::Fixed(u64::from(nr))],
                }),
                nr,
            )
        });
        let outer = dims[..batch].to_vec();
        // The nest's index arithmetic, before it (at the kernel's top for
        // a matrix, where the runtime reads a chunk loop's trip count: a
        // convolution's tiles split within its batch element and group).
        let me = self.extent(&m_dim);
        let m = self.emit(out, DType::I64, Expr::ExtentValue(me), None);
        let ne = self.extent(&n_dim);
        let n = self.emit(out, DType::I64, Expr::ExtentValue(ne), None);
        let col_blocks = i64_op(self, out, BinaryOp::ShrLogical, n, nr_log);
        let n_full = i64_op(self, out, BinaryOp::Shl, col_blocks, nr_log);
        let n_rest = self.i64_binary(out, BinaryOp::Sub, n, n_full);
        let row_blocks = i64_op(self, out, BinaryOp::ShrLogical, m, mr_log);
        let m_full = i64_op(self, out, BinaryOp::Shl, row_blocks, mr_log);
        let m_rest = self.i64_binary(out, BinaryOp::Sub, m, m_full);
        let ke = self.extent(&k_dim);
        let k_total = self.emit(out, DType::I64, Expr::ExtentValue(ke), None);
        // Where the rows past the last block run as one padded block
        // ([`crate::LowerOptions::padded_rest_rows`]): `Some(Some(r))` for
        // a fixed `m`'s `r`, `Some(None)` for a symbolic `m`'s (as many as
        // its extent leaves, 0 to 3).
        let rest_rows = match m_dim {
            _ if !self.padded_rest_rows => None,
            Dim::Fixed(m) if m % u64::from(PANEL_ROWS) == 0 => None,
            Dim::Fixed(m) => Some(Some(m % u64::from(PANEL_ROWS))),
            Dim::Sym(_) => Some(None),
        };
        // The columns past the last full block. Where their number is
        // known (a fixed `n`), as a block as wide as the power of two at
        // or above it (at least one 64-byte vector), `b`'s columns packed
        // with zeros after them: the block runs in vectors like a full one
        // and only the real columns are stored (ViT's 197 tokens leave 5:
        // one 16-wide block, rather than a loop of 5 whose sums stay in
        // memory). Else at their width.
        let zero = self.i64_const(out, 0);
        let one = self.i64_const(out, 1);
        let (rest_block, rest_cols, has_rest) = match n_dim {
            Dim::Fixed(n) if n % u64::from(nr) != 0 => {
                let left = (n % u64::from(nr)) as u32;
                let vector = (64 / dtype.size_bytes() as u32).max(1);
                let w = left.next_power_of_two().max(vector).min(nr);
                // A matrix's over all of `k` (its tiles read it: below).
                let steps = if batch > 0 { &panel_rows } else { &k_dim };
                let param = self.param(Param::Scratch {
                    dtype,
                    shape: vec![steps.clone(), Dim::Fixed(u64::from(w))],
                });
                // Its rows in blocks of PANEL_ROWS × `nr / w` (below).
                let rows = PANEL_ROWS * (nr / w).clamp(1, MAX_STACK);
                while acc.len() < rows as usize {
                    acc.push(self.param(Param::Scratch {
                        dtype,
                        shape: vec![Dim::Fixed(u64::from(nr))],
                    }));
                }
                (Some((w, param)), Extent::Fixed(u64::from(left)), one)
            }
            Dim::Fixed(_) => (None, Extent::Fixed(0), zero),
            Dim::Sym(_) => {
                let any = self.i64_binary(out, BinaryOp::Min, n_rest, one);
                (None, Extent::Reg(n_rest), any)
            }
        };
        // Tiles of up to 2^ROW_GROUP_LOG row blocks × one column block:
        // tile `t` is row group `t / blocks`, column block `t % blocks`,
        // and packs its own block of `b`. A chunk of tiles spans both the
        // rows and the columns, so a `Linear` layer's few column blocks
        // (its 197 tokens as the columns of `(w @ x.T).T`: 3 blocks and the
        // rest) still split many ways; with fewer than 4 column blocks of a
        // fixed `n` (a convolution's 7×7 planes: one) the groups are
        // 2^FEW_COLUMNS_GROUP_LOG row blocks. The last group also takes
        // the rows past the last block.
        //
        // Within a batch's loops (a convolution's batch element and group,
        // a batched matmul), the rest block is the last column block of
        // each row group's tiles, so that the nest is one loop inside them,
        // which chunks split. A matrix's rest block is a tile loop of its
        // own over row groups after the tiles (Cranelift's tiles ran its
        // panels at half speed with the rest block in them: regalloc2).
        let rest_in_tiles = batch > 0 && !matches!(rest_cols, Extent::Fixed(0));
        // A streamed `a`'s tiles are a row group × a chunk of column
        // blocks (the rest block stays a loop of its own after them).
        let streamed = streamed && !rest_in_tiles;
        // Its row groups of 512 rows, or, where that leaves fewer than
        // STREAM_TILES tiles of one column block each, of as few as make
        // them (down to 128 rows): ViT-B/16's `Linear(3072, 768)` as
        // `(w @ x.T).T`, 768 rows by 3 blocks of its 197 tokens, in groups
        // of 256 rows.
        let group_log = match (&m_dim, &n_dim) {
            _ if !streamed => group_log,
            (Dim::Fixed(m), Dim::Fixed(n)) => {
                let row_blocks = m >> mr_log;
                let col_blocks = n >> nr_log;
                let tiles = |log: i64| row_blocks.div_ceil(1 << log).max(1) * col_blocks;
                (ROW_GROUP_LOG..=STREAM_GROUP_LOG)
                    .rev()
                    .find(|&log| tiles(log) >= STREAM_TILES as u64)
                    .unwrap_or(ROW_GROUP_LOG)
            }
            _ => STREAM_GROUP_LOG,
        };
        // `groups` is the row groups that hold a block (at least one, for
        // the rows past the last block): a group of none would make
        // tiles that do nothing, and a chunk of them idles while another
        // works (512 rows were 5 groups, the last empty).
        let group = 1i64 << group_log;
        let row_groups = self.row_groups(out, row_blocks, group_log);
        let groups = row_groups.groups;
        // Tiles a row group: its column blocks, or for a streamed `a` its
        // chunks of them, at most STREAM_SPAN blocks each, and as many as
        // make STREAM_TILES tiles in all where there are blocks enough.
        let blocks = if rest_in_tiles {
            self.i64_binary(out, BinaryOp::Add, col_blocks, has_rest)
        } else if streamed {
            // No division here: the runtime computes the tile count from
            // the kernel's top-level arithmetic, and a division there stays
            // behind its check (the product then ran on one thread).
            // STREAM_SPAN is a power of two; the groups, where `m` is
            // fixed, are counted now.
            let most = streamed_b.map_or(STREAM_SPAN, |(_, span)| span);
            let span_log = i64::from(most.trailing_zeros());
            let spread = i64_op(self, out, BinaryOp::Add, col_blocks, most - 1);
            let fewest = i64_op(self, out, BinaryOp::ShrLogical, spread, span_log);
            if streamed_b.is_some() {
                // The chunks of the span ([`STREAMED_B_SPAN_BYTES`]).
                fewest
            } else {
                let wanted = match m_dim {
                    Dim::Fixed(m) => {
                        let groups = (m >> mr_log).div_ceil(group as u64).max(1) as i64;
                        (STREAM_TILES + groups - 1) / groups
                    }
                    Dim::Sym(_) => STREAM_TILES,
                };
                let wanted = i64_op(self, out, BinaryOp::Min, col_blocks, wanted);
                self.i64_binary(out, BinaryOp::Max, fewest, wanted)
            }
        } else {
            col_blocks
        };
        let tiles = self.mul(out, groups, blocks);
        // Never 0: no tile divides by it then (the tile loop is empty).
        let per_group = self.i64_binary(out, BinaryOp::Max, blocks, one);
        // A matrix's rest block (below) in tiles of its own: row groups of
        // 2^`log` row blocks, the largest up to ROW_GROUP_LOG that leaves
        // REST_TILES of them (down to FEW_COLUMNS_GROUP_LOG), which all read
        // its rest panel, packed over all of `k` before them (where `n` is
        // fixed: `Panel::Prepacked`). As one loop over every row block, its
        // `k` blocks outermost, the nest was sequential: `x @ w.T` of 16
        // rows on AVX-512, `(w @ x.T).T` and so all rest block, ran on one
        // thread at any count (`[16, 3072] @ w[768, 3072].T`: 723–767 µs on
        // one Zen 5 thread, 727–779 on two).
        let rest_tiles = (!rest_in_tiles && !matches!(rest_cols, Extent::Fixed(0))).then(|| {
            let log = match m_dim {
                Dim::Fixed(m) => {
                    let row_blocks = m >> mr_log;
                    (FEW_COLUMNS_GROUP_LOG..=ROW_GROUP_LOG)
                        .rev()
                        .find(|&log| row_blocks.div_ceil(1 << log) >= REST_TILES)
                        .unwrap_or(FEW_COLUMNS_GROUP_LOG)
                }
                Dim::Sym(_) => ROW_GROUP_LOG,
            };
            let rest_groups = self.row_groups(out, row_blocks, log);
            let panel = rest_block.map(|(w, param)| {
                let all_k = self.extent(&k_dim);
                let packing = (b, strides, &[][..]);
                self.pack_panel(out, packing, param, (n_full, rest_cols, w), (None, all_k));
                (w, Panel::Prepacked(param, w))
            });
            (rest_groups, panel)
        });
        self.nest(out, &outer, |lw, body, brows| {
            // The epilogue of a block of rows × `cols` columns from `j0`,
            // once it is complete, in place.
            // Only the rows it stores (`Stored`): the first `n` in one loop,
            // else each in its own.
            let epilogue = |lw: &mut Self,
                            body: &mut Vec<Stmt>,
                            (rows, stored): (&[Reg], Stored),
                            j0: Reg,
                            cols| {
                let Some(epi) = epi else { return };
                let each_row = |lw: &mut Self, body: &mut Vec<Stmt>, rows: &[Reg]| {
                    let j = lw.new_reg(DType::I64, Some("j"));
                    let mut e_body = Vec::new();
                    let col = lw.i64_binary(&mut e_body, BinaryOp::Add, j0, j);
                    for &i in rows {
                        let mut at = brows.to_vec();
                        at.extend([i, col]);
                        lw.epilogue_at(&mut e_body, epi, d, &at);
                    }
                    body.push(Stmt::loop_of(cols, j, e_body));
                };
                match stored {
                    Stored::First(n) => each_row(lw, body, &rows[..n]),
                    Stored::Upto(_) => {
                        for (q, &i) in rows.iter().enumerate() {
                            lw.if_stored(body, q, stored, |lw, body| each_row(lw, body, &[i]));
                        }
                    }
                }
            };
            // A block of `rows` × `width` columns computed over `steps`, its
            // first `cols` stored (`width` is `cols` but for a padded rest
            // block).
            let panel = |lw: &mut Self,
                         body: &mut Vec<Stmt>,
                         (b, b_j0, strides): (&View, Reg, &[Vec<Option<Reg>>; 4]),
                         rows: (&[Reg], Stored),
                         j0: Reg,
                         (width, cols): (Extent, Extent),
                         steps: Steps| {
                let views = (a, b, d, &acc[..]);
                let at = (rows, (b_j0, j0), (width, cols));
                lw.panel(body, views, strides, brows, at, steps, dtype);
            };
            // Rows of one column block (starting at `j0`, `cols` wide, or
            // with `padded` a block of that width packed with zeros past
            // `cols`): `count` blocks of PANEL_ROWS from block `first`, then
            // `rest` rows from `m_full` (one at a time, or one padded
            // block: `rest_rows`); in `k` blocks where
            // the packed panel would outgrow the caches (`kc`). With `span`,
            // that many full column blocks from `j0`, one after another
            // inside each `k` block (a streamed `a`).
            let row_loops = |lw: &mut Self,
                             body: &mut Vec<Stmt>,
                             (j0, cols, padded): (Reg, Extent, Option<(u32, Panel)>),
                             (first, count, rest): (Reg, Reg, Reg),
                             span: Option<Reg>| {
                let width = padded.map_or(cols, |(w, _)| Extent::Fixed(u64::from(w)));
                let packing = match padded {
                    Some((_, panel)) => Some(panel),
                    None => packed,
                };
                // A padded block narrower than the panel runs `stack` row
                // blocks at a time (16 rows of a 16-wide f32 block), so that
                // as many sums are in flight as in a full panel: 4 rows of
                // one vector each wait on the fused multiply-add's latency
                // (by that count, ViT's 5 tokens past 192 took about a third
                // of a full block's time for a sixteenth of its columns).
                let stack = padded.map_or(1, |(w, _)| (nr / w).clamp(1, MAX_STACK));
                // Each row block's and rest row's registers, in `body`.
                // `rows` a block's, the first `stored` of them its own (the
                // others a padded rest block's repeats, read, never stored).
                type Each<'e, L> = dyn FnMut(&mut L, &mut Vec<Stmt>, &[Reg], Stored) + 'e;
                let blocks = |lw: &mut Self, body: &mut Vec<Stmt>, each: &mut Each<'_, Self>| {
                    let (mut first, mut count) = (first, count);
                    if stack > 1 {
                        let s_log = i64::from(stack.trailing_zeros());
                        let stacks = i64_op(lw, body, BinaryOp::ShrLogical, count, s_log);
                        let is = lw.new_reg(DType::I64, Some("is"));
                        let mut is_body = Vec::new();
                        let skip = i64_op(lw, &mut is_body, BinaryOp::Shl, is, s_log);
                        let block = lw.i64_binary(&mut is_body, BinaryOp::Add, first, skip);
                        let top = i64_op(lw, &mut is_body, BinaryOp::Shl, block, mr_log);
                        let rows: Vec<Reg> = (0..i64::from(PANEL_ROWS * stack))
                            .map(|r| i64_op(lw, &mut is_body, BinaryOp::Add, top, r))
                            .collect();
                        each(lw, &mut is_body, &rows, Stored::First(rows.len()));
                        body.push(Stmt::loop_of(Extent::Reg(stacks), is, is_body));
                        // The row blocks past the last stack, one at a time.
                        let done = i64_op(lw, body, BinaryOp::Shl, stacks, s_log);
                        first = lw.i64_binary(body, BinaryOp::Add, first, done);
                        count = lw.i64_binary(body, BinaryOp::Sub, count, done);
                    }
                    let ib = lw.new_reg(DType::I64, Some("ib"));
                    let mut ib_body = Vec::new();
                    let block = lw.i64_binary(&mut ib_body, BinaryOp::Add, first, ib);
                    let top = i64_op(lw, &mut ib_body, BinaryOp::Shl, block, mr_log);
                    let rows: Vec<Reg> = (0..i64::from(PANEL_ROWS))
                        .map(|r| i64_op(lw, &mut ib_body, BinaryOp::Add, top, r))
                        .collect();
                    each(lw, &mut ib_body, &rows, Stored::First(rows.len()));
                    body.push(Stmt::loop_of(Extent::Reg(count), ib, ib_body));
                    // The rows past the last block start at `m_full`, which
                    // is `(first + count) << mr_log` where there are any
                    // (the last group's), computed so from the tile: a
                    // tile's stores addressed by its own index arithmetic
                    // are what tells the analysis that tiles write apart
                    // (`iterations`), where the rest block's tiles share
                    // their columns.
                    let end = lw.i64_binary(body, BinaryOp::Add, first, count);
                    let m_full = i64_op(lw, body, BinaryOp::Shl, end, mr_log);
                    match rest_rows {
                        // The rows past the last block as one block (a loop
                        // that runs once where this group has them), its
                        // last real row repeated in the missing ones.
                        Some(left) => {
                            let once = lw.i64_binary(body, BinaryOp::Min, rest, one);
                            let ir = lw.new_reg(DType::I64, Some("ir"));
                            let mut ir_body = Vec::new();
                            let ib = &mut ir_body;
                            let (rows, stored): (Vec<Reg>, _) = match left {
                                Some(left) => {
                                    let last = left as i64 - 1;
                                    let rows = (0..i64::from(PANEL_ROWS))
                                        .map(|r| i64_op(lw, ib, BinaryOp::Add, m_full, r.min(last)))
                                        .collect();
                                    (rows, Stored::First(left as usize))
                                }
                                None => {
                                    let last = i64_op(lw, ib, BinaryOp::Sub, rest, 1);
                                    let rows = (0..i64::from(PANEL_ROWS))
                                        .map(|r| {
                                            let r = i64_op(lw, ib, BinaryOp::Min, last, r);
                                            lw.i64_binary(ib, BinaryOp::Add, m_full, r)
                                        })
                                        .collect();
                                    (rows, Stored::Upto(rest))
                                }
                            };
                            each(lw, &mut ir_body, &rows, stored);
                            body.push(Stmt::loop_of(Extent::Reg(once), ir, ir_body));
                        }
                        None => {
                            let ir = lw.new_reg(DType::I64, Some("ir"));
                            let mut ir_body = Vec::new();
                            let i = lw.i64_binary(&mut ir_body, BinaryOp::Add, m_full, ir);
                            each(lw, &mut ir_body, &[i], Stored::First(1));
                            body.push(Stmt::loop_of(Extent::Reg(rest), ir, ir_body));
                        }
                    }
                };
                let pack = |lw: &mut Self,
                            body: &mut Vec<Stmt>,
                            packing: Panel,
                            j0: Reg,
                            ks: (Option<Reg>, Extent)| {
                    let view = match packing {
                        Panel::Packed(param, w) => match taps {
                            Some(taps) => lw.pack_taps(body, taps, brows, param, (j0, cols, w), ks),
                            None => {
                                let from = (b, strides, brows);
                                lw.pack_panel(body, from, param, (j0, cols, w), ks)
                            }
                        },
                        Panel::Prepacked(param, w) => {
                            // Its rows from `k0` on.
                            let mut view = lw.packed_view(body, param, w);
                            if let Some(k0) = ks.0 {
                                let w = lw.i64_const(body, i64::from(w));
                                view.offset = Some(lw.mul(body, k0, w));
                                view.dense = false;
                            }
                            view
                        }
                        Panel::InPlace => {
                            // `b` from row `k0` on, its batch rows as they are.
                            let mut view = b.clone();
                            if let Some(k0) = ks.0 {
                                view.offset =
                                    Some(lw.flat(body, b.offset, &[k0], &strides[3][..1]));
                                view.dense = false;
                            }
                            return (view, j0, strides.clone());
                        }
                    };
                    let zero = lw.i64_const(body, 0);
                    let mut s = strides.clone();
                    s[2] = vec![None; batch];
                    s[3] = view.strides.clone();
                    (view, zero, s)
                };
                let all_k = lw.extent(&k_dim);
                match (kc, packing) {
                    (Some(kc), Some(packing)) => {
                        // k blocks of `kc` steps: each packs its rows of
                        // the column block, and each row's sums continue
                        // from where the block before stored them in `d`.
                        // Their number a constant where `k` is fixed, so
                        // that the runtime's estimate of a tile's work
                        // (`stages::Work`) counts every block.
                        let fixed_blocks = match k_dim {
                            Dim::Fixed(k) => Some(k.div_ceil(kc) as i64),
                            Dim::Sym(_) => None,
                        };
                        let kc = lw.i64_const(body, kc as i64);
                        let k_blocks = match fixed_blocks {
                            Some(n) => lw.i64_const(body, n),
                            None => {
                                let end = lw.i64_binary(body, BinaryOp::Add, k_total, kc);
                                let end = lw.i64_binary(body, BinaryOp::Sub, end, one);
                                lw.i64_binary(body, BinaryOp::Div, end, kc)
                            }
                        };
                        let kb = lw.new_reg(DType::I64, Some("kb"));
                        let mut kb_body = Vec::new();
                        let kbb = &mut kb_body;
                        let k0 = lw.mul(kbb, kb, kc);
                        // A streamed `b`'s blocks are all whole: a constant
                        // count of steps, a short loop the backend keeps.
                        let extent = match streamed_b {
                            Some((steps, _)) => Extent::Fixed(steps),
                            None => {
                                let left = lw.i64_binary(kbb, BinaryOp::Sub, k_total, k0);
                                Extent::Reg(lw.i64_binary(kbb, BinaryOp::Min, left, kc))
                            }
                        };
                        let steps = Steps {
                            k0: Some(k0),
                            extent,
                            split,
                        };
                        // One column block's rows over this `k` block.
                        let column = |lw: &mut Self, body: &mut Vec<Stmt>, j0: Reg| {
                            let (b_panel, b_j0, b_strides) =
                                pack(lw, body, packing, j0, (Some(k0), steps.extent));
                            let b_at = (&b_panel, b_j0, &b_strides);
                            blocks(lw, body, &mut |lw, body, rows, stored| {
                                panel(lw, body, b_at, (rows, stored), j0, (width, cols), steps)
                            });
                        };
                        // Each column block of the span (or `j0`'s alone),
                        // its epilogue once every `k` block has run.
                        let spanned = |lw: &mut Self,
                                       body: &mut Vec<Stmt>,
                                       each: &mut dyn FnMut(&mut Self, &mut Vec<Stmt>, Reg)| {
                            let Some(span) = span else {
                                return each(lw, body, j0);
                            };
                            let jb = lw.new_reg(DType::I64, Some("jb"));
                            let mut jb_body = Vec::new();
                            let skip = i64_op(lw, &mut jb_body, BinaryOp::Shl, jb, nr_log);
                            let at = lw.i64_binary(&mut jb_body, BinaryOp::Add, j0, skip);
                            each(lw, &mut jb_body, at);
                            body.push(Stmt::loop_of(Extent::Reg(span), jb, jb_body));
                        };
                        spanned(lw, kbb, &mut |lw, body, j0| column(lw, body, j0));
                        body.push(Stmt::loop_of(Extent::Reg(k_blocks), kb, kb_body));
                        if epi.is_some() {
                            spanned(lw, body, &mut |lw, body, j0| {
                                blocks(lw, body, &mut |lw, body, rows, stored| {
                                    epilogue(lw, body, (rows, stored), j0, cols)
                                })
                            });
                        }
                    }
                    _ => {
                        let (b_panel, b_j0, b_strides) = match packing {
                            Some(packing) => pack(lw, body, packing, j0, (None, all_k)),
                            None => (b.clone(), j0, strides.clone()),
                        };
                        let steps = Steps {
                            k0: None,
                            extent: all_k,
                            split,
                        };
                        let b_at = (&b_panel, b_j0, &b_strides);
                        blocks(lw, body, &mut |lw, body, rows, stored| {
                            panel(lw, body, b_at, (rows, stored), j0, (width, cols), steps);
                            epilogue(lw, body, (rows, stored), j0, cols);
                        });
                    }
                }
            };
            let t = lw.new_reg(DType::I64, Some("tile"));
            let mut t_body = Vec::new();
            let tb = &mut t_body;
            let g = lw.i64_binary(tb, BinaryOp::Div, t, per_group);
            let g_cols = lw.mul(tb, g, per_group);
            let jb = lw.i64_binary(tb, BinaryOp::Sub, t, g_cols);
            // A streamed `a`'s tile: chunk `jb` of column blocks, the
            // blocks split evenly between the chunks.
            let (jb, span) = if streamed {
                // Chunk `c` of `per_group` is column blocks
                // `c * col_blocks / per_group` up to the next's start.
                let at = |lw: &mut Self, body: &mut Vec<Stmt>, c: Reg| {
                    let scaled = lw.mul(body, c, col_blocks);
                    lw.i64_binary(body, BinaryOp::Div, scaled, per_group)
                };
                let next = i64_op(lw, tb, BinaryOp::Add, jb, 1);
                let (jb, end) = (at(lw, tb, jb), at(lw, tb, next));
                let span = lw.i64_binary(tb, BinaryOp::Sub, end, jb);
                (jb, Some(span))
            } else {
                (jb, None)
            };
            let j0 = i64_op(lw, tb, BinaryOp::Shl, jb, nr_log);
            let rows = lw.group_rows(tb, g, &row_groups, (row_blocks, m_rest));
            let full = Extent::Fixed(u64::from(nr));
            if !rest_in_tiles {
                row_loops(lw, tb, (j0, full, None), rows, span);
            } else {
                // A full block or the rest block: loops that run once or
                // not at all, as the tile's column block is. `j0` is
                // `n_full` in the rest block, computed from the tile:
                // stores addressed by the tile's own index arithmetic are
                // what tells the analysis that tiles write apart
                // (`iterations`).
                let is_rest = lw.emit(
                    tb,
                    DType::Bool,
                    Expr::Compare(CmpOp::Eq, jb, col_blocks),
                    None,
                );
                let rest_once = lw.emit(tb, DType::I64, Expr::Select(is_rest, one, zero), None);
                let full_once = lw.i64_binary(tb, BinaryOp::Sub, one, rest_once);
                let once = lw.new_reg(DType::I64, Some("full"));
                let mut full_body = Vec::new();
                row_loops(lw, &mut full_body, (j0, full, None), rows, None);
                tb.push(Stmt::loop_of(Extent::Reg(full_once), once, full_body));
                let once = lw.new_reg(DType::I64, Some("rest"));
                let mut rest_body = Vec::new();
                let padded = rest_block.map(|(w, param)| (w, Panel::Packed(param, w)));
                row_loops(lw, &mut rest_body, (j0, rest_cols, padded), rows, None);
                tb.push(Stmt::loop_of(Extent::Reg(rest_once), once, rest_body));
            }
            body.push(Stmt::loop_of(Extent::Reg(tiles), t, t_body));
            if let Some((rest_groups, padded)) = &rest_tiles {
                // Row group `r` of the rest block, its rows from the tile's
                // own index arithmetic (as the tiles above).
                let r = lw.new_reg(DType::I64, Some("rest_tile"));
                let mut r_body = Vec::new();
                let rows = lw.group_rows(&mut r_body, r, rest_groups, (row_blocks, m_rest));
                row_loops(lw, &mut r_body, (n_full, rest_cols, *padded), rows, None);
                body.push(Stmt::loop_of(Extent::Reg(rest_groups.groups), r, r_body));
            }
        });
    }

    /// `row_blocks` in groups of `2^log` (at least one group: a group of
    /// none would make tiles that do nothing, and a chunk of them idle).
    fn row_groups(&mut self, out: &mut Vec<Stmt>, row_blocks: Reg, log: i64) -> RowGroups {
        let spread = self.i64_const(out, (1 << log) - 1);
        let spread = self.i64_binary(out, BinaryOp::Add, row_blocks, spread);
        let log = self.i64_const(out, log);
        let covering = self.i64_binary(out, BinaryOp::ShrLogical, spread, log);
        let one = self.i64_const(out, 1);
        let groups = self.i64_binary(out, BinaryOp::Max, covering, one);
        let last = self.i64_binary(out, BinaryOp::Sub, groups, one);
        RowGroups { log, groups, last }
    }

    /// Group `g`'s rows, from `g`'s own index arithmetic (what tells the
    /// analysis that tiles write apart, `iterations`): its first block, its
    /// count of blocks, and the rows past the last block (`m_rest` in the
    /// last group, else none).
    fn group_rows(
        &mut self,
        body: &mut Vec<Stmt>,
        g: Reg,
        groups: &RowGroups,
        (row_blocks, m_rest): (Reg, Reg),
    ) -> (Reg, Reg, Reg) {
        let first = self.i64_binary(body, BinaryOp::Shl, g, groups.log);
        let left = self.i64_binary(body, BinaryOp::Sub, row_blocks, first);
        let one = self.i64_const(body, 1);
        let group = self.i64_binary(body, BinaryOp::Shl, one, groups.log);
        let count = self.i64_binary(body, BinaryOp::Min, left, group);
        let is_last = Expr::Compare(CmpOp::Eq, g, groups.last);
        let is_last = self.emit(body, DType::Bool, is_last, None);
        let zero = self.i64_const(body, 0);
        let rest = self.emit(body, DType::I64, Expr::Select(is_last, m_rest, zero), None);
        (first, count, rest)
    }

    /// One panel: `d[i, j0 + j] = Σ_k a[i, k] * b[k, j0 + j]` for every `i`
    /// of `rows` and `j` below `cols`, accumulated in `acc` (a scratch
    /// block, row `r` in `acc[r]`): the block set to the
    /// identity, then per `k` in order each row's `a` element loaded and,
    /// in one loop over the columns, `b`'s element loaded once and added
    /// into every row; then the block copied to `d`. Every place in the
    /// block is a constant offset from its own buffer, so the optimizer
    /// sees them apart (LLVM's LICM then keeps the block in registers
    /// across `k`; with `d`'s own row arithmetic its alias analysis could
    /// not tell the rows apart).
    #[allow(clippy::too_many_arguments)]
    fn panel(
        &mut self,
        body: &mut Vec<Stmt>,
        (a, b, d, acc): (&View, &View, &View, &[ParamIdx]),
        [a_batch, a_ik, b_batch, b_kj]: &[Vec<Option<Reg>>; 4],
        brows: &[Reg],
        ((rows, stored), (b_j0, j0), (width, cols)): PanelAt<'_>,
        steps: Steps,
        dtype: DType,
    ) {
        let index = |lw: &mut Self,
                     out: &mut Vec<Stmt>,
                     v: &View,
                     batch: &[Option<Reg>],
                     own: &[Option<Reg>],
                     pair: [Reg; 2]| {
            let mut idx_rows = brows.to_vec();
            let mut idx_strides = batch.to_vec();
            idx_rows.extend(pair);
            idx_strides.extend_from_slice(own);
            lw.flat(out, v.offset, &idx_rows, &idx_strides)
        };
        let add = |lw: &mut Self, out: &mut Vec<Stmt>, x: Reg, y: Reg| {
            lw.emit(out, DType::I64, Expr::Binary(BinaryOp::Add, x, y), None)
        };
        let identity = self.emit(
            body,
            dtype,
            Expr::Const(reduce_identity(ReduceOp::Sum, dtype)),
            None,
        );
        let d_batch: Vec<Option<Reg>> = d.strides[..brows.len()].to_vec();
        let d_ij: Vec<Option<Reg>> = d.strides[brows.len()..].to_vec();
        let j = self.new_reg(DType::I64, Some("j"));
        let mut init = Vec::new();
        match (steps.k0, width, cols) {
            // A `k` block: the block set to the sums so far, back from `d`,
            // or to the identity in the first block (`k0` 0) and in a padded
            // block's columns past `cols`, whose `d` column is clamped to the
            // last real one (read, never used). One loop of selects: LLVM
            // then keeps the block in registers from `d` to `d` (two loops,
            // the identity stored and then the sums copied over it, cost
            // 5-22 % on an Emerald Rapids core's `Linear` layers, 24 blocks
            // of 128 steps). LLVM's codegen keeps a loop of 16 columns or
            // fewer (AVX2's) from being unrolled before it is vectorized:
            // unrolled, its selects became a branch and a scalar store each
            // (`kiln_llvm`'s `selects_loads`).
            (Some(k0), Extent::Fixed(w), Extent::Fixed(c)) if c > 0 && c <= w => {
                let zero = self.i64_const(body, 0);
                let first = Expr::Compare(CmpOp::Eq, k0, zero);
                let first = self.emit(body, DType::Bool, first, None);
                let (jc, past) = if c < w {
                    let last = self.i64_const(&mut init, c as i64 - 1);
                    let jc = self.i64_binary(&mut init, BinaryOp::Min, j, last);
                    let past = Expr::Compare(CmpOp::Gt, j, last);
                    (jc, Some(self.emit(&mut init, DType::Bool, past, None)))
                } else {
                    (j, None)
                };
                let col = add(self, &mut init, j0, jc);
                for (&row, &i) in acc.iter().zip(rows) {
                    let from = index(self, &mut init, d, &d_batch, &d_ij, [i, col]);
                    let v = self.emit(&mut init, dtype, Expr::Load(d.param, from), None);
                    let mut v = self.emit(&mut init, dtype, Expr::Select(first, identity, v), None);
                    if let Some(past) = past {
                        v = self.emit(&mut init, dtype, Expr::Select(past, identity, v), None);
                    }
                    init.push(Stmt::Store(row, Some(j), v));
                }
                body.push(Stmt::loop_of(width, j, init));
            }
            _ => {
                // The block set to the identity.
                for &row in &acc[..rows.len()] {
                    init.push(Stmt::Store(row, Some(j), identity));
                }
                body.push(Stmt::loop_of(width, j, init));
                // A later `k` block: the sums so far, back from `d` (a loop
                // that runs min(k0, 1) times: not in the first block).
                if let Some(k0) = steps.k0 {
                    let one = self.i64_const(body, 1);
                    let reload = self.i64_binary(body, BinaryOp::Min, k0, one);
                    let once = self.new_reg(DType::I64, Some("reload"));
                    let j = self.new_reg(DType::I64, Some("j"));
                    let mut back = Vec::new();
                    let col = add(self, &mut back, j0, j);
                    for (&row, &i) in acc.iter().zip(rows) {
                        let from = index(self, &mut back, d, &d_batch, &d_ij, [i, col]);
                        let v = self.emit(&mut back, dtype, Expr::Load(d.param, from), None);
                        back.push(Stmt::Store(row, Some(j), v));
                    }
                    let each = vec![Stmt::loop_of(cols, j, back)];
                    body.push(Stmt::loop_of(Extent::Reg(reload), once, each));
                }
            }
        }
        // Per k: the rows' `a` elements, then the columns. `a_col` is the
        // `k` part of `a`'s index where its `k` is split ([`Split`]).
        let step =
            |lw: &mut Self, kb: &mut Vec<Stmt>, (k, k_abs): (Reg, Reg), a_col: Option<Reg>| {
                let xs: Vec<Reg> = rows
                    .iter()
                    .map(|&i| {
                        let at = match a_col {
                            Some(col) => {
                                // The row's stride alone: `index` takes as
                                // many indices as strides.
                                let row = index(lw, kb, a, a_batch, &a_ik[..1], [i, i]);
                                add(lw, kb, row, col)
                            }
                            None => index(lw, kb, a, a_batch, a_ik, [i, k_abs]),
                        };
                        lw.emit(kb, dtype, Expr::Load(a.param, at), None)
                    })
                    .collect();
                if lw.prefetch {
                    let a_ik = if a_col.is_some() { &a_ik[..1] } else { a_ik };
                    let at = (k, k_abs, a_col);
                    lw.prefetch_rows(kb, (a, a_batch, a_ik), brows, rows, at, dtype);
                }
                let j = lw.new_reg(DType::I64, Some("j"));
                let mut jb = Vec::new();
                let b_col = add(lw, &mut jb, b_j0, j);
                let b_at = index(lw, &mut jb, b, b_batch, b_kj, [k, b_col]);
                let y = lw.emit(&mut jb, dtype, Expr::Load(b.param, b_at), None);
                for (&row, &x) in acc.iter().zip(&xs) {
                    let sum = lw.emit(&mut jb, dtype, Expr::Load(row, j), None);
                    let next = lw.mul_add(&mut jb, dtype, x, y, sum);
                    jb.push(Stmt::Store(row, Some(j), next));
                }
                kb.push(Stmt::loop_of(width, j, jb));
            };
        match steps.split {
            None => {
                let k = self.new_reg(DType::I64, Some("k"));
                let mut kb = Vec::new();
                let k_abs = match steps.k0 {
                    Some(k0) => add(self, &mut kb, k0, k),
                    None => k,
                };
                step(self, &mut kb, (k, k_abs), None);
                body.push(Stmt::loop_of(steps.extent, k, kb));
            }
            Some(Split {
                kernel: [kh, kw],
                strides: [s_ic, s_ky, s_kx],
            }) => {
                // Input channel `icl` of the block (whose first is
                // `k0 / (kh * kw)`), kernel row `ky`, kernel column `kx`.
                let taps = u64::from(kh * kw);
                let t = self.i64_const(body, taps as i64);
                let (icl, ky, kx) = (
                    self.new_reg(DType::I64, Some("icl")),
                    self.new_reg(DType::I64, Some("ky")),
                    self.new_reg(DType::I64, Some("kx")),
                );
                let channels = match steps.extent {
                    Extent::Fixed(n) => Extent::Fixed(n / taps),
                    Extent::Reg(n) => Extent::Reg(self.i64_binary(body, BinaryOp::Div, n, t)),
                    param => {
                        let n = self.emit(body, DType::I64, Expr::ExtentValue(param), None);
                        Extent::Reg(self.i64_binary(body, BinaryOp::Div, n, t))
                    }
                };
                let first = steps
                    .k0
                    .map(|k0| self.i64_binary(body, BinaryOp::Div, k0, t));
                let mut kx_body = Vec::new();
                let kxb = &mut kx_body;
                let hk = self.i64_const(kxb, i64::from(kh));
                let wk = self.i64_const(kxb, i64::from(kw));
                let row = self.mul(kxb, icl, hk);
                let row = add(self, kxb, row, ky);
                let k = self.mul(kxb, row, wk);
                let k = add(self, kxb, k, kx);
                let k_abs = match steps.k0 {
                    Some(k0) => add(self, kxb, k0, k),
                    None => k,
                };
                let ic = match first {
                    Some(first) => add(self, kxb, first, icl),
                    None => icl,
                };
                let a_col = self.flat(kxb, None, &[ic, ky, kx], &[s_ic, s_ky, s_kx]);
                step(self, kxb, (k, k_abs), Some(a_col));
                let ky_body = vec![Stmt::loop_of(Extent::Fixed(u64::from(kw)), kx, kx_body)];
                let ic_body = vec![Stmt::loop_of(Extent::Fixed(u64::from(kh)), ky, ky_body)];
                body.push(Stmt::loop_of(channels, icl, ic_body));
            }
        }
        // The block's first `cols` columns to `d`, a loop a row: each a
        // contiguous copy, which LLVM makes a `memcpy` (inlined as vector
        // moves) before it unrolls short loops. One loop over the columns
        // storing every row was left to the loop vectorizer, which took it
        // only at 64 columns: at AVX2's 16 it was unrolled first and ran as
        // 64 scalar moves a block (6-8 % of a `k = 64` product's time on
        // Zen 1).
        for (q, (&row, &i)) in acc.iter().zip(rows).enumerate() {
            self.if_stored(body, q, stored, |lw, body| {
                let j = lw.new_reg(DType::I64, Some("j"));
                let mut copy = Vec::new();
                let col = add(lw, &mut copy, j0, j);
                let v = lw.emit(&mut copy, dtype, Expr::Load(row, j), None);
                let to = index(lw, &mut copy, d, &d_batch, &d_ij, [i, col]);
                copy.push(Stmt::Store(d.param, Some(to), v));
                body.push(Stmt::loop_of(cols, j, copy));
            });
        }
    }

    /// Row `q`'s statements (`emit`) where the block stores the row
    /// ([`Stored`]): as they are, not at all, or in a loop that runs once
    /// where the row is real (never the first: a block holds at least one).
    fn if_stored(
        &mut self,
        body: &mut Vec<Stmt>,
        q: usize,
        stored: Stored,
        emit: impl FnOnce(&mut Self, &mut Vec<Stmt>),
    ) {
        match stored {
            Stored::First(n) if q < n => emit(self, body),
            Stored::First(_) => {}
            Stored::Upto(_) if q == 0 => emit(self, body),
            Stored::Upto(count) => {
                let q = self.i64_const(body, q as i64);
                let left = self.i64_binary(body, BinaryOp::Sub, count, q);
                let zero = self.i64_const(body, 0);
                let left = self.i64_binary(body, BinaryOp::Max, left, zero);
                let one = self.i64_const(body, 1);
                let once = self.i64_binary(body, BinaryOp::Min, left, one);
                let real = self.new_reg(DType::I64, Some("real"));
                let mut inner = Vec::new();
                emit(self, &mut inner);
                body.push(Stmt::loop_of(Extent::Reg(once), real, inner));
            }
        }
    }

    /// In a panel's `k` step, a prefetch of `a` at `k_abs` in a row of the
    /// next block ([`crate::LowerOptions::prefetch`]): `rows` are
    /// consecutive, so the next block's are as many on. Step `k` takes rows
    /// `(k * p + q) % rows.len()` for `q < p`, `p` as many as reach every
    /// row once a cache line's worth of steps (one for 4 rows or 16 rows of
    /// `f32`). The next block reads those rows over the same steps, one
    /// block's time later (128 steps of 16 fused multiply-adds: about a
    /// thousand cycles), so their memory latency hides behind this block's
    /// arithmetic. Past the last row the hint points past `a`, which a hint
    /// may.
    fn prefetch_rows(
        &mut self,
        body: &mut Vec<Stmt>,
        (a, a_batch, a_ik): (&View, &[Option<Reg>], &[Option<Reg>]),
        brows: &[Reg],
        rows: &[Reg],
        (k, k_abs, a_col): (Reg, Reg, Option<Reg>),
        dtype: DType,
    ) {
        let n = rows.len() as i64;
        debug_assert!(n.count_ones() == 1, "a panel's rows are a power of two");
        let per_line = (64 / dtype.size_bytes() as i64).max(1);
        let p = (n / per_line).max(1);
        let mask = self.i64_const(body, n - 1);
        let step = self.i64_const(body, p);
        let ahead = self.i64_const(body, n);
        let first = self.i64_binary(body, BinaryOp::Mul, k, step);
        let next = self.i64_binary(body, BinaryOp::Add, rows[0], ahead);
        for q in 0..p {
            let q = self.i64_const(body, q);
            let pick = self.i64_binary(body, BinaryOp::Add, first, q);
            let pick = self.i64_binary(body, BinaryOp::BAnd, pick, mask);
            let row = self.i64_binary(body, BinaryOp::Add, next, pick);
            let mut idx_rows = brows.to_vec();
            let mut idx_strides = a_batch.to_vec();
            idx_rows.extend([row, k_abs]);
            idx_strides.extend_from_slice(a_ik);
            // `a_ik` is the rows' stride alone where `a_col` is `k`'s part.
            idx_rows.truncate(idx_strides.len());
            let mut at = self.flat(body, a.offset, &idx_rows, &idx_strides);
            if let Some(col) = a_col {
                at = self.i64_binary(body, BinaryOp::Add, at, col);
            }
            body.push(Stmt::Prefetch(a.param, at));
        }
    }

    /// Columns `j0 .. j0 + cols` of `b` (with the batch rows `brows`)
    /// copied to `packed`, a dense `[k, nr]` panel: the view of it. A `b`
    /// read across (each `k` step of a column the next element: `x @ w.T`)
    /// is copied in tiles of `T × T` ([`crate::transpose`]) where the
    /// backend transposes them ([`crate::LowerOptions::transpose_tiles`]),
    /// the `k` steps past the last tile row by row.
    fn pack_panel(
        &mut self,
        body: &mut Vec<Stmt>,
        (b, strides, brows): (&View, &[Vec<Option<Reg>>; 4], &[Reg]),
        packed: ParamIdx,
        (j0, cols, nr): (Reg, Extent, u32),
        (k0, steps): (Option<Reg>, Extent),
    ) -> View {
        let dtype = self.param_dtype(b.param).expect("a tensor buffer");
        let view = self.packed_view(body, packed, nr);
        // packed[k, j] = b[k0 + k, j0 + j]
        let copy = |lw: &mut Self, out: &mut Vec<Stmt>, k: Reg, j: Reg| {
            let col = lw.i64_binary(out, BinaryOp::Add, j0, j);
            let k_abs = match k0 {
                Some(k0) => lw.i64_binary(out, BinaryOp::Add, k0, k),
                None => k,
            };
            let mut rows = brows.to_vec();
            rows.extend([k_abs, col]);
            let mut from_strides = strides[2].clone();
            from_strides.extend_from_slice(&strides[3]);
            let from = lw.flat(out, b.offset, &rows, &from_strides);
            let x = lw.emit(out, dtype, Expr::Load(b.param, from), None);
            let to = lw.flat(out, None, &[k, j], &view.strides);
            out.push(Stmt::Store(packed, Some(to), x));
        };
        // Rows `first + r` of the panel, `r` below `rows`, element by element.
        let by_rows = |lw: &mut Self, out: &mut Vec<Stmt>, first: Option<Reg>, rows: Extent| {
            let (r, j) = (
                lw.new_reg(DType::I64, Some("k")),
                lw.new_reg(DType::I64, Some("j")),
            );
            let mut kb = Vec::new();
            let k = match first {
                Some(first) => lw.i64_binary(&mut kb, BinaryOp::Add, first, r),
                None => r,
            };
            let mut jb = Vec::new();
            copy(lw, &mut jb, k, j);
            kb.push(Stmt::loop_of(cols, j, jb));
            lw.pad_panel_row(&mut kb, (&view, k), cols, nr, dtype);
            out.push(Stmt::loop_of(rows, r, kb));
        };
        let lanes = crate::transpose::lanes(dtype).filter(|&t| {
            self.transpose_tiles
                && self.across(&strides[3])
                && cols == Extent::Fixed(u64::from(nr))
                && nr % t == 0
                && !matches!(steps, Extent::Fixed(s) if s < u64::from(t))
        });
        let Some(t) = lanes else {
            by_rows(self, body, None, steps);
            return view;
        };
        // Tiles of `t` steps × `t` columns: `kt` a tile row, `c` a tile
        // column, `a` the step in the tile (the load's contiguous axis),
        // `e` the column (the store's); `done` steps in whole tiles (where
        // any are left past them), `left` past them.
        let log = i64::from(t.trailing_zeros());
        let (tile_rows, done, left) = match steps {
            Extent::Fixed(s) => {
                let (tiles, left) = (s / u64::from(t), s % u64::from(t));
                let done = (left > 0).then(|| self.i64_const(body, (tiles * u64::from(t)) as i64));
                (Extent::Fixed(tiles), done, Extent::Fixed(left))
            }
            _ => {
                let s = self.emit(body, DType::I64, Expr::ExtentValue(steps), None);
                let log = self.i64_const(body, log);
                let tiles = self.i64_binary(body, BinaryOp::ShrLogical, s, log);
                let done = self.i64_binary(body, BinaryOp::Shl, tiles, log);
                let left = self.i64_binary(body, BinaryOp::Sub, s, done);
                (Extent::Reg(tiles), Some(done), Extent::Reg(left))
            }
        };
        let (kt, c, a, e) = (
            self.new_reg(DType::I64, Some("kt")),
            self.new_reg(DType::I64, Some("jt")),
            self.new_reg(DType::I64, Some("k")),
            self.new_reg(DType::I64, Some("j")),
        );
        // Each tile column's `t` rows of `w` (in `x @ w.T`) are read along
        // `k` before the next's: rows a power of two of KiB apart fall in
        // one L1 set, and a panel's 16 rows at once outgrew its 8 ways
        // (`Linear(3072, 768)`, rows 12 KiB apart).
        let mut c_body = Vec::new();
        let log_reg = self.i64_const(&mut c_body, log);
        let j_first = self.i64_binary(&mut c_body, BinaryOp::Shl, c, log_reg);
        let mut kt_body = Vec::new();
        let k_first = self.i64_binary(&mut kt_body, BinaryOp::Shl, kt, log_reg);
        let mut a_body = Vec::new();
        let k = self.i64_binary(&mut a_body, BinaryOp::Add, k_first, a);
        let mut e_body = Vec::new();
        let j = self.i64_binary(&mut e_body, BinaryOp::Add, j_first, e);
        copy(self, &mut e_body, k, j);
        let tile = Extent::Fixed(u64::from(t));
        a_body.push(Stmt::loop_of(tile, e, e_body));
        kt_body.push(Stmt::loop_of(tile, a, a_body));
        c_body.push(Stmt::loop_of(tile_rows, kt, kt_body));
        body.push(Stmt::loop_of(Extent::Fixed(u64::from(nr / t)), c, c_body));
        if let Some(done) = done {
            by_rows(self, body, Some(done), left);
        }
        view
    }

    /// Whether a matrix, by its last two axes' strides, is read across:
    /// down a column the next element, along a row further (the transpose
    /// of a dense matrix: `w.T` of a `[n, k]` `w` as a matmul's `b`).
    pub(super) fn across(&self, b_strides: &[Option<Reg>]) -> bool {
        b_strides[0].is_some_and(|s| self.unit_strides.contains(&s))
            && b_strides[1].is_some_and(|s| !self.unit_strides.contains(&s))
    }

    /// The dense `[k, nr]` view of a packed panel.
    fn packed_view(&mut self, body: &mut Vec<Stmt>, packed: ParamIdx, nr: u32) -> View {
        let nr = self.i64_const(body, i64::from(nr));
        let one = self.i64_const(body, 1);
        View {
            param: packed,
            dims: self.scratch_shape(packed),
            offset: None,
            strides: vec![Some(nr), Some(one)],
            dense: true,
        }
    }

    /// A rest block narrower than the panel: zeros after its `cols`
    /// columns in packed row `k` (computed, never stored, but every element
    /// is written before the panel reads it).
    fn pad_panel_row(
        &mut self,
        body: &mut Vec<Stmt>,
        (view, k): (&View, Reg),
        cols: Extent,
        nr: u32,
        dtype: DType,
    ) {
        let Extent::Fixed(c) = cols else { return };
        if c >= u64::from(nr) {
            return;
        }
        let z = self.new_reg(DType::I64, Some("j"));
        let mut zb = Vec::new();
        let zero = self.emit(&mut zb, dtype, Expr::Const(Scalar::zero(dtype)), None);
        let first = self.i64_const(&mut zb, c as i64);
        let col = self.i64_binary(&mut zb, BinaryOp::Add, first, z);
        let to = self.flat(&mut zb, None, &[k, col], &view.strides);
        zb.push(Stmt::Store(view.param, Some(to), zero));
        body.push(Stmt::loop_of(Extent::Fixed(u64::from(nr) - c), z, zb));
    }

    /// Columns `j0 .. j0 + cols` of a convolution's implicit `b` (batch rows
    /// `brows`: the batch element and the group) copied to `packed`, a
    /// dense `[k, nr]` panel, one tap's run of the input at a time: the
    /// view of it.
    fn pack_taps(
        &mut self,
        body: &mut Vec<Stmt>,
        taps: &ConvTaps,
        brows: &[Reg],
        packed: ParamIdx,
        (j0, cols, nr): (Reg, Extent, u32),
        (k0, steps): (Option<Reg>, Extent),
    ) -> View {
        let src = &taps.src;
        let dtype = self.param_dtype(src.param).expect("a tensor buffer");
        let n_taps = taps.shifts.len() as u64;
        // The block's input channels: from `k0 / T`, `steps / T` of them
        // (a block is whole channels of taps).
        let t_count = self.i64_const(body, n_taps as i64);
        let ic0 = match k0 {
            Some(k0) => self.i64_binary(body, BinaryOp::Div, k0, t_count),
            None => self.i64_const(body, 0),
        };
        let channels = match steps {
            Extent::Fixed(k) => Extent::Fixed(k / n_taps),
            Extent::Reg(k) => Extent::Reg(self.i64_binary(body, BinaryOp::Div, k, t_count)),
            Extent::Param(_) => unreachable!("a convolution's k is fixed"),
        };
        let view = self.packed_view(body, packed, nr);
        let (n, g) = (brows[0], brows[1]);
        let ic = self.new_reg(DType::I64, Some("ic"));
        let mut icb = Vec::new();
        let per_group = self.i64_const(&mut icb, taps.per_group as i64);
        let first = self.mul(&mut icb, g, per_group);
        let first = self.i64_binary(&mut icb, BinaryOp::Add, first, ic0);
        let channel = self.i64_binary(&mut icb, BinaryOp::Add, first, ic);
        let zero = self.i64_const(&mut icb, 0);
        let plane = self.flat(
            &mut icb,
            src.offset,
            &[n, channel, zero, zero],
            &src.strides,
        );
        let plane = self.i64_binary(&mut icb, BinaryOp::Add, plane, j0);
        let first_row = self.mul(&mut icb, ic, t_count);
        for (t, &shift) in taps.shifts.iter().enumerate() {
            let shift = self.i64_const(&mut icb, shift);
            let start = self.i64_binary(&mut icb, BinaryOp::Add, plane, shift);
            let t = self.i64_const(&mut icb, t as i64);
            let k = self.i64_binary(&mut icb, BinaryOp::Add, first_row, t);
            let j = self.new_reg(DType::I64, Some("j"));
            let mut jb = Vec::new();
            let from = self.i64_binary(&mut jb, BinaryOp::Add, start, j);
            let x = self.emit(&mut jb, dtype, Expr::Load(src.param, from), None);
            let to = self.flat(&mut jb, None, &[k, j], &view.strides);
            jb.push(Stmt::Store(packed, Some(to), x));
            icb.push(Stmt::loop_of(cols, j, jb));
            self.pad_panel_row(&mut icb, (&view, k), cols, nr, dtype);
        }
        body.push(Stmt::loop_of(channels, ic, icb));
        view
    }
}
