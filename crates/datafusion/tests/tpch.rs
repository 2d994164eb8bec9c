//! TPC-H Q1 and Q6 over `lineitem` made by tpchgen (scale factor 0.01,
//! 60,175 rows), from memory and from a Parquet file: the same result with
//! kiln on (every tier) and off, and kiln computing the filters; the same
//! queries with kiln's expressions carried by [`KilnCodec`] through
//! datafusion-proto and run on a Ballista scheduler and executor.

mod common {
    pub mod lineitem;
}

use arrow_array::cast::AsArray;
use arrow_array::types::{Date32Type, Decimal128Type};
use common::lineitem::{self, Lineitem, Source, QUERIES};
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use datafusion_proto::physical_plan::AsExecutionPlan;
use datafusion_proto::protobuf::PhysicalPlanNode;
use kiln_datafusion::KilnCodec;
use prost::Message;
use std::sync::{Arc, OnceLock};

const Q1: &str = QUERIES[0].1;
const Q6: &str = QUERIES[1].1;

/// lineitem at scale factor 0.01, and as a Parquet file (row groups of
/// 16,384 rows), made once per test process.
fn data() -> &'static Lineitem {
    static DATA: OnceLock<Lineitem> = OnceLock::new();
    DATA.get_or_init(|| {
        let batches = lineitem::generate(0.01);
        let parquet = std::env::temp_dir()
            .join(format!("kiln-tpch-{}", std::process::id()))
            .join("lineitem.parquet");
        lineitem::write_parquet(&batches, &parquet, 16_384);
        Lineitem { batches, parquet }
    })
}

/// A session with 2 target partitions, kiln on `kiln` (or off).
async fn context(kiln: Option<kiln_datafusion::Tier>, source: Source) -> SessionContext {
    data().context(source, 2, kiln).await
}

/// The result as text (decimals print exactly), and what kiln decided in
/// the plan that computed it.
async fn run(ctx: &SessionContext, sql: &str) -> (String, Vec<kiln_datafusion::Decision>) {
    let plan = lineitem::plan(ctx, sql).await;
    let decisions = kiln_datafusion::decisions(&plan);
    let batches = datafusion::physical_plan::collect(plan, ctx.task_ctx())
        .await
        .unwrap();
    (
        pretty_format_batches(&batches).unwrap().to_string(),
        decisions,
    )
}

/// `sql` with kiln off and on: the same table; kiln computes the filter
/// predicate and DataFusion keeps exactly the expressions in `kept`.
async fn check(sql: &str, kept: &[&str]) -> String {
    let mut result = None;
    for source in [Source::Memory, Source::Parquet] {
        let (want, _) = run(&context(None, source).await, sql).await;
        for tier in kiln_datafusion::Tier::all() {
            let (got, decisions) = run(&context(Some(tier), source).await, sql).await;
            assert_eq!(got, want, "{tier:?} from {source:?}");
            let shown: Vec<String> = decisions.iter().map(|d| d.to_string()).collect();
            let filter = decisions.iter().find(|d| d.operator == "FilterExec");
            assert!(filter.is_some_and(|f| f.declined.is_none()), "{shown:#?}");
            let declined: Vec<&str> = decisions
                .iter()
                .filter(|d| d.declined.is_some())
                .map(|d| d.expr.as_str())
                .collect();
            assert_eq!(declined, kept, "{shown:#?}");
        }
        result = Some(want);
    }
    result.unwrap()
}

#[tokio::test]
async fn q6_is_the_same_with_kiln() {
    // The whole filter is kiln's; the product is the aggregate's argument
    // (DataFusion has no projection here).
    let table = check(Q6, &[]).await;
    // The revenue computed here by hand, from the generated columns.
    let mut revenue: i128 = 0;
    for b in &data().batches {
        let column = |name: &str| b.column(b.schema().index_of(name).unwrap()).clone();
        let decimal = |name: &str| column(name).as_primitive::<Decimal128Type>().clone();
        let (quantity, price, discount) = (
            decimal("l_quantity"),
            decimal("l_extendedprice"),
            decimal("l_discount"),
        );
        let shipdate = column("l_shipdate").as_primitive::<Date32Type>().clone();
        for r in 0..b.num_rows() {
            let day = shipdate.value(r);
            // 1994-01-01 and 1995-01-01 in days since 1970-01-01; decimals
            // at scale 2.
            if (8766..9131).contains(&day)
                && (5..=7).contains(&discount.value(r))
                && quantity.value(r) < 2400
            {
                revenue += price.value(r) * discount.value(r);
            }
        }
    }
    let revenue = format!("{}.{:04}", revenue / 10_000, revenue % 10_000);
    assert!(
        table.contains(&format!("| {revenue} |")),
        "{revenue}: {table}"
    );
}

