//! GP populations: many Python-subset expressions over the same columns
//! (`f64`, or `f32` as Operon computes: [`Precision`]), compiled in batches
//! (one module per thread) and evaluated on every core, with one row of
//! results (or one mean squared error) per expression. An expression that
//! fails (to parse, to compile, or at run time, such as an integer division
//! by zero) has its error recorded and does not stop the others. The `kiln
//! eval --population` command and Python's
//! `kiln.Population` are thin layers over this.
//!
//! Elementwise expressions with one float column out (every GP expression)
//! are compiled in groups of up to [`group_size`]: one graph whose outputs are the
//! group's expressions, so one kernel makes one pass over the rows, loads
//! each column once and computes a subtree the expressions share once (the
//! optimizer's CSE). On the GP population that halves the compile time per
//! expression and cuts evaluation by a quarter to a third
//! (docs/performance.md). Expressions that
//! can fail at run time (integer division) compile alone, so a group holds
//! only operations that cannot fail; should one fail anyway (kiln's bug),
//! its error is every member's.

use crate::{
    ArrayMut, ArrayRef, CompileOptions, Data, DynEngine, ExecError, Program, PyOptions, Scalar,
    Type, Verified,
};
use kiln_ir::{DType, Dim, EntityRef, Graph, ParseError};
use std::mem::MaybeUninit;
use std::sync::Mutex;

/// The element type of a population's columns and values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Precision {
    /// `f64`, the default.
    #[default]
    F64,
    /// `f32`, Operon's precision: half the bytes per column and shorter
    /// math routines, which run in 32-bit lanes (the VM's other
    /// instructions still hold an `f32` in an 8-byte lane).
    /// Constant subexpressions are still computed in `f64` and rounded once
    /// where they meet a column (literals are weak, docs/frontends.md), and
    /// a constant expression's value is its `f64` value rounded to `f32`.
    F32,
}

impl Precision {
    /// Its dtype.
    pub fn dtype(self) -> DType {
        match self {
            Precision::F64 => DType::F64,
            Precision::F32 => DType::F32,
        }
    }

    /// Its name as kiln writes dtypes: `f64` or `f32`.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F64 => "f64",
            Precision::F32 => "f32",
        }
    }
}

impl std::str::FromStr for Precision {
    type Err = String;

    /// `f64`/`float64` or `f32`/`float32`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "f64" | "float64" => Ok(Precision::F64),
            "f32" | "float32" => Ok(Precision::F32),
            _ => Err(format!(
                "a population's dtype is f64 (float64) or f32 (float32), not `{s}`"
            )),
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

/// An element of a population's columns and values: `f64` or `f32`.
pub trait Element: Copy + Send + Sync + std::fmt::Debug + sealed::Sealed + 'static {
    /// The precision of this element type.
    const PRECISION: Precision;
    /// Not a number, the value of a failed expression's rows.
    const NAN: Self;
    /// `values` as a kernel input.
    fn array(values: &[Self]) -> ArrayRef<'_>;
    /// `values` as a kernel output.
    fn array_mut(values: &mut [Self]) -> ArrayMut<'_>;
    /// Room not written yet as a kernel output.
    fn array_uninit(values: &mut [MaybeUninit<Self>]) -> ArrayMut<'_>;
    /// `values` as an owned column.
    fn buffer(values: &[Self]) -> crate::Buffer;
    /// `s` cast to this type (kiln's cast: round to nearest).
    fn of_scalar(s: Scalar) -> Self;
    /// Exactly as `f64`.
    fn to_f64(self) -> f64;
}

impl Element for f64 {
    const PRECISION: Precision = Precision::F64;
    const NAN: f64 = f64::NAN;
    fn array(values: &[f64]) -> ArrayRef<'_> {
        ArrayRef::F64(values)
    }
    fn array_mut(values: &mut [f64]) -> ArrayMut<'_> {
        ArrayMut::F64(values)
    }
    fn array_uninit(values: &mut [MaybeUninit<f64>]) -> ArrayMut<'_> {
        ArrayMut::F64Uninit(values)
    }
    fn buffer(values: &[f64]) -> crate::Buffer {
        crate::Buffer::F64(values.to_vec())
    }
    fn of_scalar(s: Scalar) -> f64 {
        match kiln_ir::semantics::cast(s, DType::F64) {
            Scalar::F64(v) => v,
            _ => unreachable!("a cast to f64 gives f64"),
        }
    }
    fn to_f64(self) -> f64 {
        self
    }
}

impl Element for f32 {
    const PRECISION: Precision = Precision::F32;
    const NAN: f32 = f32::NAN;
    fn array(values: &[f32]) -> ArrayRef<'_> {
        ArrayRef::F32(values)
    }
    fn array_mut(values: &mut [f32]) -> ArrayMut<'_> {
        ArrayMut::F32(values)
    }
    fn array_uninit(values: &mut [MaybeUninit<f32>]) -> ArrayMut<'_> {
        ArrayMut::F32Uninit(values)
    }
    fn buffer(values: &[f32]) -> crate::Buffer {
        crate::Buffer::F32(values.to_vec())
    }
    fn of_scalar(s: Scalar) -> f32 {
        match kiln_ir::semantics::cast(s, DType::F32) {
            Scalar::F32(v) => v,
            _ => unreachable!("a cast to f32 gives f32"),
        }
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
}

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
    /// The columns' and values' element type.
    pub precision: Precision,
}

