//! LightGBM's text model (`Booster.save_model`, `model_to_string`, the
//! `lightgbm` CLI's `output_model`), read into a [`Model`].
//!
//! The format's contract, as LightGBM's `GBDT::LoadModelFromString` and
//! `Tree::Tree(const char*)` read it: a header of `key=value` lines from
//! `tree` to the first `Tree=0` (`max_feature_idx`, `num_class`,
//! `num_tree_per_iteration`, `objective`, `feature_names`, and the flag line
//! `average_output` of random-forest mode), then per tree a block of
//! `key=value` lines: `num_leaves`, `split_feature`, `threshold`,
//! `decision_type`, `left_child`, `right_child`, `leaf_value` (already
//! scaled by the learning rate), `num_cat`, `cat_boundaries`,
//! `cat_threshold`, `is_linear`; `end of trees` closes them.
//!
//! `decision_type`'s bits, read only in [`node`]: bit 0 categorical, bit 1
//! default left, bits 2–3 the missing type (0 none, 1 zero, 2 NaN). A child
//! `c >= 0` is node `c`, a negative one leaf `~c`. Tree `i` adds to output
//! `i % num_tree_per_iteration`. A categorical node's threshold is an index
//! into `cat_boundaries`, whose consecutive pair bounds its words of
//! `cat_threshold` (a bitset of the categories that go left); NaN goes
//! right whatever the missing type says (`Tree::CategoricalDecision`).

use super::{Link, Model};
use kiln_ir::trees::{Child, Missing, SplitTest, Tree, TreeEnsemble, TreeNode};
use kiln_ir::types::DType;
use kiln_ir::{ParseError, ParseResult};
use std::collections::HashMap;

/// One `key=value` line: the value and where it starts in the source.
#[derive(Clone, Copy)]
struct Field<'a> {
    value: &'a str,
    at: usize,
}

/// A block of `key=value` lines, and where it starts.
struct Block<'a> {
    fields: HashMap<&'a str, Field<'a>>,
    flags: Vec<&'a str>,
    at: usize,
}

/// Whether `text` looks like a LightGBM text model (its first line is `tree`).
pub fn sniff(text: &str) -> bool {
    text.lines().next().map(str::trim) == Some("tree")
}

/// Reads a LightGBM text model.
pub fn parse(src: &str) -> ParseResult<Model> {
    if !sniff(src) {
        return Err(ParseError::at(
            src,
            0,
            "not a LightGBM text model: its first line is `tree`",
        ));
    }
    let (header, trees) = blocks(src);
    let err = |at: usize, msg: String| ParseError::at(src, at, msg);
    let n_features = number::<u32>(src, &header, "max_feature_idx")?
        .checked_add(1)
        .ok_or_else(|| err(header.at, "max_feature_idx is too large".into()))?;
    let per_iteration = match header.fields.get("num_tree_per_iteration") {
        Some(_) => number::<u32>(src, &header, "num_tree_per_iteration")?,
        None => 1,
    };
    if per_iteration == 0 {
        return Err(err(header.at, "num_tree_per_iteration is 0".into()));
    }
    // LightGBM always writes the names (`Column_0`, … when it was given none).
    let names = field(src, &header, "feature_names")?;
    let feature_names: Vec<String> = names.value.split_whitespace().map(str::to_string).collect();
    if feature_names.len() != n_features as usize {
        let at = names.at;
        return Err(err(
            at,
            format!(
                "{} feature names for {n_features} features",
                feature_names.len()
            ),
        ));
    }
    let link = match header.fields.get("objective") {
        Some(f) => objective(src, *f)?,
        None => Link::Identity,
    };
    let mut ensemble = TreeEnsemble {
        n_features,
        dtype: DType::F64,
        init: vec![0.0; per_iteration as usize],
        trees: Vec::with_capacity(trees.len()),
    };
    for (idx, block) in trees.iter().enumerate() {
        let output = (idx % per_iteration as usize) as u32;
        let tree = tree(src, block, output, n_features)?;
        ensemble
            .check_tree(&tree)
            .map_err(|why| err(block.at, format!("tree {idx}: {why}")))?;
        ensemble.trees.push(tree);
    }
    let average_over = header.flags.contains(&"average_output").then(|| {
        let iterations = ensemble.trees.len() / per_iteration as usize;
        iterations.max(1) as u32
    });
    Ok(Model {
        ensemble,
        feature_names,
        average_over,
        link,
        input: DType::F64,
        nonnegative_categories: Vec::new(),
    })
}

