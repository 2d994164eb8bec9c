//! Fitting an expression's constants: its float literals become
//! parameters (`kiln_frontend::py::parse_parameters`), forward mode gives the
//! Jacobian of every row with respect to them (`kiln_ir::grad::jacobian`),
//! and Levenberg–Marquardt moves them to lower the squared error against a
//! target. The value and Jacobian graphs compile on any tier ([`BATCH`]
//! expressions a module), and every tier gives the same bits, so the
//! fitted constants are the same on every tier too.
//!
//! The algorithm is MINPACK's `lmder`, the one scipy's
//! `least_squares(method="lm")` runs, with its stopping tests and default
//! tolerances ([`lm`]), on kiln's exact Jacobian where scipy takes finite
//! differences.
//!
//! The expression's subtrees that read no constant (`sin(cos(exp(x0)))` in
//! `sin(4.26 * x0) / sin(cos(exp(x0)))`: most of a random GP expression's
//! functions) give the same column at every step: they are computed once
//! per fit, by a graph of their own ([`kiln_ir::hoist`]), and the value and
//! Jacobian graph reads them as columns. The two compute each row as the
//! whole expression does, so the bits are the same.
//!
//! An expression that cannot be fitted (NaN or infinite at its initial
//! constants, a Jacobian of zeros) keeps its constants and says why; one
//! that fails to compile or to run has an error; neither stops the others.

mod lm;

use crate::population::MemberError;
use crate::{ArrayMut, ArrayRef, CompileOptions, DynEngine, Program, Scalar, Verified};
use kiln_frontend::py::Parameter;
use kiln_ir::Type;

/// How to fit.
#[derive(Clone, Debug)]
pub struct FitOptions {
    /// The most Levenberg–Marquardt steps per expression (each one linear
    /// solve and one evaluation of the expression).
    pub max_iter: usize,
    /// Threads to compile and fit on; 0 means every core.
    pub threads: usize,
    /// How to compile the value and Jacobian graphs.
    pub compile: CompileOptions,
}

impl Default for FitOptions {
    fn default() -> Self {
        FitOptions {
            max_iter: 100,
            threads: 0,
            compile: CompileOptions::default(),
        }
    }
}

/// One expression's fit.
#[derive(Clone, Debug, PartialEq)]
pub struct Fitted {
    /// The constants after the fit (the initial ones if it failed), in the
    /// order the expression's float literals are read.
    pub constants: Vec<f64>,
    /// The constants as written.
    pub initial: Vec<f64>,
    /// The mean squared error at `constants` (its squares summed in a
    /// fixed order: the same bits on every tier and thread count).
    pub mse: f64,
    /// Levenberg–Marquardt steps taken.
    pub iterations: usize,
    /// The expression with `constants` written in place of its literals
    /// (shortest round-trip decimals; negative ones in parentheses).
    pub expr: String,
    /// Why the fit kept the initial constants, when it did.
    pub failure: Option<String>,
}

/// An expression with its float literals as parameters, compiled: its
/// values and their Jacobian, in one program, and the columns that do not
/// depend on the parameters, in another.
struct Model {
    /// For each input of `jacobian`: a column, or a parameter's index.
    inputs: Vec<Slot>,
    parameters: Vec<Parameter>,
    jacobian: Box<dyn Program>,
    /// Whether the result is one value for every row (no column read).
    scalar: bool,
    /// The hoisted columns' program, when there are some: the variables it
    /// reads (positions), and how many columns it computes (which follow
    /// the variables in the columns `jacobian` reads).
    invariant: Option<(Box<dyn Program>, Vec<usize>, usize)>,
}

#[derive(Copy, Clone)]
enum Slot {
    /// A column: a variable's position, or past the variables a hoisted
    /// column's.
    Column(usize),
    Parameter(usize),
    /// The target, of which a column model's program returns its values'
    /// difference: the residuals.
    Target,
}

/// The name of a column model's target input (no variable's: not a
/// Python name).
const TARGET: &str = "%target";

/// A model's graphs before they compile: the value and Jacobian graph with
/// where its inputs come from, and the hoisted columns' graph with the
/// variables it reads.
struct Graphs {
    jacobian: Verified,
    inputs: Vec<Slot>,
    parameters: Vec<Parameter>,
    invariant: Option<(Verified, Vec<usize>)>,
}

/// A column's position among `variables`.
fn variable(variables: &[String], name: &str) -> Result<usize, MemberError> {
    variables
        .iter()
        .position(|v| v == name)
        .ok_or_else(|| MemberError::UnknownVariable(name.to_string()))
}

