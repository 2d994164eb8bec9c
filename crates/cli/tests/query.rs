//! `kiln query` end to end over CSV, Arrow IPC and Parquet files (the IPC and
//! Parquet files were written by pyarrow: tests/fixtures/arrow/make_files.py).

mod common;

use common::{fails, fixture, kiln, ok, tiers};

fn temp_csv(name: &str, contents: &str) -> String {
    let dir = std::env::temp_dir().join(format!("kiln-query-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, contents).expect("temp file");
    path.display().to_string()
}

const SEED: &str = "(x > 2.0) & (x < 6.0)";

#[test]
fn the_seed_query_on_a_parquet_file_written_by_pyarrow() {
    for tier in tiers() {
        let out = ok(&kiln(&[
            "query",
            &fixture("seed.parquet"),
            SEED,
            "--tier",
            tier,
        ]));
        assert_eq!(
            out,
            "x,k,big,flag,name,day\n\
             3.0,4,1000000000003,true,d,2022-01-11\n\
             4.0,5,1000000000004,true,e,2022-01-12\n\
             5.0,6,1000000000005,false,f,2022-01-13\n",
            "{tier}"
        );
    }
}

#[test]
fn a_query_may_start_with_a_minus() {
    let out = ok(&kiln(&[
        "query",
        &fixture("seed.parquet"),
        "-x > -2.0",
        "--select",
        "x",
    ]));
    assert_eq!(out, "x\n0.0\n1.0\n");
}

#[test]
fn nulls_select_and_count_on_arrow_ipc() {
    let ipc = fixture("seed.arrow");
    // flag: T F N T T F T N F T; k: 1 2 N 4 5 6 N 8 9 10 (4-row batches).
    let out = ok(&kiln(&[
        "query",
        &ipc,
        "flag & (k > 3) | (day == 19009)",
        "--select",
        "x,flag",
    ]));
    assert_eq!(out, "x,flag\n3.0,true\n4.0,true\n9.0,true\n");
    let out = ok(&kiln(&["query", &ipc, "k.isnull() | ~flag", "--count"]));
    // isnull(k): rows 2, 6; ~flag: true at 1, 5, 8, null at 2, 7. Row 7 is
    // `false | null` = null: not kept. So rows 1, 2, 5, 6, 8.
    assert_eq!(out, "5\n");
    let out = ok(&kiln(&[
        "query",
        &fixture("seed.parquet"),
        "big - 1000000000000 >= 8",
        "--count",
    ]));
    assert_eq!(out, "2\n");
}

#[test]
fn csv_streams_in_small_batches() {
    let mut csv = String::from("x,k\n");
    for i in 0..1000 {
        csv.push_str(&format!("{}.5,{}\n", i, i % 7));
    }
    let path = temp_csv("many.csv", &csv);
    for tier in tiers() {
        let out = ok(&kiln(&[
            "query",
            &path,
            "(x > 100) & (k == 3)",
            "--count",
            "--batch-size",
            "64",
            "--tier",
            tier,
        ]));
        let want = (0..1000)
            .filter(|i| *i as f64 + 0.5 > 100.0 && i % 7 == 3)
            .count();
        assert_eq!(out, format!("{want}\n"), "{tier}");
    }
    let out = ok(&kiln(&["query", &path, "x > 1e9"]));
    assert_eq!(out, "x,k\n", "no match still prints the header");
}

#[test]
fn bad_queries_and_files_exit_2_and_division_by_zero_exits_1() {
    let pq = fixture("seed.parquet");
    fails(&kiln(&["query", &pq, "y > 1"]), 2, "no column `y`");
    fails(&kiln(&["query", &pq, "name > 1"]), 2, "Utf8");
    fails(&kiln(&["query", &pq, "x >"]), 2, "query");
    fails(&kiln(&["query", &pq, "x + 1"]), 2, "must be bool");
    fails(
        &kiln(&["query", &pq, SEED, "--select", "x,zz"]),
        2,
        "no column `zz`",
    );
    fails(
        &kiln(&["query", &pq, SEED, "--batch-size", "0"]),
        2,
        "batch-size",
    );
    fails(
        &kiln(&["query", "/nonexistent.csv", SEED]),
        2,
        "nonexistent",
    );
    fails(
        &kiln(&["query", &temp_csv("bad.parquet", "not parquet"), SEED]),
        2,
        "PAR1",
    );
    fails(
        &kiln(&["query", &temp_csv("ragged.csv", "x,k\n1,2\n3\n"), "x > 0"]),
        2,
        "ragged.csv",
    );
    fails(
        &kiln(&["query", &pq, "10 // (k - 1) > 1"]),
        1,
        "division by zero",
    );
    if !cfg!(feature = "llvm") {
        fails(
            &kiln(&["query", &pq, SEED, "--tier", "llvm"]),
            2,
            "--features llvm",
        );
    }
}

/// `kiln query` knows every elementwise name `kiln eval` knows, and pandas'
/// precedence.
#[test]
fn queries_know_inf_nan_and_the_float_tests_with_pandas_precedence() {
    let csv = temp_csv("inf.csv", "a,b\n-inf,1.0\n1.0,2.0\nnan,-1.0\n3.0,4.0\n");
    for tier in tiers() {
        let out = kiln(&["query", &csv, "isinf(a) | isnan(a)", "--tier", tier]);
        assert_eq!(ok(&out), "a,b\n-inf,1.0\nNaN,-1.0\n");
        let out = kiln(&["query", &csv, "a > 0 & b > 2", "--count", "--tier", tier]);
        assert_eq!(ok(&out), "1\n");
        let out = kiln(&["query", &csv, "a > -inf", "--count", "--tier", tier]);
        assert_eq!(ok(&out), "2\n");
    }
}