/// The header block, then each `Tree=` block, up to `end of trees`.
fn blocks(src: &str) -> (Block<'_>, Vec<Block<'_>>) {
    let mut header = Block {
        fields: HashMap::new(),
        flags: Vec::new(),
        at: 0,
    };
    let mut trees: Vec<Block<'_>> = Vec::new();
    let mut offset = 0;
    for line in src.split_inclusive('\n') {
        let at = offset;
        offset += line.len();
        let text = line.trim();
        if text == "end of trees" {
            break;
        }
        if text.starts_with("Tree=") {
            trees.push(Block {
                fields: HashMap::new(),
                flags: Vec::new(),
                at,
            });
            continue;
        }
        let block = trees.last_mut().unwrap_or(&mut header);
        match text.split_once('=') {
            Some((key, value)) => {
                let lead = line.len() - line.trim_start().len();
                let value_at = at + lead + key.len() + 1;
                block.fields.insert(
                    key.trim(),
                    Field {
                        value,
                        at: value_at,
                    },
                );
            }
            None if !text.is_empty() => block.flags.push(text),
            None => {}
        }
    }
    (header, trees)
}

fn field<'a>(src: &str, block: &Block<'a>, key: &str) -> ParseResult<Field<'a>> {
    block
        .fields
        .get(key)
        .copied()
        .ok_or_else(|| ParseError::at(src, block.at, format!("`{key}=` is missing")))
}

fn number<T: std::str::FromStr>(src: &str, block: &Block<'_>, key: &str) -> ParseResult<T> {
    let f = field(src, block, key)?;
    f.value
        .trim()
        .parse()
        .map_err(|_| ParseError::at(src, f.at, format!("`{key}={}` is not a number", f.value)))
}

/// The whitespace-separated numbers of `key=`, exactly `count` of them.
fn numbers<T: std::str::FromStr>(
    src: &str,
    block: &Block<'_>,
    key: &str,
    count: Option<usize>,
) -> ParseResult<Vec<T>> {
    let f = field(src, block, key)?;
    let mut out = Vec::new();
    for word in f.value.split_whitespace() {
        let at = f.at + (word.as_ptr() as usize - f.value.as_ptr() as usize);
        out.push(word.parse().map_err(|_| {
            ParseError::at(src, at, format!("`{word}` in `{key}=` is not a number"))
        })?);
    }
    match count {
        Some(n) if n != out.len() => Err(ParseError::at(
            src,
            f.at,
            format!("`{key}=` has {} values, the tree needs {n}", out.len()),
        )),
        _ => Ok(out),
    }
}