/// Parses `expr` with its float literals as parameters and builds the
/// graph of its values and their Jacobian (its values alone without
/// parameters), the subtrees without parameters cut out into a graph of
/// their own when `hoist` is set.
fn graphs(expr: &str, variables: &[String], hoist: bool) -> Result<Graphs, MemberError> {
    let compile_error = |e: &dyn std::fmt::Display| MemberError::Compile(e.to_string());
    let options = crate::population::column_options(crate::population::Precision::F64);
    let (graph, _, _, parameters) =
        kiln_frontend::py::parse_parameters(expr, &options).map_err(MemberError::Parse)?;
    let graph = crate::verify(graph).map_err(|e| compile_error(&e))?;
    let g = graph.graph();
    let out_ok = g.outputs().len() == 1
        && matches!(g.ty(g.outputs()[0].value),
            Type::Tensor(t) if t.dtype == kiln_ir::DType::F64 && t.shape.len() <= 1);
    if !out_ok {
        return Err(MemberError::Compile(
            "a fitted expression has one float64 result, a column or a constant".to_string(),
        ));
    }
    // A column's residuals in the graph (`out - target`): one pass less
    // over the rows than subtracting after it.
    let graph = if g
        .ty(g.outputs()[0].value)
        .as_tensor()
        .is_some_and(|t| t.shape.len() == 1)
    {
        let mut g = graph.into_graph();
        let out = g.outputs()[0].value;
        let ty = g.ty(out).clone();
        let target = g.push_input(TARGET, ty.clone());
        let residual = g.push_node(kiln_ir::graph::NodeData {
            op: kiln_ir::Op::Binary(kiln_ir::BinaryOp::Sub),
            args: vec![out, target],
            ty,
        });
        g.set_output(0, residual);
        crate::verify(g).map_err(|e| compile_error(&e))?
    } else {
        graph
    };
    let names: Vec<String> = (0..parameters.len()).map(|k| format!("${k}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    // The values and their derivatives in one graph (the values alone
    // without parameters), merged and pruned so that a subtree the two
    // share is cut out once.
    let jacobian = if names.is_empty() {
        graph
    } else {
        let j = kiln_ir::grad::jacobian(&graph, &names).map_err(|e| compile_error(&e))?;
        let j = crate::verify(j).map_err(|e| compile_error(&e))?;
        kiln_ir::passes::optimize(&j).map_err(|e| compile_error(&e))?
    };
    let column = |ty: &Type| matches!(ty, Type::Tensor(t) if t.dtype == kiln_ir::DType::F64 && t.shape.len() == 1);
    // Without parameters nothing varies: the graph is its values alone.
    // The target varies as the parameters do, for the split: what reads it
    // (the residuals) stays, even where the values hold no parameter.
    let varying: Vec<&str> = names.iter().copied().chain([TARGET]).collect();
    let split = (hoist && !names.is_empty())
        .then(|| kiln_ir::hoist::hoist(jacobian.graph(), &varying, column))
        .flatten();
    let (jacobian, invariant) = match split {
        None => (jacobian, None),
        Some(split) => {
            let reads = split
                .invariant
                .inputs()
                .iter()
                .map(|i| variable(variables, &i.name))
                .collect::<Result<Vec<_>, _>>()?;
            let invariant = crate::verify(split.invariant).map_err(|e| compile_error(&e))?;
            let rest = crate::verify(split.rest).map_err(|e| compile_error(&e))?;
            (rest, Some((invariant, reads)))
        }
    };
    let hoisted: Vec<&str> = match &invariant {
        Some((inv, _)) => inv
            .graph()
            .outputs()
            .iter()
            .map(|o| o.name.as_str())
            .collect(),
        None => Vec::new(),
    };
    let mut inputs = Vec::with_capacity(jacobian.graph().inputs().len());
    for input in jacobian.graph().inputs() {
        inputs.push(match input.name.strip_prefix('$') {
            Some(k) => Slot::Parameter(k.parse().expect("parameters are named $k")),
            None if input.name == TARGET => Slot::Target,
            None => match hoisted.iter().position(|h| *h == input.name) {
                Some(h) => Slot::Column(variables.len() + h),
                None => Slot::Column(variable(variables, &input.name)?),
            },
        });
    }
    Ok(Graphs {
        jacobian,
        inputs,
        parameters,
        invariant,
    })
}

/// The expression's text with `constants` in place of its literals.
fn rewrite(expr: &str, parameters: &[Parameter], constants: &[f64]) -> String {
    let mut out = String::with_capacity(expr.len() + 8 * constants.len());
    let mut at = 0;
    let mut order: Vec<usize> = (0..parameters.len()).collect();
    order.sort_by_key(|&k| parameters[k].span.start);
    for k in order {
        let span = &parameters[k].span;
        out.push_str(&expr[at..span.start]);
        let c = constants[k];
        if c.is_sign_negative() {
            out.push_str(&format!("({c:?})"));
        } else {
            out.push_str(&format!("{c:?}"));
        }
        at = span.end;
    }
    out.push_str(&expr[at..]);
    out
}

impl Model {
    /// The hoisted columns over `variables` into the first of `columns`
    /// (none without an invariant program): those columns.
    fn hoisted<'c>(
        &self,
        variables: &[&[f64]],
        rows: usize,
        columns: &'c mut Vec<Vec<f64>>,
    ) -> Result<&'c [Vec<f64>], MemberError> {
        let Some((program, reads, count)) = &self.invariant else {
            return Ok(&columns[..0]);
        };
        let inputs: Vec<ArrayRef<'_>> =
            reads.iter().map(|&v| ArrayRef::F64(variables[v])).collect();
        let columns = lm::columns_of(columns, *count, rows);
        let mut rooms: Vec<ArrayMut<'_>> = columns.iter_mut().map(|c| ArrayMut::F64(c)).collect();
        program.run_arrays(&inputs, &mut rooms)?;
        Ok(columns)
    }

    /// Runs the program at `theta` over `columns` (the variables, then the
    /// hoisted columns): the residuals against `target` into `residuals`,
    /// each parameter's derivatives into `derivatives`.
    fn run(
        &self,
        theta: &[f64],
        (columns, target): (&[&[f64]], &[f64]),
        residuals: &mut [f64],
        derivatives: &mut [Vec<f64>],
    ) -> Result<(), MemberError> {
        let inputs: Vec<ArrayRef<'_>> = self
            .inputs
            .iter()
            .map(|slot| match *slot {
                Slot::Column(c) => ArrayRef::F64(columns[c]),
                Slot::Parameter(k) => ArrayRef::Scalar(Scalar::F64(theta[k])),
                Slot::Target => ArrayRef::F64(target),
            })
            .collect();
        // A constant expression's outputs are one value for every row, its
        // residuals subtracted here.
        let len = if self.scalar { 1 } else { residuals.len() };
        let mut rooms: Vec<ArrayMut<'_>> = Vec::with_capacity(1 + derivatives.len());
        rooms.push(ArrayMut::F64(&mut residuals[..len]));
        rooms.extend(derivatives.iter_mut().map(|d| ArrayMut::F64(&mut d[..len])));
        self.jacobian.run_arrays(&inputs, &mut rooms)?;
        drop(rooms);
        if self.scalar {
            let v = residuals[0];
            for (r, t) in residuals.iter_mut().zip(target) {
                *r = v - t;
            }
            for d in derivatives {
                let v = d[0];
                d.fill(v);
            }
        }
        Ok(())
    }
}

