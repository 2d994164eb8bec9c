//! XGBoost's JSON model (`Booster.save_model("model.json")`,
//! `save_raw("json")`), read into a [`Model`] with XGBoost's meanings.
//!
//! The format's contract, as XGBoost's `Learner::LoadModel` and
//! `RegTree::LoadModel` read it: `learner.learner_model_param` holds
//! `num_feature`, `num_class`, `num_target` and `base_score` (a number, or
//! in 3.x the text of a vector such as `"[5E-1]"`, one per output, in the
//! objective's output space); `learner.objective.name` the objective;
//! `learner.feature_names` the names (empty when it was given none);
//! `learner.gradient_booster.model` the trees and `tree_info` (the output
//! each tree adds to; a `dart` booster holds them in `gbtree.model`, with
//! `weight_drop`, one `float` per tree). A tree is columns over nodes: `left_children` and
//! `right_children` (`-1` at a leaf), `split_indices`, `split_conditions`
//! (the threshold, or the leaf's value at a leaf), `default_left`,
//! `split_type` (1 categorical), and per categorical node
//! (`categories_nodes`) its slice of `categories` (`categories_segments`,
//! `categories_sizes`).
//!
//! XGBoost's rules (`predictor/predict_fn.h`, `common/categorical.h`):
//! every value is a `float`, so the rows are rounded to `f32` first; a NaN
//! takes the default child; a number goes left when `x < threshold`; a
//! category goes **right** when it is listed, left when it is not or is
//! not a category (negative, or `>= 2^24`); the sums are `float`, starting
//! from `base_score` taken to the margin (`ProbToMargin`), trees added in
//! order.

use super::json::{self, Json, Value};
use super::{Link, Model};
use kiln_ir::trees::{Child, Missing, SplitTest, Tree, TreeEnsemble, TreeNode};
use kiln_ir::types::DType;
use kiln_ir::{ParseError, ParseResult};

/// Whether `text` looks like an XGBoost JSON model.
pub fn sniff(text: &str) -> bool {
    let head = text.trim_start();
    head.starts_with('{') && head.contains("\"learner\"")
}

/// Reads an XGBoost JSON model.
pub fn parse(src: &str) -> ParseResult<Model> {
    let root = json::parse(src)?;
    let err = |at: usize, msg: String| ParseError::at(src, at, msg);
    let learner = root.field(src, "learner")?;
    let params = learner.field(src, "learner_model_param")?;
    let n_features: u32 = params
        .field(src, "num_feature")?
        .number(src, "num_feature")?;
    let n_class: u32 = match params.get("num_class") {
        Some(v) => v.number(src, "num_class")?,
        None => 0,
    };
    let n_target: u32 = match params.get("num_target") {
        Some(v) => v.number(src, "num_target")?,
        None => 1,
    };
    let n_outputs = n_class.max(n_target).max(1);
    let objective = learner.field(src, "objective")?;
    let objective_name = objective.field(src, "name")?;
    let (link, margin) = objective_link(src, objective_name)?;
    let base = params.field(src, "base_score")?;
    let base_scores = base_score(src, base)?;
    let init: Vec<f64> = match base_scores.len() {
        1 => vec![f64::from(margin(base_scores[0])); n_outputs as usize],
        n if n == n_outputs as usize => base_scores.iter().map(|&b| f64::from(margin(b))).collect(),
        n => {
            return Err(err(
                base.at,
                format!("{n} base scores for {n_outputs} outputs"),
            ))
        }
    };

    let booster = learner.field(src, "gradient_booster")?;
    let kind = booster.field(src, "name")?.text(src, "name")?;
    // DART predicts with each tree's leaf times its `weight_drop`, a `float`
    // product added in tree order: the leaves are scaled here, in `float`.
    let (model, weights) = match kind {
        "gbtree" => (booster.field(src, "model")?, None),
        "dart" => {
            let gbtree = booster.field(src, "gbtree")?;
            let weights: Vec<f32> = booster
                .field(src, "weight_drop")?
                .numbers(src, "weight_drop")?;
            (gbtree.field(src, "model")?, Some(weights))
        }
        _ => {
            return Err(err(
                booster.at,
                format!("the `{kind}` booster is not supported: kiln reads gbtree and dart models"),
            ))
        }
    };
    let trees = model.field(src, "trees")?.array(src, "trees")?;
    let tree_info: Vec<u32> = model.field(src, "tree_info")?.numbers(src, "tree_info")?;
    if let Some(w) = &weights {
        if w.len() != trees.len() {
            let at = booster.at;
            return Err(err(
                at,
                format!("{} trees but {} weight_drop entries", trees.len(), w.len()),
            ));
        }
    }
    if tree_info.len() != trees.len() {
        let at = model.at;
        return Err(err(
            at,
            format!(
                "{} trees but {} tree_info entries",
                trees.len(),
                tree_info.len()
            ),
        ));
    }
    let mut ensemble = TreeEnsemble {
        n_features,
        dtype: DType::F32,
        init,
        trees: Vec::with_capacity(trees.len()),
    };
    let mut categorical = vec![false; n_features as usize];
    for (idx, (t, &output)) in trees.iter().zip(&tree_info).enumerate() {
        if output >= n_outputs {
            return Err(err(
                t.at,
                format!("tree {idx} adds to output {output} of {n_outputs}"),
            ));
        }
        let mut tree = tree(src, t, output, n_features, &mut categorical)
            .map_err(|e| e.or_at(src, t.at, idx))?;
        if let Some(w) = &weights {
            for leaf in &mut tree.leaves {
                *leaf = f64::from(*leaf as f32 * w[idx]);
            }
        }
        ensemble
            .check_tree(&tree)
            .map_err(|why| err(t.at, format!("tree {idx}: {why}")))?;
        ensemble.trees.push(tree);
    }

    let names = match learner.get("feature_names") {
        Some(v) => v
            .array(src, "feature_names")?
            .iter()
            .map(|n| n.text(src, "feature_names").map(str::to_string))
            .collect::<ParseResult<Vec<_>>>()?,
        None => Vec::new(),
    };
    let feature_names = if names.is_empty() {
        // XGBoost's own names for unnamed features.
        (0..n_features).map(|i| format!("f{i}")).collect()
    } else if names.len() == n_features as usize {
        names
    } else {
        let at = learner.get("feature_names").map_or(learner.at, |v| v.at);
        return Err(err(
            at,
            format!("{} feature names for {n_features} features", names.len()),
        ));
    };
    Ok(Model {
        ensemble,
        feature_names,
        average_over: None,
        link,
        input: DType::F32,
        nonnegative_categories: (0..n_features)
            .filter(|&f| categorical[f as usize])
            .collect(),
    })
}