/// The link of an `objective=` line (its first word, then `name:value`
/// parameters), as LightGBM's `ObjectiveFunction::ConvertOutput` applies it.
fn objective(src: &str, f: Field<'_>) -> ParseResult<Link> {
    let mut words = f.value.split_whitespace();
    let name = words.next().unwrap_or("");
    let params: Vec<&str> = words.collect();
    let sigmoid = || -> ParseResult<f64> {
        let value = params
            .iter()
            .find_map(|p| p.strip_prefix("sigmoid:"))
            .unwrap_or("1");
        value
            .parse()
            .map_err(|_| ParseError::at(src, f.at, format!("`sigmoid:{value}` is not a number")))
    };
    Ok(match name {
        "binary" | "multiclassova" => Link::Sigmoid(sigmoid()?),
        "cross_entropy" => Link::Sigmoid(1.0),
        "multiclass" => Link::Softmax,
        "poisson" | "gamma" | "tweedie" => Link::Exp,
        "cross_entropy_lambda" => Link::LogOnePlusExp,
        "regression" | "regression_l1" if params.contains(&"sqrt") => Link::SignedSquare,
        "regression" | "regression_l1" | "huber" | "fair" | "quantile" | "mape" | "lambdarank"
        | "rank_xendcg" | "custom" | "none" | "" => Link::Identity,
        other => {
            return Err(ParseError::at(
                src,
                f.at,
                format!("unknown objective `{other}`: kiln knows LightGBM's built-in objectives"),
            ))
        }
    })
}

/// One `Tree=` block.
fn tree(src: &str, block: &Block<'_>, output: u32, n_features: u32) -> ParseResult<Tree> {
    let err = |msg: String| ParseError::at(src, block.at, msg);
    if let Some(f) = block.fields.get("is_linear") {
        if f.value.trim() != "0" {
            return Err(ParseError::at(
                src,
                f.at,
                "linear trees (`linear_tree=true`) are not supported",
            ));
        }
    }
    let n_leaves: usize = number(src, block, "num_leaves")?;
    if n_leaves == 0 {
        return Err(err("num_leaves is 0".into()));
    }
    let leaves: Vec<f64> = numbers(src, block, "leaf_value", Some(n_leaves))?;
    if n_leaves == 1 {
        return Ok(Tree {
            output,
            nodes: Vec::new(),
            leaves,
        });
    }
    let n_nodes = Some(n_leaves - 1);
    let features: Vec<u32> = numbers(src, block, "split_feature", n_nodes)?;
    let thresholds: Vec<f64> = numbers(src, block, "threshold", n_nodes)?;
    let decisions: Vec<i8> = numbers(src, block, "decision_type", n_nodes)?;
    let left: Vec<i32> = numbers(src, block, "left_child", n_nodes)?;
    let right: Vec<i32> = numbers(src, block, "right_child", n_nodes)?;
    let n_cat: usize = match block.fields.get("num_cat") {
        Some(_) => number(src, block, "num_cat")?,
        None => 0,
    };
    let (bounds, words): (Vec<usize>, Vec<u32>) = if n_cat > 0 {
        let bounds = numbers(src, block, "cat_boundaries", Some(n_cat + 1))?;
        (bounds, numbers(src, block, "cat_threshold", None)?)
    } else {
        (Vec::new(), Vec::new())
    };
    let mut nodes = Vec::with_capacity(n_leaves - 1);
    for idx in 0..n_leaves - 1 {
        let at = NodeAt {
            feature: features[idx],
            threshold: thresholds[idx],
            decision: decisions[idx],
            children: (left[idx], right[idx]),
        };
        nodes.push(
            node(at, &bounds, &words, n_features)
                .map_err(|why| err(format!("node {idx}: {why}")))?,
        );
    }
    Ok(Tree {
        output,
        nodes,
        leaves,
    })
}

/// A node's columns.
struct NodeAt {
    feature: u32,
    threshold: f64,
    decision: i8,
    children: (i32, i32),
}

