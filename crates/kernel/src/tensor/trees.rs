//! Lowering of `trees` (a tree ensemble, `kiln_ir::trees`), in one of two
//! forms, both the rules of `TreeNode::goes_left` and both summing each
//! output's leaves in tree order in the ensemble's dtype: the same bits.
//!
//! **Straight-line selects** (up to `LowerOptions::tree_selects` nodes):
//! per row, every node's test of its feature (read once) against its
//! constant threshold, and each tree's leaf picked by a select per node,
//! children before parents, on the leaves' bits as integers. No table, no
//! branch: a row loop a vectorizer runs in lanes. Trees go in groups of
//! about 512 nodes, a row loop each, the sums kept in the output between
//! them; with several groups the rows go in blocks of 128, every group's
//! loop over a block before the next block, so that a block's rows stay
//! in the first level of cache.
//!
//! **A table walk** (larger ensembles, and every one where the option is
//! 0): every node and leaf of every tree is a record of 4 words (8 where
//! some node tests categories) in one table, named by its first word's
//! offset: feature, threshold, both children's offsets, flags and height
//! (then the category set). A leaf leads to itself both ways, so the walk
//! needs no test for a leaf: it steps in segments of a few steps, each as
//! long as the deepest of its rows' nodes' heights allows, and after them
//! the rows stand on their leaves, whose values are in their threshold's
//! word. A step reads its node's record and decides with selects; what no
//! node uses (categories, `Missing::Zero`, a strict test) is left out.
//! Rows go in blocks of 512, tree by tree within a block (a tree's records
//! come into the cache once per block, the sums kept in the output), and
//! through a tree in groups of `LowerOptions::tree_block` walked side by
//! side: a step of a group is that many independent chains of loads and
//! compares, which the machine overlaps where one row's chain would wait
//! on each load. The code does not grow with the model, so a thousand
//! trees compile as fast as ten.

use super::Loc;
use crate::lower::Lowerer;
use crate::{Expr, Extent, Param, ParamIdx, Reg, Stmt, Var};
use kiln_ir::op::{BinaryOp, CmpOp, TensorConst, UnaryOp};
use kiln_ir::scalar::Scalar;
use kiln_ir::trees::{Child, Missing, SplitTest, TreeEnsemble, TreeNode, ZERO_THRESHOLD};
use kiln_ir::types::DType;
use std::sync::Arc;

/// `let r = expr` of `dtype` into `body`: `emit!(self, body, dtype, expr)`.
macro_rules! emit {
    ($lw:expr, $body:expr, $dtype:expr, $expr:expr) => {
        $lw.emit($body, $dtype, $expr, None)
    };
}

/// Flag bits of a node's rules, in its record's `RULES` word.
const DEFAULT_LEFT: i64 = 1;
const ZERO_MISSING: i64 = 2;
const NAN_MISSING: i64 = 4;
const STRICT: i64 = 8;
const CATEGORY: i64 = 16;

/// The words of a node's record: its feature; its threshold's bits (a
/// leaf's value's, in the ensemble's dtype widened to `f64`); its
/// children's record offsets, the left one in the low 32 bits and the
/// right one in the high (a leaf's own, both ways; the two in one word so
/// that a step picks one by a select of registers, which LLVM keeps a
/// select: of two loads it made an unpredictable branch); its flags in
/// the low 32 bits and its height (the steps from it to its deepest
/// leaf; a leaf's is 0) in the high; in a record of [`WIDE`] words also
/// its category set's first word in `tree_words` and its count of
/// categories (32 per word).
const FEATURE: i64 = 0;
const THRESHOLD: i64 = 1;
const CHILDREN: i64 = 2;
const RULES: i64 = 3;
const WORD_AT: i64 = 4;
const N_CATEGORIES: i64 = 5;
/// The most words the records may take: offsets fit in 32 bits.
const MAX_TREE_WORDS: u64 = 1 << 32;
/// The rows of a walk's block, as a power of two: 512 rows go through a
/// tree before the next tree. Larger blocks share a big model's records
/// among more rows (1,024 ran a 1,000-tree model 12–23 % faster on one
/// thread) but split among fewer threads (512 ran 1,000 rows twice as fast
/// on two threads); docs/performance.md.
const TREE_ROWS_LOG: i64 = 9;

/// How many steps a walk takes between looks at its rows' nodes' heights
/// (powers of two), for a group of rows side by side and for one row
/// (docs/performance.md).
const GROUP_SEGMENT: i64 = 4;
const ROW_SEGMENT: i64 = 2;

/// A record's words where no node tests categories, and where some do.
const NARROW: i64 = 4;
const WIDE: i64 = 8;

/// The ensemble as records of one table, every node and leaf of every
/// tree a record, named by the offset of its first word.
struct Tables {
    records: Vec<i64>,
    stride: i64,
    /// The words of every category set (one unused word if none).
    words: Vec<i64>,
    /// Per tree, ordered by output then tree: its root's offset and its
    /// depth.
    trees: Vec<i64>,
    /// Per output, its trees' range (in trees, not words).
    ranges: Vec<(usize, usize)>,
    /// Which flags some node has set, and which every node has.
    some: i64,
    all: i64,
}

/// A node's flags.
fn flags_of(node: &TreeNode) -> i64 {
    let mut flags = if node.default_left { DEFAULT_LEFT } else { 0 };
    flags |= match node.missing {
        Missing::None => 0,
        Missing::Zero => ZERO_MISSING,
        Missing::Nan => NAN_MISSING,
    };
    flags
        | match node.test {
            SplitTest::Le(_) => 0,
            SplitTest::Lt(_) => STRICT,
            SplitTest::In(_) => CATEGORY,
        }
}

