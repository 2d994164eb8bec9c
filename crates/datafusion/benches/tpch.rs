//! TPC-H Q1 and Q6 through DataFusion with and without kiln, in one run:
//!
//! ```text
//! cargo bench -p kiln-datafusion --bench tpch [--features llvm] -- [--sf 1] [--runs 7]
//! ```
//!
//! `lineitem` comes from tpchgen at the scale factor asked (SF 1: 6,001,215
//! rows), held in memory (two partitions' worth of 8192-row batches) and
//! written once as a Parquet file under `target/tpch/` (row groups of 1M
//! rows, as DataFusion's own benchmarks write it). For each source, target
//! partitions (1 and 2), query and engine it prints the median end-to-end
//! time (plan + run) of `--runs` runs, the median time inside filters and
//! projections (DataFusion's `elapsed_compute`, summed over partitions), and
//! the first run's planning time, where kiln compiles (its kernel cache is
//! cold only for the first configuration that plans the query).

use arrow_array::RecordBatch;
use datafusion::datasource::MemTable;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tpchgen::generators::LineItemGenerator;
use tpchgen_arrow::LineItemArrow;

const QUERIES: [(&str, &str); 2] = [
    ("Q1", include_str!("../queries/q1.sql")),
    ("Q6", include_str!("../queries/q6.sql")),
];

fn arg(name: &str, default: f64) -> f64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("a number"))
        .unwrap_or(default)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[derive(Clone, Copy)]
enum Source {
    Memory,
    Parquet,
}

struct Data {
    batches: Vec<RecordBatch>,
    parquet: PathBuf,
}

fn data(sf: f64) -> Data {
    let start = Instant::now();
    let batches: Vec<RecordBatch> = LineItemArrow::new(LineItemGenerator::new(sf, 1, 1))
        .with_batch_size(8192)
        .collect::<Result<_, _>>()
        .expect("tpchgen");
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    eprintln!(
        "lineitem SF {sf}: {rows} rows generated in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../../target/tpch/sf{sf}"));
    let parquet = dir.join("lineitem.parquet");
    if !parquet.exists() {
        std::fs::create_dir_all(&dir).unwrap();
        let partial = dir.join("lineitem.parquet.partial");
        let file = std::fs::File::create(&partial).unwrap();
        let props = parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_row_count(Some(1 << 20))
            .build();
        let mut w =
            parquet::arrow::ArrowWriter::try_new(file, batches[0].schema(), Some(props)).unwrap();
        for b in &batches {
            w.write(b).unwrap();
        }
        w.close().unwrap();
        std::fs::rename(&partial, &parquet).unwrap();
        eprintln!("wrote {}", parquet.display());
    }
    Data { batches, parquet }
}

async fn context(
    data: &Data,
    source: Source,
    partitions: usize,
    tier: Option<kiln_datafusion::Tier>,
) -> SessionContext {
    let config = SessionConfig::new().with_target_partitions(partitions);
    let ctx = match tier {
        None => SessionContext::new_with_config(config),
        Some(tier) => kiln_datafusion::context_with(config, kiln_datafusion::Options { tier }),
    };
    match source {
        Source::Memory => {
            let mut parts = vec![Vec::new(); partitions];
            for (i, b) in data.batches.iter().enumerate() {
                parts[i % partitions].push(b.clone());
            }
            let table = MemTable::try_new(data.batches[0].schema(), parts).unwrap();
            ctx.register_table("lineitem", Arc::new(table)).unwrap();
        }
        Source::Parquet => {
            let path = data.parquet.display().to_string();
            ctx.register_parquet("lineitem", &path, ParquetReadOptions::default())
                .await
                .unwrap();
        }
    }
    ctx
}

/// One run: (plan time, end-to-end time, filter + projection time, rows).
async fn once(ctx: &SessionContext, sql: &str) -> (Duration, Duration, Duration, String) {
    let start = Instant::now();
    let plan = ctx
        .sql(sql)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let planned = start.elapsed();
    let batches = datafusion::physical_plan::collect(plan.clone(), ctx.task_ctx())
        .await
        .unwrap();
    let total = start.elapsed();
    let shown = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string();
    (
        planned,
        total,
        kiln_datafusion::filter_projection_time(&plan),
        shown,
    )
}

fn main() {
    let sf = arg("--sf", 1.0);
    let runs = arg("--runs", 7.0) as usize;
    let data = data(sf);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut engines: Vec<(&str, Option<kiln_datafusion::Tier>)> = vec![
        ("DataFusion", None),
        ("kiln cranelift", Some(kiln_datafusion::Tier::Cranelift)),
    ];
    if cfg!(feature = "llvm") {
        engines.push(("kiln llvm", kiln_datafusion::Tier::all().last().copied()));
    }
    println!(
        "| source | partitions | query | engine | end to end (ms) | filters + projections (ms) | first plan (ms) | speed-up |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    runtime.block_on(async {
        for (source, source_name) in [(Source::Parquet, "Parquet"), (Source::Memory, "memory")] {
            for partitions in [1, 2] {
                for (q, sql) in QUERIES {
                    let mut baseline = None;
                    let mut answer = None;
                    for (name, tier) in &engines {
                        let ctx = context(&data, source, partitions, *tier).await;
                        let (first_plan, _, _, shown) = once(&ctx, sql).await;
                        match &answer {
                            None => answer = Some(shown),
                            Some(a) => assert_eq!(a, &shown, "{q} {name}: a different answer"),
                        }
                        let mut total = Vec::new();
                        let mut ops = Vec::new();
                        for _ in 0..runs {
                            let (_, t, o, _) = once(&ctx, sql).await;
                            total.push(t);
                            ops.push(o);
                        }
                        let (total, ops) = (median(total), median(ops));
                        let base = *baseline.get_or_insert(total);
                        println!(
                            "| {source_name} | {partitions} | {q} | {name} | {:.1} | {:.1} | {:.2} | {:.2}× |",
                            ms(total),
                            ms(ops),
                            ms(first_plan),
                            base.as_secs_f64() / total.as_secs_f64()
                        );
                    }
                }
            }
        }
    });
}