#[tokio::test]
async fn q1_is_the_same_with_kiln() {
    let table = check(
        Q1,
        // A Decimal128(38, 4) product: more digits than kiln's i64
        // decimals hold.
        &["l_extendedprice@0 * (1 - l_discount@1)"],
    )
    .await;
    // Four groups: (A, F), (N, F), (N, O), (R, F).
    assert_eq!(table.lines().count(), 4 + 4, "{table}");
    for group in [
        "| A            | F ",
        "| N            | F ",
        "| N            | O ",
        "| R            | F ",
    ] {
        assert!(table.contains(group), "{group}: {table}");
    }
}

/// A plan with kiln's expressions, encoded by datafusion-proto with
/// [`KilnCodec`] and decoded again: kiln's expressions come back compiled,
/// and the plan returns what DataFusion returns. Damaged bytes are an error.
#[tokio::test]
async fn kiln_expressions_survive_datafusion_proto() {
    let sql = "SELECT l_orderkey, l_quantity + l_tax AS qt FROM lineitem \
               WHERE l_shipdate < date '1993-01-01' AND l_discount > 0.05 ORDER BY l_orderkey, qt";
    let (want, _) = run(&context(None, Source::Parquet).await, sql).await;
    for tier in kiln_datafusion::Tier::all() {
        let ctx = context(Some(tier), Source::Parquet).await;
        let plan = lineitem::plan(&ctx, sql).await;
        let codec = KilnCodec::default();
        let bytes = PhysicalPlanNode::try_from_physical_plan(plan.clone(), &codec)
            .unwrap()
            .encode_to_vec();
        let decoded = PhysicalPlanNode::decode(bytes.as_slice())
            .unwrap()
            .try_into_physical_plan(&ctx.task_ctx(), &codec)
            .unwrap();
        // The filter and the projection's sum, compiled again.
        assert_eq!(codec.decoded(), 2, "{tier:?}");
        let before: Vec<String> = kiln_datafusion::decisions(&plan)
            .iter()
            .map(|d| d.to_string())
            .collect();
        let after: Vec<String> = kiln_datafusion::decisions(&decoded)
            .iter()
            .map(|d| d.to_string())
            .collect();
        assert_eq!(after, before, "{tier:?}");
        let batches = datafusion::physical_plan::collect(decoded, ctx.task_ctx())
            .await
            .unwrap();
        assert_eq!(
            pretty_format_batches(&batches).unwrap().to_string(),
            want,
            "{tier:?}"
        );

        // The kiln expression's bytes cut short: an error, not a panic.
        let marker = b"kiln-expr/1\n";
        let at = bytes
            .windows(marker.len())
            .position(|w| w == marker)
            .expect("a kiln expression in the plan");
        let mut damaged = bytes.clone();
        damaged[at + marker.len()] ^= 0xff;
        let result = PhysicalPlanNode::decode(damaged.as_slice())
            .map_err(|e| e.to_string())
            .and_then(|node| {
                node.try_into_physical_plan(&ctx.task_ctx(), &codec)
                    .map_err(|e| e.to_string())
            });
        assert!(result.is_err(), "{tier:?}: damaged bytes decoded");
    }
}

/// Q1 and Q6 on a Ballista cluster (scheduler and executor in this process,
/// talking gRPC over the loopback address): the scheduler plans with kiln,
/// ships the stages with [`KilnCodec`], the executor compiles the
/// expressions again, and the answers are DataFusion's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q1_and_q6_run_on_ballista_with_kiln() {
    use ballista::prelude::{SessionConfigExt, SessionContextExt};
    use ballista_core::serde::BallistaPhysicalExtensionCodec;
    use datafusion::execution::session_state::SessionStateBuilder;

    let codec = Arc::new(KilnCodec::wrapping(Arc::new(
        BallistaPhysicalExtensionCodec::default(),
    )));
    let config = SessionConfig::new_with_ballista()
        .with_target_partitions(2)
        .with_ballista_standalone_parallelism(2)
        // Ballista's adaptive planner (on by default) replaces the session's
        // physical optimizer rules with its own list, kiln's included; the
        // static planner runs the session's rules.
        .with_ballista_adaptive_query_planner(false)
        .with_ballista_physical_extension_codec(codec.clone());
    let state = kiln_datafusion::enable(
        SessionStateBuilder::new()
            .with_config(config)
            .with_default_features(),
    )
    .build();
    let cluster = SessionContext::standalone_with_state(state).await.unwrap();
    let path = data().parquet.display().to_string();
    cluster
        .register_parquet("lineitem", &path, ParquetReadOptions::default())
        .await
        .unwrap();
    for sql in [Q1, Q6] {
        let (want, _) = run(&context(None, Source::Parquet).await, sql).await;
        let batches = cluster.sql(sql).await.unwrap().collect().await.unwrap();
        assert_eq!(pretty_format_batches(&batches).unwrap().to_string(), want);
    }
    // Each query's filter (and Q1's projection, which stays DataFusion's,
    // does not count) reached the executor as a kiln expression.
    assert!(codec.decoded() >= 2, "decoded {}", codec.decoded());
}
