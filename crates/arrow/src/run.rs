//! Compiled filters and projections, their per-null-pattern kernels, the
//! process-wide code cache, and the calls into the kernels.

use crate::expr::Expr;
use crate::lower::{self, Kind, Lowered, ProjectedOutput, Source};
use crate::{Error, Tier, DEFAULT_TIER};
use arrow_array::{
    Array, ArrayRef, BooleanArray, Decimal128Array, Float32Array, Float64Array, Int32Array,
    Int64Array, RecordBatch, UInt32Array,
};
use arrow_buffer::{BooleanBuffer, Buffer as ArrowBuffer, NullBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use kiln::kernel::abi::{self, Bind};
use kiln::{
    Buffer, CompileOptions, DType, Data, Engine, ExecError, JitProgram, Program, Scalar, Verified,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Machine code (or an interpreter program) for one graph.
enum Code {
    Interp(kiln::InterpProgram),
    Jit(JitProgram),
    /// The `auto` tier: Cranelift, then LLVM once the batches paid for it.
    Auto(kiln::TieredProgram),
}

/// One compiled variant: the kernel for one pattern of columns with nulls.
struct Variant {
    inputs: Vec<Source>,
    outputs: Vec<ProjectedOutput>,
    graph: Verified,
    code: Arc<Code>,
}

/// The kernels compiled in this process, by tier and graph text: a query
/// compiled again (by another `Filter::make`, on another schema with the same
/// column types) reuses the code.
type CodeCache = Mutex<HashMap<(Tier, String), Arc<Code>>>;

static CACHE: OnceLock<CodeCache> = OnceLock::new();
static COMPILATIONS: AtomicU64 = AtomicU64::new(0);

/// How many kernels this process has compiled (not found in the cache).
pub fn compilations() -> u64 {
    COMPILATIONS.load(Ordering::Relaxed)
}

/// The cache holds at most this many kernels; it starts over when full.
const CACHE_CAPACITY: usize = 4096;

fn compile(tier: Tier, graph: kiln::Graph) -> Result<(Verified, Arc<Code>), Error> {
    let graph = kiln::verify(graph).map_err(kiln::CompileError::from)?;
    let graph = kiln::optimize(&graph).map_err(kiln::CompileError::from)?;
    let key = (tier, kiln::ir::text::print(graph.graph()));
    let cache = CACHE.get_or_init(Default::default);
    if let Some(code) = cache.lock().expect("cache lock").get(&key) {
        return Ok((graph, code.clone()));
    }
    // Already optimized; Arrow's booleans and validity are bitmaps.
    let options = CompileOptions {
        optimize: false,
        packed_bools: true,
        ..CompileOptions::default()
    };
    let code = Arc::new(match tier {
        Tier::Interp => Code::Interp(kiln::Interpreter.compile(&graph, &options)?),
        Tier::Auto => Code::Auto(kiln::Auto.compile(&graph, &options)?),
        t => {
            let backend = t.backend().map_err(kiln::CompileError::from)?;
            Code::Jit(backend.compile(&graph, &options)?)
        }
    });
    COMPILATIONS.fetch_add(1, Ordering::Relaxed);
    let mut map = cache.lock().expect("cache lock");
    if map.len() >= CACHE_CAPACITY {
        map.clear();
    }
    map.insert(key, code.clone());
    Ok((graph, code))
}

/// What a filter and a projector share: the expressions, the schema, and a
/// variant per null pattern.
struct Compiled {
    schema: SchemaRef,
    exprs: Vec<Expr>,
    kind: Kind,
    tier: Tier,
    variants: Mutex<HashMap<Vec<bool>, Arc<Variant>>>,
}

impl Compiled {
    fn new(schema: SchemaRef, exprs: Vec<Expr>, kind: Kind, tier: Tier) -> Result<Self, Error> {
        let compiled = Compiled {
            schema,
            exprs,
            kind,
            tier,
            variants: Mutex::new(HashMap::new()),
        };
        // Compile the null-free kernel now: type errors surface here, and the
        // common case is ready.
        compiled.variant(vec![false; compiled.schema.fields().len()])?;
        Ok(compiled)
    }

    fn variant(&self, nulls: Vec<bool>) -> Result<Arc<Variant>, Error> {
        if let Some(v) = self.variants.lock().expect("variants lock").get(&nulls) {
            return Ok(v.clone());
        }
        let Lowered {
            graph,
            inputs,
            outputs,
        } = lower::lower(&self.schema, &self.exprs, &self.kind, &nulls)?;
        let (graph, code) = compile(self.tier, graph)?;
        let variant = Arc::new(Variant {
            inputs,
            outputs,
            graph,
            code,
        });
        self.variants
            .lock()
            .expect("variants lock")
            .insert(nulls, variant.clone());
        Ok(variant)
    }

    /// Checks the batch against the schema and picks the variant for the
    /// columns that have nulls in it.
    fn variant_for(&self, batch: &RecordBatch) -> Result<Arc<Variant>, Error> {
        let schema = batch.schema();
        if schema.fields().len() != self.schema.fields().len() {
            return Err(Error::SchemaMismatch(format!(
                "{} columns, compiled for {}",
                schema.fields().len(),
                self.schema.fields().len()
            )));
        }
        for (got, want) in schema.fields().iter().zip(self.schema.fields()) {
            if got.name() != want.name() || got.data_type() != want.data_type() {
                return Err(Error::SchemaMismatch(format!(
                    "column `{}: {}` where `{}: {}` was compiled for",
                    got.name(),
                    got.data_type(),
                    want.name(),
                    want.data_type()
                )));
            }
        }
        if u32::try_from(batch.num_rows()).is_err() {
            return Err(Error::SchemaMismatch(format!(
                "{} rows: selection vectors index at most 2^32 rows per batch",
                batch.num_rows()
            )));
        }
        let nulls = batch.columns().iter().map(|c| c.null_count() > 0).collect();
        self.variant(nulls)
    }

    /// Runs the kernel over `batch`: one `Data` per graph output. A filter's
    /// selection is written into `selection` (its allocation is reused).
    fn run(
        &self,
        batch: &RecordBatch,
        selection: Vec<u32>,
    ) -> Result<(Arc<Variant>, Vec<Data>), Error> {
        let variant = self.variant_for(batch)?;
        let outs = match &*variant.code {
            Code::Interp(program) => {
                let inputs = variant
                    .inputs
                    .iter()
                    .map(|s| interp_input(batch, *s))
                    .collect::<Result<Vec<Data>, _>>()?;
                program
                    .run(&inputs)
                    .map_err(|e| exec_error(variant.graph.graph(), e))?
            }
            Code::Jit(program) => run_jit(program, &variant, batch, selection)?,
            Code::Auto(program) => {
                program.with(|program| run_jit(program, &variant, batch, selection))?
            }
        };
        Ok((variant, outs))
    }
}

fn exec_error(graph: &kiln::Graph, e: ExecError) -> Error {
    match e {
        ExecError::DivisionByZero { node, .. } => Error::DivisionByZero {
            expr: graph.source_name(node).unwrap_or("?").to_string(),
        },
        e => Error::Exec(e.to_string()),
    }
}

/// The unscaled values of the `Decimal128` column `idx` as `i64`s (null
/// slots hold whatever fits), or an error if a valid one has more digits than
/// the column's precision (at most 18, so the rest fit an `i64`, and a sum or
/// a product lowering allows cannot overflow).
///
/// One pass that narrows and tests in word arithmetic (it vectorizes; i128
/// compares do not); only a batch with a value out of range looks at which
/// rows are valid (null slots may hold anything).
fn decimal_as_i64(batch: &RecordBatch, idx: usize) -> Result<Vec<i64>, Error> {
    let column = batch.column(idx);
    let decimals = column
        .as_any()
        .downcast_ref::<Decimal128Array>()
        .expect("lowering checked the type");
    debug_assert!(decimals.precision() <= lower::MAX_DECIMAL_DIGITS);
    // In range: -limit <= v <= limit, limit = 10^p - 1 (below 2^60).
    let limit = 10i64.pow(u32::from(decimals.precision())) - 1;
    // The values as (low, high) word pairs. ORs, no compares: `high + (low
    // >> 63)` is 0 where v fits an i64, and `(limit - n) | (n + limit)` is
    // negative where that i64 `n` is beyond ±limit (where either wraps, `n`
    // is beyond it too).
    let words: &[u64] = decimals.values().inner().typed_data();
    let mut out = vec![0i64; decimals.len()];
    let (mut not_i64, mut beyond) = (0u64, 0i64);
    for (n, pair) in out.iter_mut().zip(words.chunks_exact(2)) {
        let (low, high) = (pair[0], pair[1]);
        *n = low as i64;
        not_i64 |= high.wrapping_add(low >> 63);
        beyond |= limit.wrapping_sub(*n) | n.wrapping_add(limit);
    }
    if not_i64 != 0 || beyond < 0 {
        let fits = |v: i128| v.unsigned_abs() <= limit as u128;
        let values = decimals.values();
        if (0..values.len()).any(|row| !fits(values[row]) && decimals.is_valid(row)) {
            return Err(Error::DecimalRange {
                column: batch.schema().field(idx).name().clone(),
            });
        }
    }
    Ok(out)
}

/// A column as the interpreter takes it (copied).
fn interp_input(batch: &RecordBatch, source: Source) -> Result<Data, Error> {
    Ok(match source {
        Source::Validity(idx) => {
            let col = batch.column(idx);
            Data::Column(Buffer::Bool(
                (0..col.len()).map(|row| col.is_valid(row)).collect(),
            ))
        }
        Source::Values(idx) => {
            let data = batch.column(idx).to_data();
            let len = data.len();
            let dtype = lower::column_dtype(data.data_type()).expect("lowering checked the type");
            if dtype == DType::Bool {
                let bits = BooleanBuffer::new(data.buffers()[0].clone(), data.offset(), len);
                return Ok(Data::Column(Buffer::Bool(bits.iter().collect())));
            }
            if let DataType::Decimal128(..) = data.data_type() {
                return Ok(Data::Column(Buffer::I64(decimal_as_i64(batch, idx)?)));
            }
            let bytes = &data.buffers()[0].as_slice()[data.offset() * dtype.size_bytes()..];
            let mut buffer = Buffer::with_capacity(dtype, len);
            for chunk in bytes.chunks_exact(dtype.size_bytes()).take(len) {
                buffer.push(Scalar::from_le_bytes(dtype, chunk).expect("one element"));
            }
            Data::Column(buffer)
        }
    })
}

/// The address of bit 0 of `bits`, copying them to a byte boundary first if
/// they start inside a byte (a slice at an odd row).
fn bitmap_ptr(bits: &BooleanBuffer, keep: &mut Vec<ArrowBuffer>) -> u64 {
    if bits.offset().is_multiple_of(8) {
        bits.inner().as_slice()[bits.offset() / 8..].as_ptr() as u64
    } else {
        let aligned = bits.sliced();
        let ptr = aligned.as_ptr() as u64;
        keep.push(aligned);
        ptr
    }
}

/// Storage for one kernel output during the call.
enum Out {
    /// One element in the low bytes.
    Scalar(DType, u64),
    Column(Buffer),
    /// Rows are written into the spare capacity (room for every row), their
    /// count into the `i64`.
    Selection(Vec<u32>, i64),
}

/// A call's memory over a batch: the columns' own buffers (addresses taken
/// before the call), and room for each output allocated here.
struct ArrowBind<'a> {
    /// The program whose constant tables the kernel reads.
    program: &'a JitProgram,
    /// Each graph input's address: a column's values or a packed bitmap.
    inputs: &'a [u64],
    /// Which outputs are scalars.
    scalar: Vec<bool>,
    /// Each output's room, in place for the call (never moved: the Vec is
    /// made at its final length).
    outs: Vec<Option<Out>>,
    /// The caller's vector to reuse for a selection.
    selection: Vec<u32>,
}

impl Bind for ArrowBind<'_> {
    type Error = std::convert::Infallible;

    fn scalar(&mut self, input: usize) -> Result<u64, Self::Error> {
        unreachable!("input {input}: an Arrow graph's inputs are columns")
    }

    fn input(&mut self, input: usize) -> Result<u64, Self::Error> {
        Ok(self.inputs[input])
    }

    fn bitmap(&mut self, input: usize) -> Result<u64, Self::Error> {
        Ok(self.inputs[input])
    }

    fn constant(&mut self, param: usize) -> Result<u64, Self::Error> {
        // A constant table of the kernel's (an `isin` set).
        Ok(self
            .program
            .constant_address(param)
            .expect("a constant parameter has its elements"))
    }

    fn scratch(&mut self, _: usize, _: DType, _: usize) -> Result<u64, Self::Error> {
        unreachable!("an Arrow graph is columns in, columns or aggregates out")
    }

    fn output(&mut self, output: usize, dtype: DType, len: usize) -> Result<u64, Self::Error> {
        let out = if self.scalar[output] {
            Out::Scalar(dtype, 0)
        } else {
            Out::Column(Buffer::zeroed(dtype, len))
        };
        Ok(match self.outs[output].insert(out) {
            Out::Scalar(_, cell) => cell as *mut u64 as u64,
            Out::Column(b) => b.as_mut_ptr() as u64,
            Out::Selection(..) => unreachable!("just made"),
        })
    }

    fn selection(&mut self, output: usize, len: usize) -> Result<u64, Self::Error> {
        let mut rows = std::mem::take(&mut self.selection);
        rows.clear();
        rows.reserve(len);
        match self.outs[output].insert(Out::Selection(rows, 0)) {
            Out::Selection(rows, _) => Ok(rows.spare_capacity_mut().as_mut_ptr() as u64),
            _ => unreachable!("just made"),
        }
    }

    fn count(&mut self, output: usize) -> Result<u64, Self::Error> {
        match &mut self.outs[output] {
            Some(Out::Selection(_, count)) => Ok(count as *mut i64 as u64),
            _ => unreachable!("a count follows its selection"),
        }
    }
}

