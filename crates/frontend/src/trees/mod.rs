//! Tree-ensemble models as graphs: the model formats users save, read into
//! one `trees` op ([`kiln_ir::trees`]) and the model's link written with
//! ordinary ops after it.
//!
//! - [`lightgbm`]: LightGBM's text model (`Booster.save_model`,
//!   `model_to_string`), with LightGBM's meanings;
//! - [`kiln`]: kiln's own tree-model text (what `kiln.trees` writes for
//!   scikit-learn's estimators: an ensemble in the IR's `trees` syntax and
//!   the model's link);
//! - [`xgboost`]: XGBoost's JSON model (`save_model("model.json")`,
//!   `save_raw("json")`), with XGBoost's (rows rounded to `f32`, sums in
//!   `f32`).
//!
//! The graph takes the rows as one `f64[n, features]` input `x`, or (with
//! [`Options::columns`]) one `f64[n]` column per feature, named after the
//! model's features, as a CSV file or a data frame holds them. Its output
//! `prediction` is `f64[n, outputs]` (`f64[n]` for one output): the raw
//! scores, or (the default) what the library's `predict` returns after its
//! link.

mod json;
pub mod kiln;
pub mod lightgbm;
pub mod xgboost;

use kiln_ir::builder::Builder;
use kiln_ir::op::{Op, ReduceOp, TensorConst};
use kiln_ir::trees::TreeEnsemble;
use kiln_ir::types::{DType, Dim, TensorType, Type};
use kiln_ir::{BinaryOp, CmpOp, Graph, Scalar, UnaryOp, Value};
use std::sync::Arc;

/// How a model becomes a graph.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Return the raw scores (LightGBM's `raw_score=True`, XGBoost's
    /// `output_margin=True`) instead of the linked prediction.
    pub raw_score: bool,
    /// One `f64[n]` input per feature, named after it, instead of one
    /// `f64[n, features]` input `x`.
    pub columns: bool,
}

/// What a model's `predict` does to the summed scores.
#[derive(Clone, Debug, PartialEq)]
pub enum Link {
    /// Nothing (regression, ranking).
    Identity,
    /// `1 / (1 + exp(-scale * x))` per output (binary, one-vs-all).
    Sigmoid(f64),
    /// LightGBM's softmax over the outputs: `exp(x - max)`, summed in
    /// order, each divided by the sum.
    Softmax,
    /// `exp(x)` (Poisson, gamma, Tweedie).
    Exp,
    /// XGBoost's `common::Sigmoid` in `float`: `1 / (exp(min(-x, 88.7)) +
    /// 1)` (its `+ 1e-16` vanishes in `float`).
    XgboostSigmoid,
    /// XGBoost's `common::Softmax`: `exp(x - max)` in `float`, summed in
    /// `double` in order, each divided by the sum rounded to `float`.
    XgboostSoftmax,
    /// The first output holding the row's maximum, as a number
    /// (`multi:softmax`).
    ArgMax,
    /// `1` where `x > 0`, else `0` (`binary:hinge`).
    Hinge,
    /// `[1 - p, p]` of `p = 1 / (1 + exp(-x))`, one score's two classes
    /// (scikit-learn's binary `predict_proba`).
    SigmoidPair,
    /// `log(1 + exp(x))` (LightGBM's `cross_entropy_lambda`).
    LogOnePlusExp,
    /// `sign(x) * x * x` (LightGBM's `regression` with `sqrt`).
    SignedSquare,
}

/// A parsed model: its ensemble, feature names and link.
#[derive(Clone, Debug)]
pub struct Model {
    /// The trees.
    pub ensemble: TreeEnsemble,
    /// The features' names, one per feature.
    pub feature_names: Vec<String>,
    /// Divide the sums by this before the link (LightGBM's random forest
    /// mode averages its trees; its raw scores are the sums).
    pub average_over: Option<u32>,
    /// The link `predict` applies.
    pub link: Link,
    /// The dtype the library reads rows in: `f32` rounds each value first
    /// (XGBoost, scikit-learn), `f64` keeps it (LightGBM).
    pub input: DType,
    /// Category features where a negative value is no category (XGBoost's
    /// `InvalidCat`, so it goes where unlisted ones go): such a value is read
    /// as -1 (the `in` test's integer part would make -0.5 category 0).
    pub nonnegative_categories: Vec<u32>,
}

