//! Lowering of `trees` (a tree ensemble, `kiln_ir::trees`), in one of two
//! forms, both the rules of `TreeNode::goes_left` and both summing each
//! output's leaves in tree order in the ensemble's dtype: the same bits.
//!
//! **Straight-line selects** (up to `LowerOptions::tree_selects` nodes):
//! per row, every node's test of its feature (read once) against its
//! constant threshold, and each tree's leaf picked by a select per node,
//! children before parents. No table, no branch: a row loop a vectorizer
//! runs in lanes. Trees go in groups of about 256 nodes, a row loop each,
//! the sums kept in the output between them.
//!
//! **A table walk** (larger ensembles, and every one where the option is
//! 0): every node and leaf of every tree gets an index into one table
//! space. A leaf leads to itself both ways, so a tree's walk takes exactly
//! its depth's steps and the loop needs no exit: after `depth[t]` steps
//! from `root[t]` the walk stands on the row's leaf. A step reads its
//! node's feature, threshold, children and (only where the ensemble mixes
//! them) its rules from the tables and decides with selects; what no node
//! uses (categories, `Missing::Zero`, a strict test) is left out. The code
//! does not grow with the model, so a thousand trees compile as fast as
//! ten.

use super::Loc;
use crate::lower::Lowerer;
use crate::{Expr, Extent, Param, ParamIdx, Reg, Stmt};
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

/// Flag bits of a node's rules in the `flags` table.
const DEFAULT_LEFT: i64 = 1;
const ZERO_MISSING: i64 = 2;
const NAN_MISSING: i64 = 4;
const STRICT: i64 = 8;
const CATEGORY: i64 = 16;

/// The ensemble as tables over one index space of nodes and leaves.
struct Tables {
    feature: Vec<i64>,
    threshold: Vec<f64>,
    left: Vec<i64>,
    right: Vec<i64>,
    flags: Vec<i64>,
    /// A category node's first word in `words`, and its count of
    /// categories (32 per word).
    word_at: Vec<i64>,
    n_categories: Vec<i64>,
    words: Vec<i64>,
    value: Vec<f64>,
    /// Per tree, ordered by output then tree: its root and depth.
    root: Vec<i64>,
    depth: Vec<i64>,
    /// Per output, its trees' range in `root` and `depth`.
    ranges: Vec<(usize, usize)>,
    /// Which flags some node has set, and which some node has clear.
    some: i64,
    all: i64,
}

impl Tables {
    fn of(e: &TreeEnsemble) -> Tables {
        let mut t = Tables {
            feature: Vec::new(),
            threshold: Vec::new(),
            left: Vec::new(),
            right: Vec::new(),
            flags: Vec::new(),
            word_at: Vec::new(),
            n_categories: Vec::new(),
            words: Vec::new(),
            value: Vec::new(),
            root: Vec::new(),
            depth: Vec::new(),
            ranges: Vec::new(),
            some: 0,
            all: !0,
        };
        for output in 0..e.n_outputs() as u32 {
            let start = t.root.len();
            for tree in e.trees.iter().filter(|tree| tree.output == output) {
                t.push_tree(tree);
            }
            t.ranges.push((start, t.root.len()));
        }
        if t.words.is_empty() {
            // A load's index must be inside its table even where its word is not used.
            t.words.push(0);
        }
        t
    }

    fn push_tree(&mut self, tree: &kiln_ir::trees::Tree) {
        let base = self.feature.len() as i64;
        let leaf_base = base + tree.nodes.len() as i64;
        let at = |c: Child| match c {
            Child::Node(i) => base + i64::from(i),
            Child::Leaf(i) => leaf_base + i64::from(i),
        };
        self.root.push(base);
        self.depth.push(i64::from(tree.depth()));
        for node in &tree.nodes {
            let mut flags = if node.default_left { DEFAULT_LEFT } else { 0 };
            flags |= match node.missing {
                Missing::None => 0,
                Missing::Zero => ZERO_MISSING,
                Missing::Nan => NAN_MISSING,
            };
            let (threshold, word_at, n_categories) = match &node.test {
                SplitTest::Le(t) => (*t, 0, 0),
                SplitTest::Lt(t) => {
                    flags |= STRICT;
                    (*t, 0, 0)
                }
                SplitTest::In(words) => {
                    flags |= CATEGORY;
                    let word_at = self.words.len() as i64;
                    self.words.extend(words.iter().map(|&w| i64::from(w)));
                    (0.0, word_at, 32 * words.len() as i64)
                }
            };
            self.some |= flags;
            self.all &= flags;
            self.feature.push(i64::from(node.feature));
            self.threshold.push(threshold);
            self.left.push(at(node.left));
            self.right.push(at(node.right));
            self.flags.push(flags);
            self.word_at.push(word_at);
            self.n_categories.push(n_categories);
            self.value.push(0.0);
        }
        for (idx, &leaf) in tree.leaves.iter().enumerate() {
            let me = leaf_base + idx as i64;
            self.feature.push(0);
            self.threshold.push(0.0);
            self.left.push(me);
            self.right.push(me);
            self.flags.push(0);
            self.word_at.push(0);
            self.n_categories.push(0);
            self.value.push(leaf);
        }
    }

