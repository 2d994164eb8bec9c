//! `kiln sql QUERY`: SQL over Parquet, CSV and Arrow IPC files through
//! DataFusion, with kiln compiling the filters and projections it computes
//! with DataFusion's meaning (kiln-datafusion).

use kiln_cli::{Failure, Tier};

/// The arguments of `kiln sql`.
#[derive(clap::Args)]
#[cfg_attr(not(feature = "sql"), allow(dead_code))]
pub struct SqlArgs {
    /// The query. A table is a file named in quotes (`FROM 'trips.parquet'`)
    /// or a name given with --table. It may start with `-` (a `--` comment).
    #[arg(allow_hyphen_values = true)]
    query: String,
    /// A name for a file: `--table lineitem=data/lineitem.parquet`. The
    /// format follows the extension: `.parquet`, `.csv` (with a header row),
    /// `.arrow`/`.ipc`/`.feather` (Arrow IPC file format).
    #[arg(long = "table", value_name = "NAME=FILE")]
    tables: Vec<String>,
    /// DataFusion alone, without kiln (to compare).
    #[arg(long)]
    no_kiln: bool,
    /// Print which filter and projection expressions kiln compiles and which
    /// DataFusion keeps (with the reason), and the physical plan; do not run.
    #[arg(long)]
    explain: bool,
    /// The engine that compiles the expressions.
    #[arg(long, value_parser = kiln_cli::tier_parser(), default_value = "auto")]
    tier: Tier,
    /// The partitions DataFusion splits the work into (default: one per core).
    #[arg(long, value_name = "N")]
    partitions: Option<usize>,
    /// How to print the result.
    #[arg(long, value_enum, default_value = "csv")]
    format: OutputFormat,
    /// Print to stderr the time spent planning (kiln compiles while planning),
    /// running, and inside the filter and projection operators.
    #[arg(long)]
    timing: bool,
}

/// `kiln sql --format` values.
#[derive(Copy, Clone, Debug, clap::ValueEnum)]
#[cfg_attr(not(feature = "sql"), allow(dead_code))]
enum OutputFormat {
    /// CSV with a header row, written batch by batch as the query produces them.
    Csv,
    /// A table drawn with borders (the whole result is held in memory).
    Table,
}

/// Runs `kiln sql`.
pub fn run(args: &SqlArgs) -> Result<(), Failure> {
    #[cfg(feature = "sql")]
    return imp::run(args);
    #[cfg(not(feature = "sql"))]
    {
        let _ = args;
        Err(Failure::Input(
            "error: kiln sql: this kiln was built without DataFusion: build it with `--features sql` (`cargo run --features llvm,sql --bin kiln -- sql …`)".into(),
        ))
    }
}

/// DataFusion's side of `kiln sql`.
#[cfg(feature = "sql")]
mod imp {
    use super::{OutputFormat, SqlArgs, Tier};
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::datasource::file_format::options::ArrowReadOptions;
    use datafusion::error::DataFusionError;
    use datafusion::execution::session_state::SessionStateBuilder;
    use datafusion::physical_plan::{displayable, execute_stream};
    use datafusion::prelude::{CsvReadOptions, ParquetReadOptions, SessionConfig, SessionContext};
    use futures::StreamExt;
    use kiln_cli::Failure;
    use std::io::Write;
    use std::path::Path;
    use std::time::{Duration, Instant};

    /// A DataFusion error as a failure: planning errors (SQL, unknown tables or
    /// columns, unreadable files) are bad input, the rest happen while running.
    fn planning(e: DataFusionError) -> Failure {
        Failure::Input(format!("error: {}", e.strip_backtrace()))
    }

    fn running(e: DataFusionError) -> Failure {
        Failure::Run(format!("error: {}", e.strip_backtrace()))
    }

    pub fn run(args: &SqlArgs) -> Result<(), Failure> {
        let tier = kiln_cli::built(args.tier)?;
        if args.partitions == Some(0) {
            return Err(Failure::Input(
                "error: --partitions must be at least 1".into(),
            ));
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| Failure::Run(format!("error: cannot start the runtime: {e}")))?;
        runtime.block_on(query(args, tier))
    }

