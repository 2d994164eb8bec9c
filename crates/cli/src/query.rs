//! `kiln query FILE QUERY`: a compiled filter streamed over a CSV, Arrow IPC or
//! Parquet file, batch by batch, so files larger than memory work.

use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::{ArrowError, SchemaRef};
use kiln_arrow::Filter;
use kiln_cli::{Failure, Tier};
use std::fs::File;
use std::io::{BufReader, IsTerminal, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The arguments of `kiln query`.
#[derive(clap::Args)]
pub struct QueryArgs {
    /// The data: `.csv` (with a header row), Arrow IPC (`.arrow`, `.feather`,
    /// `.ipc`, file or stream format) or `.parquet`.
    file: PathBuf,
    /// The condition, in pandas' query syntax: `"(x > 2.0) & (x < 6.0)"`. It
    /// may start with `-` (`"-x > 2"`).
    #[arg(allow_hyphen_values = true)]
    query: String,
    /// The columns to print, comma-separated (default: all).
    #[arg(long, value_name = "COLS", value_delimiter = ',')]
    select: Vec<String>,
    /// Print only the number of matching rows.
    #[arg(long)]
    count: bool,
    /// The engine that runs the condition.
    #[arg(long, value_parser = kiln_cli::tier_parser(), default_value = "auto")]
    tier: Tier,
    /// Rows per batch.
    #[arg(long, default_value_t = 65_536, value_name = "ROWS")]
    batch_size: usize,
    /// Never draw the progress line (it is drawn only when stderr is a terminal).
    #[arg(long)]
    no_progress: bool,
    /// Threads each batch's kernel may use (default: KILN_NUM_THREADS, else
    /// every core); a batch too small to pay for threads runs on one.
    #[arg(long, value_name = "N", value_parser = kiln_cli::threads_parser())]
    pub threads: Option<usize>,
}

/// How far a scan has got, for the progress line.
struct Progress {
    /// Bytes of the file read so far (CSV), or rows decoded (IPC, Parquet).
    done: Arc<AtomicU64>,
    /// What `done` counts up to.
    total: u64,
    unit: &'static str,
}

/// Counts the bytes a reader hands out.
struct Counting<R> {
    inner: R,
    done: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.done.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

fn input_err(path: &Path, e: impl std::fmt::Display) -> Failure {
    Failure::Input(format!("error: {}: {e}", path.display()))
}

enum Format {
    Csv,
    Ipc,
    Parquet,
}

fn format_of(path: &Path, file: &mut File) -> Result<Format, Failure> {
    let mut magic = [0u8; 6];
    let got = file.read(&mut magic).map_err(|e| input_err(path, e))?;
    file.seek(SeekFrom::Start(0))
        .map_err(|e| input_err(path, e))?;
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    Ok(if got >= 4 && &magic[..4] == b"PAR1" {
        Format::Parquet
    } else if (got == 6 && &magic == b"ARROW1")
        || matches!(ext.as_str(), "arrow" | "feather" | "ipc" | "arrows")
    {
        Format::Ipc
    } else if matches!(ext.as_str(), "csv" | "txt" | "") {
        Format::Csv
    } else if ext == "parquet" {
        return Err(input_err(path, "not a Parquet file (no PAR1 magic)"));
    } else {
        return Err(input_err(
            path,
            "unknown format: give a .csv, .arrow/.feather/.ipc or .parquet file",
        ));
    })
}

type Batches = Box<dyn RecordBatchReader + Send>;

/// Opens `path` as a stream of record batches.
fn open(path: &Path, batch_size: usize) -> Result<(Batches, Progress), Failure> {
    let mut file = File::open(path).map_err(|e| input_err(path, e))?;
    let size = file.metadata().map_err(|e| input_err(path, e))?.len();
    let done = Arc::new(AtomicU64::new(0));
    match format_of(path, &mut file)? {
        Format::Csv => {
            // The schema comes from the first 1,000 rows; a later row that does
            // not fit it is an error naming the line.
            let (schema, _) = arrow_csv::reader::Format::default()
                .with_header(true)
                .infer_schema(BufReader::new(&mut file), Some(1000))
                .map_err(|e| input_err(path, e))?;
            file.seek(SeekFrom::Start(0))
                .map_err(|e| input_err(path, e))?;
            let reader = arrow_csv::ReaderBuilder::new(Arc::new(schema))
                .with_header(true)
                .with_batch_size(batch_size)
                .build(BufReader::with_capacity(
                    1 << 20,
                    Counting {
                        inner: file,
                        done: done.clone(),
                    },
                ))
                .map_err(|e| input_err(path, e))?;
            Ok((
                Box::new(reader),
                Progress {
                    done,
                    total: size,
                    unit: "bytes",
                },
            ))
        }
        Format::Ipc => {
            let mut magic = [0u8; 6];
            let is_file = file
                .read(&mut magic)
                .is_ok_and(|n| n == 6 && &magic == b"ARROW1");
            file.seek(SeekFrom::Start(0))
                .map_err(|e| input_err(path, e))?;
            if is_file {
                let reader = arrow_ipc::reader::FileReader::try_new(BufReader::new(file), None)
                    .map_err(|e| input_err(path, e))?;
                let total = reader.num_batches() as u64;
                let counted = Counted::new(reader, done.clone(), false);
                Ok((
                    Box::new(counted),
                    Progress {
                        done,
                        total,
                        unit: "batches",
                    },
                ))
            } else {
                // A stream does not say how long it is: the line shows rows only.
                let reader = arrow_ipc::reader::StreamReader::try_new(BufReader::new(file), None)
                    .map_err(|e| input_err(path, e))?;
                let counted = Counted::new(reader, done.clone(), false);
                Ok((
                    Box::new(counted),
                    Progress {
                        done,
                        total: 0,
                        unit: "batches",
                    },
                ))
            }
        }
        Format::Parquet => {
            let builder =
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                    .map_err(|e| input_err(path, e))?;
            let rows = builder.metadata().file_metadata().num_rows().max(0) as u64;
            let reader = builder
                .with_batch_size(batch_size)
                .build()
                .map_err(|e| input_err(path, e))?;
            Ok((
                Box::new(Counted::new(reader, done.clone(), true)),
                Progress {
                    done,
                    total: rows,
                    unit: "rows",
                },
            ))
        }
    }
}

/// A batch reader that counts what it hands out (batches or rows).
struct Counted<R> {
    inner: R,
    done: Arc<AtomicU64>,
    rows: bool,
}

impl<R> Counted<R> {
    fn new(inner: R, done: Arc<AtomicU64>, rows: bool) -> Self {
        Counted { inner, done, rows }
    }
}

impl<R: RecordBatchReader> Iterator for Counted<R> {
    type Item = Result<RecordBatch, ArrowError>;
    fn next(&mut self) -> Option<Self::Item> {
        let item = self.inner.next();
        if let Some(Ok(b)) = &item {
            let step = if self.rows { b.num_rows() as u64 } else { 1 };
            self.done.fetch_add(step, Ordering::Relaxed);
        }
        item
    }
}

impl<R: RecordBatchReader> RecordBatchReader for Counted<R> {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }
}

/// Runs `kiln query`.
pub fn run(args: &QueryArgs) -> Result<(), Failure> {
    if let Some(n) = args.threads {
        kiln::threads::set_num_threads(n);
    }
    let tier = kiln_cli::built(args.tier)?;
    if args.batch_size == 0 {
        return Err(Failure::Input(
            "error: --batch-size must be at least 1".into(),
        ));
    }
    let condition = kiln_arrow::query::parse(&args.query)
        .map_err(|e| Failure::Input(format!("error: query: {e}")))?;
    let (reader, progress) = open(&args.file, args.batch_size)?;
    let schema = reader.schema();
    let filter = Filter::make_with(schema.clone(), &condition, tier)
        .map_err(|e| Failure::Input(format!("error: {e}")))?;
    let selected: Vec<usize> = if args.select.is_empty() {
        (0..schema.fields().len()).collect()
    } else {
        args.select
            .iter()
            .map(|name| {
                schema.index_of(name.trim()).map_err(|_| {
                    let names: Vec<&str> =
                        schema.fields().iter().map(|f| f.name().as_str()).collect();
                    Failure::Input(format!(
                        "error: --select: no column `{name}` (the columns are {})",
                        names.join(", ")
                    ))
                })
            })
            .collect::<Result<_, _>>()?
    };
    let out_schema = Arc::new(
        schema
            .project(&selected)
            .map_err(|e| Failure::Input(format!("error: {e}")))?,
    );
    let show_progress = !args.no_progress && std::io::stderr().is_terminal();
    let stdout = std::io::stdout();
    let mut writer = (!args.count).then(|| {
        arrow_csv::WriterBuilder::new()
            .with_header(true)
            .build(std::io::BufWriter::with_capacity(1 << 16, stdout.lock()))
    });
    let (mut scanned, mut matched) = (0u64, 0u64);
    let start = Instant::now();
    let mut last_draw = start;
    for batch in reader {
        let batch = batch.map_err(|e| input_err(&args.file, e))?;
        scanned += batch.num_rows() as u64;
        let run_err = |e: kiln_arrow::Error| match e {
            kiln_arrow::Error::DivisionByZero { .. } => Failure::Run(format!("error: {e}")),
            e => Failure::Input(format!("error: {e}")),
        };
        if let Some(writer) = writer.as_mut() {
            let indices = filter.evaluate(&batch).map_err(run_err)?;
            matched += indices.len() as u64;
            if !indices.is_empty() {
                let columns = selected
                    .iter()
                    .map(|&c| arrow_select::take::take(batch.column(c), &indices, None))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| Failure::Run(format!("error: {e}")))?;
                let out = RecordBatch::try_new(out_schema.clone(), columns)
                    .map_err(|e| Failure::Run(format!("error: {e}")))?;
                writer.write(&out).map_err(write_err)?;
            }
        } else {
            matched += filter.count(&batch).map_err(run_err)? as u64;
        }
        if show_progress && last_draw.elapsed() > Duration::from_millis(200) {
            last_draw = Instant::now();
            draw(&progress, scanned, matched, start);
        }
    }
    if show_progress {
        eprint!("\r\x1b[2K");
    }
    match writer {
        Some(mut w) if matched == 0 => {
            // Nothing matched: still print the header.
            w.write(&RecordBatch::new_empty(out_schema))
                .map_err(write_err)?;
        }
        Some(_) => {}
        None => println!("{matched}"),
    }
    std::io::stdout()
        .flush()
        .map_err(|e| Failure::Run(format!("error: {e}")))?;
    Ok(())
}

fn write_err(e: ArrowError) -> Failure {
    Failure::Run(format!("error: writing the output: {e}"))
}

fn draw(p: &Progress, scanned: u64, matched: u64, start: Instant) {
    let done = p.done.load(Ordering::Relaxed);
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    let pct = if p.total > 0 {
        format!(" {:5.1}%", 100.0 * done as f64 / p.total as f64)
    } else {
        String::new()
    };
    let _ = write!(
        std::io::stderr(),
        "\r\x1b[2K{pct} {scanned} rows scanned, {matched} matched, {:.1} M rows/s ({done} of {} {})",
        scanned as f64 / secs / 1e6,
        p.total,
        p.unit
    );
}