impl Model {
    /// The model as a graph (see the module docs).
    pub fn graph(&self, name: &str, opts: &Options) -> Result<Graph, String> {
        let mut b = Builder::new(name);
        let n = Dim::Sym("n".into());
        let n_features = self.ensemble.n_features as usize;
        let x = if opts.columns {
            let mut cols = Vec::with_capacity(n_features);
            for feature in &self.feature_names {
                let col = b.input(feature, Type::column(DType::F64, "n"));
                let tall = Op::Reshape(vec![n.clone(), Dim::Fixed(1)]);
                cols.push(b.op(tall, &[col]).map_err(|e| e.to_string())?);
            }
            b.op(Op::Concat(1), &cols).map_err(|e| e.to_string())?
        } else {
            let ty = Type::Tensor(TensorType {
                dtype: DType::F64,
                shape: vec![n, Dim::Fixed(n_features as u64)],
            });
            b.input("x", ty)
        };
        let x = self.read_rows(&mut b, x).map_err(|e| e.to_string())?;
        let ensemble = Arc::new(self.ensemble.clone());
        let mut y = b.op(Op::Trees(ensemble), &[x]).map_err(|e| e.to_string())?;
        if !opts.raw_score {
            // LightGBM's `Predict`: the average, then the link; its
            // `PredictRaw` (`raw_score=True`) does neither.
            if let Some(count) = self.average_over {
                let count = Scalar::F64(f64::from(count));
                let count = b.constant(kiln_ir::semantics::cast(count, self.ensemble.dtype));
                y = b
                    .binary(BinaryOp::Div, y, count)
                    .map_err(|e| e.to_string())?;
            }
            y = link(
                &mut b,
                &self.link,
                self.ensemble.dtype,
                self.ensemble.n_outputs() as u64,
                y,
            )
            .map_err(|e| e.to_string())?;
        }
        let columns = match (&self.link, opts.raw_score) {
            (Link::ArgMax, false) => 0, // already f[n]
            (Link::SigmoidPair, false) => 2,
            _ => self.ensemble.n_outputs(),
        };
        if columns == 1 {
            // One output is a column, as the libraries' `predict` returns it.
            let column = Op::Reshape(vec![Dim::Sym("n".into())]);
            y = b.op(column, &[y]).map_err(|e| e.to_string())?;
        }
        b.output("prediction", y);
        Ok(b.finish())
    }

    /// The `f64[n, features]` rows as the library reads them: rounded to its
    /// dtype, negative values of its non-negative category features made -1.
    fn read_rows(&self, b: &mut Builder, x: Value) -> kiln_ir::TypeResult<Value> {
        let x = if self.input == DType::F64 {
            x
        } else {
            b.cast(x, self.input)?
        };
        if self.nonnegative_categories.is_empty() {
            return Ok(x);
        }
        // x < lower, with lower 0 at those features and -inf elsewhere.
        let n = self.ensemble.n_features as usize;
        let mut lower =
            vec![kiln_ir::semantics::cast(Scalar::F64(f64::NEG_INFINITY), self.input); n];
        for &f in &self.nonnegative_categories {
            lower[f as usize] = kiln_ir::semantics::cast(Scalar::F64(0.0), self.input);
        }
        let lower = TensorConst {
            dtype: self.input,
            dims: vec![n as u64],
            values: lower,
        };
        let lower = b.op(Op::Tensor(Arc::new(lower)), &[])?;
        let negative = b.compare(CmpOp::Lt, x, lower)?;
        let minus_one = b.constant(kiln_ir::semantics::cast(Scalar::F64(-1.0), self.input));
        b.select(negative, minus_one, x)
    }
}