/// A model's residuals against `target` over `columns`.
struct Problem<'a> {
    model: &'a Model,
    columns: &'a [&'a [f64]],
    target: &'a [f64],
}

impl lm::Residuals for Problem<'_> {
    type Error = MemberError;

    fn jacobian(
        &mut self,
        theta: &[f64],
        r: &mut [f64],
        j: &mut [Vec<f64>],
    ) -> Result<(), MemberError> {
        self.model.run(theta, (self.columns, self.target), r, j)
    }
}

/// Fits one compiled model.
fn fit_model(
    model: &Model,
    columns: &[&[f64]],
    target: &[f64],
    max_iter: usize,
    (scratch, hoisted): &mut (lm::Scratch, Vec<Vec<f64>>),
) -> Result<lm::Outcome, MemberError> {
    let n = target.len();
    let hoisted = model.hoisted(columns, n, hoisted)?;
    let columns: Vec<&[f64]> = columns
        .iter()
        .copied()
        .chain(hoisted.iter().map(Vec::as_slice))
        .collect();
    let mut problem = Problem {
        model,
        columns: &columns,
        target,
    };
    let theta = model.parameters.iter().map(|p| p.value).collect();
    lm::minimize(&mut problem, theta, n, max_iter, scratch)
}

/// Expressions compiled together (one module on the JIT tiers).
const BATCH: usize = 64;

