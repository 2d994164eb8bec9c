//! Fitting an expression's constants: its float literals become
//! parameters (`kiln_frontend::py::parse_parameters`), forward mode gives the
//! Jacobian of every row with respect to them (`kiln_ir::grad::jacobian`),
//! and Levenberg–Marquardt moves them to lower the squared error against a
//! target. The value and Jacobian graphs compile on any tier (one module
//! per thread for a population), and every tier gives the same bits, so the
//! fitted constants are the same on every tier too.
//!
//! The algorithm is Marquardt's, with Nielsen's damping update (Madsen,
//! Nielsen and Tingleff, *Methods for non-linear least squares problems*,
//! 2004, §3.2): the step solves `(JᵀJ + μ·D) δ = -Jᵀr` with `D` the
//! diagonal of `JᵀJ` (scale-invariant, as MINPACK's `lmder`), by Cholesky.
//! It stops, as scipy's `least_squares(method="lm")` does with its default
//! tolerances, when the error's relative decrease, the step's relative size
//! or the residual's largest cosine with a Jacobian column falls below
//! 1e-8, or after `max_iter` steps.
//!
//! An expression that cannot be fitted (NaN or infinite at its initial
//! constants, a Jacobian of zeros) keeps its constants and says why; one
//! that fails to compile or to run has an error; neither stops the others.

use crate::population::MemberError;
use crate::{ArrayMut, ArrayRef, CompileOptions, DynEngine, Program, Scalar, Verified};
use kiln_frontend::py::{Options as PyOptions, Parameter};
use kiln_ir::{Dim, Type};

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
    /// The mean squared error at `constants`, summed in row order.
    pub mse: f64,
    /// Levenberg–Marquardt steps taken.
    pub iterations: usize,
    /// The expression with `constants` written in place of its literals
    /// (shortest round-trip decimals; negative ones in parentheses).
    pub expr: String,
    /// Why the fit kept the initial constants, when it did.
    pub failure: Option<String>,
}

/// An expression with its float literals as parameters, compiled: the
/// values alone, and the values with their Jacobian.
struct Model {
    /// For each graph input: a variable's position, or a parameter's index.
    inputs: Vec<Slot>,
    parameters: Vec<Parameter>,
    values: Box<dyn Program>,
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
/// value and Jacobian graphs; also where each input comes from.
fn graphs(
    expr: &str,
    variables: &[String],
) -> Result<(Verified, Verified, Vec<Slot>, Vec<Parameter>), MemberError> {
    let options = PyOptions {
        default_shape: vec![Dim::Sym("n".into())],
        ..PyOptions::default()
    };
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
        graph.clone()
    } else {
        let j = kiln_ir::grad::jacobian(&graph, &names)
            .map_err(|e| MemberError::Compile(e.to_string()))?;
        crate::verify(j).map_err(|e| MemberError::Compile(e.to_string()))?
    };
    Ok((graph, jacobian, slots, parameters))
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
    /// Runs `program` at `theta` into `outs` (the values, then one column
    /// per parameter for the Jacobian program).
    fn run(
        &self,
        program: &dyn Program,
        theta: &[f64],
        columns: &[&[f64]],
        outs: &mut [Vec<f64>],
    ) -> Result<(), MemberError> {
        let inputs: Vec<ArrayRef<'_>> = self
            .inputs
            .iter()
            .map(|slot| match *slot {
                Slot::Variable(v) => ArrayRef::F64(columns[v]),
                Slot::Parameter(k) => ArrayRef::Scalar(Scalar::F64(theta[k])),
            })
            .collect();
        let scalar = self.scalar;
        let mut rooms: Vec<ArrayMut<'_>> = outs
            .iter_mut()
            .map(|o| ArrayMut::F64(if scalar { &mut o[..1] } else { &mut o[..] }))
            .collect();
        program.run_arrays(&inputs, &mut rooms)?;
        drop(rooms);
        if scalar {
            for o in outs.iter_mut() {
                let v = o[0];
                o.fill(v);
            }
        }
        Ok(())
    }
}

/// What one evaluation gives: the residuals' squares' sum, and the
/// residuals.
fn residuals(values: &[f64], target: &[f64], r: &mut [f64]) -> f64 {
    let mut sum = 0.0;
    for ((r, v), t) in r.iter_mut().zip(values).zip(target) {
        *r = v - t;
        sum += *r * *r;
    }
    sum
}