fn run_jit(
    program: &JitProgram,
    variant: &Variant,
    batch: &RecordBatch,
    selection: Vec<u32>,
) -> Result<Vec<Data>, Error> {
    let n = batch.num_rows();
    let kernel = program.kernel();
    let mut keep_data = Vec::with_capacity(variant.inputs.len());
    let mut keep_buffers = Vec::new();
    let mut input_ptrs = Vec::with_capacity(variant.inputs.len());
    for &source in &variant.inputs {
        let ptr = match source {
            Source::Validity(idx) => {
                let nulls = batch
                    .column(idx)
                    .nulls()
                    .expect("the variant was chosen for a column with nulls");
                bitmap_ptr(nulls.inner(), &mut keep_buffers)
            }
            Source::Values(idx)
                if matches!(batch.column(idx).data_type(), DataType::Decimal128(..)) =>
            {
                // Narrowed to the i64s lowering typed the column as.
                let narrow = ArrowBuffer::from_vec(decimal_as_i64(batch, idx)?);
                let ptr = narrow.as_ptr() as u64;
                keep_buffers.push(narrow);
                ptr
            }
            Source::Values(idx) => {
                let data = batch.column(idx).to_data();
                let ptr = if data.data_type() == &DataType::Boolean {
                    let bits = BooleanBuffer::new(data.buffers()[0].clone(), data.offset(), n);
                    bitmap_ptr(&bits, &mut keep_buffers)
                } else {
                    let width = data
                        .data_type()
                        .primitive_width()
                        .expect("a primitive column");
                    // Arrow keeps primitive buffers aligned to their width.
                    data.buffers()[0].as_slice()[data.offset() * width..].as_ptr() as u64
                };
                keep_data.push(data);
                ptr
            }
        };
        input_ptrs.push(ptr);
    }
    // Every symbolic dimension of an Arrow graph is the batch's row count.
    let extents = vec![n as u64; kernel.params.len()];
    let args = abi::args(kernel, &extents);
    let graph = variant.graph.graph();
    let mut bind = ArrowBind {
        program,
        inputs: &input_ptrs,
        // Scalar outputs are aggregates, or a query with no column in it
        // (`0`, `2 > 1`), which lowers to a direct kernel that returns its
        // one scalar: the uniform entry writes it where the slot points,
        // like any scalar output.
        scalar: graph
            .outputs()
            .iter()
            .map(|o| graph.ty(o.value).as_tensor().is_some_and(|t| t.is_scalar()))
            .collect(),
        outs: graph.outputs().iter().map(|_| None).collect(),
        selection,
    };
    let mut slots = vec![0u64; args.len()];
    let Ok(()) = abi::pack(&args, &mut bind, &mut slots);
    let outs = bind.outs;
    // SAFETY: one slot per kernel parameter, as `abi::args` describes it.
    // Input pointers address the batch's buffers (kept alive by `keep_data` /
    // `keep_buffers`), each with `n` elements (or `ceil(n / 8)` bitmap bytes)
    // of the dtype lowering chose from the schema, which `variant_for` checked
    // the batch against; output buffers were sized by `abi::args` for `n`
    // rows and are exclusively borrowed here.
    let status = unsafe { program.call_slots(&mut slots) };
    drop((keep_data, keep_buffers));
    if status != abi::STATUS_OK {
        return Err(exec_error(graph, kernel.status_error(graph, status)));
    }
    Ok(outs
        .into_iter()
        .map(|o| match o.expect("pack binds every output") {
            Out::Scalar(dtype, bits) => Data::Scalar(Scalar::from_bits(dtype, bits)),
            Out::Column(b) => Data::Column(b),
            Out::Selection(mut rows, count) => {
                let count = usize::try_from(count).expect("a count is not negative");
                assert!(
                    count <= n && n <= rows.capacity(),
                    "a kernel selects at most every row"
                );
                // SAFETY: the kernel wrote `count` indices to the first
                // `count` slots of the spare capacity (docs/abi.md), and
                // `count <= capacity`.
                unsafe { rows.set_len(count) };
                Data::Selection(rows)
            }
        })
        .collect())
}

