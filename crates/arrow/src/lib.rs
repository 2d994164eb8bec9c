//! Gandiva-style filters and projections over Apache Arrow, compiled by kiln.
//!
//! Compile an expression against a [`Schema`](arrow_schema::Schema) once, then
//! evaluate it over any number of [`RecordBatch`](arrow_array::RecordBatch)es,
//! from any number of threads. A [`Filter`] returns a selection vector (a
//! `UInt32Array` of ascending row indices, Gandiva's `SelectionVector`) and can
//! apply it; a [`Projector`] returns new arrays.
//!
//! ```
//! use arrow_array::{Float64Array, RecordBatch};
//! use std::sync::Arc;
//! let x = Float64Array::from_iter_values((0..10).map(f64::from));
//! let batch = RecordBatch::try_from_iter([("x", Arc::new(x) as _)]).unwrap();
//! let filter = kiln_arrow::Filter::query(batch.schema(), "(x > 2.0) & (x < 6.0)").unwrap();
//! assert_eq!(filter.evaluate(&batch).unwrap().values(), &[3, 4, 5]);
//! ```
//!
//! Nulls follow SQL: arithmetic and comparisons on a null are null, `&`/`|`
//! are Kleene's, a filter keeps the rows where its condition is true (not
//! null). The kernel reads Arrow's validity bitmaps (and boolean columns)
//! directly, bit by bit without branches; a batch whose columns have no nulls
//! runs a kernel compiled without them. `docs/semantics.md` ("Arrow") has the
//! rules, `docs/abi.md` the packed-bitmap parameters.

pub mod expr;
mod lower;
pub mod query;
mod run;

pub use expr::{Expr, Func, Literal};
pub use lower::{column_dtype, MAX_DECIMAL_DIGITS};
pub use run::{compilations, Filter, Projector};

use arrow_schema::DataType;

/// Which kiln engine runs the expressions: any tier, the interpreter
/// included (it copies the columns; the oracle in tests).
pub use kiln::Tier;

/// The tier [`Filter::make`] and [`Projector::make`] compile on: `auto`
/// (Cranelift, which compiles in microseconds, then LLVM on a background
/// thread once the batches have paid for it; LLVM at once where the code
/// cache holds the kernel).
pub const DEFAULT_TIER: Tier = Tier::Auto;

/// What can go wrong compiling or evaluating an expression.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The query text does not parse.
    #[error("{0}")]
    Parse(#[from] kiln::ParseError),
    /// A name that is no column of the schema.
    #[error("no column `{name}` (the columns are {})", .available.join(", "))]
    UnknownColumn {
        /// The name used.
        name: String,
        /// The schema's columns.
        available: Vec<String>,
    },
    /// A column of a type kiln does not compute with.
    #[error("column `{name}` is {data_type}; kiln reads Boolean, Int32, Int64, Float32, Float64, Date32, Date64, Timestamp and Decimal128 (up to 18 digits) columns")]
    UnsupportedColumn {
        /// The column.
        name: String,
        /// Its Arrow type.
        data_type: DataType,
    },
    /// A function name the builder does not know.
    #[error("unknown function `{0}`")]
    UnknownFunction(String),
    /// Operands or arguments of the wrong type or number.
    #[error("type error: {0}")]
    Type(String),
    /// An expression nested deeper than [`expr::MAX_DEPTH`].
    #[error("the expression nests more than {0} levels")]
    TooDeep(usize),
    /// A batch whose schema is not the one the expression was compiled for.
    #[error("batch does not match the compiled schema: {0}")]
    SchemaMismatch(String),
    /// An integer division or remainder by zero in a row where the divisor
    /// was not null.
    #[error("integer division by zero in `{expr}`")]
    DivisionByZero {
        /// The dividing sub-expression.
        expr: String,
    },
    /// A valid value of a `Decimal128` column with more digits than the
    /// column's precision (Arrow does not enforce it; kiln computes decimals
    /// in `i64`s that only the precision keeps from overflowing).
    #[error("column `{column}` holds a decimal with more digits than its precision")]
    DecimalRange {
        /// The column.
        column: String,
    },
    /// The engine could not compile the expression.
    #[error("compile error: {0}")]
    Compile(#[from] kiln::CompileError),
    /// The engine failed while running (a bug: reported, never ignored).
    #[error("evaluation failed: {0}")]
    Exec(String),
}
