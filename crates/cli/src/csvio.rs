//! CSV in and out for `kiln eval`: graph inputs are read as columns by name;
//! outputs are written one per CSV column.

use crate::Failure;
use kiln::ir::scalar::parse_scalar;
use kiln::{Buffer, Data, Graph};
use std::io::Write;
use std::path::Path;

/// The CSV's columns, by header name.
pub struct Table {
    headers: Vec<String>,
    rows: Vec<csv::StringRecord>,
}

/// Reads a whole CSV file with a header row.
pub fn read(path: &Path) -> Result<Table, Failure> {
    let bad = |e: csv::Error| Failure::Input(format!("{}: error: {e}", path.display()));
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_path(path)
        .map_err(bad)?;
    let headers = reader
        .headers()
        .map_err(bad)?
        .iter()
        .map(str::to_string)
        .collect();
    let rows = reader
        .records()
        .collect::<Result<Vec<_>, _>>()
        .map_err(bad)?;
    Ok(Table { headers, rows })
}

impl Table {
    /// The header names.
    pub fn headers(&self) -> &[String] {
        &self.headers
    }

    /// Number of data rows.
    pub fn n_rows(&self) -> usize {
        self.rows.len()
    }

    /// Column `name` parsed as `dtype`.
    pub fn column(&self, path: &Path, name: &str, dtype: kiln::DType) -> Result<Data, Failure> {
        let col_idx = self.headers.iter().position(|h| h == name).ok_or_else(|| {
            Failure::Input(format!(
                "{}: error: no column `{name}` (the columns are: {})",
                path.display(),
                self.headers.join(", ")
            ))
        })?;
        let mut buf = Buffer::with_capacity(dtype, self.rows.len());
        for (row_idx, row) in self.rows.iter().enumerate() {
            let cell = row.get(col_idx).unwrap_or("");
            let value = parse_scalar(cell, dtype).map_err(|e| {
                // Line 1 is the header.
                Failure::Input(format!(
                    "{}:{}: error: column `{name}`: {e}",
                    path.display(),
                    row_idx + 2
                ))
            })?;
            buf.push(value);
        }
        Ok(Data::Column(buf))
    }
}

/// Writes the outputs as CSV: output `k`'s `i`-th element in row `i`, column `k`.
/// A scalar is a one-element column; shorter outputs leave their cells empty.
pub fn write(out: &mut dyn Write, graph: &Graph, outputs: &[Data]) -> Result<(), Failure> {
    let io = |e: csv::Error| Failure::Input(format!("error: writing CSV: {e}"));
    let mut writer = csv::Writer::from_writer(out);
    // A `[rows, k]` output (a model's classes) is k columns `name_0`, ….
    let mut headers = Vec::new();
    let mut cells: Vec<Vec<String>> = Vec::new();
    for (output, data) in graph.outputs().iter().zip(outputs) {
        let all = cells_of(data);
        let width = match graph
            .ty(output.value)
            .as_tensor()
            .map(|t| t.shape.as_slice())
        {
            Some([_, kiln::Dim::Fixed(k)]) if *k > 1 => *k as usize,
            _ => 1,
        };
        if width == 1 {
            headers.push(output.name.clone());
            cells.push(all);
            continue;
        }
        for col in 0..width {
            headers.push(format!("{}_{col}", output.name));
            cells.push(all.iter().skip(col).step_by(width).cloned().collect());
        }
    }
    writer.write_record(&headers).map_err(io)?;
    let n_rows = cells.iter().map(Vec::len).max().unwrap_or(0);
    for row_idx in 0..n_rows {
        writer
            .write_record(
                cells
                    .iter()
                    .map(|c| c.get(row_idx).map_or("", String::as_str)),
            )
            .map_err(io)?;
    }
    writer
        .flush()
        .map_err(|e| Failure::Input(format!("error: writing CSV: {e}")))
}

fn cells_of(data: &Data) -> Vec<String> {
    match data {
        Data::Scalar(s) => vec![s.readable().to_string()],
        Data::Column(b) => b.iter().map(|s| s.readable().to_string()).collect(),
        Data::Selection(rows) => rows.iter().map(u32::to_string).collect(),
    }
}