impl FitOptions {
    fn threads(&self) -> usize {
        crate::population::threads_or_cores(self.threads)
    }
}

/// Compiles a part's models in one batch (every value and Jacobian graph,
/// then every hoisted columns' graph), or each alone if the batch fails,
/// so an error lands on its expression.
fn compile_models<S: AsRef<str>>(
    exprs: &[S],
    variables: &[String],
    engine: &dyn DynEngine,
    options: &CompileOptions,
    hoist: bool,
) -> Vec<Result<Model, MemberError>> {
    let built: Vec<Result<Graphs, MemberError>> = exprs
        .iter()
        .map(|e| graphs(e.as_ref(), variables, hoist))
        .collect();
    let make = |g: Graphs, jacobian: Box<dyn Program>, invariant: Option<Box<dyn Program>>| {
        let j = g.jacobian.graph();
        let scalar = matches!(j.ty(j.outputs()[0].value), Type::Tensor(t) if t.shape.is_empty());
        let invariant = g
            .invariant
            .zip(invariant)
            .map(|((graph, reads), program)| (program, reads, graph.graph().outputs().len()));
        Model {
            inputs: g.inputs,
            parameters: g.parameters,
            jacobian,
            scalar,
            invariant,
        }
    };
    let mut batch: Vec<Verified> = built.iter().flatten().map(|g| g.jacobian.clone()).collect();
    let models = batch.len();
    batch.extend(
        built
            .iter()
            .flatten()
            .filter_map(|g| g.invariant.as_ref().map(|(graph, _)| graph.clone())),
    );
    if let Ok(mut programs) = engine.compile_batch_dyn(&batch, options) {
        let mut invariants = programs.split_off(models).into_iter();
        let mut programs = programs.into_iter();
        return built
            .into_iter()
            .map(|b| {
                let g = b?;
                let jacobian = programs.next().expect("a program per model");
                let invariant = g.invariant.as_ref().map(|_| {
                    invariants
                        .next()
                        .expect("a program per hoisted columns' graph")
                });
                Ok(make(g, jacobian, invariant))
            })
            .collect();
    }
    let compile = |graph: &Verified| {
        engine
            .compile_dyn(graph, options)
            .map_err(|e| MemberError::Compile(e.to_string()))
    };
    built
        .into_iter()
        .map(|b| {
            let g = b?;
            let jacobian = compile(&g.jacobian)?;
            let invariant = match &g.invariant {
                Some((graph, _)) => Some(compile(graph)?),
                None => None,
            };
            Ok(make(g, jacobian, invariant))
        })
        .collect()
}

/// Fits the constants of each expression (Python subset; its free names
/// are `f64` columns named in `variables`, given in `columns`) to `target`
/// by least squares, on `engine`, the expressions spread over
/// `options.threads` threads. Never fails as a whole: each expression has
/// its fit or its error.
///
/// # Panics
/// If `columns` does not have one slice per variable, each as long as
/// `target`.
pub fn fit_constants<S: AsRef<str> + Sync>(
    exprs: &[S],
    variables: &[String],
    columns: &[&[f64]],
    target: &[f64],
    engine: &dyn DynEngine,
    options: &FitOptions,
) -> Vec<Result<Fitted, MemberError>> {
    fit_all(exprs, variables, columns, target, engine, options, true)
}