/// A compiled filter: evaluates to the ascending indices of the rows where the
/// condition is true. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct Filter {
    inner: Arc<Compiled>,
    /// The same condition summed instead of selected, compiled on first
    /// [`Filter::count`].
    counter: Arc<OnceLock<Compiled>>,
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Filter({} on {})",
            self.inner.exprs[0],
            self.inner.tier.name()
        )
    }
}

impl Filter {
    /// Compiles `condition` (a `bool` expression) for batches of `schema`
    /// with the Cranelift tier.
    pub fn make(schema: SchemaRef, condition: &Expr) -> Result<Filter, Error> {
        Filter::make_with(schema, condition, DEFAULT_TIER)
    }

    /// Compiles `condition` for batches of `schema` with `tier`.
    pub fn make_with(schema: SchemaRef, condition: &Expr, tier: Tier) -> Result<Filter, Error> {
        Ok(Filter {
            inner: Arc::new(Compiled::new(
                schema,
                vec![condition.clone()],
                Kind::Filter,
                tier,
            )?),
            counter: Arc::new(OnceLock::new()),
        })
    }

    /// Parses a pandas-style query ([`crate::query`]) and compiles it with
    /// the Cranelift tier.
    pub fn query(schema: SchemaRef, query: &str) -> Result<Filter, Error> {
        Filter::make(schema, &crate::query::parse(query)?)
    }

