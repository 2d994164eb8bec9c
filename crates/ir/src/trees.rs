//! Tree ensembles: the attribute of [`crate::Op::Trees`] and what it means.
//!
//! A [`TreeEnsemble`] holds a model's trees as arrays, the way LightGBM,
//! XGBoost and scikit-learn hold them (a node's split feature, its test, its
//! children, where a missing value goes; a tree's leaf values), with no
//! pointers. Its meaning for one row of features is [`TreeEnsemble::eval_row`]:
//! each output starts at its `init` and adds, tree by tree in order, the leaf
//! its row reaches, in the ensemble's dtype. A node's decision is
//! [`TreeNode::goes_left`], the one statement of the rules (the interpreter
//! calls it; lowering expands the same rules into kernel expressions, and
//! the differential tests hold them equal). The model's link (sigmoid,
//! softmax, exp) is not part of the op: importers write it with ordinary
//! ops after it.
//!
//! [`TreeEnsemble::check`] is what the verifier asks of one: every child
//! inside its tree, every node reached once from the root (so a walk always
//! ends at a leaf), every leaf once. Nothing here recurses: a tree of any
//! depth is walked with a loop.

use crate::types::DType;
use std::hash::{Hash, Hasher};

/// LightGBM's `kZeroThreshold` (`1e-35f`, a `float` widened to `double`):
/// under [`Missing::Zero`], a value whose magnitude is at most this is
/// missing.
pub const ZERO_THRESHOLD: f64 = 1e-35f32 as f64;

/// A tree ensemble: the attribute of [`crate::Op::Trees`].
#[derive(Clone, Debug)]
pub struct TreeEnsemble {
    /// How many features a row has: the input's last extent.
    pub n_features: u32,
    /// The dtype the sums are kept and returned in (`f32` or `f64`).
    pub dtype: DType,
    /// Each output's starting value (XGBoost's `base_score`; LightGBM's 0);
    /// its length is the number of outputs (classes).
    pub init: Vec<f64>,
    /// The trees, in the order their leaves are added.
    pub trees: Vec<Tree>,
}

/// One tree: nodes (node 0 is the root) and leaf values.
#[derive(Clone, Debug, PartialEq)]
pub struct Tree {
    /// The output (class) its leaf is added to.
    pub output: u32,
    /// The internal nodes; none when the tree is a single leaf.
    pub nodes: Vec<TreeNode>,
    /// The leaf values (widened to `f64`; added in the ensemble's dtype).
    pub leaves: Vec<f64>,
}

/// An internal node.
#[derive(Clone, Debug, PartialEq)]
pub struct TreeNode {
    /// The feature it tests: an index into a row.
    pub feature: u32,
    /// The test a present value takes; true goes left.
    pub test: SplitTest,
    /// Which values are missing (and take `default_left`), and whether a
    /// NaN that is not missing reads as 0.
    pub missing: Missing,
    /// Where a missing value goes: left when true.
    pub default_left: bool,
    /// Where the test's true goes.
    pub left: Child,
    /// Where the test's false goes.
    pub right: Child,
}

/// A node's test of its feature's value `x`, widened to `f64`.
#[derive(Clone, Debug, PartialEq)]
pub enum SplitTest {
    /// `x <= threshold` (LightGBM, scikit-learn).
    Le(f64),
    /// `x < threshold` (XGBoost).
    Lt(f64),
    /// `x` is a category in the set: `x` is not NaN and its integer part
    /// `c` (toward zero) has `0 <= c < 32 * words.len()` and bit `c % 32` of
    /// `words[c / 32]` set (LightGBM's `cat_threshold` bitsets).
    In(Vec<u32>),
}

/// Which values of a node's feature are missing.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Missing {
    /// None: a NaN reads as 0 and takes the test (LightGBM `None`).
    None,
    /// A NaN reads as 0, and then a value with `|x| <= ZERO_THRESHOLD` is
    /// missing (LightGBM `Zero`).
    Zero,
    /// A NaN is missing (LightGBM `NaN`, XGBoost, scikit-learn).
    Nan,
}

/// Where a branch leads.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Child {
    /// An internal node of the same tree, by index.
    Node(u32),
    /// A leaf of the same tree, by index.
    Leaf(u32),
}

impl TreeNode {
    /// Whether the value `x` of this node's feature goes left: the rule of
    /// docs/semantics.md, stated once.
    pub fn goes_left(&self, x: f64) -> bool {
        let x = if x.is_nan() {
            if self.missing == Missing::Nan {
                return self.default_left;
            }
            0.0
        } else {
            x
        };
        if self.missing == Missing::Zero && x.abs() <= ZERO_THRESHOLD {
            return self.default_left;
        }
        match &self.test {
            SplitTest::Le(t) => x <= *t,
            SplitTest::Lt(t) => x < *t,
            SplitTest::In(words) => in_set(words, x),
        }
    }
}