/// [`fit_constants`], with the subtrees without parameters computed once
/// per fit (`hoist`) or at every step (the tests' reference).
fn fit_all<S: AsRef<str> + Sync>(
    exprs: &[S],
    variables: &[String],
    columns: &[&[f64]],
    target: &[f64],
    engine: &dyn DynEngine,
    options: &FitOptions,
    hoist: bool,
) -> Vec<Result<Fitted, MemberError>> {
    assert_eq!(columns.len(), variables.len(), "one column per variable");
    assert!(
        columns.iter().all(|c| c.len() == target.len()),
        "columns as long as the target"
    );
    let threads = options.threads().min(exprs.len()).max(1);
    let chunk = exprs.len().div_ceil(threads).max(1);
    // Each expression's kernels run on its fitting thread.
    let compile = &crate::population::member_options(&options.compile);
    crate::population::on_threads(exprs.chunks(chunk).collect(), threads, |part| {
        let mut scratch = (lm::Scratch::default(), Vec::new());
        // Compiled a batch at a time, so that each batch's
        // programs reuse the memory of the one before.
        part.chunks(BATCH)
            .flat_map(|batch| {
                batch
                    .iter()
                    .zip(compile_models(batch, variables, engine, compile, hoist))
            })
            .map(|(expr, model)| {
                let model = model?;
                let out = fit_model(&model, columns, target, options.max_iter, &mut scratch)?;
                let initial = model.parameters.iter().map(|p| p.value).collect();
                let n = target.len();
                Ok(Fitted {
                    expr: rewrite(expr.as_ref(), &model.parameters, &out.theta),
                    mse: if n == 0 {
                        f64::NAN
                    } else {
                        out.cost / n as f64
                    },
                    constants: out.theta,
                    initial,
                    iterations: out.iterations,
                    failure: out.failure,
                })
            })
            .collect::<Vec<_>>()
    })
    .into_iter()
    .flatten()
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hoisting the subtrees without constants changes no bit of any fit:
    /// the GP fixture's first 300 expressions over 2,000 of its rows, 10
    /// steps each, fitted with and without it on the VM and on Cranelift.
    #[test]
    fn hoisted_columns_fit_to_the_same_bits() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/gp");
        let text = std::fs::read_to_string(dir.join("gp_population.txt")).expect("the GP fixture");
        let exprs: Vec<&str> = text.lines().take(300).collect();
        let data = std::fs::read_to_string(dir.join("gp_data.csv")).expect("the GP data");
        let mut lines = data.lines();
        let names: Vec<String> = lines
            .next()
            .expect("a header")
            .split(',')
            .map(String::from)
            .collect();
        let mut columns = vec![Vec::new(); names.len()];
        for line in lines.take(2000) {
            for (c, v) in columns.iter_mut().zip(line.split(',')) {
                c.push(v.parse::<f64>().expect("a number"));
            }
        }
        let refs: Vec<&[f64]> = columns.iter().map(Vec::as_slice).collect();
        let hoisting = exprs
            .iter()
            .filter(|e| graphs(e, &names, true).is_ok_and(|g| g.invariant.is_some()))
            .count();
        assert!(
            hoisting > 100,
            "{hoisting} of 300 expressions hoist columns"
        );
        let options = FitOptions {
            max_iter: 10,
            threads: 1,
            ..FitOptions::default()
        };
        for tier in [crate::Tier::Vm, crate::Tier::Cranelift] {
            let engine = tier.engine().expect("the engine");
            let fit = |hoist| {
                fit_all(&exprs, &names, &refs, refs[0], &*engine, &options, hoist)
                    .iter()
                    .map(|f| format!("{f:?}"))
                    .collect::<Vec<_>>()
            };
            let (hoisted, whole) = (fit(true), fit(false));
            for ((h, w), e) in hoisted.iter().zip(&whole).zip(&exprs) {
                assert_eq!(h, w, "{tier:?}: {e}");
            }
        }
    }

    /// An expression whose values, once optimized, hold none of its
    /// constants (`where(c, a, a)` is `a`): the residuals still read the
    /// target in the fitted program, not in the hoisted one, and the fit
    /// keeps the constant, saying why.
    #[test]
    fn values_without_their_constants_keep_them() {
        let names: Vec<String> = ["x0", "x1"].map(String::from).to_vec();
        let x0 = [0.5, 1.0, 2.0, 3.0];
        let x1 = [1.0, -2.0, 0.25, 4.0];
        let target = [1.0, 1.0, 1.0, 1.0];
        let engine = crate::Tier::Vm.engine().expect("the VM");
        let fits = fit_constants(
            &["where(x0 > 1.5, x1 * 2, x1 * 2)"],
            &names,
            &[&x0, &x1],
            &target,
            &*engine,
            &FitOptions::default(),
        );
        let fit = fits[0].as_ref().expect("fits");
        assert_eq!(fit.constants, [1.5]);
        assert!(
            fit.failure.as_deref().is_some_and(|f| f.contains("zero")),
            "{:?}",
            fit.failure
        );
        let want = x1
            .iter()
            .zip(target)
            .map(|(x, t)| (2.0 * x - t) * (2.0 * x - t))
            .sum::<f64>()
            / 4.0;
        assert_eq!(fit.mse, want);
    }

    #[test]
    fn fitted_constants_are_written_back_into_the_text() {
        let p = |value, start, end| Parameter {
            value,
            span: start..end,
        };
        let text = "x * 2.0 + sin(1.5 * y)";
        let params = [p(2.0, 4, 7), p(1.5, 14, 17)];
        assert_eq!(
            rewrite(text, &params, &[0.25, -3.0]),
            "x * 0.25 + sin((-3.0) * y)"
        );
    }
}