    /// The rows of `batch` where the condition is true, ascending.
    pub fn evaluate(&self, batch: &RecordBatch) -> Result<UInt32Array, Error> {
        let rows = self.selection(batch, Vec::new())?;
        Ok(UInt32Array::new(ScalarBuffer::from(rows), None))
    }

    /// Writes the rows of `batch` where the condition is true into
    /// `selection` (replacing its contents) and returns how many there are.
    /// Reusing one buffer across batches, as Gandiva's `SelectionVector` is
    /// reused, saves allocating (and page-faulting) room for every row of every
    /// batch.
    pub fn evaluate_into(
        &self,
        batch: &RecordBatch,
        selection: &mut Vec<u32>,
    ) -> Result<usize, Error> {
        *selection = self.selection(batch, std::mem::take(selection))?;
        Ok(selection.len())
    }

    /// Evaluates the condition over `rows` of `batch` in slices of `chunk`
    /// rows (zero-copy `RecordBatch::slice`s) and hands each slice's
    /// selection, relative to the slice, to `f` with the slice's first row;
    /// returns how many rows were kept. A consumer that gathers the kept rows
    /// of other columns (a `take`) reads them while the slice is still in
    /// cache, and the selection buffer is reused, so it never page-faults.
    /// `rows` must lie within the batch; `chunk` is at least 1.
    pub fn evaluate_chunks(
        &self,
        batch: &RecordBatch,
        rows: std::ops::Range<usize>,
        chunk: usize,
        mut f: impl FnMut(usize, &[u32]),
    ) -> Result<usize, Error> {
        let end = rows.end.min(batch.num_rows());
        let chunk = chunk.max(1);
        let mut selection = Vec::new();
        let mut kept = 0;
        let mut start = rows.start;
        while start < end {
            let len = chunk.min(end - start);
            self.evaluate_into(&batch.slice(start, len), &mut selection)?;
            f(start, &selection);
            kept += selection.len();
            start += len;
        }
        Ok(kept)
    }