impl PopulationOptions {
    fn threads(&self) -> usize {
        threads_or_cores(self.threads)
    }
}

/// `threads`, or every core for 0.
pub(crate) fn threads_or_cores(threads: usize) -> usize {
    match threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
}

/// How a member (an expression, a group, a fitted model) compiles:
/// `options` with vector loops off unless asked for (many small kernels),
/// and no stages, since members run side by side, each on one thread.
pub(crate) fn member_options(options: &CompileOptions) -> CompileOptions {
    CompileOptions {
        vectorize: Some(options.vectorize.unwrap_or(false)),
        parallel: Some(false),
        ..options.clone()
    }
}

/// The most expressions compiled as one graph (one kernel) on `tier`. On
/// the GP population (`cargo bench -p kiln --bench compile`), groups of 16,
/// 64 and 250 compile in 0.36, 0.30 and 0.28 of the time per expression of
/// one kernel each, and evaluate in 0.87, 0.78 and 0.67 of its time; groups
/// of 1,024 against 256 (`gp_timing`, its 1,000 expressions, one thread):
/// the VM evaluates in 35.0 ms against 38.4 (19.2 against 20.2 on two
/// threads) and Cranelift in 151 against 171, each compiling in the same
/// time, but LLVM compiles in 61 s against 30 and evaluates in 277 ms
/// against 49. So 1,024, and 256 on LLVM (and on an engine of no tier). A
/// compile thread's share of the expressions bounds a group too, so every
/// thread still gets groups.
pub fn group_size(tier: Option<crate::Tier>) -> usize {
    match tier {
        Some(crate::Tier::Llvm) | None => 256,
        Some(_) => 1024,
    }
}

/// The bytes of scratch `mse` evaluates a group's block of rows into, per
/// thread, at most (and a block is at least 256 rows).
const MSE_SCRATCH: usize = 8 << 20;

/// The tier a population compiles on when its caller names none (`kiln
/// eval --population` without `--tier`, Python's `kiln.Population` without
/// `tier=`): the vector VM, by measurement on the GP population (1,000
/// expressions at 10,000 and 40,000 rows; docs/performance.md, "Compile
/// latency, second step: the vector VM"): it compiles several times faster
/// than Cranelift and evaluates as fast or faster. LLVM evaluates about as
/// fast but compiles far slower, which pays only when the same population
/// runs over millions of rows; the rule does not guess that. Naming a tier
/// overrides it.
pub const DEFAULT_TIER: crate::Tier = crate::Tier::Vm;

/// The tier a population runs on when its caller names `tier`: `auto`
/// (kiln decides) is [`DEFAULT_TIER`], the measured choice; a population's
/// members are compiled in batches, one module per thread, which a
/// program-by-program tier-up would break up.
pub fn tier_for(tier: crate::Tier) -> crate::Tier {
    match tier {
        crate::Tier::Auto => DEFAULT_TIER,
        t => t,
    }
}

/// Rows per block when [`Population::mse`] runs a group into scratch, and
/// when [`Population::evaluate`] hands a group's rows to its threads.
const BLOCK: usize = 4096;

struct Member {
    /// Each input's position in the population's variables.
    columns: Vec<usize>,
    program: Box<dyn Program>,
}

/// How an expression runs.
enum Slot {
    /// Its own program.
    Alone(Member),
    /// Output `output` of group `group`.
    Grouped { group: usize, output: usize },
}

/// Expressions compiled as the outputs of one graph, whose inputs are every
/// variable in order.
struct Group {
    program: Box<dyn Program>,
    /// The expressions, in output order.
    members: Vec<usize>,
    /// Whether each output is a scalar (a constant expression: one value
    /// for every row).
    scalar: Vec<bool>,
}

/// A compiled population ([`Population::compile`]).
pub struct Population {
    variables: Vec<String>,
    members: Vec<Result<Slot, MemberError>>,
    groups: Vec<Group>,
    nodes: Vec<usize>,
    threads: usize,
    precision: Precision,
}

impl std::fmt::Debug for Population {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Population")
            .field("variables", &self.variables)
            .field("len", &self.members.len())
            .field("threads", &self.threads)
            .field("precision", &self.precision)
            .finish_non_exhaustive()
    }
}