/// A located error, or one that says which tree it is in.
enum TreeError {
    At(usize, String),
    Tree(String),
}

impl From<ParseError> for TreeError {
    fn from(e: ParseError) -> TreeError {
        TreeError::Tree(e.to_string())
    }
}

impl TreeError {
    fn or_at(self, src: &str, at: usize, idx: usize) -> ParseError {
        match self {
            TreeError::At(at, msg) => ParseError::at(src, at, format!("tree {idx}: {msg}")),
            TreeError::Tree(msg) => ParseError::at(src, at, format!("tree {idx}: {msg}")),
        }
    }
}

/// `base_score`: a number, or the text of a vector of them (`"[5E-1]"`).
fn base_score(src: &str, v: &Json<'_>) -> ParseResult<Vec<f32>> {
    let text = v.text(src, "base_score")?.trim();
    let inner = text
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(text);
    inner
        .split(',')
        .map(|s| {
            s.trim().parse::<f32>().map_err(|_| {
                ParseError::at(src, v.at, format!("base_score {text:?} is not a number"))
            })
        })
        .collect()
}

/// The objective's link and its `ProbToMargin` (in `float`, as XGBoost
/// computes it).
#[allow(clippy::type_complexity)]
fn objective_link(src: &str, name: &Json<'_>) -> ParseResult<(Link, fn(f32) -> f32)> {
    fn same(b: f32) -> f32 {
        b
    }
    fn logit(b: f32) -> f32 {
        -(1.0f32 / b - 1.0f32).ln()
    }
    fn log(b: f32) -> f32 {
        b.ln()
    }
    let text = name.text(src, "objective")?;
    Ok(match text {
        "binary:logistic" | "reg:logistic" => (Link::XgboostSigmoid, logit as fn(f32) -> f32),
        "binary:logitraw" => (Link::Identity, same),
        "binary:hinge" => (Link::Hinge, same),
        "multi:softprob" => (Link::XgboostSoftmax, same),
        "multi:softmax" => (Link::ArgMax, same),
        "count:poisson" | "reg:gamma" | "reg:tweedie" | "survival:cox" | "survival:aft" => {
            (Link::Exp, log)
        }
        "reg:squarederror"
        | "reg:squaredlogerror"
        | "reg:pseudohubererror"
        | "reg:absoluteerror"
        | "reg:quantileerror"
        | "reg:linear"
        | "rank:pairwise"
        | "rank:ndcg"
        | "rank:map" => (Link::Identity, same),
        other => {
            return Err(ParseError::at(
                src,
                name.at,
                format!("unknown objective `{other}`: kiln knows XGBoost's built-in objectives"),
            ))
        }
    })
}