    /// How many rows of `batch` the condition keeps, without writing a
    /// selection (a kernel that sums the condition instead).
    pub fn count(&self, batch: &RecordBatch) -> Result<usize, Error> {
        let counter = match self.counter.get() {
            Some(c) => c,
            None => {
                let c = Compiled::new(
                    self.inner.schema.clone(),
                    self.inner.exprs.clone(),
                    Kind::Count,
                    self.inner.tier,
                )?;
                // Two threads may both compile it; the code cache makes the
                // loser cheap and either result is the same.
                let _ = self.counter.set(c);
                self.counter.get().expect("just set")
            }
        };
        let (_, outs) = counter.run(batch, Vec::new())?;
        match outs.as_slice() {
            [Data::Scalar(Scalar::I64(n))] => Ok(usize::try_from(*n).expect("a count")),
            other => Err(Error::Exec(format!("a count returned {other:?}"))),
        }
    }

    /// The rows of `batch` where the condition is true, as a new batch.
    pub fn apply(&self, batch: &RecordBatch) -> Result<RecordBatch, Error> {
        let indices = self.evaluate(batch)?;
        arrow_select::take::take_record_batch(batch, &indices)
            .map_err(|e| Error::Exec(e.to_string()))
    }

    fn selection(&self, batch: &RecordBatch, buffer: Vec<u32>) -> Result<Vec<u32>, Error> {
        let (_, mut outs) = self.inner.run(batch, buffer)?;
        match outs.pop() {
            Some(Data::Selection(rows)) => Ok(rows),
            other => Err(Error::Exec(format!("a filter returned {other:?}"))),
        }
    }
}

