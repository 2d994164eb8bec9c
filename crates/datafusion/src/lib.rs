//! kiln inside [DataFusion](https://datafusion.apache.org): the predicates of
//! filters and the expressions of projections in a physical plan, compiled
//! by kiln with DataFusion's meaning.
//!
//! One call turns it on; SQL stays as it is:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> datafusion::common::Result<()> {
//! use datafusion::prelude::*;
//! let ctx = kiln_datafusion::context(SessionConfig::new());
//! let sql = "SELECT x * 2 AS y FROM (VALUES (1.5), (2.5)) AS t(x) WHERE x > 2";
//! let batches = ctx.sql(sql).await?.collect().await?;
//! assert_eq!(batches[0].num_rows(), 1);
//! # Ok(())
//! # }
//! ```
//!
//! [`KilnRule`] runs after DataFusion's physical optimizer rules. It replaces
//! each expression kiln computes exactly as DataFusion does with a
//! [`KilnExpr`], and leaves every other one (strings, decimals of more than
//! 18 digits, functions kiln does not have, …) as it is, expression by
//! expression and never with an error: [`decisions`] lists what it did and
//! why. `docs/semantics.md` ("DataFusion") lists where DataFusion's meaning
//! differs from kiln's own and how kiln follows DataFusion here.

mod codec;
mod expr;
mod rule;
pub mod translate;

pub use codec::KilnCodec;
pub use expr::KilnExpr;
pub use kiln::Tier;
pub use rule::{decisions, filter_projection_time, Decision, KilnRule};

use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use std::sync::Arc;

/// How kiln compiles inside DataFusion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The engine that compiles the expressions (default: kiln-arrow's,
    /// Cranelift, which compiles in well under a millisecond per
    /// expression).
    pub tier: Tier,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            tier: kiln_arrow::DEFAULT_TIER,
        }
    }
}

/// `builder` with kiln's rule added after DataFusion's own.
pub fn enable(builder: SessionStateBuilder) -> SessionStateBuilder {
    enable_with(builder, Options::default())
}

/// `builder` with kiln's rule, compiling with `options`.
pub fn enable_with(builder: SessionStateBuilder, options: Options) -> SessionStateBuilder {
    builder.with_physical_optimizer_rule(Arc::new(KilnRule::new(options)))
}

/// A `SessionContext` with DataFusion's defaults and kiln enabled.
pub fn context(config: SessionConfig) -> SessionContext {
    context_with(config, Options::default())
}

/// A `SessionContext` with DataFusion's defaults and kiln compiling with
/// `options`.
pub fn context_with(config: SessionConfig, options: Options) -> SessionContext {
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_default_features();
    SessionContext::new_with_state(enable_with(state, options).build())
}

/// The README's Rust examples (kiln's, kiln-arrow's and this crate's),
/// compiled and run as doctests here, where all three crates are in reach.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