/// `f` of each item, in order, on up to `threads` threads: the calling
/// thread and workers of kiln's pool ([`crate::threads::for_each_part`]),
/// which live across calls (a thread made per call took fresh pages for its
/// allocations, whose first touch was a tenth of a population's compile),
/// each taking the next item as it finishes one. A panic in one is raised
/// again here.
pub(crate) fn on_threads<T: Send, R: Send>(
    items: Vec<T>,
    threads: usize,
    f: impl Fn(T) -> R + Sync,
) -> Vec<R> {
    let n = items.len();
    let items: Vec<Mutex<Option<T>>> = items.into_iter().map(|i| Mutex::new(Some(i))).collect();
    let results: Vec<Mutex<Option<R>>> = (0..n).map(|_| Mutex::new(None)).collect();
    crate::threads::for_each_part(n, threads, &|j| {
        let item = lock(&items[j]).take().expect("each item is taken once");
        let result = f(item);
        *lock(&results[j]) = Some(result);
    });
    results
        .into_iter()
        .map(|r| {
            r.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .expect("every item ran")
        })
        .collect()
}

/// A slot's lock (a panic elsewhere does not poison the data: each slot is
/// written once).
fn lock<T>(slot: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    slot.lock().unwrap_or_else(|e| e.into_inner())
}

/// How a member expression is read: its free names are columns `[n]` of
/// `precision`.
pub(crate) fn column_options(precision: Precision) -> PyOptions {
    PyOptions {
        default_shape: vec![Dim::Sym("n".into())],
        default_dtype: Some(precision.dtype()),
        ..PyOptions::default()
    }
}

/// Parses one expression whose free names are columns of `precision`;
/// also its node count as written ([`kiln_frontend::py::count_nodes`]; 0 if
/// it does not parse). The graph is not verified yet: a group's merged graph
/// is verified whole ([`merge`]), an expression alone on its own
/// ([`compile_part`]).
fn parse(expr: &str, precision: Precision) -> (Result<Graph, MemberError>, usize) {
    match kiln_frontend::py::parse_counted(expr, &column_options(precision)) {
        Ok((graph, _, nodes)) => (Ok(graph), nodes),
        Err(e) => (Err(MemberError::Parse(e)), 0),
    }
}

/// [`crate::verify`], with its error as a member's.
fn verify_member(graph: Graph) -> Result<Verified, MemberError> {
    crate::verify(graph).map_err(|e| MemberError::Compile(e.to_string()))
}

/// An expression with each input's position in `variables`.
fn positions(graph: Graph, variables: &[String]) -> Result<(Graph, Vec<usize>), MemberError> {
    let columns = graph
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
        .outputs()
        .first()
        .and_then(|o| graph.get(o.value))
        .map(|n| &n.ty)
    {
        Some(Type::Tensor(_)) => Ok((graph, columns)),
        _ => Err(MemberError::Compile(
            "the first output is not a column or a scalar".to_string(),
        )),
    }
}

/// Whether `graph` can join a group: one float column or scalar out (a
/// constant expression: `f64` in an `f32` population too, cast by
/// [`merge`]), every node elementwise (so a group may also run over a block
/// of the rows), and no integer division, the one thing that fails at run
/// time (an expression that can fail runs alone, so its failure costs no
/// other expression its compiled kernel).
fn groupable(g: &Graph) -> bool {
    use kiln_ir::op::Op;
    let float_out = g.outputs().len() == 1
        && matches!(g.get(g.outputs()[0].value).map(|n| &n.ty),
            Some(Type::Tensor(t)) if t.dtype.is_float() && t.shape.len() <= 1);
    float_out
        && g.nodes().all(|(_, n)| match n.op {
            Op::Binary(op) => {
                !(op.divides() && matches!(&n.ty, Type::Tensor(t) if t.dtype.is_int()))
            }
            Op::Input { .. }
            | Op::Const(_)
            | Op::Unary(_)
            | Op::Compare(_)
            | Op::Select
            | Op::Cast(_) => true,
            _ => false,
        })
}

/// One graph computing `members` (each a graph and its inputs' positions in
/// `variables`) as its outputs, in order, over every variable (a column of
/// `precision`); an output of another float type is cast to `precision`.
/// Verified here, whole: an error in a member fails the group, and
/// [`compile_part`] then verifies each member alone.
fn merge(
    members: &[&(Graph, Vec<usize>)],
    variables: &[String],
    precision: Precision,
) -> Result<Verified, MemberError> {
    use kiln_ir::graph::NodeData;
    use kiln_ir::op::Op;
    let nodes: usize = members.iter().map(|(g, _)| g.len() + 1).sum();
    let mut merged = Graph::with_capacity("population", variables.len() + nodes);
    // Every variable is a column like the members' inputs.
    let column = members
        .iter()
        .find_map(|(g, _)| {
            g.inputs()
                .first()
                .and_then(|i| g.get(i.value))
                .map(|n| n.ty.clone())
        })
        .unwrap_or_else(|| {
            Type::Tensor(kiln_ir::TensorType {
                dtype: precision.dtype(),
                shape: vec![Dim::Sym("n".into())],
            })
        });
    let inputs: Vec<kiln_ir::Value> = variables
        .iter()
        .map(|v| merged.push_input(v, column.clone()))
        .collect();
    for (k, (g, columns)) in members.iter().enumerate() {
        // The merged value of each of the member's values, by index (nodes
        // come in order, arguments first).
        let mut map: Vec<kiln_ir::Value> = Vec::with_capacity(g.len());
        for (value, node) in g.nodes() {
            debug_assert_eq!(value.index(), map.len());
            let mapped = match node.op {
                Op::Input { index } => match columns.get(index as usize) {
                    Some(&column) => inputs[column],
                    None => return Err(MemberError::Compile(format!("{value}: no such input"))),
                },
                _ => {
                    let args = node
                        .args
                        .iter()
                        .map(|a| map.get(a.index()).copied())
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| {
                            MemberError::Compile(format!("{value}: uses a later value"))
                        })?;
                    merged.push_node(NodeData {
                        op: node.op.clone(),
                        args,
                        ty: node.ty.clone(),
                    })
                }
            };
            map.push(mapped);
        }
        let Some(mut out) = g
            .outputs()
            .first()
            .and_then(|o| map.get(o.value.index()).copied())
        else {
            return Err(MemberError::Compile("no output".to_string()));
        };
        if let Type::Tensor(t) = merged.ty(out) {
            if t.dtype != precision.dtype() {
                let ty = Type::Tensor(kiln_ir::TensorType {
                    dtype: precision.dtype(),
                    shape: t.shape.clone(),
                });
                out = merged.push_node(NodeData {
                    op: Op::Cast(precision.dtype()),
                    args: vec![out],
                    ty,
                });
            }
        }
        merged.push_output(&format!("e{k}"), out);
    }
    verify_member(merged)
}