    async fn query(args: &SqlArgs, tier: Tier) -> Result<(), Failure> {
        let mut config = SessionConfig::new();
        if let Some(n) = args.partitions {
            config = config.with_target_partitions(n);
        }
        let mut state = SessionStateBuilder::new()
            .with_config(config)
            .with_default_features();
        if !args.no_kiln {
            state = kiln_datafusion::enable_with(state, kiln_datafusion::Options { tier });
        }
        // Quoted file names in FROM are tables (DataFusion's URL tables).
        let ctx = SessionContext::new_with_state(state.build()).enable_url_table();
        for table in &args.tables {
            register(&ctx, table).await?;
        }

        let start = Instant::now();
        let frame = ctx.sql(&args.query).await.map_err(planning)?;
        let plan = frame.create_physical_plan().await.map_err(planning)?;
        let planned = start.elapsed();

        if args.explain {
            let mut out = String::new();
            for decision in kiln_datafusion::decisions(&plan) {
                out.push_str(&format!("{decision}\n"));
            }
            out.push_str(&format!(
                "\nphysical plan:\n{}",
                displayable(plan.as_ref()).indent(true)
            ));
            return write_out(out.as_bytes());
        }

        let start = Instant::now();
        let task = ctx.task_ctx();
        let rows = match args.format {
            OutputFormat::Csv => {
                let mut stream = execute_stream(plan.clone(), task).map_err(running)?;
                let stdout = std::io::stdout();
                let mut writer = datafusion::arrow::csv::Writer::new(stdout.lock());
                let mut rows = 0;
                while let Some(batch) = stream.next().await {
                    let batch = batch.map_err(running)?;
                    rows += batch.num_rows();
                    writer.write(&batch).map_err(|e| output_err(&e))?;
                }
                if rows == 0 {
                    // Still a header, so an empty result is a valid CSV file.
                    let empty = datafusion::arrow::array::RecordBatch::new_empty(plan.schema());
                    writer.write(&empty).map_err(|e| output_err(&e))?;
                }
                rows
            }
            OutputFormat::Table => {
                let batches = datafusion::physical_plan::collect(plan.clone(), task)
                    .await
                    .map_err(running)?;
                let table = pretty_format_batches(&batches).map_err(|e| output_err(&e))?;
                write_out(format!("{table}\n").as_bytes())?;
                batches.iter().map(|b| b.num_rows()).sum()
            }
        };
        let ran = start.elapsed();
        if args.timing {
            let compiled = kiln_datafusion::decisions(&plan)
                .iter()
                .filter(|d| d.declined.is_none())
                .count();
            let operators = kiln_datafusion::filter_projection_time(&plan);
            eprintln!(
                "rows: {rows}; plan: {:.3} ms ({compiled} expressions compiled by kiln); run: {:.3} ms; \
                 in filters and projections: {:.3} ms (all partitions)",
                ms(planned),
                ms(ran),
                ms(operators),
            );
        }
        Ok(())
    }

    fn ms(d: Duration) -> f64 {
        d.as_secs_f64() * 1e3
    }

    fn output_err(e: &dyn std::fmt::Display) -> Failure {
        Failure::Run(format!("error: writing the result: {e}"))
    }

    fn write_out(bytes: &[u8]) -> Result<(), Failure> {
        let mut out = std::io::stdout().lock();
        out.write_all(bytes)
            .and_then(|()| out.flush())
            .map_err(|e| output_err(&e))
    }

    /// Registers `NAME=FILE` as a table, reading the format from the extension.
    async fn register(ctx: &SessionContext, spec: &str) -> Result<(), Failure> {
        let Some((name, file)) = spec.split_once('=') else {
            return Err(Failure::Input(format!(
                "error: --table {spec}: expected NAME=FILE"
            )));
        };
        let (name, file) = (name.trim(), file.trim());
        if name.is_empty() {
            return Err(Failure::Input(format!(
                "error: --table {spec}: the name is empty"
            )));
        }
        let path = Path::new(file);
        if !path.is_file() {
            return Err(Failure::Input(format!(
                "error: --table {name}: {file}: no such file"
            )));
        }
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        // The listing table only reads files with the extension it is told.
        let dotted = format!(".{ext}");
        let registered = match ext.to_ascii_lowercase().as_str() {
            "parquet" => {
                let options = ParquetReadOptions {
                    file_extension: &dotted,
                    ..Default::default()
                };
                ctx.register_parquet(name, file, options).await
            }
            "csv" => {
                let options = CsvReadOptions::new().file_extension(&dotted);
                ctx.register_csv(name, file, options).await
            }
            "arrow" | "ipc" | "feather" => {
                let options = ArrowReadOptions {
                    file_extension: &dotted,
                    ..Default::default()
                };
                ctx.register_arrow(name, file, options).await
            }
            _ => {
                return Err(Failure::Input(format!(
                    "error: --table {name}: {file}: unknown format (expected .parquet, .csv, .arrow, .ipc or .feather)"
                )))
            }
        };
        registered
            .map_err(|e| Failure::Input(format!("error: --table {name}: {}", e.strip_backtrace())))
    }
}
