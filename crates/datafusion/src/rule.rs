//! [`KilnRule`]: the physical optimizer rule that puts [`KilnExpr`]s into a
//! plan, and [`decisions`], which says what it did.

use crate::expr::KilnExpr;
use crate::translate;
use crate::Options;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::Result;
use datafusion::physical_expr::expressions::{Column, Literal};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion::physical_plan::ExecutionPlan;
use std::sync::Arc;

/// Replaces the predicate of every `FilterExec` and the computed
/// expressions of every `ProjectionExec` with [`KilnExpr`]s, one expression
/// at a time, wherever kiln computes the whole expression with DataFusion's
/// meaning; every other expression stays DataFusion's. Add it after
/// DataFusion's own rules (as [`crate::enable`] does), so filter pushdown
/// and pruning still see DataFusion's expressions.
#[derive(Debug, Default)]
pub struct KilnRule {
    options: Options,
}

impl KilnRule {
    /// A rule compiling with `options`.
    pub fn new(options: Options) -> KilnRule {
        KilnRule { options }
    }

    fn compile(
        &self,
        expr: &Arc<dyn PhysicalExpr>,
        schema: &arrow_schema::Schema,
    ) -> Option<Arc<dyn PhysicalExpr>> {
        if worth_nothing(expr) {
            return None;
        }
        KilnExpr::try_new(expr, schema, &self.options)
            .ok()
            .map(|k| Arc::new(k) as Arc<dyn PhysicalExpr>)
    }

    fn rewrite(&self, node: Arc<dyn ExecutionPlan>) -> Result<Transformed<Arc<dyn ExecutionPlan>>> {
        if let Some(filter) = node.downcast_ref::<FilterExec>() {
            let schema = filter.input().schema();
            if let Some(k) = self.compile(filter.predicate(), &schema) {
                let filter = FilterExecBuilder::from(filter).with_predicate(k).build()?;
                return Ok(Transformed::yes(Arc::new(filter)));
            }
        } else if let Some(projection) = node.downcast_ref::<ProjectionExec>() {
            let schema = projection.input().schema();
            let mut changed = false;
            let exprs: Vec<ProjectionExpr> = projection
                .expr()
                .iter()
                .map(|p| match self.compile(&p.expr, &schema) {
                    Some(k) => {
                        changed = true;
                        ProjectionExpr {
                            expr: k,
                            alias: p.alias.clone(),
                        }
                    }
                    None => p.clone(),
                })
                .collect();
            if changed {
                let projection = ProjectionExec::try_new(exprs, projection.input().clone())?;
                return Ok(Transformed::yes(Arc::new(projection)));
            }
        }
        Ok(Transformed::no(node))
    }
}

/// Columns, constants and expressions already compiled: nothing to gain.
fn worth_nothing(expr: &Arc<dyn PhysicalExpr>) -> bool {
    expr.is::<Column>() || expr.is::<Literal>() || expr.is::<KilnExpr>()
}

impl PhysicalOptimizerRule for KilnRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(plan.transform_up(|node| self.rewrite(node))?.data)
    }

    fn name(&self) -> &str {
        "kiln"
    }

    /// Types and nullability stay DataFusion's.
    fn schema_check(&self) -> bool {
        true
    }
}

/// What happened to one expression of a filter or projection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// `FilterExec` or `ProjectionExec`.
    pub operator: &'static str,
    /// The expression, as DataFusion prints it.
    pub expr: String,
    /// `None` where kiln computes it; otherwise why DataFusion does.
    pub declined: Option<String>,
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.declined {
            None => write!(f, "{}: kiln: {}", self.operator, self.expr),
            Some(why) => write!(f, "{}: DataFusion: {} ({why})", self.operator, self.expr),
        }
    }
}

/// The expressions of every filter and projection of `plan` (columns and
/// constants aside), and whether kiln computes each.
pub fn decisions(plan: &Arc<dyn ExecutionPlan>) -> Vec<Decision> {
    let mut out = Vec::new();
    let mut note = |operator, expr: &Arc<dyn PhysicalExpr>, schema: &arrow_schema::Schema| {
        if expr.is::<Column>() || expr.is::<Literal>() {
            return;
        }
        let (shown, declined) = match expr.downcast_ref::<KilnExpr>() {
            Some(k) => (k.original().to_string(), None),
            None => {
                let why = match translate::translate(expr, schema) {
                    Err(why) => why.to_string(),
                    Ok(_) => "kiln is not enabled here".to_string(),
                };
                (expr.to_string(), Some(why))
            }
        };
        out.push(Decision {
            operator,
            expr: shown,
            declined,
        });
    };
    let _ = plan.apply(|node| {
        if let Some(filter) = node.downcast_ref::<FilterExec>() {
            note("FilterExec", filter.predicate(), &filter.input().schema());
        } else if let Some(projection) = node.downcast_ref::<ProjectionExec>() {
            for p in projection.expr() {
                note("ProjectionExec", &p.expr, &projection.input().schema());
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    out
}

/// The compute time DataFusion measured in the filters and projections of
/// `plan` after it ran (`elapsed_compute`, summed over partitions): the
/// operators kiln's expressions run in.
pub fn filter_projection_time(plan: &Arc<dyn ExecutionPlan>) -> std::time::Duration {
    let mut nanos = 0u64;
    let _ = plan.apply(|node| {
        if node.is::<FilterExec>() || node.is::<ProjectionExec>() {
            if let Some(n) = node.metrics().and_then(|m| m.elapsed_compute()) {
                nanos += n as u64;
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    std::time::Duration::from_nanos(nanos)
}
