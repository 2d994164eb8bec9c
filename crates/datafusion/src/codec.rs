//! [`KilnCodec`]: carries [`KilnExpr`]s through DataFusion's protobuf plans,
//! so a plan kiln compiled on a scheduler is compiled again on the executors
//! that run it (Ballista, or anything that ships plans with datafusion-proto).

use crate::expr::KilnExpr;
use crate::Options;
use datafusion::common::{internal_datafusion_err, Result};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{AggregateUDF, HigherOrderUDF, ScalarUDF, WindowUDF};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr_common::physical_expr::proto_decode::PhysicalExprDecodeCtx;
use datafusion::physical_expr_common::physical_expr::proto_encode::PhysicalExprEncodeCtx;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::{
    DefaultPhysicalExtensionCodec, PhysicalExtensionCodec, PhysicalProtoConverterExtension,
};
use datafusion_proto::protobuf::PhysicalExprNode;
use prost::Message;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// What a [`KilnExpr`] travels as: the DataFusion expression it computes (its
/// source, which the receiving side translates and compiles again) and the
/// options it was compiled with.
#[derive(Clone, PartialEq, Message)]
struct KilnExprNode {
    /// DataFusion's expression, encoded by datafusion-proto.
    #[prost(message, optional, tag = "1")]
    source: Option<PhysicalExprNode>,
    /// The tier's name: `interp`, `cranelift` or `llvm`.
    #[prost(string, tag = "2")]
    tier: String,
}

/// Marks a buffer as a [`KilnExprNode`] of this encoding's version.
const MAGIC: &[u8] = b"kiln-expr/1\n";

/// A `PhysicalExtensionCodec` that encodes [`KilnExpr`]s and hands every
/// other plan node and expression to the codec it wraps (Ballista's, or
/// DataFusion's default).
///
/// A decoded expression is compiled again by the receiving process. If that
/// process's kiln cannot compile it (another kiln version, or a tier its
/// build lacks), the expression decodes as DataFusion's own: the plan may
/// lose kiln there, never its meaning. An LLVM-tier expression decodes on a
/// build without LLVM as a Cranelift one (the tiers return the same bits).
#[derive(Debug)]
pub struct KilnCodec {
    inner: Arc<dyn PhysicalExtensionCodec>,
    decoded: AtomicUsize,
}

impl Default for KilnCodec {
    fn default() -> Self {
        KilnCodec::wrapping(Arc::new(DefaultPhysicalExtensionCodec {}))
    }
}

impl KilnCodec {
    /// A codec for kiln's expressions in front of `inner`, which encodes and
    /// decodes everything else (for Ballista: its
    /// `BallistaPhysicalExtensionCodec`).
    pub fn wrapping(inner: Arc<dyn PhysicalExtensionCodec>) -> KilnCodec {
        KilnCodec {
            inner,
            decoded: AtomicUsize::new(0),
        }
    }

    /// How many kiln expressions this codec has decoded and compiled.
    pub fn decoded(&self) -> usize {
        self.decoded.load(Ordering::Relaxed)
    }
}

/// The tier named `name` ([`kiln::Tier`]'s names). A build without LLVM
/// compiles an LLVM expression with Cranelift, which returns the same bits.
fn tier_named(name: &str) -> Result<kiln::Tier> {
    match name.parse::<kiln::Tier>() {
        Ok(tier) if tier.is_built() => Ok(tier),
        Ok(_) => Ok(kiln::Tier::Cranelift),
        Err(e) => Err(internal_datafusion_err!("kiln expression: {e}")),
    }
}

impl PhysicalExtensionCodec for KilnCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.inner.try_decode(buf, inputs, ctx, proto_converter)
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        self.inner.try_encode(node, buf, proto_converter)
    }

    fn try_encode_expr(
        &self,
        node: &Arc<dyn PhysicalExpr>,
        buf: &mut Vec<u8>,
        ctx: &PhysicalExprEncodeCtx<'_>,
    ) -> Result<()> {
        let Some(kiln) = node.downcast_ref::<KilnExpr>() else {
            return self.inner.try_encode_expr(node, buf, ctx);
        };
        let message = KilnExprNode {
            source: Some(ctx.encode_child(kiln.original())?),
            tier: kiln.options().tier.name().to_string(),
        };
        buf.extend_from_slice(MAGIC);
        message
            .encode(buf)
            .map_err(|e| internal_datafusion_err!("kiln expression: {e}"))
    }

    fn try_decode_expr(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn PhysicalExpr>],
        ctx: &PhysicalExprDecodeCtx<'_>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        let Some(body) = buf.strip_prefix(MAGIC) else {
            return self.inner.try_decode_expr(buf, inputs, ctx);
        };
        let message = KilnExprNode::decode(body)
            .map_err(|e| internal_datafusion_err!("kiln expression: {e}"))?;
        let source = message
            .source
            .ok_or_else(|| internal_datafusion_err!("kiln expression: no source"))?;
        let original = ctx.decode(&source)?;
        let options = Options {
            tier: tier_named(&message.tier)?,
        };
        Ok(match KilnExpr::try_new(&original, ctx.schema(), &options) {
            Ok(kiln) => {
                self.decoded.fetch_add(1, Ordering::Relaxed);
                Arc::new(kiln)
            }
            Err(_) => original,
        })
    }

    fn try_decode_udf(&self, name: &str, buf: &[u8]) -> Result<Arc<ScalarUDF>> {
        self.inner.try_decode_udf(name, buf)
    }

    fn try_encode_udf(&self, node: &ScalarUDF, buf: &mut Vec<u8>) -> Result<()> {
        self.inner.try_encode_udf(node, buf)
    }

    fn try_decode_higher_order_function(
        &self,
        name: &str,
        buf: &[u8],
    ) -> Result<Arc<HigherOrderUDF>> {
        self.inner.try_decode_higher_order_function(name, buf)
    }

    fn try_encode_higher_order_function(
        &self,
        node: &HigherOrderUDF,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        self.inner.try_encode_higher_order_function(node, buf)
    }

    fn try_decode_udaf(&self, name: &str, buf: &[u8]) -> Result<Arc<AggregateUDF>> {
        self.inner.try_decode_udaf(name, buf)
    }

    fn try_encode_udaf(&self, node: &AggregateUDF, buf: &mut Vec<u8>) -> Result<()> {
        self.inner.try_encode_udaf(node, buf)
    }

    fn try_decode_udwf(&self, name: &str, buf: &[u8]) -> Result<Arc<WindowUDF>> {
        self.inner.try_decode_udwf(name, buf)
    }

    fn try_encode_udwf(&self, node: &WindowUDF, buf: &mut Vec<u8>) -> Result<()> {
        self.inner.try_encode_udwf(node, buf)
    }
}