/// A compiled projection: evaluates named expressions to new columns.
/// Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct Projector {
    inner: Arc<Compiled>,
    schema: SchemaRef,
}

impl std::fmt::Debug for Projector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Projector({:?} on {})",
            self.schema,
            self.inner.tier.name()
        )
    }
}

fn arrow_type(dtype: DType) -> DataType {
    match dtype {
        DType::Bool => DataType::Boolean,
        DType::I32 => DataType::Int32,
        DType::I64 => DataType::Int64,
        DType::F32 => DataType::Float32,
        DType::F64 => DataType::Float64,
    }
}

impl Projector {
    /// Compiles `(name, expression)` pairs for batches of `schema` with `tier`.
    pub fn make_with(
        schema: SchemaRef,
        exprs: &[(&str, Expr)],
        tier: Tier,
    ) -> Result<Projector, Error> {
        let inner = Compiled::new(
            schema,
            exprs.iter().map(|(_, e)| e.clone()).collect(),
            Kind::Project,
            tier,
        )?;
        let variant = inner.variant(vec![false; inner.schema.fields().len()])?;
        let fields: Vec<Field> = exprs
            .iter()
            .zip(&variant.outputs)
            .map(|((name, _), o)| Field::new(*name, arrow_type(o.dtype), true))
            .collect();
        Ok(Projector {
            inner: Arc::new(inner),
            schema: Arc::new(Schema::new(fields)),
        })
    }