/// Whether `x` is a category of the bitset `words` ([`SplitTest::In`]).
pub fn in_set(words: &[u32], x: f64) -> bool {
    // Saturating, as Rust's `as` is: a value past the bitset stays past it.
    let c = x as i64;
    !x.is_nan()
        && c >= 0
        && (c / 32) < words.len() as i64
        && (words[(c / 32) as usize] >> (c % 32)) & 1 == 1
}

impl Tree {
    /// The leaf `features` reaches (a row's values, widened to `f64`).
    pub fn leaf(&self, features: &[f64]) -> u32 {
        if self.nodes.is_empty() {
            return 0;
        }
        let mut at = 0u32;
        loop {
            let node = &self.nodes[at as usize];
            let x = features[node.feature as usize];
            match if node.goes_left(x) {
                node.left
            } else {
                node.right
            } {
                Child::Node(next) => at = next,
                Child::Leaf(leaf) => return leaf,
            }
        }
    }

    /// The most decisions a row makes before reaching a leaf (0 for a
    /// single leaf). Only for a checked tree.
    pub fn depth(&self) -> u32 {
        if self.nodes.is_empty() {
            return 0;
        }
        let mut deepest = 0;
        let mut stack = vec![(0u32, 1u32)];
        while let Some((at, depth)) = stack.pop() {
            deepest = deepest.max(depth);
            let node = &self.nodes[at as usize];
            for child in [node.left, node.right] {
                if let Child::Node(next) = child {
                    stack.push((next, depth + 1));
                }
            }
        }
        deepest
    }
}

impl TreeEnsemble {
    /// The number of outputs (classes).
    pub fn n_outputs(&self) -> usize {
        self.init.len()
    }

    /// The outputs for one row of features (widened to `f64`): each starts
    /// at its `init` and adds each of its trees' leaves in tree order, in
    /// the ensemble's dtype. An `f32` ensemble's values come back widened.
    pub fn eval_row(&self, features: &[f64]) -> Vec<f64> {
        let f32_sums = self.dtype == DType::F32;
        let mut sums: Vec<f64> = self
            .init
            .iter()
            .map(|&v| if f32_sums { f64::from(v as f32) } else { v })
            .collect();
        for tree in &self.trees {
            let leaf = tree.leaves[tree.leaf(features) as usize];
            let sum = &mut sums[tree.output as usize];
            *sum = if f32_sums {
                f64::from(*sum as f32 + leaf as f32)
            } else {
                *sum + leaf
            };
        }
        sums
    }

    /// Every problem of the ensemble's structure, each a sentence naming
    /// the tree and node (what [`crate::verify()`] reports).
    pub fn check(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if !matches!(self.dtype, DType::F32 | DType::F64) {
            problems.push(format!(
                "a tree ensemble sums in f32 or f64, not {}",
                self.dtype
            ));
        }
        if self.init.is_empty() {
            problems.push("a tree ensemble has at least one output".into());
        }
        for (idx, tree) in self.trees.iter().enumerate() {
            if let Err(why) = self.check_tree(tree) {
                problems.push(format!("tree {idx}: {why}"));
            }
        }
        problems
    }

    /// The first problem of one tree of this ensemble, if any: its output
    /// is one of the ensemble's, its features are inside a row, and every
    /// node and leaf is reached exactly once from the root.
    pub fn check_tree(&self, tree: &Tree) -> Result<(), String> {
        if tree.output as usize >= self.init.len() {
            return Err(format!(
                "its output {} is not one of the {} outputs",
                tree.output,
                self.init.len()
            ));
        }
        if tree.nodes.is_empty() {
            return match tree.leaves.len() {
                1 => Ok(()),
                n => Err(format!("a tree without nodes has one leaf, not {n}")),
            };
        }
        let (n_nodes, n_leaves) = (tree.nodes.len(), tree.leaves.len());
        for (at, node) in tree.nodes.iter().enumerate() {
            if node.feature >= self.n_features {
                return Err(format!(
                    "node {at} tests feature {} of {}",
                    node.feature, self.n_features
                ));
            }
            for child in [node.left, node.right] {
                let (index, count, what) = match child {
                    Child::Node(i) => (i, n_nodes, "node"),
                    Child::Leaf(i) => (i, n_leaves, "leaf"),
                };
                if index as usize >= count {
                    return Err(format!("node {at} leads to {what} {index} of {count}"));
                }
            }
        }
        // Walk from the root: every node and leaf is reached exactly once.
        let mut seen_node = vec![false; n_nodes];
        let mut seen_leaf = vec![false; n_leaves];
        seen_node[0] = true;
        let mut stack = vec![0u32];
        while let Some(at) = stack.pop() {
            let node = &tree.nodes[at as usize];
            for child in [node.left, node.right] {
                let (seen, index, what) = match child {
                    Child::Node(i) => (&mut seen_node, i, "node"),
                    Child::Leaf(i) => (&mut seen_leaf, i, "leaf"),
                };
                if std::mem::replace(&mut seen[index as usize], true) {
                    return Err(format!("{what} {index} is reached twice (node {at})"));
                }
                if let Child::Node(next) = child {
                    stack.push(next);
                }
            }
        }
        if let Some(at) = seen_node.iter().position(|s| !s) {
            return Err(format!("node {at} is not reached from the root"));
        }
        if let Some(at) = seen_leaf.iter().position(|s| !s) {
            return Err(format!("leaf {at} is not reached from the root"));
        }
        Ok(())
    }
}