/// A compile thread's expressions (as slots) and groups.
type Part = (Vec<Result<Slot, MemberError>>, Vec<Group>);

/// Compiles `part` (expressions with their first indices at `first`) on
/// `engine` as one batch: the groupable ones in groups of up to
/// [`group_size`],
/// the rest alone. If the batch fails, each expression alone, so the error
/// lands on the one that caused it. Group numbers are local to the part.
fn compile_part(
    mut part: Vec<Result<(Graph, Vec<usize>), MemberError>>,
    first: usize,
    variables: &[String],
    engine: &dyn DynEngine,
    options: &CompileOptions,
    precision: Precision,
) -> Part {
    // Which expressions go in groups, and the groups' graphs.
    let group = group_size(engine.name().parse().ok());
    let grouped: Vec<usize> = part
        .iter()
        .enumerate()
        .filter(|(_, m)| m.as_ref().is_ok_and(|(g, _)| groupable(g)))
        .map(|(i, _)| i)
        .collect();
    let merged: Result<Vec<Verified>, MemberError> = grouped
        .chunks(group)
        .map(|chunk| {
            let members: Vec<&(Graph, Vec<usize>)> = chunk
                .iter()
                .map(|&i| part[i].as_ref().expect("grouped members loaded"))
                .collect();
            merge(&members, variables, precision)
        })
        .collect();
    // Each grouped expression's group and output.
    let mut slot_of: Vec<Option<(usize, usize)>> = vec![None; part.len()];
    for (k, &i) in grouped.iter().enumerate() {
        slot_of[i] = Some((k / group, k % group));
    }
    // The expressions alone, verified each (one that fails has its error).
    let mut verified: Vec<Option<Verified>> = vec![None; part.len()];
    for (i, member) in part.iter_mut().enumerate() {
        if slot_of[i].is_none() {
            if let Ok((graph, _)) = member {
                match verify_member(std::mem::take(graph)) {
                    Ok(v) => verified[i] = Some(v),
                    Err(e) => *member = Err(e),
                }
            }
        }
    }
    let alone: Vec<usize> = (0..part.len()).filter(|&i| verified[i].is_some()).collect();
    if let Ok(merged) = merged {
        let mut graphs: Vec<Verified> = merged;
        let n_groups = graphs.len();
        graphs.extend(
            alone
                .iter()
                .map(|&i| verified[i].clone().expect("verified alone")),
        );
        if let Ok(programs) = engine.compile_batch_dyn(&graphs, options) {
            let mut programs = programs.into_iter();
            let groups: Vec<Group> = grouped
                .chunks(group)
                .map(|chunk| {
                    let program = programs.next().expect("one program per group");
                    let g = program.verified().graph();
                    let scalar = g
                        .outputs()
                        .iter()
                        .map(|o| matches!(g.ty(o.value), Type::Tensor(t) if t.shape.is_empty()))
                        .collect();
                    Group {
                        program,
                        members: chunk.iter().map(|&i| first + i).collect(),
                        scalar,
                    }
                })
                .collect();
            debug_assert_eq!(groups.len(), n_groups);
            let mut alone_programs = programs;
            let slots = part
                .into_iter()
                .enumerate()
                .map(|(i, m)| {
                    let (_, columns) = m?;
                    Ok(match slot_of[i] {
                        Some((group, output)) => Slot::Grouped { group, output },
                        None => Slot::Alone(Member {
                            columns,
                            program: alone_programs.next().expect("one program per graph"),
                        }),
                    })
                })
                .collect();
            return (slots, groups);
        }
    }
    // Each alone, so a failure lands on its expression.
    let slots = part
        .into_iter()
        .zip(verified)
        .map(|(m, verified)| {
            let (graph, columns) = m?;
            let graph = match verified {
                Some(v) => v,
                None => verify_member(graph)?,
            };
            let program = engine
                .compile_dyn(&graph, options)
                .map_err(|e| MemberError::Compile(e.to_string()))?;
            Ok(Slot::Alone(Member { columns, program }))
        })
        .collect();
    (slots, Vec::new())
}