/// One tree's columns, renumbered: internal nodes in the order a walk from
/// the root meets them (root first), leaves likewise; nodes no walk
/// reaches (XGBoost's deleted ones) are left out.
fn tree(
    src: &str,
    t: &Json<'_>,
    output: u32,
    n_features: u32,
    categorical: &mut [bool],
) -> Result<Tree, TreeError> {
    let param = t.field(src, "tree_param")?;
    if let Some(size) = param.get("size_leaf_vector") {
        if size.number::<u32>(src, "size_leaf_vector")? > 1 {
            let msg = "vector leaves (`multi_strategy=\"multi_output_tree\"`) are not supported";
            return Err(TreeError::At(size.at, msg.into()));
        }
    }
    let column = |key: &str| -> ParseResult<&Json<'_>> { t.field(src, key) };
    let left: Vec<i64> = column("left_children")?.numbers(src, "left_children")?;
    let n = left.len();
    let sized = |key: &str| -> Result<&Json<'_>, TreeError> {
        let v = column(key)?;
        match &v.value {
            Value::Array(items) if items.len() == n => Ok(v),
            Value::Array(items) => Err(TreeError::At(
                v.at,
                format!("`{key}` has {} entries for {n} nodes", items.len()),
            )),
            _ => Err(TreeError::At(v.at, format!("`{key}` is not an array"))),
        }
    };
    let right: Vec<i64> = sized("right_children")?.numbers(src, "right_children")?;
    let features: Vec<u32> = sized("split_indices")?.numbers(src, "split_indices")?;
    let conditions: Vec<f32> = sized("split_conditions")?.numbers(src, "split_conditions")?;
    let default_left: Vec<u8> = sized("default_left")?.numbers(src, "default_left")?;
    let split_type: Vec<u8> = match t.get("split_type") {
        Some(_) => sized("split_type")?.numbers(src, "split_type")?,
        None => vec![0; n],
    };
    let sets = categories(src, t, n)?;
    if n == 0 {
        return Err(TreeError::At(t.at, "a tree with no nodes".into()));
    }

    // Renumber from the root, with an explicit stack.
    let mut node_of = vec![u32::MAX; n];
    let mut leaf_of = vec![u32::MAX; n];
    let (mut n_nodes, mut n_leaves) = (0u32, 0u32);
    let mut order = Vec::new();
    let mut stack = vec![0usize];
    while let Some(i) = stack.pop() {
        if node_of[i] != u32::MAX || leaf_of[i] != u32::MAX {
            return Err(TreeError::At(t.at, format!("node {i} is reached twice")));
        }
        if left[i] == -1 {
            leaf_of[i] = n_leaves;
            n_leaves += 1;
            order.push(i);
            continue;
        }
        node_of[i] = n_nodes;
        n_nodes += 1;
        order.push(i);
        for c in [right[i], left[i]] {
            if c < 0 || c as usize >= n {
                return Err(TreeError::At(
                    t.at,
                    format!("node {i} has child {c} of {n}"),
                ));
            }
            stack.push(c as usize);
        }
    }
    let child = |c: i64| {
        let c = c as usize;
        if left[c] == -1 {
            Child::Leaf(leaf_of[c])
        } else {
            Child::Node(node_of[c])
        }
    };
    let mut nodes = Vec::with_capacity(n_nodes as usize);
    let mut leaves = Vec::with_capacity(n_leaves as usize);
    for &i in &order {
        if left[i] == -1 {
            leaves.push(f64::from(conditions[i]));
            continue;
        }
        let feature = features[i];
        if feature >= n_features {
            return Err(TreeError::At(
                t.at,
                format!("node {i}: feature {feature} of {n_features}"),
            ));
        }
        let node = if split_type[i] == 1 {
            categorical[feature as usize] = true;
            let set = sets
                .iter()
                .find(|(node, _)| *node == i)
                .map(|(_, set)| set.clone())
                .ok_or_else(|| {
                    TreeError::At(t.at, format!("categorical node {i} has no categories"))
                })?;
            // Listed goes right: the set's side is XGBoost's right child.
            TreeNode {
                feature,
                test: SplitTest::In(set),
                missing: Missing::Nan,
                default_left: default_left[i] == 0,
                left: child(right[i]),
                right: child(left[i]),
            }
        } else {
            TreeNode {
                feature,
                test: SplitTest::Lt(f64::from(conditions[i])),
                missing: Missing::Nan,
                default_left: default_left[i] != 0,
                left: child(left[i]),
                right: child(right[i]),
            }
        };
        nodes.push(node);
    }
    Ok(Tree {
        output,
        nodes,
        leaves,
    })
}

