//! Fitting an expression's constants: its float literals become
//! parameters (`kiln_frontend::py::parse_parameters`), forward mode gives the
//! Jacobian of every row with respect to them (`kiln_ir::grad::jacobian`),
//! and Levenberg–Marquardt moves them to lower the squared error against a
//! target. The value and Jacobian graphs compile on any tier (one module
//! per thread for a population), and every tier gives the same bits, so the
//! fitted constants are the same on every tier too.
//!
//! The algorithm is MINPACK's `lmder`, the one scipy's
//! `least_squares(method="lm")` runs, with its stopping tests and default
//! tolerances ([`lm`]), on kiln's exact Jacobian where scipy takes finite
//! differences.
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
/// values and their Jacobian, in one program.
struct Model {
    /// For each graph input: a variable's position, or a parameter's index.
    inputs: Vec<Slot>,
    parameters: Vec<Parameter>,
    jacobian: Box<dyn Program>,
    /// Whether the result is one value for every row (no variable read).
    scalar: bool,
}

#[derive(Copy, Clone)]
enum Slot {
    Variable(usize),
    Parameter(usize),
}

/// Parses `expr` with its float literals as parameters and builds the
/// graph of its values and their Jacobian (its values alone without
/// parameters); also where each input comes from.
fn graphs(
    expr: &str,
    variables: &[String],
) -> Result<(Verified, Vec<Slot>, Vec<Parameter>), MemberError> {
    let options = crate::population::column_options(crate::population::Precision::F64);
    let (graph, _, _, parameters) =
        kiln_frontend::py::parse_parameters(expr, &options).map_err(MemberError::Parse)?;
    let graph = crate::verify(graph).map_err(|e| MemberError::Compile(e.to_string()))?;
    let g = graph.graph();
    let out_ok = g.outputs().len() == 1
        && matches!(g.ty(g.outputs()[0].value),
            Type::Tensor(t) if t.dtype == kiln_ir::DType::F64 && t.shape.len() <= 1);
    if !out_ok {
        return Err(MemberError::Compile(
            "a fitted expression has one float64 result, a column or a constant".to_string(),
        ));
    }
    let mut slots = Vec::with_capacity(g.inputs().len());
    for input in g.inputs() {
        slots.push(match input.name.strip_prefix('$') {
            Some(k) => Slot::Parameter(k.parse().expect("parameters are named $k")),
            None => Slot::Variable(
                variables
                    .iter()
                    .position(|v| *v == input.name)
                    .ok_or_else(|| MemberError::UnknownVariable(input.name.clone()))?,
            ),
        });
    }
    let names: Vec<String> = (0..parameters.len()).map(|k| format!("${k}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let jacobian = if names.is_empty() {
        graph
    } else {
        let j = kiln_ir::grad::jacobian(&graph, &names)
            .map_err(|e| MemberError::Compile(e.to_string()))?;
        crate::verify(j).map_err(|e| MemberError::Compile(e.to_string()))?
    };
    Ok((jacobian, slots, parameters))
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
    /// Runs the program at `theta`: the values into `values`, each
    /// parameter's derivatives into `derivatives`.
    fn run(
        &self,
        theta: &[f64],
        columns: &[&[f64]],
        values: &mut [f64],
        derivatives: &mut [Vec<f64>],
    ) -> Result<(), MemberError> {
        let inputs: Vec<ArrayRef<'_>> = self
            .inputs
            .iter()
            .map(|slot| match *slot {
                Slot::Variable(v) => ArrayRef::F64(columns[v]),
                Slot::Parameter(k) => ArrayRef::Scalar(Scalar::F64(theta[k])),
            })
            .collect();
        // A constant expression's outputs are one value for every row.
        let len = if self.scalar { 1 } else { values.len() };
        let mut rooms: Vec<ArrayMut<'_>> = Vec::with_capacity(1 + derivatives.len());
        rooms.push(ArrayMut::F64(&mut values[..len]));
        rooms.extend(derivatives.iter_mut().map(|d| ArrayMut::F64(&mut d[..len])));
        self.jacobian.run_arrays(&inputs, &mut rooms)?;
        drop(rooms);
        if self.scalar {
            let v = values[0];
            values.fill(v);
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
        self.model.run(theta, self.columns, r, j)?;
        for (r, t) in r.iter_mut().zip(self.target) {
            *r -= t;
        }
        Ok(())
    }
}

/// Fits one compiled model.
fn fit_model(
    model: &Model,
    columns: &[&[f64]],
    target: &[f64],
    max_iter: usize,
) -> Result<lm::Outcome, MemberError> {
    let n = target.len();
    let mut problem = Problem {
        model,
        columns,
        target,
    };
    let theta = model.parameters.iter().map(|p| p.value).collect();
    lm::minimize(&mut problem, theta, n, max_iter)
}

impl FitOptions {
    fn threads(&self) -> usize {
        crate::population::threads_or_cores(self.threads)
    }
}

/// Compiles a part's models in one batch, or each alone if the batch
/// fails, so an error lands on its expression.
fn compile_models<S: AsRef<str>>(
    exprs: &[S],
    variables: &[String],
    engine: &dyn DynEngine,
    options: &CompileOptions,
) -> Vec<Result<Model, MemberError>> {
    type Parts = (Verified, Vec<Slot>, Vec<Parameter>);
    let built: Vec<Result<Parts, MemberError>> = exprs
        .iter()
        .map(|e| graphs(e.as_ref(), variables))
        .collect();
    let make = |(graph, inputs, parameters): Parts, jacobian: Box<dyn Program>| {
        let g = graph.graph();
        let scalar = matches!(g.ty(g.outputs()[0].value), Type::Tensor(t) if t.shape.is_empty());
        Model {
            inputs,
            parameters,
            jacobian,
            scalar,
        }
    };
    let graphs: Vec<Verified> = built.iter().flatten().map(|(j, _, _)| j.clone()).collect();
    if let Ok(programs) = engine.compile_batch_dyn(&graphs, options) {
        let mut programs = programs.into_iter();
        return built
            .into_iter()
            .map(|b| {
                let parts = b?;
                Ok(make(parts, programs.next().expect("a program per model")))
            })
            .collect();
    }
    built
        .into_iter()
        .map(|b| {
            let parts = b?;
            let program = engine
                .compile_dyn(&parts.0, options)
                .map_err(|e| MemberError::Compile(e.to_string()))?;
            Ok(make(parts, program))
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
    assert_eq!(columns.len(), variables.len(), "one column per variable");
    assert!(
        columns.iter().all(|c| c.len() == target.len()),
        "columns as long as the target"
    );
    let threads = options.threads().min(exprs.len()).max(1);
    let chunk = exprs.len().div_ceil(threads).max(1);
    // Each expression's kernels run on its fitting thread.
    let compile = &crate::population::member_options(&options.compile);
    std::thread::scope(|s| {
        let handles: Vec<_> = exprs
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || {
                    let models = compile_models(part, variables, engine, compile);
                    part.iter()
                        .zip(models)
                        .map(|(expr, model)| {
                            let model = model?;
                            let out = fit_model(&model, columns, target, options.max_iter)?;
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
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("fitting threads do not panic"))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
