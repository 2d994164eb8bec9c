//! TPC-H Q1 and Q6 through DataFusion with and without kiln, in one run:
//!
//! ```text
//! cargo bench -p kiln-datafusion --bench tpch [--features llvm] -- [--sf 1] [--runs 7]
//!     [--query Q1|Q6] [--source Parquet|memory]
//! ```
//!
//! `lineitem` comes from tpchgen at the scale factor asked (SF 1: 6,001,215
//! rows), held in memory (two partitions' worth of 8192-row batches) and
//! written once as a Parquet file under `target/tpch/` (row groups of 1M
//! rows, as DataFusion's own benchmarks write it). For each source, target
//! partitions (1 and 2), query and engine it prints the median end-to-end
//! time (plan + run) of `--runs` runs (the engines' runs take turns), the
//! median time inside filters and projections (DataFusion's
//! `elapsed_compute`, summed over partitions), and the first run's planning
//! time, where kiln compiles (its kernel cache is cold only for the first
//! configuration that plans the query).

#[path = "../tests/common/lineitem.rs"]
mod lineitem;

use datafusion::prelude::SessionContext;
use lineitem::{Lineitem, Source, QUERIES};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The value after `name`, if given (`--query Q6`, `--source memory`).
fn choice(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1).cloned()
}

/// The number after `name` (`--sf 1`), or `default`.
fn arg(name: &str, default: f64) -> f64 {
    choice(name).map_or(default, |v| v.parse().expect("a number"))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// lineitem at `sf`, and its Parquet file under `target/tpch/` (written
/// once, row groups of 1M rows as DataFusion's benchmarks write them).
fn data(sf: f64) -> Lineitem {
    let start = Instant::now();
    let batches = lineitem::generate(sf);
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    eprintln!(
        "lineitem SF {sf}: {rows} rows generated in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    let parquet = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../../target/tpch/sf{sf}/lineitem.parquet"));
    if !parquet.exists() {
        lineitem::write_parquet(&batches, &parquet, 1 << 20);
        eprintln!("wrote {}", parquet.display());
    }
    Lineitem { batches, parquet }
}

/// One run: (plan time, end-to-end time, filter + projection time, rows).
async fn once(ctx: &SessionContext, sql: &str) -> (Duration, Duration, Duration, String) {
    let start = Instant::now();
    let plan = lineitem::plan(ctx, sql).await;
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
    let only_query = choice("--query");
    let only_source = choice("--source");
    let runs = arg("--runs", 7.0) as usize;
    let data = data(sf);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // DataFusion alone, then kiln on each compiling tier of this build.
    let mut engines = vec![("DataFusion".to_string(), None)];
    for tier in kiln_datafusion::Tier::all() {
        if tier != kiln_datafusion::Tier::Interp {
            engines.push((format!("kiln {}", tier.name()), Some(tier)));
        }
    }
    println!(
        "| source | partitions | query | engine | end to end (ms) | filters + projections (ms) | first plan (ms) | speed-up |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    runtime.block_on(async {
        for (source, source_name) in [(Source::Parquet, "Parquet"), (Source::Memory, "memory")] {
            if only_source.as_ref().is_some_and(|s| s != source_name) {
                continue;
            }
            for partitions in [1, 2] {
                for (q, sql) in QUERIES {
                    if only_query.as_ref().is_some_and(|o| o != q) {
                        continue;
                    }
                    // Every engine plans and runs once (its first plan is
                    // where kiln compiles), then the runs take turns, so a
                    // slow moment of this machine falls on all engines alike.
                    let mut contexts = Vec::new();
                    let mut first_plans = Vec::new();
                    let mut answer = None;
                    for (name, tier) in &engines {
                        let ctx = data.context(source, partitions, *tier).await;
                        let (first_plan, _, _, shown) = once(&ctx, sql).await;
                        match &answer {
                            None => answer = Some(shown),
                            Some(a) => assert_eq!(a, &shown, "{q} {name}: a different answer"),
                        }
                        contexts.push(ctx);
                        first_plans.push(first_plan);
                    }
                    let mut totals = vec![Vec::new(); engines.len()];
                    let mut ops = vec![Vec::new(); engines.len()];
                    for _ in 0..runs {
                        for (e, ctx) in contexts.iter().enumerate() {
                            let (_, t, o, _) = once(ctx, sql).await;
                            totals[e].push(t);
                            ops[e].push(o);
                        }
                    }
                    let totals: Vec<Duration> = totals.into_iter().map(median).collect();
                    let ops: Vec<Duration> = ops.into_iter().map(median).collect();
                    for (e, (name, _)) in engines.iter().enumerate() {
                        println!(
                            "| {source_name} | {partitions} | {q} | {name} | {:.1} | {:.1} | {:.2} | {:.2}× |",
                            ms(totals[e]),
                            ms(ops[e]),
                            ms(first_plans[e]),
                            totals[0].as_secs_f64() / totals[e].as_secs_f64()
                        );
                    }
                }
            }
        }
    });
}