/// Each categorical node's listed categories, as a bitset.
fn categories(src: &str, t: &Json<'_>, n: usize) -> Result<Vec<(usize, Vec<u32>)>, TreeError> {
    let Some(nodes) = t.get("categories_nodes") else {
        return Ok(Vec::new());
    };
    let nodes: Vec<usize> = nodes.numbers(src, "categories_nodes")?;
    let segments: Vec<usize> = t
        .field(src, "categories_segments")?
        .numbers(src, "categories_segments")?;
    let sizes: Vec<usize> = t
        .field(src, "categories_sizes")?
        .numbers(src, "categories_sizes")?;
    let all: Vec<u32> = t.field(src, "categories")?.numbers(src, "categories")?;
    if segments.len() != nodes.len() || sizes.len() != nodes.len() {
        return Err(TreeError::At(
            t.at,
            "categories_nodes, categories_segments and categories_sizes differ in length".into(),
        ));
    }
    let mut out = Vec::with_capacity(nodes.len());
    for ((&node, &start), &size) in nodes.iter().zip(&segments).zip(&sizes) {
        let listed = start
            .checked_add(size)
            .and_then(|end| all.get(start..end))
            .filter(|_| node < n)
            .ok_or_else(|| {
                TreeError::At(t.at, format!("node {node}'s categories are out of range"))
            })?;
        // XGBoost's categories are below 2^24 (`OutOfRangeCat`).
        let max = listed.iter().copied().max().unwrap_or(0);
        if max >= 1 << 24 {
            return Err(TreeError::At(t.at, format!("category {max} is past 2^24")));
        }
        let mut words = vec![0u32; max as usize / 32 + 1];
        for &c in listed {
            words[c as usize / 32] |= 1 << (c % 32);
        }
        out.push((node, words));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written by real xgboost-cpu 3.2.0 (`tests/fixtures/xgboost`).
    const MODEL: &str = include_str!("../../../../tests/fixtures/xgboost/model.json");

    #[test]
    fn reads_the_fixture() {
        let model = parse(MODEL).expect("the fixture parses");
        assert_eq!(model.ensemble.n_features, 4);
        assert_eq!(model.ensemble.n_outputs(), 1);
        assert_eq!(model.ensemble.dtype, DType::F32);
        assert_eq!(model.ensemble.trees.len(), 10);
        assert_eq!(model.feature_names, ["alpha", "beta", "gamma", "kind"]);
        assert_eq!(model.link, Link::XgboostSigmoid);
        assert_eq!(model.input, DType::F32);
        assert_eq!(model.nonnegative_categories, [3]);
        let nodes = || model.ensemble.trees.iter().flat_map(|t| &t.nodes);
        assert!(nodes().any(|n| matches!(n.test, SplitTest::In(_)) && n.feature == 3));
        assert!(nodes().all(|n| n.missing == Missing::Nan));
        for tree in &model.ensemble.trees {
            assert_eq!(model.ensemble.check_tree(tree), Ok(()));
        }
    }

    #[test]
    fn every_truncation_is_a_located_error() {
        let mut step = MODEL.len() / 200;
        step = step.max(1);
        for cut in (0..MODEL.len() - 1).step_by(step) {
            let e = parse(&MODEL[..cut])
                .expect_err("a truncated model")
                .to_string();
            assert!(
                e.contains("JSON ends") || e.contains("missing"),
                "{cut}: {e}"
            );
        }
    }

    #[test]
    fn a_leaf_only_tree_and_deleted_nodes() {
        // Tree 0's root is a leaf; tree 1 has an unreachable (deleted) node 3.
        let src = r#"{"learner": {
            "learner_model_param": {"num_feature": "2", "base_score": "5E-1", "num_class": "0"},
            "objective": {"name": "reg:squarederror"},
            "gradient_booster": {"name": "gbtree", "model": {"tree_info": [0, 0], "trees": [
              {"tree_param": {"size_leaf_vector": "1"}, "left_children": [-1], "right_children": [-1],
               "split_indices": [0], "split_conditions": [0.25], "default_left": [0], "split_type": [0]},
              {"tree_param": {}, "left_children": [1, -1, -1, -1], "right_children": [2, -1, -1, -1],
               "split_indices": [1, 0, 0, 0], "split_conditions": [1.5, -1, 2, 9], "default_left": [1, 0, 0, 0]}
            ]}}}}"#;
        let model = parse(src).expect("parses");
        let e = &model.ensemble;
        assert_eq!(e.init, [0.5]);
        assert_eq!(e.trees[0].nodes.len(), 0);
        assert_eq!(e.trees[0].leaves, [0.25]);
        assert_eq!(e.trees[1].nodes.len(), 1);
        assert_eq!(e.trees[1].leaves, [-1.0, 2.0]);
        assert_eq!(model.feature_names, ["f0", "f1"]);
        // 0.5 + 0.25 + (x1 < 1.5 or NaN ? -1 : 2)
        assert_eq!(e.eval_row(&[0.0, 1.0]), [-0.25]);
        assert_eq!(e.eval_row(&[0.0, f64::NAN]), [-0.25]);
        assert_eq!(e.eval_row(&[0.0, 1.5]), [2.75]);
    }
}