/// Whether the walk's records of `e` fit [`MAX_TREE_WORDS`].
pub(crate) fn walk_fits(e: &TreeEnsemble) -> bool {
    let records: u64 = e
        .trees
        .iter()
        .map(|t| (t.nodes.len() + t.leaves.len()) as u64)
        .sum();
    records.saturating_mul(WIDE as u64) <= MAX_TREE_WORDS
}

impl Tables {
    fn of(e: &TreeEnsemble) -> Tables {
        let (mut some, mut all) = (0, !0);
        for node in e.trees.iter().flat_map(|t| &t.nodes) {
            let flags = flags_of(node);
            some |= flags;
            all &= flags;
        }
        let mut t = Tables {
            records: Vec::new(),
            stride: NARROW,
            words: Vec::new(),
            trees: Vec::new(),
            ranges: Vec::new(),
            some,
            all,
        };
        if some & CATEGORY != 0 {
            t.stride = WIDE;
        }
        for output in 0..e.n_outputs() as u32 {
            let start = t.trees.len() / 2;
            for tree in e.trees.iter().filter(|tree| tree.output == output) {
                t.push_tree(tree, e.dtype);
            }
            t.ranges.push((start, t.trees.len() / 2));
        }
        if t.words.is_empty() {
            // A load's index must be inside its table even where its word is not used.
            t.words.push(0);
        }
        t
    }

    fn push_tree(&mut self, tree: &kiln_ir::trees::Tree, dtype: DType) {
        let stride = self.stride;
        let base = self.records.len() as i64;
        let leaf_base = base + tree.nodes.len() as i64 * stride;
        let at = |c: Child| match c {
            Child::Node(i) => base + i64::from(i) * stride,
            Child::Leaf(i) => leaf_base + i64::from(i) * stride,
        };
        let heights = heights(tree);
        self.trees
            .extend([base, heights.first().copied().unwrap_or(0)]);
        for (node, &height) in tree.nodes.iter().zip(&heights) {
            let (threshold, word_at, n_categories) = match &node.test {
                SplitTest::Le(t) | SplitTest::Lt(t) => (*t, 0, 0),
                SplitTest::In(words) => {
                    let word_at = self.words.len() as i64;
                    self.words.extend(words.iter().map(|&w| i64::from(w)));
                    (0.0, word_at, 32 * words.len() as i64)
                }
            };
            let record = [
                i64::from(node.feature),
                threshold.to_bits() as i64,
                at(node.left) | at(node.right) << 32,
                flags_of(node) | height << 32,
                word_at,
                n_categories,
                0,
                0,
            ];
            self.records.extend(&record[..stride as usize]);
        }
        for (idx, &leaf) in tree.leaves.iter().enumerate() {
            let me = leaf_base + idx as i64 * stride;
            let value = kiln_ir::semantics::cast(Scalar::F64(leaf), dtype);
            let value = kiln_ir::semantics::cast(value, DType::F64).bits() as i64;
            let record = [0, value, me | me << 32, 0, 0, 0, 0, 0];
            self.records.extend(&record[..stride as usize]);
        }
    }

    /// Whether the nodes differ in `flag` (so a step must read it).
    fn mixed(&self, flag: i64) -> bool {
        self.some & flag != 0 && self.all & flag == 0
    }
}

/// Each node's height: the steps from it to its deepest leaf (a tree's
/// nodes in an order where parents come first, then back).
fn heights(tree: &kiln_ir::trees::Tree) -> Vec<i64> {
    let mut heights = vec![0i64; tree.nodes.len()];
    if tree.nodes.is_empty() {
        return heights;
    }
    let mut order = Vec::with_capacity(tree.nodes.len());
    let mut stack = vec![0u32];
    while let Some(at) = stack.pop() {
        order.push(at);
        let node = &tree.nodes[at as usize];
        for child in [node.left, node.right] {
            if let Child::Node(i) = child {
                stack.push(i);
            }
        }
    }
    for &at in order.iter().rev() {
        let node = &tree.nodes[at as usize];
        let below = |c: Child| match c {
            Child::Node(i) => heights[i as usize],
            Child::Leaf(_) => 0,
        };
        heights[at as usize] = 1 + below(node.left).max(below(node.right));
    }
    heights
}

/// What a walk reads that no step changes: its tables, and constants.
struct Walk<'t> {
    t: &'t Tables,
    records: ParamIdx,
    words: Option<ParamIdx>,
    trees: ParamIdx,
    /// `offsets[w]` is the `i64` constant `w`.
    offsets: Vec<Reg>,
    zero_f: Reg,
    /// `2^32 - 1` and 32, which take a word of two halves apart.
    low_half: Reg,
    half: Reg,
}

impl Walk<'_> {
    fn zero(&self) -> Reg {
        self.offsets[0]
    }

    fn one(&self) -> Reg {
        self.offsets[1]
    }
}

