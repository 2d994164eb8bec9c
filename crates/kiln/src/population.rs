//! GP populations: many Python-subset expressions over the same `f64`
//! columns, compiled in batches (one module per thread) and evaluated on
//! every core, with one row of results (or one mean squared error) per
//! expression. An expression that fails (to parse, to compile, or at run
//! time, such as an integer division by zero) has its error recorded and does
//! not stop the others. The `kiln eval --population` command and Python's
//! `kiln.Population` are thin layers over this.

use crate::{
    ArrayMut, ArrayRef, CompileOptions, Data, DynEngine, ExecError, Format, LoadOptions, Program,
    PyOptions, Scalar, Type, Verified,
};
use kiln_ir::{Dim, ParseError};

/// Why one expression has no results.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum MemberError {
    /// It does not parse (or its types do not check); `loc` is in the
    /// expression's own text.
    #[error("{0}")]
    Parse(ParseError),
    /// It reads a variable the population was not given.
    #[error("unknown variable `{0}`")]
    UnknownVariable(String),
    /// It does not verify or compile, or its first output is not a column
    /// or scalar of numbers.
    #[error("{0}")]
    Compile(String),
    /// It failed while running.
    #[error("{0}")]
    Exec(#[from] ExecError),
}

/// How to compile and run a population.
#[derive(Clone, Debug, Default)]
pub struct PopulationOptions {
    /// Threads to compile and evaluate on; 0 means every core.
    pub threads: usize,
    /// How to compile each expression. Its `vectorize` left at `None` means
    /// off here: a population is many small kernels, whose vector loops cost
    /// more compile time than they save on short columns (break-even near
    /// 15,000–20,000 rows, docs/performance.md); `Some(true)` turns them on.
    pub compile: CompileOptions,
}

impl PopulationOptions {
    fn threads(&self) -> usize {
        match self.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }
}

struct Member {
    /// Each input's position in the population's variables.
    columns: Vec<usize>,
    program: Box<dyn Program>,
}

/// A compiled population ([`Population::compile`]).
pub struct Population {
    variables: Vec<String>,
    members: Vec<Result<Member, MemberError>>,
    nodes: Vec<usize>,
    threads: usize,
}