impl Population {
    /// Parses, verifies and compiles each expression (Python subset; its
    /// free names are columns named in `variables`, of the options'
    /// [`Precision`]) on `engine`
    /// ([`DEFAULT_TIER`] unless the caller has a reason for another), one
    /// batch per thread. Never fails as a whole: see [`Self::compile_errors`].
    pub fn compile<S: AsRef<str> + Sync>(
        exprs: &[S],
        variables: &[String],
        engine: &dyn DynEngine,
        options: &PopulationOptions,
    ) -> Population {
        Self::compile_with(exprs, Some(variables), engine, options)
    }

    /// [`Self::compile`] over the variables the expressions read
    /// ([`variables_of`]'s: every free name, in order of first appearance;
    /// [`Self::variables`] gives them), parsing each expression once.
    pub fn compile_inferring<S: AsRef<str> + Sync>(
        exprs: &[S],
        engine: &dyn DynEngine,
        options: &PopulationOptions,
    ) -> Population {
        Self::compile_with(exprs, None, engine, options)
    }

    fn compile_with<S: AsRef<str> + Sync>(
        exprs: &[S],
        variables: Option<&[String]>,
        engine: &dyn DynEngine,
        options: &PopulationOptions,
    ) -> Population {
        let threads = options.threads();
        let precision = options.precision;
        let chunk = exprs.len().div_ceil(threads).max(1);
        let compile = &member_options(&options.compile);
        let compile_part_of =
            |k: usize, part: Vec<(Result<Graph, MemberError>, usize)>, variables| {
                let (loaded, nodes): (Vec<_>, Vec<usize>) = part
                    .into_iter()
                    .map(|(g, nodes)| (g.and_then(|g| positions(g, variables)), nodes))
                    .unzip();
                let part = compile_part(loaded, k * chunk, variables, engine, compile, precision);
                (part, nodes)
            };
        let parse_part =
            |part: &[S]| -> Vec<_> { part.iter().map(|e| parse(e.as_ref(), precision)).collect() };
        let parts: Vec<(Part, Vec<usize>)>;
        let variables = match variables {
            // Each thread parses its part and compiles it.
            Some(variables) => {
                parts = on_threads(
                    exprs.chunks(chunk).enumerate().collect(),
                    threads,
                    |(k, part)| compile_part_of(k, parse_part(part), variables),
                );
                variables.to_vec()
            }
            // Parse on every thread, then compile on every thread: the
            // variables come from all the expressions.
            None => {
                let parsed = on_threads(exprs.chunks(chunk).collect(), threads, parse_part);
                let variables =
                    names_of(parsed.iter().flatten().filter_map(|(g, _)| g.as_ref().ok()));
                parts = on_threads(
                    parsed.into_iter().enumerate().collect(),
                    threads,
                    |(k, part)| compile_part_of(k, part, &variables),
                );
                variables
            }
        };
        // Number the groups across parts.
        let mut members = Vec::with_capacity(exprs.len());
        let mut groups = Vec::new();
        let mut nodes = Vec::with_capacity(exprs.len());
        for ((slots, part_groups), part_nodes) in parts {
            nodes.extend(part_nodes);
            let offset = groups.len();
            members.extend(slots.into_iter().map(|slot| match slot {
                Ok(Slot::Grouped { group, output }) => Ok(Slot::Grouped {
                    group: group + offset,
                    output,
                }),
                other => other,
            }));
            groups.extend(part_groups);
        }
        Population {
            variables,
            members,
            groups,
            nodes,
            threads,
            precision,
        }
    }

