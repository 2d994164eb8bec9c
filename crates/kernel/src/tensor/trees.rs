//! Lowering of `trees` (a tree ensemble, `kiln_ir::trees`) to a
//! table-driven walk: the ensemble becomes constant tables, and each row
//! walks each tree by a counted loop, one decision per step.
//!
//! Every node and leaf of every tree gets an index into one table space.
//! A leaf leads to itself both ways, so a tree's walk takes exactly its
//! depth's steps, and the loop needs no exit: after `depth[t]` steps from
//! `root[t]` the walk stands on the row's leaf, whose value is added to its
//! output's sum (a variable, in tree order, in the ensemble's dtype). A
//! step reads its node's feature, threshold, children and (only where the
//! ensemble mixes them) its rules from the tables, and computes the
//! decision of `TreeNode::goes_left` with selects: the same rules, the same
//! bits. What no node of the ensemble uses (categories, `Missing::Zero`, a
//! strict test) is left out of the step.
//!
//! The walk compiles in time linear in nothing but the op (the tables are
//! data), so a model of a thousand trees compiles as fast as one of ten.

use super::Loc;
use crate::lower::Lowerer;
use crate::{Expr, Extent, Param, ParamIdx, Reg, Stmt};
use kiln_ir::op::{BinaryOp, CmpOp, TensorConst, UnaryOp};
use kiln_ir::scalar::Scalar;
use kiln_ir::trees::{Child, Missing, SplitTest, TreeEnsemble, ZERO_THRESHOLD};
use kiln_ir::types::DType;
use std::sync::Arc;

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
        macro_rules! emit {
            ($dtype:expr, $expr:expr) => {
                self.emit(body, $dtype, $expr, None)
            };
        }
        let feature = emit!(I64, Expr::Load(tables.feature, here));
        let value = self.read(body, locs, x, &[Some(row), Some(feature)]);
        let value = match self.kernel.reg_type(value) {
            F64 => value,
            _ => emit!(F64, Expr::Cast(F64, value)),
        };
        let mixed = [DEFAULT_LEFT, ZERO_MISSING, NAN_MISSING, STRICT, CATEGORY];
        let flags = mixed
            .iter()
            .any(|&bit| t.mixed(bit))
            .then(|| emit!(I64, Expr::Load(tables.flags, here)));
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
        let is_nan = emit!(Bool, Expr::Compare(CmpOp::Ne, value, value));
        let x0 = emit!(F64, Expr::Select(is_nan, c.zero_f, value));
        // Missing: a NaN under `Missing::Nan`; a tiny value under `Zero`.
        let mut missing = emit!(Bool, Expr::Const(Scalar::Bool(false)));
        if t.some & NAN_MISSING != 0 {
            let nan_rule = flag(self, body, NAN_MISSING);
            let m = emit!(Bool, Expr::Binary(BinaryOp::And, is_nan, nan_rule));
            missing = emit!(Bool, Expr::Binary(BinaryOp::Or, missing, m));
        }
        if t.some & ZERO_MISSING != 0 {
            let zero_rule = flag(self, body, ZERO_MISSING);
            let tiny = emit!(F64, Expr::Const(Scalar::F64(ZERO_THRESHOLD)));
            let magnitude = emit!(F64, Expr::Unary(UnaryOp::Abs, x0));
            let small = emit!(Bool, Expr::Compare(CmpOp::Le, magnitude, tiny));
            let m = emit!(Bool, Expr::Binary(BinaryOp::And, small, zero_rule));
            missing = emit!(Bool, Expr::Binary(BinaryOp::Or, missing, m));
        }
        // The test of a present value.
        let threshold = emit!(F64, Expr::Load(tables.threshold, here));
        let le = emit!(Bool, Expr::Compare(CmpOp::Le, x0, threshold));
        let mut test = if t.some & STRICT != 0 {
            let lt = emit!(Bool, Expr::Compare(CmpOp::Lt, x0, threshold));
            let strict = flag(self, body, STRICT);
            emit!(Bool, Expr::Select(strict, lt, le))
        } else {
            le
        };
        if let Some(cats) = &tables.categories {
            let category = self.in_set(body, cats, c, x0, here);
            let is_category = flag(self, body, CATEGORY);
            test = emit!(Bool, Expr::Select(is_category, category, test));
        }
        let default_left = flag(self, body, DEFAULT_LEFT);
        let go_left = emit!(Bool, Expr::Select(missing, default_left, test));
        let left = emit!(I64, Expr::Load(tables.left, here));
        let right = emit!(I64, Expr::Load(tables.right, here));
        emit!(I64, Expr::Select(go_left, left, right))
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
        macro_rules! emit {
            ($dtype:expr, $expr:expr) => {
                self.emit(body, $dtype, $expr, None)
            };
        }
        // Saturating, as the semantics' `as` is.
        let category = emit!(I64, Expr::Cast(I64, x0));
        let count = emit!(I64, Expr::Load(cats.n_categories, here));
        let above = emit!(Bool, Expr::Compare(CmpOp::Ge, category, c.zero));
        let below = emit!(Bool, Expr::Compare(CmpOp::Lt, category, count));
        let inside = emit!(Bool, Expr::Binary(BinaryOp::And, above, below));
        // Outside the set, read a word inside the table instead.
        let safe = emit!(I64, Expr::Select(inside, category, c.zero));
        let five = self.i64_const(body, 5);
        let word_idx = emit!(I64, Expr::Binary(BinaryOp::ShrArith, safe, five));
        let first = emit!(I64, Expr::Load(cats.word_at, here));
        let word_at = emit!(I64, Expr::Binary(BinaryOp::Add, first, word_idx));
        let word = emit!(I64, Expr::Load(cats.words, word_at));
        let low = self.i64_const(body, 31);
        let bit_idx = emit!(I64, Expr::Binary(BinaryOp::BAnd, safe, low));
        let shifted = emit!(I64, Expr::Binary(BinaryOp::ShrLogical, word, bit_idx));
        let bit = emit!(I64, Expr::Binary(BinaryOp::BAnd, shifted, c.one));
        let set = emit!(Bool, Expr::Compare(CmpOp::Ne, bit, c.zero));
        emit!(Bool, Expr::Binary(BinaryOp::And, inside, set))
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
