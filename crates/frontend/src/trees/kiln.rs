//! kiln's own tree-model text: an ensemble in the IR's `trees` syntax
//! (docs/semantics.md) with what the model does around it. `kiln.trees`
//! writes it for scikit-learn's estimators, whose fitted `tree_` arrays
//! live in Python; any other library's trees can be written in it too.
//!
//! ```text
//! kiln-trees v0
//! input f32                      # rows rounded to f32 first (default f64)
//! sums f64                       # the ensemble's dtype (default f64)
//! link sigmoid                   # identity (default), sigmoid [SCALE],
//!                                # sigmoid-pair, softmax, exp
//! average 100                    # divide the sums by 100 before the link
//! feature petal length (cm)      # one line per feature, in order
//! trees features 4 init [0.0] tree 0 [f2 le 2.45 nan left l0 n1, ...] [...]
//! ```
//!
//! Lines before `trees` are `key value` (`#` starts a comment; `feature`
//! takes the rest of its line as the name). Without `feature` lines the
//! features are named `x0`, `x1`, … .

use super::{Link, Model};
use kiln_ir::op::Op;
use kiln_ir::types::DType;
use kiln_ir::{ParseError, ParseResult};

/// The first line of the format.
pub const MAGIC: &str = "kiln-trees v0";

/// Whether `text` is kiln's tree-model text.
pub fn sniff(text: &str) -> bool {
    text.lines().next().map(str::trim) == Some(MAGIC)
}

/// Reads kiln's tree-model text.
pub fn parse(src: &str) -> ParseResult<Model> {
    if !sniff(src) {
        return Err(ParseError::at(
            src,
            0,
            format!("not a kiln tree model: its first line is `{MAGIC}`"),
        ));
    }
    let mut input = DType::F64;
    let mut sums = DType::F64;
    let mut link = Link::Identity;
    let mut average_over = None;
    let mut names = Vec::new();
    let mut offset = 0;
    let mut trees = None;
    for line in src.split_inclusive('\n') {
        let at = offset;
        offset += line.len();
        if at == 0 {
            continue;
        }
        let text = line.trim_end_matches(['\n', '\r']);
        let err = |msg: String| ParseError::at(src, at, msg);
        if let Some(rest) = text.strip_prefix("feature ") {
            names.push(rest.to_string());
            continue;
        }
        let text = text.split('#').next().unwrap_or("").trim();
        if text.is_empty() {
            continue;
        }
        if text.starts_with("trees ") {
            trees = Some((at, text));
            break;
        }
        let (key, value) = text.split_once(' ').unwrap_or((text, ""));
        let value = value.trim();
        let dtype = |v: &str| match v {
            "f32" => Ok(DType::F32),
            "f64" => Ok(DType::F64),
            _ => Err(err(format!("`{key}` is f32 or f64, not `{v}`"))),
        };
        match key {
            "input" => input = dtype(value)?,
            "sums" => sums = dtype(value)?,
            "average" => {
                let n: u32 = value
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| err(format!("`average {value}` is not a positive count")))?;
                average_over = Some(n);
            }
            "link" => {
                let mut words = value.split_whitespace();
                link = match (words.next(), words.next(), words.next()) {
                    (Some("identity"), None, _) => Link::Identity,
                    (Some("sigmoid"), None, _) => Link::Sigmoid(1.0),
                    (Some("sigmoid"), Some(scale), None) => Link::Sigmoid(
                        scale
                            .parse()
                            .map_err(|_| err(format!("sigmoid scale `{scale}` is not a number")))?,
                    ),
                    (Some("sigmoid-pair"), None, _) => Link::SigmoidPair,
                    (Some("softmax"), None, _) => Link::Softmax,
                    (Some("exp"), None, _) => Link::Exp,
                    _ => {
                        return Err(err(format!(
                            "unknown link `{value}`: identity, sigmoid [SCALE], sigmoid-pair, softmax or exp"
                        )))
                    }
                };
            }
            _ => return Err(err(format!("unknown line `{key}`"))),
        }
    }
    let (at, line) =
        trees.ok_or_else(|| ParseError::at(src, src.len(), "the `trees` line is missing"))?;
    let ensemble = ensemble(src, at, line, input, sums)?;
    let n = ensemble.n_features as usize;
    let feature_names = if names.is_empty() {
        (0..n).map(|i| format!("x{i}")).collect()
    } else if names.len() == n {
        names
    } else {
        return Err(ParseError::at(
            src,
            at,
            format!("{} feature lines for {n} features", names.len()),
        ));
    };
    if link == Link::SigmoidPair && ensemble.n_outputs() != 1 {
        return Err(ParseError::at(
            src,
            at,
            "`sigmoid-pair` takes a model with one output",
        ));
    }
    Ok(Model {
        ensemble,
        feature_names,
        average_over,
        link,
        input,
        nonnegative_categories: Vec::new(),
    })
}