    /// The element type of its columns and values.
    pub fn precision(&self) -> Precision {
        self.precision
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

    /// How many kernels evaluate the population: one per group, one per
    /// expression compiled alone.
    pub fn kernels(&self) -> usize {
        self.groups.len()
            + self
                .members
                .iter()
                .filter(|m| matches!(m, Ok(Slot::Alone(_))))
                .count()
    }

    /// The units of work, spread over the threads by expression count:
    /// groups, expressions alone, and expressions that did not compile.
    fn units(&self) -> Vec<Vec<Unit>> {
        let mut units: Vec<Unit> = (0..self.groups.len()).map(Unit::Group).collect();
        for (i, m) in self.members.iter().enumerate() {
            match m {
                Ok(Slot::Grouped { .. }) => {}
                _ => units.push(Unit::Expr(i)),
            }
        }
        let threads = self.threads.min(units.len()).max(1);
        let mut load = vec![0usize; threads];
        let mut per_thread: Vec<Vec<Unit>> = (0..threads).map(|_| Vec::new()).collect();
        for unit in units {
            let weight = match unit {
                Unit::Group(g) => self.groups[g].members.len(),
                Unit::Expr(_) => 1,
            };
            let t = (0..threads).min_by_key(|&t| load[t]).expect("a thread");
            load[t] += weight;
            per_thread[t].push(unit);
        }
        per_thread
    }

    /// Evaluates every expression over `columns` (one per variable, each
    /// `n_rows` long) into `out`, row `i` (`n_rows` values) for expression
    /// `i`, on the population's threads. A failed expression's row is NaN
    /// and its error is returned at its index.
    ///
    /// # Panics
    /// If `T` is not the population's [`Precision`], `columns` does not have
    /// one slice of `n_rows` per variable, or `out` is not `len() * n_rows`
    /// long.
    pub fn evaluate<T: Element>(
        &self,
        columns: &[&[T]],
        n_rows: usize,
        out: &mut [T],
    ) -> Vec<Option<MemberError>> {
        self.evaluate_into(columns, n_rows, as_room(out))
    }

    /// [`Self::evaluate`] into room that may not be written yet: writes
    /// every element of `out` (each row its expression's values, or NaN
    /// where it failed) unless it panics.
    fn evaluate_into<T: Element>(
        &self,
        columns: &[&[T]],
        n_rows: usize,
        out: &mut [MaybeUninit<T>],
    ) -> Vec<Option<MemberError>> {
        self.check_columns(columns, n_rows);
        assert_eq!(
            out.len(),
            self.members.len() * n_rows,
            "a row per expression"
        );
        if self.members.is_empty() {
            return Vec::new();
        }
        // Each expression's row, handed to the item that writes it: a
        // group's rows in blocks of `BLOCK`, so that the threads share the
        // work evenly by taking the next block as they finish one.
        let mut rows: Vec<Option<&mut [MaybeUninit<T>]>> = if n_rows == 0 {
            (0..self.members.len()).map(|_| Some(&mut [][..])).collect()
        } else {
            out.chunks_mut(n_rows).map(Some).collect()
        };
        let mut items: Vec<Item<'_, T>> = Vec::new();
        if n_rows > 0 {
            for (g, group) in self.groups.iter().enumerate() {
                let mut blocks: Vec<std::slice::ChunksMut<'_, MaybeUninit<T>>> = group
                    .members
                    .iter()
                    .map(|&i| {
                        rows[i]
                            .take()
                            .expect("one writer per row")
                            .chunks_mut(BLOCK)
                    })
                    .collect();
                for start in (0..n_rows).step_by(BLOCK) {
                    let block = blocks
                        .iter_mut()
                        .map(|b| b.next().expect("a block per member"))
                        .collect();
                    items.push(Item::Block {
                        group: g,
                        start,
                        rows: block,
                    });
                }
            }
        }
        for (i, row) in rows.iter_mut().enumerate() {
            if let (Some(row), Err(_) | Ok(Slot::Alone(_))) = (row.take(), &self.members[i]) {
                items.push(Item::Expr { expr: i, row });
            }
        }
        let outcomes = on_threads(items, self.threads, |item| {
            self.evaluate_item(item, columns)
        });
        // A group that failed in one block fails every member: its rows are
        // NaN throughout.
        let mut errors: Vec<Option<MemberError>> = vec![None; self.members.len()];
        for outcome in outcomes {
            match outcome {
                Outcome::Group(_, None) => {}
                Outcome::Group(g, Some(e)) => {
                    for &i in &self.groups[g].members {
                        out[i * n_rows..(i + 1) * n_rows].fill(MaybeUninit::new(T::NAN));
                        errors[i] = Some(MemberError::Exec(e.clone()));
                    }
                }
                Outcome::Expr(i, e) => errors[i] = e,
            }
        }
        errors
    }

    /// [`Self::evaluate`] into a new vector of `len() * n_rows` values,
    /// written once: the evaluation writes into the vector's memory
    /// before anything else does, each part on the thread that computes it
    /// (its pages first touched there too). Writing it first (NaN, on the
    /// population's threads) cost an extra pass over all of it: 80 MB for
    /// 1,000 expressions over 10,000 rows in `f64`, 10 ms on one Intel
    /// core, an eighth of the evaluation.
    ///
    /// # Panics
    /// As [`Self::evaluate`], and if the output's length overflows `usize`.
    pub fn evaluate_to_vec<T: Element>(
        &self,
        columns: &[&[T]],
        n_rows: usize,
    ) -> (Vec<T>, Vec<Option<MemberError>>) {
        let len = self
            .members
            .len()
            .checked_mul(n_rows)
            .expect("the output's length fits in memory");
        let mut out: Vec<T> = Vec::with_capacity(len);
        let errors = self.evaluate_into(columns, n_rows, &mut out.spare_capacity_mut()[..len]);
        // SAFETY: the capacity is `len`, and `evaluate_into` returned, so it
        // wrote each of the first `len` elements.
        unsafe { out.set_len(len) };
        (out, errors)
    }

    /// Runs one item of [`Self::evaluate`] into its rows (an expression that
    /// fails has its row NaN).
    fn evaluate_item<T: Element>(&self, item: Item<'_, T>, columns: &[&[T]]) -> Outcome {
        match item {
            Item::Block {
                group: g,
                start,
                rows: mut block,
            } => {
                let group = &self.groups[g];
                let len = block.first().map_or(0, |r| r.len());
                let inputs: Vec<ArrayRef<'_>> = columns
                    .iter()
                    .map(|c| T::array(&c[start..start + len]))
                    .collect();
                // A constant's one value goes to the block's first element.
                let mut outs: Vec<ArrayMut<'_>> = block
                    .iter_mut()
                    .zip(&group.scalar)
                    .map(|(r, &scalar)| {
                        T::array_uninit(if scalar { &mut r[..1] } else { &mut r[..] })
                    })
                    .collect();
                let error = group.program.run_arrays(&inputs, &mut outs).err();
                drop(outs);
                // On an error the caller writes every member's row (NaN).
                if error.is_none() {
                    for (r, &scalar) in block.iter_mut().zip(&group.scalar) {
                        if scalar {
                            // SAFETY: the call returned `Ok`, so it wrote
                            // its output, this first element.
                            let v = unsafe { r[0].assume_init() };
                            r.fill(MaybeUninit::new(v));
                        }
                    }
                }
                Outcome::Group(g, error)
            }
            Item::Expr { expr: i, row } => {
                let result = match &self.members[i] {
                    Ok(Slot::Alone(m)) => run(m, columns, row),
                    // A group's member over no rows: nothing to compute.
                    Ok(Slot::Grouped { .. }) => Ok(()),
                    Err(e) => Err(e.clone()),
                };
                if result.is_err() {
                    row.fill(MaybeUninit::new(T::NAN));
                }
                Outcome::Expr(i, result.err())
            }
        }
    }

    /// Panics unless `columns` are one slice of `n_rows` per variable, of
    /// the population's precision.
    fn check_columns<T: Element>(&self, columns: &[&[T]], n_rows: usize) {
        assert_eq!(
            T::PRECISION,
            self.precision,
            "columns of the population's precision"
        );
        assert_eq!(
            columns.len(),
            self.variables.len(),
            "one column per variable"
        );
        assert!(
            columns.iter().all(|c| c.len() == n_rows),
            "columns of n_rows"
        );
    }

    /// The expressions a unit computes, in its output order.
    fn unit_members(&self, unit: Unit) -> Vec<usize> {
        match unit {
            Unit::Group(g) => self.groups[g].members.clone(),
            Unit::Expr(i) => vec![i],
        }
    }

    /// Each expression's mean squared error against `target` over `columns`
    /// (NaN for an expression that failed, whose error is returned at its
    /// index). The squares are summed in `f64` in row order, whatever the
    /// precision (each difference taken in `f64` of the values as
    /// computed). Each thread evaluates into a block of scratch, so memory
    /// is O(threads × group × block), not O(expressions × rows).
    ///
    /// # Panics
    /// As [`Self::evaluate`], and if `target` is not `n_rows` long.
    pub fn mse<T: Element>(
        &self,
        columns: &[&[T]],
        target: &[T],
    ) -> (Vec<f64>, Vec<Option<MemberError>>) {
        let n_rows = target.len();
        self.check_columns(columns, n_rows);
        let mut mse = vec![f64::NAN; self.members.len()];
        let mut errors: Vec<Option<MemberError>> = vec![None; self.members.len()];
        if self.members.is_empty() {
            return (mse, errors);
        }
        let results: Vec<Vec<(usize, f64, Option<MemberError>)>> =
            on_threads(self.units(), self.threads, |units| {
                let mut results = Vec::new();
                for unit in units {
                    self.mse_unit(unit, columns, target, &mut results);
                }
                results
            });
        for (i, m, e) in results.into_iter().flatten() {
            mse[i] = m;
            errors[i] = e;
        }
        (mse, errors)
    }

    /// [`Self::mse`] of one unit: a group block by block into scratch, its
    /// squares summed in row order; an expression (or a failed group's, one
    /// by one) into a row of scratch.
    fn mse_unit<T: Element>(
        &self,
        unit: Unit,
        columns: &[&[T]],
        target: &[T],
        results: &mut Vec<(usize, f64, Option<MemberError>)>,
    ) {
        let n_rows = target.len();
        if let (Unit::Group(g), true) = (unit, n_rows > 0) {
            let group = &self.groups[g];
            let k = group.members.len();
            let block = (MSE_SCRATCH / (k * size_of::<T>()))
                .clamp(256, BLOCK)
                .min(n_rows.max(1));
            let mut scratch = vec![T::NAN; k * block];
            let mut sums = vec![0.0f64; k];
            let mut error = None;
            let mut start = 0;
            while start < n_rows {
                let len = block.min(n_rows - start);
                let inputs: Vec<ArrayRef<'_>> = columns
                    .iter()
                    .map(|c| T::array(&c[start..start + len]))
                    .collect();
                let mut outs: Vec<ArrayMut<'_>> = scratch
                    .chunks_mut(block)
                    .zip(&group.scalar)
                    .map(|(r, &scalar)| T::array_mut(&mut r[..if scalar { 1 } else { len }]))
                    .collect();
                if let Err(e) = group.program.run_arrays(&inputs, &mut outs) {
                    error = Some(MemberError::Exec(e));
                    break;
                }
                let t = &target[start..start + len];
                for ((sum, row), &scalar) in sums
                    .iter_mut()
                    .zip(scratch.chunks(block))
                    .zip(&group.scalar)
                {
                    if scalar {
                        let v = row[0].to_f64();
                        for t in t {
                            let d = v - t.to_f64();
                            *sum += d * d;
                        }
                    } else {
                        for (v, t) in row[..len].iter().zip(t) {
                            let d = v.to_f64() - t.to_f64();
                            *sum += d * d;
                        }
                    }
                }
                start += len;
            }
            for (&i, sum) in group.members.iter().zip(sums) {
                results.push(match &error {
                    None => (i, sum / n_rows as f64, None),
                    Some(e) => (i, f64::NAN, Some(e.clone())),
                });
            }
            return;
        }
        let mut row = vec![T::NAN; n_rows];
        for i in self.unit_members(unit) {
            let result = match &self.members[i] {
                Ok(Slot::Alone(m)) => run(m, columns, as_room(&mut row)),
                // A group over no rows.
                Ok(Slot::Grouped { .. }) => Ok(()),
                Err(e) => Err(e.clone()),
            };
            results.push(match result {
                Ok(()) => (i, squared_error(&row, target), None),
                Err(e) => (i, f64::NAN, Some(e)),
            });
        }
    }
}

/// A unit and its expressions' rows of the output.
/// An item of [`Population::evaluate`]'s work: a group over a block of rows
/// (each member's part of its row, from row `start`), or an expression
/// alone (its whole row).
enum Item<'a, T> {
    Block {
        group: usize,
        start: usize,
        rows: Vec<&'a mut [MaybeUninit<T>]>,
    },
    Expr {
        expr: usize,
        row: &'a mut [MaybeUninit<T>],
    },
}

