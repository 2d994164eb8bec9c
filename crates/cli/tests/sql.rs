//! `kiln sql` end to end: SQL over the Parquet and Arrow IPC files pyarrow
//! wrote (tests/fixtures/arrow) and over CSV, with kiln on (every tier) and
//! off, `--explain`, and the errors.

mod common;

use common::{fails, fixture, ok, tiers};
use std::path::PathBuf;
use std::process::Output;

/// Runs `kiln sql` with `args`.
fn kiln(args: &[&str]) -> Output {
    common::kiln(&[&["sql"], args].concat())
}

/// The seed table (x = 0 … 9, k with nulls at rows 2 and 6, day =
/// 2022-01-08 + row): rows with 2 < x < 6, and a computed column.
const SEED_SQL: &str = "SELECT x, k, k * 2 + 1 AS k2, day + 1 AS next FROM {t} \
                        WHERE x > 2.0 AND x < 6.0 ORDER BY x";
const SEED_ROWS: &str = "x,k,k2,next\n\
                         3.0,4,9,2022-01-12\n\
                         4.0,5,11,2022-01-13\n\
                         5.0,6,13,2022-01-14\n";

#[test]
fn sql_over_a_parquet_file_named_in_from() {
    let sql = SEED_SQL.replace("{t}", &format!("'{}'", fixture("seed.parquet")));
    for tier in tiers() {
        assert_eq!(ok(&kiln(&[&sql, "--tier", tier])), SEED_ROWS, "{tier}");
    }
    assert_eq!(ok(&kiln(&[&sql, "--no-kiln"])), SEED_ROWS);
}

#[test]
fn sql_may_start_with_a_comment() {
    let sql = format!(
        "-- the seed rows\n{}",
        SEED_SQL.replace("{t}", &format!("'{}'", fixture("seed.parquet")))
    );
    assert_eq!(ok(&kiln(&[&sql])), SEED_ROWS);
}

#[test]
fn sql_over_arrow_ipc_and_csv_tables() {
    let sql = SEED_SQL.replace("{t}", "seed");
    let arrow = format!("seed={}", fixture("seed.arrow"));
    for tier in tiers() {
        assert_eq!(
            ok(&kiln(&[&sql, "--table", &arrow, "--tier", tier])),
            SEED_ROWS,
            "{tier}"
        );
    }
    let dir = std::env::temp_dir().join(format!("kiln-sql-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let csv = dir.join("points.csv");
    std::fs::write(&csv, "a,b\n1,2.5\n-4,0.5\n7,-1.0\n,3.0\n").unwrap();
    let table = format!("p={}", csv.display());
    // A null `a` with b > 2.75 passes: OR is three-valued.
    let sql = "SELECT p.a, p.b * 2 AS b2 FROM p WHERE p.a > 0 OR p.b > 2.75 ORDER BY p.b";
    for tier in tiers() {
        let out = ok(&kiln(&[sql, "--table", &table, "--tier", tier]));
        assert_eq!(out, "a,b2\n7,-2.0\n1,5.0\n,6.0\n", "{tier}");
    }
    let out = ok(&kiln(&[sql, "--table", &table, "--no-kiln"]));
    assert_eq!(out, "a,b2\n7,-2.0\n1,5.0\n,6.0\n");
}

#[test]
fn explain_says_which_expressions_kiln_compiles() {
    let table = format!("seed={}", fixture("seed.parquet"));
    let sql = "SELECT x * 2 AS x2, upper(name) AS n FROM seed WHERE x > 2.0 AND name LIKE 'd%'";
    let out = ok(&kiln(&["--explain", "--table", &table, sql]));
    assert!(out.contains("ProjectionExec: kiln: x@0 * 2"), "{out}");
    assert!(
        out.contains("ProjectionExec: DataFusion: upper(name@1)"),
        "{out}"
    );
    // The filter mixes a string match kiln does not do: DataFusion keeps it.
    assert!(
        out.contains("FilterExec: DataFusion: x@0 > 2 AND name@1 LIKE d%"),
        "{out}"
    );
    assert!(out.contains("physical plan:"), "{out}");
    let out = ok(&kiln(&["--explain", "--no-kiln", "--table", &table, sql]));
    assert!(out.contains("kiln is not enabled here"), "{out}");
    assert!(!out.contains(": kiln:"), "{out}");
}

#[test]
fn table_format_and_timing() {
    let sql = format!(
        "SELECT count(*) AS n FROM '{}' WHERE k IS NOT NULL AND x >= 5",
        fixture("seed.parquet")
    );
    let out = kiln(&[&sql, "--format", "table", "--timing", "--partitions", "2"]);
    let table = ok(&out);
    assert_eq!(table, "+---+\n| n |\n+---+\n| 4 |\n+---+\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rows: 1; plan:") && err.contains("1 expressions compiled by kiln"),
        "{err}"
    );
    // An empty result is still a CSV file with its header.
    let empty = sql
        .replace("x >= 5", "x > 100")
        .replace("count(*) AS n", "x");
    assert_eq!(ok(&kiln(&[&empty])), "x\n");
}

#[test]
fn bad_input_is_a_clear_error() {
    let parquet = fixture("seed.parquet");
    fails(&kiln(&["SELEC x FROM t"]), 2, "SELEC");
    fails(&kiln(&["SELECT x FROM nowhere"]), 2, "nowhere");
    let sql = format!("SELECT nope FROM '{parquet}'");
    fails(&kiln(&[&sql]), 2, "nope");
    fails(
        &kiln(&["SELECT 1", "--table", "seed"]),
        2,
        "expected NAME=FILE",
    );
    fails(
        &kiln(&["SELECT 1", "--table", "=x.csv"]),
        2,
        "the name is empty",
    );
    fails(
        &kiln(&["SELECT 1", "--table", "t=/no/such.parquet"]),
        2,
        "no such file",
    );
    let readme = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let table = format!("t={}", readme.display());
    fails(&kiln(&["SELECT 1", "--table", &table]), 2, "unknown format");
    fails(&kiln(&["SELECT 1", "--partitions", "0"]), 2, "--partitions");
    // Integer division by zero while running: DataFusion's error, exit 1.
    let sql = format!("SELECT k / (k - k) FROM '{parquet}'");
    fails(&kiln(&[&sql]), 1, "Divide by zero");
    if !cfg!(feature = "llvm") {
        fails(&kiln(&["SELECT 1", "--tier", "llvm"]), 2, "llvm");
    }
}