/// The `trees` line's ensemble, read by the IR's own parser (and checked by
/// its verifier) inside a one-op graph.
fn ensemble(
    src: &str,
    at: usize,
    line: &str,
    input: DType,
    sums: DType,
) -> ParseResult<kiln_ir::trees::TreeEnsemble> {
    let err = |msg: String| ParseError::at(src, at, msg);
    let attr = &line["trees".len()..];
    let word = |key: &str| {
        let rest = attr.split_once(key)?.1;
        Some(rest.split_whitespace().next()?.to_string())
    };
    let features = word("features ").ok_or_else(|| err("`trees` needs `features N`".into()))?;
    let outputs = attr
        .split_once("init [")
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(init, _)| init.split(',').filter(|v| !v.trim().is_empty()).count())
        .ok_or_else(|| err("`trees` needs `init [...]`".into()))?;
    let graph = format!(
        "graph \"trees\"\nv0: {input}[n, {features}] = input \"x\"\n\
         v1: {sums}[n, {outputs}] = trees v0{attr}\noutput \"y\" = v1\n"
    );
    let g = kiln_ir::text::parse(&graph).map_err(|e| err(format!("in `trees`: {}", e.message)))?;
    let g = kiln_ir::verify(g).map_err(|e| err(format!("in `trees`: {e}")))?;
    let found = g.graph().nodes().find_map(|(_, n)| match &n.op {
        Op::Trees(e) => Some((**e).clone()),
        _ => None,
    });
    found.ok_or_else(|| err("no `trees` op".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODEL: &str = "kiln-trees v0
input f32
link sigmoid-pair   # two classes from one score
average 2
feature a b
feature c
trees features 2 init [0.5] tree 0 [f1 le 0.25 nan left l0 l1] [1.0, -1.0] tree 0 [] [3.0]
";

    #[test]
    fn reads_a_model() {
        let m = parse(MODEL).expect("parses");
        assert_eq!(m.input, DType::F32);
        assert_eq!(m.link, Link::SigmoidPair);
        assert_eq!(m.average_over, Some(2));
        assert_eq!(m.feature_names, ["a b", "c"]);
        assert_eq!(m.ensemble.trees.len(), 2);
        assert_eq!(m.ensemble.eval_row(&[0.0, 0.25]), [4.5]);
        assert_eq!(m.ensemble.eval_row(&[0.0, f64::NAN]), [4.5]);
        assert_eq!(m.ensemble.eval_row(&[0.0, 0.5]), [2.5]);
    }

    #[test]
    fn every_header_makes_a_graph_that_verifies() {
        for (sums, link) in [
            ("f64", "sigmoid-pair"),
            ("f32", "sigmoid 2.5"),
            ("f32", "exp"),
        ] {
            let src = MODEL
                .replace("link sigmoid-pair", &format!("link {link}"))
                .replace("input f32", &format!("input f32\nsums {sums}"));
            let m = parse(&src).expect("parses");
            for raw_score in [false, true] {
                let opts = super::super::Options {
                    raw_score,
                    columns: raw_score,
                };
                let g = m.graph("t", &opts).expect("builds");
                kiln_ir::verify(g).expect("verifies");
            }
        }
    }

    #[test]
    fn bad_models_are_located_errors() {
        for (from, to, says) in [
            ("link sigmoid-pair", "link tanh", "unknown link `tanh`"),
            ("average 2", "average 0", "not a positive count"),
            ("input f32", "input f16", "f32 or f64"),
            ("input f32", "colour red", "unknown line `colour`"),
            ("feature c\n", "", "1 feature lines for 2 features"),
            ("le 0.25", "le x", "in `trees`"),
            ("l0 l1]", "l0 l0]", "in `trees`"),
            ("f1 le", "f7 le", "in `trees`"),
            ("init [0.5]", "init [0.5, 1.0]", "sigmoid-pair"),
            ("trees features", "tree features", "unknown line `tree`"),
            ("kiln-trees v0", "kiln-trees v9", "first line"),
        ] {
            let src = MODEL.replacen(from, to, 1);
            let e = parse(&src).expect_err(says).to_string();
            assert!(e.contains(says), "{says}: {e}");
        }
        let e = parse("kiln-trees v0\nlink exp\n").unwrap_err().to_string();
        assert!(e.contains("`trees` line is missing"), "{e}");
    }
}