/// Floats compare by their bits (the text format's exact round trip), as
/// [`crate::Scalar`]s do.
impl PartialEq for TreeEnsemble {
    fn eq(&self, other: &Self) -> bool {
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let tree_eq = |a: &Tree, b: &Tree| {
            a.output == b.output
                && bits(&a.leaves) == bits(&b.leaves)
                && a.nodes.len() == b.nodes.len()
                && a.nodes.iter().zip(&b.nodes).all(|(m, n)| {
                    m.feature == n.feature
                        && m.missing == n.missing
                        && m.default_left == n.default_left
                        && m.left == n.left
                        && m.right == n.right
                        && match (&m.test, &n.test) {
                            (SplitTest::Le(s), SplitTest::Le(t))
                            | (SplitTest::Lt(s), SplitTest::Lt(t)) => s.to_bits() == t.to_bits(),
                            (SplitTest::In(s), SplitTest::In(t)) => s == t,
                            _ => false,
                        }
                })
        };
        self.n_features == other.n_features
            && self.dtype == other.dtype
            && bits(&self.init) == bits(&other.init)
            && self.trees.len() == other.trees.len()
            && self
                .trees
                .iter()
                .zip(&other.trees)
                .all(|(a, b)| tree_eq(a, b))
    }
}

impl Eq for TreeEnsemble {}

/// Hashes the shape of the ensemble and its first tree's leaves: CSE keys
/// nodes by their op, and a model's million nodes need not be read for it.
/// Ensembles that differ elsewhere are told apart by `==`.
impl Hash for TreeEnsemble {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.n_features.hash(state);
        self.dtype.hash(state);
        self.init.len().hash(state);
        self.trees.len().hash(state);
        if let Some(tree) = self.trees.first() {
            tree.nodes.len().hash(state);
            for leaf in &tree.leaves {
                leaf.to_bits().hash(state);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stump(test: SplitTest, missing: Missing, default_left: bool) -> TreeNode {
        TreeNode {
            feature: 0,
            test,
            missing,
            default_left,
            left: Child::Leaf(0),
            right: Child::Leaf(1),
        }
    }

    #[test]
    fn lightgbm_missing_rules() {
        let none = stump(SplitTest::Le(-1.0), Missing::None, true);
        // NaN reads as 0: 0 <= -1 is false.
        assert!(!none.goes_left(f64::NAN));
        let zero = stump(SplitTest::Le(-1.0), Missing::Zero, true);
        assert!(zero.goes_left(f64::NAN));
        assert!(zero.goes_left(1e-36));
        assert!(zero.goes_left(-0.0));
        assert!(!zero.goes_left(1e-34));
        let nan = stump(SplitTest::Le(5.0), Missing::Nan, false);
        assert!(!nan.goes_left(f64::NAN));
        assert!(nan.goes_left(5.0));
        assert!(!nan.goes_left(f64::INFINITY));
        let lt = stump(SplitTest::Lt(5.0), Missing::Nan, true);
        assert!(!lt.goes_left(5.0));
        assert!(lt.goes_left(f64::NAN));
    }

    #[test]
    fn categories_are_truncated_and_bounded() {
        // Categories 1 and 33.
        let words = vec![0b10, 0b10];
        assert!(in_set(&words, 1.0));
        assert!(in_set(&words, 1.9));
        assert!(in_set(&words, 33.0));
        assert!(!in_set(&words, 0.0));
        assert!(!in_set(&words, -1.0));
        assert!(!in_set(&words, 65.0));
        assert!(!in_set(&words, f64::NAN));
        assert!(!in_set(&words, f64::INFINITY));
        assert!(!in_set(&words, 1e300));
    }

    #[test]
    fn check_finds_cycles_and_strays() {
        let mut ensemble = TreeEnsemble {
            n_features: 1,
            dtype: DType::F64,
            init: vec![0.0],
            trees: vec![Tree {
                output: 0,
                nodes: vec![stump(SplitTest::Le(0.0), Missing::None, false)],
                leaves: vec![1.0, 2.0],
            }],
        };
        assert!(ensemble.check().is_empty());
        assert_eq!(ensemble.eval_row(&[0.0]), [1.0]);
        assert_eq!(ensemble.eval_row(&[0.5]), [2.0]);
        ensemble.trees[0].nodes[0].left = Child::Node(0);
        assert_eq!(
            ensemble.check(),
            ["tree 0: node 0 is reached twice (node 0)"]
        );
        ensemble.trees[0].nodes[0].left = Child::Leaf(1);
        assert_eq!(
            ensemble.check(),
            ["tree 0: leaf 1 is reached twice (node 0)"]
        );
        ensemble.trees[0].nodes[0].left = Child::Leaf(2);
        assert_eq!(ensemble.check(), ["tree 0: node 0 leads to leaf 2 of 2"]);
    }
}
