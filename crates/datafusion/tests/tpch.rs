//! TPC-H Q1 and Q6 over `lineitem` made by tpchgen (scale factor 0.01,
//! 60,175 rows), from memory and from a Parquet file: the same result with
//! kiln on (every tier) and off, and kiln computing the filters; the same
//! queries with kiln's expressions carried by [`KilnCodec`] through
//! datafusion-proto and run on a Ballista scheduler and executor.

use arrow_array::cast::AsArray;
use arrow_array::types::{Date32Type, Decimal128Type};
use arrow_array::RecordBatch;
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::datasource::MemTable;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use datafusion_proto::physical_plan::AsExecutionPlan;
use datafusion_proto::protobuf::PhysicalPlanNode;
use kiln_datafusion::KilnCodec;
use prost::Message;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use tpchgen::generators::LineItemGenerator;
use tpchgen_arrow::LineItemArrow;

const Q1: &str = include_str!("../queries/q1.sql");
const Q6: &str = include_str!("../queries/q6.sql");

const SCALE: f64 = 0.01;

/// lineitem at [`SCALE`], in batches of 8192 rows.
fn lineitem() -> &'static [RecordBatch] {
    static BATCHES: OnceLock<Vec<RecordBatch>> = OnceLock::new();
    BATCHES.get_or_init(|| {
        LineItemArrow::new(LineItemGenerator::new(SCALE, 1, 1))
            .with_batch_size(8192)
            .collect::<Result<_, _>>()
            .expect("tpchgen")
    })
}

/// lineitem written once as a Parquet file (row groups of 16,384 rows).
fn lineitem_parquet() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("kiln-tpch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("lineitem.parquet");
        let file = std::fs::File::create(&path).unwrap();
        let props = parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_row_count(Some(16_384))
            .build();
        let batches = lineitem();
        let mut writer =
            parquet::arrow::ArrowWriter::try_new(file, batches[0].schema(), Some(props)).unwrap();
        for b in batches {
            writer.write(b).unwrap();
        }
        writer.close().unwrap();
        path
    })
}

#[derive(Clone, Copy, Debug)]
enum Source {
    Memory,
    Parquet,
}

async fn context(kiln: Option<kiln_datafusion::Tier>, source: Source) -> SessionContext {
    let config = SessionConfig::new().with_target_partitions(2);
    let ctx = match kiln {
        None => SessionContext::new_with_config(config),
        Some(tier) => kiln_datafusion::context_with(config, kiln_datafusion::Options { tier }),
    };
    match source {
        Source::Memory => {
            // Two partitions, batches dealt alternately.
            let mut parts = vec![Vec::new(), Vec::new()];
            for (i, b) in lineitem().iter().enumerate() {
                parts[i % 2].push(b.clone());
            }
            let table = MemTable::try_new(lineitem()[0].schema(), parts).unwrap();
            ctx.register_table("lineitem", Arc::new(table)).unwrap();
        }
        Source::Parquet => {
            let path = lineitem_parquet().display().to_string();
            ctx.register_parquet("lineitem", &path, ParquetReadOptions::default())
                .await
                .unwrap();
        }
    }
    ctx
}

/// The result as text (decimals print exactly), and what kiln decided.
async fn run(ctx: &SessionContext, sql: &str) -> (String, Vec<kiln_datafusion::Decision>) {
    let df = ctx.sql(sql).await.unwrap();
    let plan = df.clone().create_physical_plan().await.unwrap();
    let decisions = kiln_datafusion::decisions(&plan);
    let batches = df.collect().await.unwrap();
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
    for b in lineitem() {
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
        let plan = ctx
            .sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
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
    let path = lineitem_parquet().display().to_string();
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