/// Solves `a x = b` for a symmetric positive definite `a` (`k × k`, row
/// major) by Cholesky; `None` when `a` is not positive definite.
fn cholesky_solve(a: &[f64], b: &[f64], k: usize) -> Option<Vec<f64>> {
    let mut l = vec![0.0; k * k];
    for i in 0..k {
        for j in 0..=i {
            let mut s = a[i * k + j];
            for p in 0..j {
                s -= l[i * k + p] * l[j * k + p];
            }
            if i == j {
                // Not positive, or NaN or infinite.
                if s.is_nan() || s <= 0.0 || s.is_infinite() {
                    return None;
                }
                l[i * k + i] = s.sqrt();
            } else {
                l[i * k + j] = s / l[j * k + j];
            }
        }
    }
    let mut y = vec![0.0; k];
    for i in 0..k {
        let mut s = b[i];
        for p in 0..i {
            s -= l[i * k + p] * y[p];
        }
        y[i] = s / l[i * k + i];
    }
    let mut x = vec![0.0; k];
    for i in (0..k).rev() {
        let mut s = y[i];
        for p in i + 1..k {
            s -= l[p * k + i] * x[p];
        }
        x[i] = s / l[i * k + i];
    }
    Some(x)
}

/// The relative tolerances of the stopping tests (scipy's defaults).
const TOL: f64 = 1e-8;

/// `JᵀJ` and `Jᵀr`, each sum in row order.
fn normal_equations(j: &[Vec<f64>], r: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let k = j.len();
    let mut a = vec![0.0; k * k];
    let mut g = vec![0.0; k];
    for p in 0..k {
        for q in 0..=p {
            let s: f64 = j[p].iter().zip(&j[q]).map(|(x, y)| x * y).sum();
            a[p * k + q] = s;
            a[q * k + p] = s;
        }
        g[p] = j[p].iter().zip(r).map(|(x, y)| x * y).sum();
    }
    (a, g)
}

/// Fits one compiled model.
fn levenberg_marquardt(
    model: &Model,
    columns: &[&[f64]],
    target: &[f64],
    max_iter: usize,
) -> Result<(Vec<f64>, f64, usize, Option<String>), MemberError> {
    let n = target.len();
    let k = model.parameters.len();
    let mut theta: Vec<f64> = model.parameters.iter().map(|p| p.value).collect();
    let mut outs = vec![vec![0.0; n]; 1 + k];
    model.run(&*model.jacobian, &theta, columns, &mut outs)?;
    let mut r = vec![0.0; n];
    let mut cost = residuals(&outs[0], target, &mut r);
    let mse = |cost: f64| if n == 0 { f64::NAN } else { cost / n as f64 };
    if !cost.is_finite() {
        let failure = "it is NaN or infinite at its initial constants".to_string();
        return Ok((theta, mse(cost), 0, Some(failure)));
    }
    if k == 0 || cost == 0.0 {
        return Ok((theta, mse(cost), 0, None));
    }
    if outs[1..].iter().flatten().any(|d| !d.is_finite()) {
        let failure = "its Jacobian is NaN or infinite at its initial constants".to_string();
        return Ok((theta, mse(cost), 0, Some(failure)));
    }
    let (mut a, mut g) = normal_equations(&outs[1..], &r);
    if (0..k).all(|p| a[p * k + p] == 0.0) {
        let failure = "its Jacobian is zero: no constant changes its value".to_string();
        return Ok((theta, mse(cost), 0, Some(failure)));
    }
    // Dimensionless: the damping scales the diagonal (Marquardt).
    let mut mu = 1e-3;
    let mut nu = 2.0;
    let mut trial = vec![vec![0.0; n]];
    let mut r_trial = vec![0.0; n];
    let mut iterations = 0;
    while iterations < max_iter {
        // The residual's largest cosine with a Jacobian column.
        let r_norm = cost.sqrt();
        let cosine = (0..k)
            .map(|p| {
                let d = a[p * k + p].sqrt();
                if d == 0.0 {
                    0.0
                } else {
                    g[p].abs() / (d * r_norm)
                }
            })
            .fold(0.0, f64::max);
        if cosine <= TOL {
            break;
        }
        iterations += 1;
        // Marquardt's scaling: the diagonal, with zero columns kept solvable.
        let floor = 1e-12 * (0..k).map(|p| a[p * k + p]).fold(0.0, f64::max);
        let mut damped = a.clone();
        let mut scale = vec![0.0; k];
        for p in 0..k {
            scale[p] = a[p * k + p].max(floor);
            damped[p * k + p] += mu * scale[p];
        }
        let minus_g: Vec<f64> = g.iter().map(|x| -x).collect();
        let Some(delta) = cholesky_solve(&damped, &minus_g, k) else {
            mu *= nu;
            nu *= 2.0;
            continue;
        };
        let step: f64 = delta.iter().map(|d| d * d).sum::<f64>().sqrt();
        let size: f64 = theta.iter().map(|t| t * t).sum::<f64>().sqrt();
        if step <= TOL * (size + TOL) {
            break;
        }
        let next: Vec<f64> = theta.iter().zip(&delta).map(|(t, d)| t + d).collect();
        model.run(&*model.values, &next, columns, &mut trial)?;
        let cost_next = residuals(&trial[0], target, &mut r_trial);
        // The decrease the linear model predicts: δᵀ(μDδ - g) (twice ½ of it).
        let predicted: f64 = (0..k)
            .map(|p| delta[p] * (mu * scale[p] * delta[p] - g[p]))
            .sum();
        let rho = (cost - cost_next) / predicted;
        if cost_next.is_finite() && rho > 0.0 {
            let decrease = cost - cost_next;
            model.run(&*model.jacobian, &next, columns, &mut outs)?;
            theta = next;
            cost = residuals(&outs[0], target, &mut r);
            if outs[1..].iter().flatten().any(|d| !d.is_finite()) {
                break;
            }
            (a, g) = normal_equations(&outs[1..], &r);
            mu *= (1.0 - (2.0 * rho - 1.0).powi(3)).max(1.0 / 3.0);
            nu = 2.0;
            if decrease <= TOL * (cost + decrease) || cost == 0.0 {
                break;
            }
        } else {
            mu *= nu;
            nu *= 2.0;
            if !mu.is_finite() {
                break;
            }
        }
    }
    Ok((theta, mse(cost), iterations, None))
}