impl Lowerer<'_> {
    /// `dest[row, k]` for every row and output `k` of the ensemble `e` over
    /// the rows of `x`.
    pub(super) fn trees(
        &mut self,
        out: &mut Vec<Stmt>,
        locs: &[Option<Loc>],
        e: &TreeEnsemble,
        x: &Loc,
        dest: &super::View,
    ) {
        let n_nodes: usize = e.trees.iter().map(|t| t.nodes.len()).sum();
        if n_nodes <= self.tree_selects as usize {
            return self.trees_by_selects(out, locs, e, x, dest);
        }
        let t = Tables::of(e);
        let i64_table = |lw: &mut Self, name: &str, values: &[i64]| {
            lw.table(name, DType::I64, values, |v| Scalar::I64(*v))
        };
        let walk = Walk {
            t: &t,
            records: i64_table(self, "tree_nodes", &t.records),
            words: (t.some & CATEGORY != 0).then(|| i64_table(self, "tree_words", &t.words)),
            trees: i64_table(self, "tree_roots", &t.trees),
            offsets: (0..t.stride.max(2))
                .map(|w| self.i64_const(out, w))
                .collect(),
            zero_f: self.emit(out, DType::F64, Expr::Const(Scalar::F64(0.0)), None),
            low_half: self.i64_const(out, (1 << 32) - 1),
            half: self.i64_const(out, 32),
        };
        // Rows in blocks of `ROWS`, and within a block tree by tree:
        // every row of the block through a tree before the next tree, so
        // that a tree's records come into the cache once per block (a big
        // model's are far larger than the cache), the sums kept in `dest`.
        // A block's rows go through a tree in groups of `tree_block`,
        // walked side by side (each tree's walk of a row takes the same
        // steps, so a group's walks are one loop of independent chains),
        // then the rows past the last group one at a time.
        let lanes = i64::from(self.tree_block.max(1).next_power_of_two());
        let rows_log = TREE_ROWS_LOG.max(i64::from(lanes.trailing_zeros()));
        let (b, blocks, mut body, start, count) = self.row_blocks(out, &dest.dims[0], rows_log);
        let lanes_log = self.i64_const(&mut body, i64::from(lanes.trailing_zeros()));
        let groups = self.i64_binary(&mut body, BinaryOp::ShrLogical, count, lanes_log);
        let grouped = self.i64_binary(&mut body, BinaryOp::Shl, groups, lanes_log);
        let singles = self.i64_binary(&mut body, BinaryOp::Sub, count, grouped);
        let single_start = self.i64_binary(&mut body, BinaryOp::Add, start, grouped);
        let group_nodes: Vec<Var> = (0..lanes).map(|_| self.new_var(Scalar::I64(0))).collect();
        let single_node = [self.new_var(Scalar::I64(0))];
        for (k, &(first_tree, last_tree)) in t.ranges.iter().enumerate() {
            let col = self.i64_const(&mut body, k as i64);
            // The sums start at the output's initial score.
            let r = self.new_reg(DType::I64, Some("row"));
            let mut init_body = Vec::new();
            let row = self.i64_binary(&mut init_body, BinaryOp::Add, start, r);
            let init = kiln_ir::semantics::cast(Scalar::F64(e.init[k]), e.dtype);
            let init = self.emit(&mut init_body, e.dtype, Expr::Const(init), None);
            let to = self.view_index(&mut init_body, dest, &[Some(row), Some(col)]);
            init_body.push(Stmt::Store(dest.param, Some(to), init));
            body.push(Stmt::loop_of(Extent::Reg(count), r, init_body));
            let tree = self.new_reg(DType::I64, Some("tree"));
            let mut tree_body = Vec::new();
            let first = self.i64_const(&mut tree_body, first_tree as i64);
            let idx = self.i64_binary(&mut tree_body, BinaryOp::Add, tree, first);
            let at = self.i64_binary(&mut tree_body, BinaryOp::Add, idx, idx);
            let root = emit!(self, &mut tree_body, DType::I64, Expr::Load(walk.trees, at));
            let depth_at = self.i64_binary(&mut tree_body, BinaryOp::Add, at, walk.one());
            let depth = emit!(
                self,
                &mut tree_body,
                DType::I64,
                Expr::Load(walk.trees, depth_at)
            );
            let tree_at = (root, depth);
            // The groups, then the rows past them.
            let g = self.new_reg(DType::I64, Some("group"));
            let mut g_body = Vec::new();
            let g_rows = self.i64_binary(&mut g_body, BinaryOp::Shl, g, lanes_log);
            let top = self.i64_binary(&mut g_body, BinaryOp::Add, start, g_rows);
            let rows: Vec<Reg> = (0..lanes)
                .map(|r| {
                    let r = self.i64_const(&mut g_body, r);
                    self.i64_binary(&mut g_body, BinaryOp::Add, top, r)
                })
                .collect();
            let lanes_at = (&rows[..], &group_nodes[..]);
            self.walk_tree(
                &mut g_body,
                locs,
                (e, &walk),
                x,
                (dest, col),
                lanes_at,
                tree_at,
            );
            tree_body.push(Stmt::loop_of(Extent::Reg(groups), g, g_body));
            if lanes > 1 {
                let r = self.new_reg(DType::I64, Some("row"));
                let mut r_body = Vec::new();
                let row = self.i64_binary(&mut r_body, BinaryOp::Add, single_start, r);
                let lanes_at = (&[row][..], &single_node[..]);
                self.walk_tree(
                    &mut r_body,
                    locs,
                    (e, &walk),
                    x,
                    (dest, col),
                    lanes_at,
                    tree_at,
                );
                tree_body.push(Stmt::loop_of(Extent::Reg(singles), r, r_body));
            }
            body.push(Stmt::loop_of(
                Extent::Fixed((last_tree - first_tree) as u64),
                tree,
                tree_body,
            ));
        }
        out.push(Stmt::loop_of(Extent::Reg(blocks), b, body));
    }

    /// The rows of `dim` in blocks of `2^log` (the last one partial): the
    /// block loop's row register and trip count (defined in `out`), its
    /// body so far, and the block's first row and row count (defined in
    /// that body).
    fn row_blocks(
        &mut self,
        out: &mut Vec<Stmt>,
        dim: &kiln_ir::types::Dim,
        log: i64,
    ) -> (Reg, Reg, Vec<Stmt>, Reg, Reg) {
        let extent = self.extent(dim);
        let n = self.emit(out, DType::I64, Expr::ExtentValue(extent), None);
        let log_reg = self.i64_const(out, log);
        let spread = self.i64_const(out, (1 << log) - 1);
        let spread = self.i64_binary(out, BinaryOp::Add, n, spread);
        let blocks = self.i64_binary(out, BinaryOp::ShrLogical, spread, log_reg);
        let block = self.new_reg(DType::I64, Some("block"));
        let mut body = Vec::new();
        let start = self.i64_binary(&mut body, BinaryOp::Shl, block, log_reg);
        let left = self.i64_binary(&mut body, BinaryOp::Sub, n, start);
        let size = self.i64_const(&mut body, 1 << log);
        let count = self.i64_binary(&mut body, BinaryOp::Min, left, size);
        (block, blocks, body, start, count)
    }

    /// Adds the leaf of the tree at `root` (of `depth`) to each of `rows`'
    /// sums in column `col` of `dest`, the rows walked side by side, each
    /// on its variable of `nodes`.
    #[allow(clippy::too_many_arguments)]
    fn walk_tree(
        &mut self,
        body: &mut Vec<Stmt>,
        locs: &[Option<Loc>],
        (e, w): (&TreeEnsemble, &Walk<'_>),
        x: &Loc,
        (dest, col): (&super::View, Reg),
        (rows, nodes): (&[Reg], &[Var]),
        (root, depth): (Reg, Reg),
    ) {
        use DType::{F64, I64};
        for &node in nodes {
            body.push(Stmt::Set(node, root));
        }
        // The steps in segments: before each, the deepest of the rows'
        // nodes' heights (at most `segment`) is the segment's steps, so
        // that the walk stops when its rows stand on their leaves rather
        // than at the tree's depth (a leaf-wise tree's deepest leaf is
        // often three times as deep as most rows go).
        let segment = if nodes.len() > 1 {
            GROUP_SEGMENT
        } else {
            ROW_SEGMENT
        };
        let spread = self.i64_const(body, segment - 1);
        let spread = self.i64_binary(body, BinaryOp::Add, depth, spread);
        let log = self.i64_const(body, i64::from(segment.trailing_zeros()));
        let segments = self.i64_binary(body, BinaryOp::ShrLogical, spread, log);
        let segment = self.i64_const(body, segment);
        let seg = self.new_reg(I64, Some("segment"));
        let mut seg_body = Vec::new();
        let mut steps = segment;
        let mut heights: Option<Reg> = None;
        for &node in nodes {
            let here = emit!(self, &mut seg_body, I64, Expr::Var(node));
            let word = self.field(&mut seg_body, w, here, RULES);
            let height = self.i64_binary(&mut seg_body, BinaryOp::ShrLogical, word, w.half);
            heights = Some(match heights {
                None => height,
                Some(h) => self.i64_binary(&mut seg_body, BinaryOp::Max, h, height),
            });
        }
        if let Some(h) = heights {
            steps = self.i64_binary(&mut seg_body, BinaryOp::Min, h, segment);
        }
        let step = self.new_reg(I64, Some("step"));
        let mut step_body = Vec::new();
        let here: Vec<Reg> = nodes
            .iter()
            .map(|&node| emit!(self, &mut step_body, I64, Expr::Var(node)))
            .collect();
        let next: Vec<Reg> = rows
            .iter()
            .zip(&here)
            .map(|(&row, &here)| self.step(&mut step_body, locs, w, x, row, here))
            .collect();
        for (&node, next) in nodes.iter().zip(next) {
            step_body.push(Stmt::Set(node, next));
        }
        seg_body.push(Stmt::loop_of(Extent::Reg(steps), step, step_body));
        body.push(Stmt::loop_of(Extent::Reg(segments), seg, seg_body));
        for (&node, &row) in nodes.iter().zip(rows) {
            let leaf = emit!(self, body, I64, Expr::Var(node));
            let value = self.field(body, w, leaf, THRESHOLD);
            let value = emit!(self, body, F64, Expr::Bitcast(F64, value));
            let value = match e.dtype {
                F64 => value,
                dtype => emit!(self, body, dtype, Expr::Cast(dtype, value)),
            };
            let to = self.view_index(body, dest, &[Some(row), Some(col)]);
            let sum = emit!(self, body, e.dtype, Expr::Load(dest.param, to));
            let sum = emit!(self, body, e.dtype, Expr::Binary(BinaryOp::Add, sum, value));
            body.push(Stmt::Store(dest.param, Some(to), sum));
        }
    }

    /// Word `word` of the record at offset `at`.
    fn field(&mut self, body: &mut Vec<Stmt>, w: &Walk<'_>, at: Reg, word: i64) -> Reg {
        let at = match word {
            0 => at,
            _ => self.i64_binary(body, BinaryOp::Add, at, w.offsets[word as usize]),
        };
        emit!(self, body, DType::I64, Expr::Load(w.records, at))
    }

    /// One step of a walk from the record at `here`: the record it leads
    /// to for row `row` (a leaf leads to itself).
    fn step(
        &mut self,
        body: &mut Vec<Stmt>,
        locs: &[Option<Loc>],
        w: &Walk<'_>,
        x: &Loc,
        row: Reg,
        here: Reg,
    ) -> Reg {
        use DType::{Bool, F64, I64};
        let t = w.t;
        let feature = self.field(body, w, here, FEATURE);
        let value = self.read(body, locs, x, &[Some(row), Some(feature)]);
        let value = match self.kernel.reg_type(value) {
            F64 => value,
            _ => emit!(self, body, F64, Expr::Cast(F64, value)),
        };
        let rules = [DEFAULT_LEFT, ZERO_MISSING, NAN_MISSING, STRICT, CATEGORY];
        let flags = rules.iter().any(|&bit| t.mixed(bit)).then(|| {
            let word = self.field(body, w, here, RULES);
            self.i64_binary(body, BinaryOp::BAnd, word, w.low_half)
        });
        // Whether the node's `bit` is set: a constant where every node agrees.
        let flag = |lw: &mut Self, body: &mut Vec<Stmt>, bit: i64| match flags {
            Some(flags) if t.mixed(bit) => {
                let b = lw.i64_const(body, bit);
                let masked = lw.emit(body, I64, Expr::Binary(BinaryOp::BAnd, flags, b), None);
                lw.emit(body, Bool, Expr::Compare(CmpOp::Ne, masked, w.zero()), None)
            }
            _ => lw.emit(
                body,
                Bool,
                Expr::Const(Scalar::Bool(t.some & bit != 0)),
                None,
            ),
        };
        let is_nan = emit!(self, body, Bool, Expr::Compare(CmpOp::Ne, value, value));
        let x0 = emit!(self, body, F64, Expr::Select(is_nan, w.zero_f, value));
        // Missing: a NaN under `Missing::Nan`; a tiny value under `Zero`;
        // each rule's part left out where no node has it, and its flag
        // where every node has it.
        let mut missing: Option<Reg> = None;
        let mut either = |lw: &mut Self, body: &mut Vec<Stmt>, m: Reg| {
            missing = Some(match missing {
                None => m,
                Some(old) => lw.emit(body, Bool, Expr::Binary(BinaryOp::Or, old, m), None),
            });
        };
        if t.some & NAN_MISSING != 0 {
            let m = match t.mixed(NAN_MISSING) {
                true => {
                    let rule = flag(self, body, NAN_MISSING);
                    emit!(self, body, Bool, Expr::Binary(BinaryOp::And, is_nan, rule))
                }
                false => is_nan,
            };
            either(self, body, m);
        }
        if t.some & ZERO_MISSING != 0 {
            let tiny = emit!(self, body, F64, Expr::Const(Scalar::F64(ZERO_THRESHOLD)));
            let magnitude = emit!(self, body, F64, Expr::Unary(UnaryOp::Abs, x0));
            let mut m = emit!(self, body, Bool, Expr::Compare(CmpOp::Le, magnitude, tiny));
            if t.mixed(ZERO_MISSING) {
                let rule = flag(self, body, ZERO_MISSING);
                m = emit!(self, body, Bool, Expr::Binary(BinaryOp::And, m, rule));
            }
            either(self, body, m);
        }
        // The test of a present value.
        let threshold = self.field(body, w, here, THRESHOLD);
        let threshold = emit!(self, body, F64, Expr::Bitcast(F64, threshold));
        let le = |lw: &mut Self, body: &mut Vec<Stmt>| {
            lw.emit(body, Bool, Expr::Compare(CmpOp::Le, x0, threshold), None)
        };
        let lt = |lw: &mut Self, body: &mut Vec<Stmt>| {
            lw.emit(body, Bool, Expr::Compare(CmpOp::Lt, x0, threshold), None)
        };
        let mut test = if t.mixed(STRICT) {
            let (lt, le) = (lt(self, body), le(self, body));
            let strict = flag(self, body, STRICT);
            emit!(self, body, Bool, Expr::Select(strict, lt, le))
        } else if t.some & STRICT != 0 {
            lt(self, body)
        } else {
            le(self, body)
        };
        if let Some(words) = w.words {
            let category = self.in_set(body, w, words, x0, here);
            test = match t.mixed(CATEGORY) {
                true => {
                    let is_category = flag(self, body, CATEGORY);
                    emit!(self, body, Bool, Expr::Select(is_category, category, test))
                }
                false => category,
            };
        }
        let go_left = match missing {
            Some(missing) => {
                let default_left = flag(self, body, DEFAULT_LEFT);
                emit!(self, body, Bool, Expr::Select(missing, default_left, test))
            }
            None => test,
        };
        let children = self.field(body, w, here, CHILDREN);
        let left = self.i64_binary(body, BinaryOp::BAnd, children, w.low_half);
        let right = self.i64_binary(body, BinaryOp::ShrLogical, children, w.half);
        emit!(self, body, I64, Expr::Select(go_left, left, right))
    }

    /// Whether `x0` (never NaN) is a category in the set of the node at
    /// `here`.
    fn in_set(
        &mut self,
        body: &mut Vec<Stmt>,
        w: &Walk<'_>,
        words: ParamIdx,
        x0: Reg,
        here: Reg,
    ) -> Reg {
        use DType::{Bool, I64};
        // Saturating, as the semantics' `as` is.
        let category = emit!(self, body, I64, Expr::Cast(I64, x0));
        let count = self.field(body, w, here, N_CATEGORIES);
        let above = emit!(
            self,
            body,
            Bool,
            Expr::Compare(CmpOp::Ge, category, w.zero())
        );
        let below = emit!(self, body, Bool, Expr::Compare(CmpOp::Lt, category, count));
        let inside = emit!(self, body, Bool, Expr::Binary(BinaryOp::And, above, below));
        // Outside the set, read a word inside the table instead.
        let safe = emit!(self, body, I64, Expr::Select(inside, category, w.zero()));
        let five = self.i64_const(body, 5);
        let word_idx = emit!(
            self,
            body,
            I64,
            Expr::Binary(BinaryOp::ShrArith, safe, five)
        );
        let first = self.field(body, w, here, WORD_AT);
        let word_at = emit!(
            self,
            body,
            I64,
            Expr::Binary(BinaryOp::Add, first, word_idx)
        );
        let word = emit!(self, body, I64, Expr::Load(words, word_at));
        let low = self.i64_const(body, 31);
        let bit_idx = emit!(self, body, I64, Expr::Binary(BinaryOp::BAnd, safe, low));
        let shifted = emit!(
            self,
            body,
            I64,
            Expr::Binary(BinaryOp::ShrLogical, word, bit_idx)
        );
        let bit = emit!(
            self,
            body,
            I64,
            Expr::Binary(BinaryOp::BAnd, shifted, w.one())
        );
        let set = emit!(self, body, Bool, Expr::Compare(CmpOp::Ne, bit, w.zero()));
        emit!(self, body, Bool, Expr::Binary(BinaryOp::And, inside, set))
    }

    /// The ensemble as straight-line code per row: each node's test of its
    /// feature's value (read once per row), and each tree's leaf value
    /// picked by a select per node, bottom up ([`LowerOptions::tree_selects`]).
    ///
    /// [`LowerOptions::tree_selects`]: crate::LowerOptions::tree_selects
    fn trees_by_selects(
        &mut self,
        out: &mut Vec<Stmt>,
        locs: &[Option<Loc>],
        e: &TreeEnsemble,
        x: &Loc,
        dest: &super::View,
    ) {
        // Trees in groups of about `GROUP_NODES` nodes, one row loop each,
        // the sums kept in `dest` between them (stored and read back
        // exactly): a loop body is one basic block, and LLVM's instruction
        // scheduling grows faster than the block (a minute for one body of
        // 3,000 nodes of a categorical model). Each group's loop in the row
        // blocks costs LLVM's register allocator more than a loop of its
        // own would (its hoisted constants live across the block): 512
        // nodes compiled a 100-tree model in 1.6 s where 256 took 2.3, and
        // ran 10-20 % faster (docs/performance.md).
        const GROUP_NODES: usize = 512;
        let mut groups: Vec<&[kiln_ir::trees::Tree]> = Vec::new();
        let (mut start, mut nodes) = (0, 0);
        for (idx, tree) in e.trees.iter().enumerate() {
            if nodes > 0 && nodes + tree.nodes.len() > GROUP_NODES {
                groups.push(&e.trees[start..idx]);
                (start, nodes) = (idx, 0);
            }
            nodes += tree.nodes.len().max(1);
        }
        groups.push(&e.trees[start..]);
        let one_row = |lw: &mut Self, body: &mut Vec<Stmt>, row: Reg, first: bool, group: &[_]| {
            let mut features = Features {
                row,
                values: vec![None; e.n_features as usize],
            };
            let at: Vec<Reg> = (0..e.n_outputs())
                .map(|k| {
                    let col = lw.i64_const(body, k as i64);
                    lw.view_index(body, dest, &[Some(row), Some(col)])
                })
                .collect();
            let mut sums: Vec<Reg> = e
                .init
                .iter()
                .zip(&at)
                .map(|(&v, &to)| {
                    if !first {
                        return lw.emit(body, e.dtype, Expr::Load(dest.param, to), None);
                    }
                    let init = kiln_ir::semantics::cast(Scalar::F64(v), e.dtype);
                    lw.emit(body, e.dtype, Expr::Const(init), None)
                })
                .collect();
            for tree in group {
                let value = lw.tree_value(body, locs, x, &mut features, tree, e.dtype);
                let sum = &mut sums[tree.output as usize];
                *sum = lw.emit(
                    body,
                    e.dtype,
                    Expr::Binary(BinaryOp::Add, *sum, value),
                    None,
                );
            }
            for (sum, to) in sums.into_iter().zip(at) {
                body.push(Stmt::Store(dest.param, Some(to), sum));
            }
        };
        let rows = dest.dims[..1].to_vec();
        if groups.len() == 1 {
            return self.nest(out, &rows, |lw, body, rows| {
                one_row(lw, body, rows[0], true, groups[0])
            });
        }
        // Several groups: the rows in blocks of `ROW_BLOCK`, each group's
        // row loop over a block while its rows (and their sums) are in the
        // first level of cache, rather than a pass of each group over all
        // the rows.
        const ROW_BLOCK_LOG: i64 = 7;
        let (b, blocks, mut body, start, count) = self.row_blocks(out, &rows[0], ROW_BLOCK_LOG);
        for (group_idx, group) in groups.into_iter().enumerate() {
            let r = self.new_reg(DType::I64, Some("row"));
            let mut row_body = Vec::new();
            let row = self.i64_binary(&mut row_body, BinaryOp::Add, start, r);
            one_row(self, &mut row_body, row, group_idx == 0, group);
            body.push(Stmt::loop_of(Extent::Reg(count), r, row_body));
        }
        out.push(Stmt::loop_of(Extent::Reg(blocks), b, body));
    }

    /// The leaf value `tree` gives the row: its nodes' selects, children
    /// before parents (an explicit post-order: no recursion over the model).
    ///
    /// The selects carry the leaves' bits as integers of the dtype's width,
    /// the root's bitcast back: the same bits, but an x86 core without
    /// AVX-512 has no branch-free select of a scalar float, and LLVM gives
    /// each one (its `CMOV_FR64`) two basic blocks, of which the vectorized
    /// loop's scalar remainder had thousands. An integer select is a `cmov`.
    /// (A 700-tree model's 12,900 nodes took LLVM over 20 minutes on a Zen 1
    /// core, its live-variable analysis quadratic in those blocks.)
    fn tree_value(
        &mut self,
        body: &mut Vec<Stmt>,
        locs: &[Option<Loc>],
        x: &Loc,
        features: &mut Features,
        tree: &kiln_ir::trees::Tree,
        dtype: DType,
    ) -> Reg {
        let bits = dtype.bits_int();
        let leaf = |lw: &mut Self, body: &mut Vec<Stmt>, i: u32| {
            let v = kiln_ir::semantics::cast(Scalar::F64(tree.leaves[i as usize]), dtype);
            lw.emit(
                body,
                bits,
                Expr::Const(Scalar::from_bits(bits, v.bits())),
                None,
            )
        };
        if tree.nodes.is_empty() {
            let value = leaf(self, body, 0);
            return self.emit(body, dtype, Expr::Bitcast(dtype, value), None);
        }
        let mut done: Vec<Option<Reg>> = vec![None; tree.nodes.len()];
        let mut stack = vec![0u32];
        while let Some(&at) = stack.last() {
            let node = &tree.nodes[at as usize];
            let pending: Vec<u32> = [node.left, node.right]
                .into_iter()
                .filter_map(|c| match c {
                    Child::Node(i) if done[i as usize].is_none() => Some(i),
                    _ => None,
                })
                .collect();
            if !pending.is_empty() {
                stack.extend(pending);
                continue;
            }
            stack.pop();
            let side = |lw: &mut Self, body: &mut Vec<Stmt>, c: Child| match c {
                Child::Node(i) => done[i as usize].expect("children first"),
                Child::Leaf(i) => leaf(lw, body, i),
            };
            let (left, right) = (side(self, body, node.left), side(self, body, node.right));
            let go_left = self.goes_left(body, locs, x, features, node);
            done[at as usize] =
                Some(self.emit(body, bits, Expr::Select(go_left, left, right), None));
        }
        let root = done[0].expect("the root is done last");
        self.emit(body, dtype, Expr::Bitcast(dtype, root), None)
    }

    /// Whether the row goes left at `node`: `TreeNode::goes_left` with the
    /// node's rules known, so each is a constant choice here.
    fn goes_left(
        &mut self,
        body: &mut Vec<Stmt>,
        locs: &[Option<Loc>],
        x: &Loc,
        features: &mut Features,
        node: &TreeNode,
    ) -> Reg {
        use DType::{Bool, F64};
        let f = self.feature(body, locs, x, features, node.feature);
        let threshold = |lw: &mut Self, body: &mut Vec<Stmt>, t: f64| {
            lw.emit(body, F64, Expr::Const(Scalar::F64(t)), None)
        };
        // The common splits: a NaN takes the default side, the test being
        // false for it: `x <= t` goes right, `!(x > t)` left.
        // (Not for a NaN threshold, whose test is false for every `x` where
        // `!(x > t)` would be true.)
        let numeric = match node.test {
            SplitTest::Le(t) | SplitTest::Lt(t) => !t.is_nan(),
            SplitTest::In(_) => false,
        };
        if node.missing == Missing::Nan && numeric {
            if let SplitTest::Le(t) | SplitTest::Lt(t) = node.test {
                let t = threshold(self, body, t);
                let strict = matches!(node.test, SplitTest::Lt(_));
                return match (node.default_left, strict) {
                    (false, false) => emit!(self, body, Bool, Expr::Compare(CmpOp::Le, f.value, t)),
                    (false, true) => emit!(self, body, Bool, Expr::Compare(CmpOp::Lt, f.value, t)),
                    (true, strict) => {
                        let op = if strict { CmpOp::Ge } else { CmpOp::Gt };
                        let right = emit!(self, body, Bool, Expr::Compare(op, f.value, t));
                        let yes = emit!(self, body, Bool, Expr::Const(Scalar::Bool(true)));
                        emit!(self, body, Bool, Expr::Binary(BinaryOp::Xor, right, yes))
                    }
                };
            }
        }
        let x0 = self.nan_as_zero(body, features, node.feature);
        let test = match &node.test {
            SplitTest::Le(t) => {
                let t = threshold(self, body, *t);
                emit!(self, body, Bool, Expr::Compare(CmpOp::Le, x0, t))
            }
            SplitTest::Lt(t) => {
                let t = threshold(self, body, *t);
                emit!(self, body, Bool, Expr::Compare(CmpOp::Lt, x0, t))
            }
            SplitTest::In(words) => self.in_words(body, features, node.feature, words),
        };
        let missing = match node.missing {
            Missing::None => return test,
            Missing::Nan => f.is_nan,
            Missing::Zero => {
                let tiny = emit!(self, body, F64, Expr::Const(Scalar::F64(ZERO_THRESHOLD)));
                let magnitude = emit!(self, body, F64, Expr::Unary(UnaryOp::Abs, x0));
                emit!(self, body, Bool, Expr::Compare(CmpOp::Le, magnitude, tiny))
            }
        };
        let default = emit!(
            self,
            body,
            Bool,
            Expr::Const(Scalar::Bool(node.default_left))
        );
        emit!(self, body, Bool, Expr::Select(missing, default, test))
    }

    /// Feature `i` of the row as `f64`, and whether it is NaN: read once.
    fn feature(
        &mut self,
        body: &mut Vec<Stmt>,
        locs: &[Option<Loc>],
        x: &Loc,
        features: &mut Features,
        i: u32,
    ) -> Feature {
        if let Some(f) = features.values[i as usize] {
            return f;
        }
        let col = self.i64_const(body, i64::from(i));
        let value = self.read(body, locs, x, &[Some(features.row), Some(col)]);
        let value = match self.kernel.reg_type(value) {
            DType::F64 => value,
            _ => self.emit(body, DType::F64, Expr::Cast(DType::F64, value), None),
        };
        let is_nan = self.emit(
            body,
            DType::Bool,
            Expr::Compare(CmpOp::Ne, value, value),
            None,
        );
        let f = Feature {
            value,
            is_nan,
            zeroed: None,
            category: None,
        };
        features.values[i as usize] = Some(f);
        f
    }

    /// Feature `i` with NaN read as 0 (read once).
    fn nan_as_zero(&mut self, body: &mut Vec<Stmt>, features: &mut Features, i: u32) -> Reg {
        let f = features.values[i as usize].expect("the feature was read");
        if let Some(z) = f.zeroed {
            return z;
        }
        let zero = self.emit(body, DType::F64, Expr::Const(Scalar::F64(0.0)), None);
        let z = self.emit(
            body,
            DType::F64,
            Expr::Select(f.is_nan, zero, f.value),
            None,
        );
        features.values[i as usize] = Some(Feature {
            zeroed: Some(z),
            ..f
        });
        z
    }

    /// Whether feature `i` (NaN read as 0) is a category of `words`. A set
    /// of a few runs of categories is a comparison of the value with each
    /// run's ends (`trunc(x)` is in `a..=b` exactly when `x` is in `[a, b +
    /// 1)`, or `(-1, b + 1)` for `a = 0`): `f64` comparisons that a vector
    /// unit takes as they are (LLVM spent a minute scheduling the `i64`
    /// vector bit tests of a 100-tree categorical model). Other sets test
    /// the category's bit.
    fn in_words(
        &mut self,
        body: &mut Vec<Stmt>,
        features: &mut Features,
        i: u32,
        words: &[u32],
    ) -> Reg {
        const MAX_RUNS: usize = 6;
        let runs = category_runs(words);
        if runs.len() > MAX_RUNS {
            return self.in_word_bits(body, features, i, words);
        }
        let x0 = self.nan_as_zero(body, features, i);
        let mut inside = self.emit(body, DType::Bool, Expr::Const(Scalar::Bool(false)), None);
        for (a, b) in runs {
            let (lo_op, lo) = if a == 0 {
                (CmpOp::Gt, -1.0)
            } else {
                (CmpOp::Ge, a as f64)
            };
            let lo = self.emit(body, DType::F64, Expr::Const(Scalar::F64(lo)), None);
            let hi = self.emit(
                body,
                DType::F64,
                Expr::Const(Scalar::F64(b as f64 + 1.0)),
                None,
            );
            let above = self.emit(body, DType::Bool, Expr::Compare(lo_op, x0, lo), None);
            let below = self.emit(body, DType::Bool, Expr::Compare(CmpOp::Lt, x0, hi), None);
            let run = self.emit(
                body,
                DType::Bool,
                Expr::Binary(BinaryOp::And, above, below),
                None,
            );
            inside = self.emit(
                body,
                DType::Bool,
                Expr::Binary(BinaryOp::Or, inside, run),
                None,
            );
        }
        inside
    }

    /// Whether feature `i` (NaN read as 0) is a category of `words`: its
    /// integer part (computed once per row) inside the set and its bit set,
    /// the word picked by comparisons with constants.
    fn in_word_bits(
        &mut self,
        body: &mut Vec<Stmt>,
        features: &mut Features,
        i: u32,
        words: &[u32],
    ) -> Reg {
        use DType::{Bool, I64};
        let x0 = self.nan_as_zero(body, features, i);
        let f = features.values[i as usize].expect("the feature was read");
        let (word_idx, bit_idx) = match f.category {
            Some(c) => c,
            None => {
                let c = self.emit(body, I64, Expr::Cast(I64, x0), None);
                let five = self.i64_const(body, 5);
                let w = self.emit(body, I64, Expr::Binary(BinaryOp::ShrArith, c, five), None);
                let low = self.i64_const(body, 31);
                let b = self.emit(body, I64, Expr::Binary(BinaryOp::BAnd, c, low), None);
                features.values[i as usize] = Some(Feature {
                    category: Some((w, b)),
                    ..f
                });
                (w, b)
            }
        };
        // The word of the category's bit: a select per word of the set,
        // 0 past it (and for a negative category, whose index is negative).
        let mut word = self.i64_const(body, 0);
        for (k, &w) in words.iter().enumerate().rev() {
            if w == 0 {
                continue;
            }
            let k = self.i64_const(body, k as i64);
            let here = emit!(self, body, Bool, Expr::Compare(CmpOp::Eq, word_idx, k));
            let w = self.i64_const(body, i64::from(w));
            word = emit!(self, body, I64, Expr::Select(here, w, word));
        }
        let shifted = emit!(
            self,
            body,
            I64,
            Expr::Binary(BinaryOp::ShrLogical, word, bit_idx)
        );
        let one = self.i64_const(body, 1);
        let bit = emit!(self, body, I64, Expr::Binary(BinaryOp::BAnd, shifted, one));
        let zero = self.i64_const(body, 0);
        emit!(self, body, Bool, Expr::Compare(CmpOp::Ne, bit, zero))
    }

    /// A constant table as a [`Param::ConstIn`].
    fn table<T>(
        &mut self,
        name: &str,
        dtype: DType,
        values: &[T],
        scalar: impl Fn(&T) -> Scalar,
    ) -> ParamIdx {
        let tensor = TensorConst {
            dtype,
            dims: vec![values.len() as u64],
            values: values.iter().map(scalar).collect(),
        };
        self.param(Param::ConstIn {
            name: name.to_string(),
            tensor: Arc::new(tensor),
        })
    }
}

/// The categories of a bitset as runs `a..=b`, ascending.
fn category_runs(words: &[u32]) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for (k, &w) in words.iter().enumerate() {
        for bit in 0..32u64 {
            if (w >> bit) & 1 == 1 {
                let c = k as u64 * 32 + bit;
                match runs.last_mut() {
                    Some((_, b)) if *b + 1 == c => *b = c,
                    _ => runs.push((c, c)),
                }
            }
        }
    }
    runs
}

/// A feature of the row, as the select form reads it.
#[derive(Copy, Clone)]
struct Feature {
    value: Reg,
    is_nan: Reg,
    /// NaN read as 0, once a node asks.
    zeroed: Option<Reg>,
    /// The integer part's word index (negative for a negative category,
    /// whose word is then 0 as one past the set's is) and bit index, once
    /// a category node asks.
    category: Option<(Reg, Reg)>,
}

/// The row's features read so far.
struct Features {
    row: Reg,
    values: Vec<Option<Feature>>,
}