    /// Whether the nodes differ in `flag` (so a step must read it).
    fn mixed(&self, flag: i64) -> bool {
        self.some & flag != 0 && self.all & flag == 0
    }
}

/// The registers a step reads that no step changes.
struct Consts {
    zero: Reg,
    zero_f: Reg,
    one: Reg,
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
        let tables = TablesIn {
            feature: self.table("tree_feature", DType::I64, &t.feature, |v| Scalar::I64(*v)),
            threshold: self.table("tree_threshold", DType::F64, &t.threshold, |v| {
                Scalar::F64(*v)
            }),
            left: self.table("tree_left", DType::I64, &t.left, |v| Scalar::I64(*v)),
            right: self.table("tree_right", DType::I64, &t.right, |v| Scalar::I64(*v)),
            flags: self.table("tree_flags", DType::I64, &t.flags, |v| Scalar::I64(*v)),
            categories: (t.some & CATEGORY != 0).then(|| CategoryTables {
                word_at: self.table("tree_word_at", DType::I64, &t.word_at, |v| Scalar::I64(*v)),
                n_categories: self.table("tree_categories", DType::I64, &t.n_categories, |v| {
                    Scalar::I64(*v)
                }),
                words: self.table("tree_words", DType::I64, &t.words, |v| Scalar::I64(*v)),
            }),
            value: self.table("tree_value", e.dtype, &t.value, |v| {
                kiln_ir::semantics::cast(Scalar::F64(*v), e.dtype)
            }),
            root: self.table("tree_root", DType::I64, &t.root, |v| Scalar::I64(*v)),
            depth: self.table("tree_depth", DType::I64, &t.depth, |v| Scalar::I64(*v)),
        };
        let consts = Consts {
            zero: self.i64_const(out, 0),
            zero_f: self.emit(out, DType::F64, Expr::Const(Scalar::F64(0.0)), None),
            one: self.i64_const(out, 1),
        };
        let accs: Vec<_> = e
            .init
            .iter()
            .map(|&v| self.new_var(kiln_ir::semantics::cast(Scalar::F64(v), e.dtype)))
            .collect();
        let node = self.new_var(Scalar::I64(0));
        let rows = dest.dims[..1].to_vec();
        self.nest(out, &rows, |lw, body, rows| {
            let row = rows[0];
            for (k, &(start, end)) in t.ranges.iter().enumerate() {
                let init = kiln_ir::semantics::cast(Scalar::F64(e.init[k]), e.dtype);
                let init = lw.emit(body, e.dtype, Expr::Const(init), None);
                body.push(Stmt::Set(accs[k], init));
                let first = lw.i64_const(body, start as i64);
                let tree_idx = lw.new_reg(DType::I64, Some("tree"));
                let mut tree_body = Vec::new();
                let at = lw.emit(
                    &mut tree_body,
                    DType::I64,
                    Expr::Binary(BinaryOp::Add, tree_idx, first),
                    None,
                );
                let root = lw.emit(
                    &mut tree_body,
                    DType::I64,
                    Expr::Load(tables.root, at),
                    None,
                );
                let depth = lw.emit(
                    &mut tree_body,
                    DType::I64,
                    Expr::Load(tables.depth, at),
                    None,
                );
                tree_body.push(Stmt::Set(node, root));
                let step = lw.new_reg(DType::I64, Some("step"));
                let mut step_body = Vec::new();
                let here = lw.emit(&mut step_body, DType::I64, Expr::Var(node), None);
                let next = lw.step(&mut step_body, locs, (&t, &tables, &consts), x, row, here);
                step_body.push(Stmt::Set(node, next));
                tree_body.push(Stmt::loop_of(Extent::Reg(depth), step, step_body));
                let leaf = lw.emit(&mut tree_body, DType::I64, Expr::Var(node), None);
                let value = lw.emit(
                    &mut tree_body,
                    e.dtype,
                    Expr::Load(tables.value, leaf),
                    None,
                );
                let acc = lw.emit(&mut tree_body, e.dtype, Expr::Var(accs[k]), None);
                let sum = lw.emit(
                    &mut tree_body,
                    e.dtype,
                    Expr::Binary(BinaryOp::Add, acc, value),
                    None,
                );
                tree_body.push(Stmt::Set(accs[k], sum));
                body.push(Stmt::loop_of(
                    Extent::Fixed((end - start) as u64),
                    tree_idx,
                    tree_body,
                ));
                let result = lw.emit(body, e.dtype, Expr::Var(accs[k]), None);
                let col = lw.i64_const(body, k as i64);
                let to = lw.view_index(body, dest, &[Some(row), Some(col)]);
                body.push(Stmt::Store(dest.param, Some(to), result));
            }
        });
    }

    /// One step of a walk from node `here`: the node it leads to for row
    /// `row` (a leaf leads to itself).
    fn step(
        &mut self,
        body: &mut Vec<Stmt>,
        locs: &[Option<Loc>],
        (t, tables, c): (&Tables, &TablesIn, &Consts),
        x: &Loc,
        row: Reg,
        here: Reg,
    ) -> Reg {
        use DType::{Bool, F64, I64};
        let feature = emit!(self, body, I64, Expr::Load(tables.feature, here));
        let value = self.read(body, locs, x, &[Some(row), Some(feature)]);
        let value = match self.kernel.reg_type(value) {
            F64 => value,
            _ => emit!(self, body, F64, Expr::Cast(F64, value)),
        };
        let mixed = [DEFAULT_LEFT, ZERO_MISSING, NAN_MISSING, STRICT, CATEGORY];
        let flags = mixed
            .iter()
            .any(|&bit| t.mixed(bit))
            .then(|| emit!(self, body, I64, Expr::Load(tables.flags, here)));
        // Whether the node's `bit` is set: a constant where every node agrees.
        let flag = |lw: &mut Self, body: &mut Vec<Stmt>, bit: i64| match flags {
            Some(flags) if t.mixed(bit) => {
                let b = lw.i64_const(body, bit);
                let masked = lw.emit(body, I64, Expr::Binary(BinaryOp::BAnd, flags, b), None);
                lw.emit(body, Bool, Expr::Compare(CmpOp::Ne, masked, c.zero), None)
            }
            _ => lw.emit(
                body,
                Bool,
                Expr::Const(Scalar::Bool(t.some & bit != 0)),
                None,
            ),
        };
        let is_nan = emit!(self, body, Bool, Expr::Compare(CmpOp::Ne, value, value));
        let x0 = emit!(self, body, F64, Expr::Select(is_nan, c.zero_f, value));
        // Missing: a NaN under `Missing::Nan`; a tiny value under `Zero`.
        let mut missing = emit!(self, body, Bool, Expr::Const(Scalar::Bool(false)));
        if t.some & NAN_MISSING != 0 {
            let nan_rule = flag(self, body, NAN_MISSING);
            let m = emit!(
                self,
                body,
                Bool,
                Expr::Binary(BinaryOp::And, is_nan, nan_rule)
            );
            missing = emit!(self, body, Bool, Expr::Binary(BinaryOp::Or, missing, m));
        }
        if t.some & ZERO_MISSING != 0 {
            let zero_rule = flag(self, body, ZERO_MISSING);
            let tiny = emit!(self, body, F64, Expr::Const(Scalar::F64(ZERO_THRESHOLD)));
            let magnitude = emit!(self, body, F64, Expr::Unary(UnaryOp::Abs, x0));
            let small = emit!(self, body, Bool, Expr::Compare(CmpOp::Le, magnitude, tiny));
            let m = emit!(
                self,
                body,
                Bool,
                Expr::Binary(BinaryOp::And, small, zero_rule)
            );
            missing = emit!(self, body, Bool, Expr::Binary(BinaryOp::Or, missing, m));
        }
        // The test of a present value.
        let threshold = emit!(self, body, F64, Expr::Load(tables.threshold, here));
        let le = emit!(self, body, Bool, Expr::Compare(CmpOp::Le, x0, threshold));
        let mut test = if t.some & STRICT != 0 {
            let lt = emit!(self, body, Bool, Expr::Compare(CmpOp::Lt, x0, threshold));
            let strict = flag(self, body, STRICT);
            emit!(self, body, Bool, Expr::Select(strict, lt, le))
        } else {
            le
        };
        if let Some(cats) = &tables.categories {
            let category = self.in_set(body, cats, c, x0, here);
            let is_category = flag(self, body, CATEGORY);
            test = emit!(self, body, Bool, Expr::Select(is_category, category, test));
        }
        let default_left = flag(self, body, DEFAULT_LEFT);
        let go_left = emit!(self, body, Bool, Expr::Select(missing, default_left, test));
        let left = emit!(self, body, I64, Expr::Load(tables.left, here));
        let right = emit!(self, body, I64, Expr::Load(tables.right, here));
        emit!(self, body, I64, Expr::Select(go_left, left, right))
    }

    /// Whether `x0` (never NaN) is a category in the set of node `here`.
    fn in_set(
        &mut self,
        body: &mut Vec<Stmt>,
        cats: &CategoryTables,
        c: &Consts,
        x0: Reg,
        here: Reg,
    ) -> Reg {
        use DType::{Bool, I64};
        // Saturating, as the semantics' `as` is.
        let category = emit!(self, body, I64, Expr::Cast(I64, x0));
        let count = emit!(self, body, I64, Expr::Load(cats.n_categories, here));
        let above = emit!(self, body, Bool, Expr::Compare(CmpOp::Ge, category, c.zero));
        let below = emit!(self, body, Bool, Expr::Compare(CmpOp::Lt, category, count));
        let inside = emit!(self, body, Bool, Expr::Binary(BinaryOp::And, above, below));
        // Outside the set, read a word inside the table instead.
        let safe = emit!(self, body, I64, Expr::Select(inside, category, c.zero));
        let five = self.i64_const(body, 5);
        let word_idx = emit!(
            self,
            body,
            I64,
            Expr::Binary(BinaryOp::ShrArith, safe, five)
        );
        let first = emit!(self, body, I64, Expr::Load(cats.word_at, here));
        let word_at = emit!(
            self,
            body,
            I64,
            Expr::Binary(BinaryOp::Add, first, word_idx)
        );
        let word = emit!(self, body, I64, Expr::Load(cats.words, word_at));
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
            Expr::Binary(BinaryOp::BAnd, shifted, c.one)
        );
        let set = emit!(self, body, Bool, Expr::Compare(CmpOp::Ne, bit, c.zero));
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
        // 3,000 nodes of a categorical model).
        const GROUP_NODES: usize = 256;
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
        let rows = dest.dims[..1].to_vec();
        for (group_idx, group) in groups.into_iter().enumerate() {
            self.nest(out, &rows, |lw, body, rows| {
                let row = rows[0];
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
                        if group_idx > 0 {
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
            });
        }
    }

    /// The leaf value `tree` gives the row: its nodes' selects, children
    /// before parents (an explicit post-order: no recursion over the model).
    fn tree_value(
        &mut self,
        body: &mut Vec<Stmt>,
        locs: &[Option<Loc>],
        x: &Loc,
        features: &mut Features,
        tree: &kiln_ir::trees::Tree,
        dtype: DType,
    ) -> Reg {
        let leaf = |lw: &mut Self, body: &mut Vec<Stmt>, i: u32| {
            let v = kiln_ir::semantics::cast(Scalar::F64(tree.leaves[i as usize]), dtype);
            lw.emit(body, dtype, Expr::Const(v), None)
        };
        if tree.nodes.is_empty() {
            return leaf(self, body, 0);
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
                Some(self.emit(body, dtype, Expr::Select(go_left, left, right), None));
        }
        done[0].expect("the root is done last")
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

/// The tables' parameters.
struct TablesIn {
    feature: ParamIdx,
    threshold: ParamIdx,
    left: ParamIdx,
    right: ParamIdx,
    flags: ParamIdx,
    value: ParamIdx,
    root: ParamIdx,
    depth: ParamIdx,
    /// Only for an ensemble with category sets.
    categories: Option<CategoryTables>,
}

/// A category node's bitset: its first word, its count of categories
/// (32 per word), and the words of every set.
struct CategoryTables {
    word_at: ParamIdx,
    n_categories: ParamIdx,
    words: ParamIdx,
}