impl std::fmt::Debug for Population {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Population")
            .field("variables", &self.variables)
            .field("len", &self.members.len())
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

/// Parses and verifies one expression whose free names are `f64` columns.
fn parse(expr: &str) -> Result<Verified, MemberError> {
    let options = LoadOptions {
        py: PyOptions {
            default_shape: vec![Dim::Sym("n".to_string())],
            ..PyOptions::default()
        },
        ..LoadOptions::default()
    };
    let loaded = crate::load(expr, Format::Py, &options).map_err(MemberError::Parse)?;
    crate::verify(loaded.graph).map_err(|e| MemberError::Compile(e.to_string()))
}

/// [`parse`], with each input's position in `variables`.
fn load(expr: &str, variables: &[String]) -> Result<(Verified, Vec<usize>), MemberError> {
    let graph = parse(expr)?;
    let columns = graph
        .graph()
        .inputs()
        .iter()
        .map(|i| {
            variables
                .iter()
                .position(|v| *v == i.name)
                .ok_or_else(|| MemberError::UnknownVariable(i.name.clone()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    match graph
        .graph()
        .outputs()
        .first()
        .map(|o| graph.graph().ty(o.value))
    {
        Some(Type::Tensor(_)) => Ok((graph, columns)),
        _ => Err(MemberError::Compile(
            "the first output is not a column or a scalar".to_string(),
        )),
    }
}

/// Compiles `part` on `engine` as one batch; if the batch fails, each graph
/// alone, so the error lands on the expression that caused it.
fn compile_part(
    part: Vec<Result<(Verified, Vec<usize>), MemberError>>,
    engine: &dyn DynEngine,
    options: &CompileOptions,
) -> Vec<Result<Member, MemberError>> {
    let graphs: Vec<Verified> = part
        .iter()
        .filter_map(|m| m.as_ref().ok().map(|(g, _)| g.clone()))
        .collect();
    let mut programs = match engine.compile_batch_dyn(&graphs, options) {
        Ok(p) => p.into_iter().map(Ok).collect::<Vec<_>>(),
        Err(_) => graphs
            .iter()
            .map(|g| {
                engine
                    .compile_dyn(g, options)
                    .map_err(|e| MemberError::Compile(e.to_string()))
            })
            .collect(),
    }
    .into_iter();
    part.into_iter()
        .map(|m| {
            let (_, columns) = m?;
            let program = programs.next().expect("one program per graph")?;
            Ok(Member { columns, program })
        })
        .collect()
}

impl Population {
    /// Parses, verifies and compiles each expression (Python subset; its
    /// free names are `f64` columns named in `variables`) on `engine`, one
    /// batch per thread. Never fails as a whole: see [`Self::compile_errors`].
    pub fn compile<S: AsRef<str> + Sync>(
        exprs: &[S],
        variables: &[String],
        engine: &dyn DynEngine,
        options: &PopulationOptions,
    ) -> Population {
        let threads = options.threads();
        let chunk = exprs.len().div_ceil(threads).max(1);
        let compile = CompileOptions {
            vectorize: Some(options.compile.vectorize.unwrap_or(false)),
            ..options.compile.clone()
        };
        let compile = &compile;
        let members: Vec<Result<Member, MemberError>> = std::thread::scope(|s| {
            let handles: Vec<_> = exprs
                .chunks(chunk)
                .map(|part| {
                    s.spawn(move || {
                        let loaded = part.iter().map(|e| load(e.as_ref(), variables)).collect();
                        compile_part(loaded, engine, compile)
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().expect("compile threads do not panic"))
                .collect()
        });
        let nodes = exprs
            .iter()
            .map(|e| kiln_frontend::py::count_nodes(e.as_ref()).unwrap_or(0))
            .collect();
        Population {
            variables: variables.to_vec(),
            members,
            nodes,
            threads,
        }
    }

    /// How many expressions.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The variables, in the order [`Self::evaluate`] takes their columns.
    pub fn variables(&self) -> &[String] {
        &self.variables
    }

    /// Each expression's node count as written (names, literals, calls and
    /// operators), for node-evaluations per second.
    pub fn nodes(&self) -> &[usize] {
        &self.nodes
    }

    /// The expressions that did not compile, by index.
    pub fn compile_errors(&self) -> Vec<(usize, &MemberError)> {
        self.members
            .iter()
            .enumerate()
            .filter_map(|(i, m)| m.as_ref().err().map(|e| (i, e)))
            .collect()
    }

    /// Evaluates every expression over `columns` (one per variable, each
    /// `n_rows` long) into `out`, row `i` (`n_rows` values) for expression
    /// `i`, on the population's threads. A failed expression's row is NaN
    /// and its error is returned at its index.
    ///
    /// # Panics
    /// If `columns` does not have one slice of `n_rows` per variable, or
    /// `out` is not `len() * n_rows` long.
    pub fn evaluate(
        &self,
        columns: &[&[f64]],
        n_rows: usize,
        out: &mut [f64],
    ) -> Vec<Option<MemberError>> {
        assert_eq!(
            columns.len(),
            self.variables.len(),
            "one column per variable"
        );
        assert!(
            columns.iter().all(|c| c.len() == n_rows),
            "columns of n_rows"
        );
        assert_eq!(
            out.len(),
            self.members.len() * n_rows,
            "a row per expression"
        );
        if self.members.is_empty() {
            return Vec::new();
        }
        let per_thread = self.members.len().div_ceil(self.threads).max(1);
        std::thread::scope(|s| {
            let handles: Vec<_> = self
                .members
                .chunks(per_thread)
                .zip(out.chunks_mut((per_thread * n_rows).max(1)))
                .map(|(members, rows)| {
                    s.spawn(move || {
                        let mut errors = Vec::with_capacity(members.len());
                        for (k, member) in members.iter().enumerate() {
                            let row = &mut rows[k * n_rows..(k + 1) * n_rows];
                            let result = match member {
                                Ok(m) => run(m, columns, row),
                                Err(e) => Err(e.clone()),
                            };
                            if result.is_err() {
                                row.fill(f64::NAN);
                            }
                            errors.push(result.err());
                        }
                        errors
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().expect("evaluation threads do not panic"))
                .collect()
        })
    }

    /// Each expression's mean squared error against `target` over `columns`
    /// (NaN for an expression that failed, whose error is returned at its
    /// index). Each thread evaluates into one row of scratch, so memory is
    /// O(threads × rows), not O(expressions × rows).
    ///
    /// # Panics
    /// As [`Self::evaluate`], and if `target` is not `n_rows` long.
    pub fn mse(&self, columns: &[&[f64]], target: &[f64]) -> (Vec<f64>, Vec<Option<MemberError>>) {
        let n_rows = target.len();
        let mut errors = Vec::with_capacity(self.members.len());
        let mut mse = Vec::with_capacity(self.members.len());
        // One expression at a time per thread, each a row of scratch.
        let per_thread = self.members.len().div_ceil(self.threads).max(1);
        let results: Vec<(f64, Option<MemberError>)> = std::thread::scope(|s| {
            let handles: Vec<_> = self
                .members
                .chunks(per_thread)
                .map(|members| {
                    s.spawn(move || {
                        let mut row = vec![0.0; n_rows];
                        members
                            .iter()
                            .map(|member| {
                                let result = match member {
                                    Ok(m) => run(m, columns, &mut row),
                                    Err(e) => Err(e.clone()),
                                };
                                match result {
                                    Ok(()) => (squared_error(&row, target), None),
                                    Err(e) => (f64::NAN, Some(e)),
                                }
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().expect("evaluation threads do not panic"))
                .collect()
        });
        for (m, e) in results {
            mse.push(m);
            errors.push(e);
        }
        (mse, errors)
    }
}

/// Mean squared error, summed in row order.
fn squared_error(values: &[f64], target: &[f64]) -> f64 {
    let sum: f64 = values
        .iter()
        .zip(target)
        .map(|(v, t)| (v - t) * (v - t))
        .sum();
    sum / values.len() as f64
}

/// Runs one expression into `row`: straight into it when its first (only)
/// output is an `f64` column, else through owned data, cast to `f64`.
fn run(member: &Member, columns: &[&[f64]], row: &mut [f64]) -> Result<(), MemberError> {
    let inputs: Vec<ArrayRef<'_>> = member
        .columns
        .iter()
        .map(|&c| ArrayRef::F64(columns[c]))
        .collect();
    let graph = member.program.verified().graph();
    let out = graph.ty(graph.outputs()[0].value);
    let direct = graph.outputs().len() == 1
        && matches!(out, Type::Tensor(t) if t.dtype == kiln_ir::DType::F64 && t.shape.len() == 1);
    if direct {
        member
            .program
            .run_arrays(&inputs, &mut [ArrayMut::F64(row)])?;
        return Ok(());
    }
    let data: Vec<Data> = inputs
        .iter()
        .map(|a| match a {
            ArrayRef::F64(v) => Data::Column(crate::Buffer::F64(v.to_vec())),
            _ => unreachable!("population inputs are f64 columns"),
        })
        .collect();
    let results = member.program.run(&data)?;
    let f64_of = |s: Scalar| match kiln_ir::semantics::cast(s, kiln_ir::DType::F64) {
        Scalar::F64(v) => v,
        _ => unreachable!("a cast to f64 gives f64"),
    };
    match &results[0] {
        Data::Scalar(s) => row.fill(f64_of(*s)),
        Data::Column(b) if b.len() == row.len() => {
            for (r, v) in row.iter_mut().zip(b.iter()) {
                *r = f64_of(v);
            }
        }
        Data::Column(b) => {
            return Err(MemberError::Compile(format!(
                "the first output has {} values, not one per row",
                b.len()
            )))
        }
        Data::Selection(_) => unreachable!("load refuses selection outputs"),
    }
    Ok(())
}

/// The variables expressions read, for callers that name columns by the
/// expressions: every free name, in order of first appearance across `exprs`
/// (expressions that do not parse contribute nothing).
pub fn variables_of<S: AsRef<str>>(exprs: &[S]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for graph in exprs.iter().filter_map(|e| parse(e.as_ref()).ok()) {
        for input in graph.graph().inputs() {
            if !names.contains(&input.name) {
                names.push(input.name.clone());
            }
        }
    }
    names
}