/// One node, its `decision_type` bits read here and nowhere else.
fn node(at: NodeAt, bounds: &[usize], words: &[u32], n_features: u32) -> Result<TreeNode, String> {
    const CATEGORICAL: i8 = 1;
    const DEFAULT_LEFT: i8 = 2;
    if at.feature >= n_features {
        return Err(format!("feature {} of {n_features}", at.feature));
    }
    let child = |c: i32| {
        if c >= 0 {
            Child::Node(c as u32)
        } else {
            Child::Leaf(!c as u32)
        }
    };
    let (test, missing, default_left) = if at.decision & CATEGORICAL != 0 {
        // `threshold` indexes `cat_boundaries`; NaN always goes right.
        if !(at.threshold >= 0.0 && at.threshold.fract() == 0.0) {
            return Err(format!("category set {} is not an index", at.threshold));
        }
        let idx = at.threshold as usize;
        let set = match (
            bounds.get(idx),
            idx.checked_add(1).and_then(|i| bounds.get(i)),
        ) {
            (Some(&lo), Some(&hi)) if lo <= hi && hi <= words.len() => words[lo..hi].to_vec(),
            _ => {
                return Err(format!(
                    "category set {} is not in cat_boundaries",
                    at.threshold
                ))
            }
        };
        (SplitTest::In(set), Missing::Nan, false)
    } else {
        let missing = match (at.decision >> 2) & 3 {
            0 => Missing::None,
            1 => Missing::Zero,
            2 => Missing::Nan,
            _ => return Err(format!("decision_type {} has missing type 3", at.decision)),
        };
        (
            SplitTest::Le(at.threshold),
            missing,
            at.decision & DEFAULT_LEFT != 0,
        )
    };
    Ok(TreeNode {
        feature: at.feature,
        test,
        missing,
        default_left,
        left: child(at.children.0),
        right: child(at.children.1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written by real lightgbm 4.7.0 (`tests/fixtures/lightgbm`).
    const MODEL: &str = include_str!("../../../../tests/fixtures/lightgbm/model.txt");

    #[test]
    fn reads_the_fixture() {
        let model = parse(MODEL).expect("the fixture parses");
        assert_eq!(model.ensemble.n_features, 4);
        assert_eq!(model.ensemble.n_outputs(), 3);
        assert_eq!(model.ensemble.trees.len(), 30);
        assert_eq!(model.feature_names, ["alpha", "beta", "gamma", "kind"]);
        assert_eq!(model.link, Link::Softmax);
        let categories = model.ensemble.trees.iter().flat_map(|t| &t.nodes);
        assert!(categories
            .clone()
            .any(|n| matches!(n.test, SplitTest::In(_))));
        assert!(categories.clone().any(|n| n.missing == Missing::Nan));
        for tree in &model.ensemble.trees {
            assert_eq!(model.ensemble.check_tree(tree), Ok(()));
        }
    }

    #[test]
    fn bad_text_is_a_located_error_never_a_panic() {
        // Every prefix that ends a line, and every line dropped.
        let lines: Vec<&str> = MODEL.lines().collect();
        for cut in 0..lines.len() {
            let _ = parse(&lines[..cut].join("\n"));
            let mut dropped = lines.clone();
            dropped.remove(cut);
            let _ = parse(&dropped.join("\n"));
        }
        let cases = [
            (
                MODEL.replacen("feature_names=", "names=", 1),
                "`feature_names=` is missing",
            ),
            (
                MODEL.replacen("num_leaves=7", "num_leaves=x", 1),
                "not a number",
            ),
            (
                MODEL.replacen("threshold=", "threshold=1e300 ", 1),
                "values",
            ),
            (
                MODEL.replacen("objective=multiclass", "objective=riddle", 1),
                "unknown objective",
            ),
            (
                MODEL.replacen("decision_type=", "decision_type=12 ", 1),
                "values",
            ),
        ];
        for (text, message) in cases {
            let e = parse(&text).expect_err(message);
            assert!(e.message.contains(message), "{}", e.message);
        }
        // A category set's index past `cat_boundaries`, however large.
        for threshold in [0.0, 1.0, 0.5, 1e300, f64::INFINITY, -1.0, f64::NAN] {
            let at = NodeAt {
                feature: 0,
                threshold,
                decision: 1,
                children: (-1, -2),
            };
            let got = node(at, &[0, 1], &[6], 4);
            assert_eq!(got.is_ok(), threshold == 0.0, "{threshold}");
        }
        assert!(parse("tree\nversion=v4\n").is_err());
        assert!(parse("").is_err());
    }
}