/// `link(y)` of `[n, outputs]` scores of `dtype`, as the libraries compute it.
fn link(
    b: &mut Builder,
    link: &Link,
    dtype: DType,
    k: u64,
    y: Value,
) -> kiln_ir::TypeResult<Value> {
    let f = |b: &mut Builder, v: f64| b.constant(kiln_ir::semantics::cast(Scalar::F64(v), dtype));
    let reduce = |b: &mut Builder, op, v, keepdim| {
        let axes = Op::ReduceAxes {
            op,
            axes: vec![1],
            keepdim,
        };
        b.op(axes, &[v])
    };
    Ok(match link {
        Link::Identity => y,
        Link::Sigmoid(scale) => {
            // LightGBM: 1.0f / (1.0f + std::exp(-sigmoid_ * input)).
            let minus_scale = f(b, -scale);
            let t = b.binary(BinaryOp::Mul, minus_scale, y)?;
            let e = b.unary(UnaryOp::Exp, t)?;
            let one = f(b, 1.0);
            let d = b.binary(BinaryOp::Add, one, e)?;
            b.binary(BinaryOp::Div, one, d)?
        }
        Link::Softmax => {
            let max = reduce(b, ReduceOp::Max, y, true)?;
            let shifted = b.binary(BinaryOp::Sub, y, max)?;
            let e = b.unary(UnaryOp::Exp, shifted)?;
            let sum = reduce(b, ReduceOp::Sum, e, true)?;
            b.binary(BinaryOp::Div, e, sum)?
        }
        Link::XgboostSigmoid => {
            let minus = b.unary(UnaryOp::Neg, y)?;
            let cap = f(b, 88.7);
            let t = b.binary(BinaryOp::Min, minus, cap)?;
            let e = b.unary(UnaryOp::Exp, t)?;
            let one = f(b, 1.0);
            let d = b.binary(BinaryOp::Add, e, one)?;
            b.binary(BinaryOp::Div, one, d)?
        }
        Link::XgboostSoftmax => {
            let max = reduce(b, ReduceOp::Max, y, true)?;
            let shifted = b.binary(BinaryOp::Sub, y, max)?;
            let e = b.unary(UnaryOp::Exp, shifted)?;
            let wide = b.cast(e, DType::F64)?;
            let sum = reduce(b, ReduceOp::Sum, wide, true)?;
            let sum = b.cast(sum, dtype)?;
            b.binary(BinaryOp::Div, e, sum)?
        }
        Link::ArgMax => {
            // min over k of (y[k] == max ? k : outputs): the first maximum.
            let max = reduce(b, ReduceOp::Max, y, true)?;
            let at_max = b.compare(CmpOp::Eq, y, max)?;
            let index = TensorConst {
                dtype,
                dims: vec![k],
                values: (0..k)
                    .map(|i| kiln_ir::semantics::cast(Scalar::F64(i as f64), dtype))
                    .collect(),
            };
            let index = b.op(Op::Tensor(Arc::new(index)), &[])?;
            let past = f(b, k as f64);
            let picked = b.select(at_max, index, past)?;
            reduce(b, ReduceOp::Min, picked, false)?
        }
        Link::SigmoidPair => {
            let p = self::link(b, &Link::Sigmoid(1.0), dtype, k, y)?;
            let one = f(b, 1.0);
            let q = b.binary(BinaryOp::Sub, one, p)?;
            b.op(Op::Concat(1), &[q, p])?
        }
        Link::Hinge => {
            let zero = f(b, 0.0);
            let one = f(b, 1.0);
            let pos = b.compare(CmpOp::Gt, y, zero)?;
            b.select(pos, one, zero)?
        }
        Link::Exp => b.unary(UnaryOp::Exp, y)?,
        Link::LogOnePlusExp => {
            let e = b.unary(UnaryOp::Exp, y)?;
            let one = f(b, 1.0);
            let s = b.binary(BinaryOp::Add, one, e)?;
            b.unary(UnaryOp::Log, s)?
        }
        Link::SignedSquare => {
            // Common::Sign(x) * x * x, the sign 1, -1 or 0.
            let zero = f(b, 0.0);
            let (one, minus_one) = (f(b, 1.0), f(b, -1.0));
            let pos = b.compare(CmpOp::Gt, y, zero)?;
            let neg = b.compare(CmpOp::Lt, y, zero)?;
            let neg_or_zero = b.select(neg, minus_one, zero)?;
            let sign = b.select(pos, one, neg_or_zero)?;
            let sx = b.binary(BinaryOp::Mul, sign, y)?;
            b.binary(BinaryOp::Mul, sx, y)?
        }
    })
}
