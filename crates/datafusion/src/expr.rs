//! [`KilnExpr`]: a DataFusion [`PhysicalExpr`] computed by a kiln kernel.

use crate::translate::{self, Translated};
use crate::Options;
use arrow_array::{
    make_array, Array, ArrayRef, Decimal128Array, Int64Array, RecordBatch, RecordBatchOptions,
};
use arrow_schema::{DataType, Field, FieldRef, Schema, SchemaRef};
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;
use kiln_arrow::Projector;
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};

/// A DataFusion expression compiled by kiln: it returns what the expression
/// it replaces returns, bit for bit (`docs/semantics.md`, "DataFusion"),
/// from one kiln kernel over the columns it reads.
#[derive(Debug)]
pub struct KilnExpr {
    /// DataFusion's expression: its type, name and SQL, and what a row it
    /// cannot compute falls back to.
    original: Arc<dyn PhysicalExpr>,
    /// The input columns the kernel reads, as DataFusion column expressions
    /// (the children other optimizer rules see).
    columns: Vec<Arc<dyn PhysicalExpr>>,
    /// Their indices in the input.
    indices: Vec<usize>,
    /// The columns as the kernel's schema (`c0`, `c1`, …).
    schema: SchemaRef,
    /// The kiln-arrow expression (for display and the codec).
    source: kiln_arrow::Expr,
    projector: Projector,
    data_type: DataType,
    options: Options,
}

/// Compiled projectors by expression text and column types, so a query
/// planned again (or a plan decoded again on an executor) reuses them.
type Cache = Mutex<HashMap<(String, Vec<DataType>, kiln::Tier), Projector>>;

static CACHE: OnceLock<Cache> = OnceLock::new();

/// The cache holds at most this many expressions; it starts over when full.
const CACHE_CAPACITY: usize = 4096;

impl KilnExpr {
    /// Compiles `expr` (over `schema`) if kiln computes all of it; the reason
    /// it does not otherwise.
    pub fn try_new(
        expr: &Arc<dyn PhysicalExpr>,
        schema: &Schema,
        options: &Options,
    ) -> std::result::Result<KilnExpr, translate::Unsupported> {
        let Translated {
            expr: source,
            columns: indices,
            data_type,
        } = translate::translate(expr, schema)?;
        let fields: Vec<Field> = indices
            .iter()
            .enumerate()
            .map(|(i, &idx)| {
                Field::new(
                    translate::column_name(i),
                    schema.field(idx).data_type().clone(),
                    true,
                )
            })
            .collect();
        let kernel_schema = Arc::new(Schema::new(fields));
        let types: Vec<DataType> = kernel_schema
            .fields()
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let key = (source.to_string(), types, options.tier);
        let cache = CACHE.get_or_init(Default::default);
        let cached = cache.lock().expect("cache lock").get(&key).cloned();
        let projector = match cached {
            Some(p) => p,
            None => {
                let p = Projector::make_with(
                    kernel_schema.clone(),
                    &[("out", source.clone())],
                    options.tier,
                )
                .map_err(|e| translate::Unsupported(format!("kiln: {e}")))?;
                let mut map = cache.lock().expect("cache lock");
                if map.len() >= CACHE_CAPACITY {
                    map.clear();
                }
                map.insert(key, p.clone());
                p
            }
        };
        let columns = indices
            .iter()
            .map(|&idx| {
                Arc::new(Column::new(schema.field(idx).name(), idx)) as Arc<dyn PhysicalExpr>
            })
            .collect();
        Ok(KilnExpr {
            original: expr.clone(),
            columns,
            indices,
            schema: kernel_schema,
            source,
            projector,
            data_type,
            options: options.clone(),
        })
    }

    /// DataFusion's expression this one replaces.
    pub fn original(&self) -> &Arc<dyn PhysicalExpr> {
        &self.original
    }

    /// The kiln-arrow expression the kernel computes (columns `c0`, `c1`, …
    /// are [`KilnExpr::input_columns`] in order).
    pub fn source(&self) -> &kiln_arrow::Expr {
        &self.source
    }

    /// The options it was compiled with.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The input columns the kernel reads.
    pub fn input_columns(&self) -> &[usize] {
        &self.indices
    }

    /// The kernel's result as an array of DataFusion's type: dates and
    /// decimals are kiln's integers with their type put back.
    fn to_datafusion(&self, array: &ArrayRef) -> Result<ArrayRef> {
        Ok(match &self.data_type {
            // The same layout: only the type changes.
            DataType::Date32 | DataType::Date64 => make_array(
                array
                    .to_data()
                    .into_builder()
                    .data_type(self.data_type.clone())
                    .build()?,
            ),
            DataType::Decimal128(p, s) => {
                let ints = array
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .expect("kiln computes decimals in i64");
                let wide: Decimal128Array = ints.unary(i128::from);
                Arc::new(wide.with_precision_and_scale(*p, *s)?)
            }
            _ => array.clone(),
        })
    }
}

impl fmt::Display for KilnExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kiln({})", self.original)
    }
}

impl PartialEq for KilnExpr {
    fn eq(&self, other: &Self) -> bool {
        self.original.eq(&other.original)
    }
}

impl Eq for KilnExpr {}

impl Hash for KilnExpr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        "kiln".hash(state);
        self.original.hash(state);
    }
}

impl PhysicalExpr for KilnExpr {
    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(self.data_type.clone())
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        self.original.nullable(input_schema)
    }

    fn return_field(&self, input_schema: &Schema) -> Result<FieldRef> {
        self.original.return_field(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let columns = self
            .indices
            .iter()
            .map(|&i| batch.column(i).clone())
            .collect();
        let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        let input = RecordBatch::try_new_with_options(self.schema.clone(), columns, &options)?;
        // DataFusion runs a partition per core: the kernel runs on the
        // partition's thread.
        match kiln::threads::with_num_threads(1, || self.projector.evaluate(&input)) {
            Ok(out) => Ok(ColumnarValue::Array(self.to_datafusion(out.column(0))?)),
            // A decimal column holding more digits than its type says:
            // DataFusion's kernels compute it in i128.
            Err(kiln_arrow::Error::DecimalRange { .. }) => self.original.evaluate(batch),
            Err(e) => Err(DataFusionError::External(Box::new(e))),
        }
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        self.columns.iter().collect()
    }

    /// The same kernel if the columns stay where they were; otherwise
    /// DataFusion's expression over the new children (this rule runs last,
    /// so a rule that moves columns afterwards is rare: the expression is
    /// then DataFusion's again, never wrong).
    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        if children.len() == self.columns.len()
            && children.iter().zip(&self.columns).all(|(a, b)| a.eq(b))
        {
            return Ok(self);
        }
        let replace = |e: Arc<dyn PhysicalExpr>| -> Result<_> {
            use datafusion::common::tree_node::Transformed;
            let position = e.downcast_ref::<Column>().and_then(|c| {
                self.columns.iter().position(|k| {
                    k.downcast_ref::<Column>()
                        .is_some_and(|k| k.index() == c.index())
                })
            });
            Ok(match position {
                Some(i) => Transformed::yes(children[i].clone()),
                None => Transformed::no(e),
            })
        };
        use datafusion::common::tree_node::TreeNode;
        Ok(self.original.clone().transform_down(replace)?.data)
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.original.fmt_sql(f)
    }
}