/// How an [`Item`] went: a group's error (in any block), an expression's.
enum Outcome {
    Group(usize, Option<ExecError>),
    Expr(usize, Option<MemberError>),
}

/// A unit of evaluation work: a group, or one expression (compiled alone or
/// not at all).
#[derive(Clone, Copy)]
enum Unit {
    Group(usize),
    Expr(usize),
}

/// Mean squared error, the squares summed in `f64` in row order.
fn squared_error<T: Element>(values: &[T], target: &[T]) -> f64 {
    let sum: f64 = values
        .iter()
        .zip(target)
        .map(|(v, t)| {
            let d = v.to_f64() - t.to_f64();
            d * d
        })
        .sum();
    sum / values.len() as f64
}

/// Written values as room for new ones: [`Population::evaluate_into`] and
/// [`run`] write only values of `T` into it (never an uninitialized one),
/// so it stays initialized.
fn as_room<T: Element>(values: &mut [T]) -> &mut [MaybeUninit<T>] {
    // SAFETY: `MaybeUninit<T>` has `T`'s layout, and the callers above
    // write only initialized values through it.
    unsafe { &mut *(std::ptr::from_mut(values) as *mut [MaybeUninit<T>]) }
}

/// Runs one expression into `row`: straight into it when its first (only)
/// output is a column of `T`, else through owned data, cast to `T`.
fn run<T: Element>(
    member: &Member,
    columns: &[&[T]],
    row: &mut [MaybeUninit<T>],
) -> Result<(), MemberError> {
    let graph = member.program.verified().graph();
    let out = graph.ty(graph.outputs()[0].value);
    let direct = graph.outputs().len() == 1
        && matches!(out, Type::Tensor(t) if t.dtype == T::PRECISION.dtype() && t.shape.len() == 1);
    if direct {
        let inputs: Vec<ArrayRef<'_>> = member
            .columns
            .iter()
            .map(|&c| T::array(columns[c]))
            .collect();
        member
            .program
            .run_arrays(&inputs, &mut [T::array_uninit(row)])?;
        return Ok(());
    }
    let data: Vec<Data> = member
        .columns
        .iter()
        .map(|&c| Data::Column(T::buffer(columns[c])))
        .collect();
    let results = member.program.run(&data)?;
    match &results[0] {
        Data::Scalar(s) => row.fill(MaybeUninit::new(T::of_scalar(*s))),
        Data::Column(b) if b.len() == row.len() => {
            for (r, v) in row.iter_mut().zip(b.iter()) {
                r.write(T::of_scalar(v));
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
/// [`Population::compile_inferring`] finds them without a second parse.
pub fn variables_of<S: AsRef<str>>(exprs: &[S]) -> Vec<String> {
    let graphs: Vec<Graph> = exprs
        .iter()
        .filter_map(|e| parse(e.as_ref(), Precision::F64).0.ok())
        .collect();
    names_of(graphs.iter())
}

/// The inputs' names of `graphs`, each once, in order of first appearance.
fn names_of<'a>(graphs: impl Iterator<Item = &'a Graph>) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for graph in graphs {
        for input in graph.inputs() {
            if !names.contains(&input.name) {
                names.push(input.name.clone());
            }
        }
    }
    names
}