    /// Compiles with the Cranelift tier.
    pub fn make(schema: SchemaRef, exprs: &[(&str, Expr)]) -> Result<Projector, Error> {
        Projector::make_with(schema, exprs, DEFAULT_TIER)
    }

    /// The schema of the batches [`Self::evaluate`] returns.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// The projected columns of `batch`.
    pub fn evaluate(&self, batch: &RecordBatch) -> Result<RecordBatch, Error> {
        let n = batch.num_rows();
        let (variant, outs) = self.inner.run(batch, Vec::new())?;
        let mut outs = outs.into_iter();
        let mut columns = Vec::with_capacity(variant.outputs.len());
        for o in &variant.outputs {
            let values = outs.next().expect("a value output per expression");
            let valid = o.validity.map(|_| outs.next().expect("a validity output"));
            columns.push(array(o.dtype, values, valid, n));
        }
        RecordBatch::try_new(self.schema.clone(), columns).map_err(|e| Error::Exec(e.to_string()))
    }
}

/// The rows of `data` (a column, or a scalar repeated `n` times) as a buffer.
fn rows(data: Data, dtype: DType, n: usize) -> Buffer {
    match data {
        Data::Column(b) => b,
        Data::Scalar(s) => {
            let mut b = Buffer::with_capacity(dtype, n);
            for _ in 0..n {
                b.push(s);
            }
            b
        }
        Data::Selection(_) => unreachable!("projections output no selections"),
    }
}

/// Kernels write a byte per `bool`; Arrow keeps bits. Packed 64 at a time
/// without branches (arrow's `From<Vec<bool>>` sets one bit per row behind
/// a branch).
fn bits(bools: &[bool]) -> BooleanBuffer {
    BooleanBuffer::collect_bool(bools.len(), |i| bools[i])
}

fn array(dtype: DType, values: Data, valid: Option<Data>, n: usize) -> ArrayRef {
    let nulls = valid.map(|v| match rows(v, DType::Bool, n) {
        Buffer::Bool(v) => NullBuffer::new(bits(&v)),
        _ => unreachable!("validity is bool"),
    });
    match rows(values, dtype, n) {
        Buffer::Bool(v) => Arc::new(BooleanArray::new(bits(&v), nulls)),
        Buffer::I32(v) => Arc::new(Int32Array::new(ScalarBuffer::from(v), nulls)),
        Buffer::I64(v) => Arc::new(Int64Array::new(ScalarBuffer::from(v), nulls)),
        Buffer::F32(v) => Arc::new(Float32Array::new(ScalarBuffer::from(v), nulls)),
        Buffer::F64(v) => Arc::new(Float64Array::new(ScalarBuffer::from(v), nulls)),
    }
}