impl FitOptions {
    fn threads(&self) -> usize {
        match self.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }
}

/// Compiles a part's models in one batch (two programs each), or each
/// alone if the batch fails, so an error lands on its expression.
fn compile_models<S: AsRef<str>>(
    exprs: &[S],
    variables: &[String],
    engine: &dyn DynEngine,
    options: &CompileOptions,
) -> Vec<Result<Model, MemberError>> {
    type Parts = (Verified, Verified, Vec<Slot>, Vec<Parameter>);
    let built: Vec<Result<Parts, MemberError>> = exprs
        .iter()
        .map(|e| graphs(e.as_ref(), variables))
        .collect();
    let make = |(values, _, inputs, parameters): Parts,
                programs: (Box<dyn Program>, Box<dyn Program>)| {
        let g = values.graph();
        let scalar = matches!(g.ty(g.outputs()[0].value), Type::Tensor(t) if t.shape.is_empty());
        Model {
            inputs,
            parameters,
            values: programs.0,
            jacobian: programs.1,
            scalar,
        }
    };
    let graphs: Vec<Verified> = built
        .iter()
        .flatten()
        .flat_map(|(v, j, _, _)| [v.clone(), j.clone()])
        .collect();
    if let Ok(programs) = engine.compile_batch_dyn(&graphs, options) {
        let mut programs = programs.into_iter();
        return built
            .into_iter()
            .map(|b| {
                let parts = b?;
                let v = programs.next().expect("two programs per model");
                let j = programs.next().expect("two programs per model");
                Ok(make(parts, (v, j)))
            })
            .collect();
    }
    built
        .into_iter()
        .map(|b| {
            let parts = b?;
            let compile = |g: &Verified| {
                engine
                    .compile_dyn(g, options)
                    .map_err(|e| MemberError::Compile(e.to_string()))
            };
            let programs = (compile(&parts.0)?, compile(&parts.1)?);
            Ok(make(parts, programs))
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
    let compile = CompileOptions {
        vectorize: Some(options.compile.vectorize.unwrap_or(false)),
        parallel: Some(false),
        ..options.compile.clone()
    };
    let compile = &compile;
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
                            let (constants, mse, iterations, failure) =
                                levenberg_marquardt(&model, columns, target, options.max_iter)?;
                            let initial = model.parameters.iter().map(|p| p.value).collect();
                            Ok(Fitted {
                                expr: rewrite(expr.as_ref(), &model.parameters, &constants),
                                constants,
                                initial,
                                mse,
                                iterations,
                                failure,
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
    fn cholesky_solves_a_small_system() {
        let a = [4.0, 2.0, 2.0, 3.0];
        let x = cholesky_solve(&a, &[2.0, 1.0], 2).expect("positive definite");
        assert!((4.0 * x[0] + 2.0 * x[1] - 2.0).abs() < 1e-15);
        assert!((2.0 * x[0] + 3.0 * x[1] - 1.0).abs() < 1e-15);
        assert!(cholesky_solve(&[1.0, 2.0, 2.0, 1.0], &[1.0, 1.0], 2).is_none());
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
