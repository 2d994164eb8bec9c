//! SQL through DataFusion with kiln on and off: the same results, bit for
//! bit, and kiln computing the expressions it should.

use arrow_array::{
    Array, ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float32Array, Float64Array,
    Int32Array, Int64Array, RecordBatch, StringArray,
};
use arrow_schema::DataType;
use datafusion::datasource::MemTable;
use datafusion::prelude::{SessionConfig, SessionContext};
use std::sync::Arc;

const ROWS: usize = 4000;

/// Columns with the values where DataFusion's and kiln's own meanings part:
/// NaN, -0.0, infinities, integer extremes, nulls everywhere.
fn batch(part: usize) -> RecordBatch {
    let specials = [
        f64::NAN,
        -0.0,
        0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1.5,
        -2.5,
        2.0,
        f64::MAX,
        5e-324,
    ];
    let id = (0..ROWS).map(|i| (part * ROWS + i) as i64);
    let x = Float64Array::from_iter((0..ROWS).map(|i| {
        (i % 13 != 0).then(|| {
            if i % 3 == 0 {
                specials[i % specials.len()]
            } else {
                (i as f64 * 0.37).sin() * 10.0
            }
        })
    }));
    let y = Float32Array::from_iter((0..ROWS).map(|i| {
        (i % 11 != 0).then(|| {
            if i % 5 == 0 {
                specials[(i / 5) % specials.len()] as f32
            } else {
                (i as f32 * 0.11).cos() * 4.0
            }
        })
    }));
    let k = Int32Array::from_iter((0..ROWS).map(|i| {
        (i % 7 != 0).then(|| match i % 9 {
            0 => i32::MAX,
            1 => i32::MIN,
            _ => (i as i32 * 7919) % 200 - 100,
        })
    }));
    let n = Int64Array::from_iter((0..ROWS).map(|i| {
        (i % 17 != 0).then(|| match i % 10 {
            0 => i64::MAX,
            1 => i64::MIN,
            _ => (i as i64 * 104729) % 5000 - 2500,
        })
    }));
    let b = BooleanArray::from_iter((0..ROWS).map(|i| (i % 5 != 0).then_some(i % 3 == 1)));
    let d = Date32Array::from_iter(
        (0..ROWS).map(|i| (i % 19 != 0).then_some(8000 + (i as i32 % 3000))),
    );
    let m = Decimal128Array::from_iter(
        (0..ROWS).map(|i| (i % 23 != 0).then_some((i as i128 * 7727) % 1_000_000 - 500_000)),
    )
    .with_precision_and_scale(15, 2)
    .unwrap();
    let s = StringArray::from_iter((0..ROWS).map(|i| (i % 4 != 0).then(|| format!("s{}", i % 10))));
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("id", Arc::new(Int64Array::from_iter_values(id))),
        ("x", Arc::new(x)),
        ("y", Arc::new(y)),
        ("k", Arc::new(k)),
        ("n", Arc::new(n)),
        ("b", Arc::new(b)),
        ("d", Arc::new(d)),
        ("m", Arc::new(m)),
        ("s", Arc::new(s)),
    ];
    RecordBatch::try_from_iter(columns).unwrap()
}

fn register(ctx: &SessionContext) {
    let parts: Vec<Vec<RecordBatch>> = (0..3).map(|p| vec![batch(p)]).collect();
    let schema = parts[0][0].schema();
    let table = MemTable::try_new(schema, parts).unwrap();
    ctx.register_table("t", Arc::new(table)).unwrap();
}

fn contexts() -> (SessionContext, Vec<SessionContext>) {
    let config = || SessionConfig::new().with_target_partitions(2);
    let plain = SessionContext::new_with_config(config());
    register(&plain);
    let kilns = kiln_datafusion::Tier::all()
        .map(|tier| {
            let ctx = kiln_datafusion::context_with(config(), kiln_datafusion::Options { tier });
            register(&ctx);
            ctx
        })
        .collect();
    (plain, kilns)
}

/// The rows of `batches` as bits: floats by their bit patterns (NaN and
/// -0.0 included), nulls as `None`.
fn cells(batches: &[RecordBatch]) -> Vec<Vec<Option<String>>> {
    let mut rows = Vec::new();
    for batch in batches {
        for r in 0..batch.num_rows() {
            let row = batch
                .columns()
                .iter()
                .map(|c| {
                    if c.is_null(r) {
                        return None;
                    }
                    Some(match c.data_type() {
                        DataType::Float64 => {
                            let v = c.as_any().downcast_ref::<Float64Array>().unwrap().value(r);
                            format!("f64:{:x}", v.to_bits())
                        }
                        DataType::Float32 => {
                            let v = c.as_any().downcast_ref::<Float32Array>().unwrap().value(r);
                            format!("f32:{:x}", v.to_bits())
                        }
                        t => format!("{t}:{}", arrow_cast_display(c, r)),
                    })
                })
                .collect();
            rows.push(row);
        }
    }
    rows
}

fn arrow_cast_display(c: &ArrayRef, r: usize) -> String {
    datafusion::common::ScalarValue::try_from_array(c, r)
        .unwrap()
        .to_string()
}

async fn run(
    ctx: &SessionContext,
    sql: &str,
) -> (Vec<RecordBatch>, Vec<kiln_datafusion::Decision>) {
    let df = ctx.sql(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    let plan = df.create_physical_plan().await.unwrap();
    let decisions = kiln_datafusion::decisions(&plan);
    let batches = datafusion::physical_plan::collect(plan, ctx.task_ctx())
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    (batches, decisions)
}

/// Runs `sql` with kiln off and on (every tier): the same rows, and
/// DataFusion keeps exactly `declined` of the filter and projection
/// expressions (kiln computes the others, at least one).
async fn check(sql: &str, declined: usize) {
    let (plain, kilns) = contexts();
    let (want, _) = run(&plain, sql).await;
    let want = cells(&want);
    assert!(!want.is_empty(), "{sql}: no rows to compare");
    for ctx in &kilns {
        let (got, decisions) = run(ctx, sql).await;
        let got = cells(&got);
        if got != want {
            let only = |a: &[Vec<Option<String>>], b: &[Vec<Option<String>>]| {
                a.iter()
                    .filter(|r| !b.contains(r))
                    .take(5)
                    .cloned()
                    .collect::<Vec<_>>()
            };
            panic!(
                "{sql}: {} rows, DataFusion {}; only kiln's: {:?}; only DataFusion's: {:?}",
                got.len(),
                want.len(),
                only(&got, &want),
                only(&want, &got)
            );
        }
        let shown: Vec<String> = decisions.iter().map(|d| d.to_string()).collect();
        let kept = decisions.iter().filter(|d| d.declined.is_some()).count();
        assert_eq!(kept, declined, "{sql}: {shown:#?}");
        assert!(
            decisions.len() > declined,
            "{sql}: kiln computes nothing: {shown:#?}"
        );
    }
}

#[tokio::test]
async fn float_comparisons_follow_arrows_total_order() {
    // NaN above +inf and equal to itself, -0.0 below +0.0.
    for op in ["<", "<=", ">", ">=", "=", "<>"] {
        check(&format!("SELECT id FROM t WHERE x {op} 0.0 ORDER BY id"), 0).await;
        check(
            &format!("SELECT id FROM t WHERE x {op} -0.0 ORDER BY id"),
            0,
        )
        .await;
        check(
            &format!("SELECT id FROM t WHERE x {op} CAST(y AS DOUBLE) ORDER BY id"),
            0,
        )
        .await;
        check(
            &format!("SELECT id, y {op} 'NaN'::float AS c FROM t ORDER BY id"),
            0,
        )
        .await;
        check(
            &format!("SELECT id, x {op} 'inf'::double AS c FROM t ORDER BY id"),
            0,
        )
        .await;
    }
    check("SELECT id FROM t WHERE x IS DISTINCT FROM y ORDER BY id", 0).await;
    check(
        "SELECT id FROM t WHERE x IS NOT DISTINCT FROM 'NaN'::double ORDER BY id",
        0,
    )
    .await;
    check(
        "SELECT id FROM t WHERE x IN (1.5, 'NaN'::double, -0.0) ORDER BY id",
        0,
    )
    .await;
    check("SELECT id FROM t WHERE x NOT IN (1.5, 2.0) ORDER BY id", 0).await;
}

#[tokio::test]
async fn in_lists_of_every_size_type_and_null() {
    // Past 16 values an IN list is a search of its sorted constants.
    let ks: Vec<String> = (-100..100).step_by(3).map(|v| v.to_string()).collect();
    let ks = ks.join(", ");
    check(
        &format!("SELECT id FROM t WHERE k IN ({ks}) ORDER BY id"),
        0,
    )
    .await;
    check(
        &format!("SELECT id, k NOT IN ({ks}, 2147483647) AS c FROM t ORDER BY id"),
        0,
    )
    .await;
    let ns: Vec<String> = (-2500..2500).step_by(7).map(|v| v.to_string()).collect();
    let ns = ns.join(", ");
    check(
        &format!("SELECT id FROM t WHERE n IN ({ns}, -9223372036854775808) ORDER BY id"),
        0,
    )
    .await;
    check("SELECT id, n IN (3, 5, -2497) AS c FROM t ORDER BY id", 0).await;
    check(
        "SELECT id, b IN (true, false, true, true) AS c FROM t ORDER BY id",
        0,
    )
    .await;
    // NULL in the list: true where found, else NULL (and NOT IN never true).
    check("SELECT id, k IN (3, NULL, -100) AS c FROM t ORDER BY id", 0).await;
    check("SELECT id, k NOT IN (3, NULL) AS c FROM t ORDER BY id", 0).await;
    // Floats: up to 3 values DataFusion's simplifier writes `=` chains,
    // which kiln computes; longer lists compare bits and stay DataFusion's.
    check(
        "SELECT id, x IN (0.0, 'NaN'::double, 1.5) AS c FROM t ORDER BY id",
        0,
    )
    .await;
    let xs = "1.5, -2.5, 2.0, 'inf'::double, 'NaN'::double, 0.0, 5e-324, 1e308, 3.25, 4.5";
    check(
        &format!("SELECT id, k + 1 AS a, x IN ({xs}) AS c FROM t ORDER BY id"),
        1,
    )
    .await;
}

#[tokio::test]
async fn arithmetic_wraps_and_divides_as_datafusion_does() {
    check(
        "SELECT id, k + 1 AS a, k * 3 AS b, -k AS c, n - 7 AS e FROM t ORDER BY id",
        0,
    )
    .await;
    check("SELECT id, n * n AS a, n + n AS b FROM t ORDER BY id", 0).await;
    check(
        "SELECT id, k / 7 AS a, k % 7 AS b, n / -3 AS c, n % 5 AS e FROM t ORDER BY id",
        0,
    )
    .await;
    check(
        "SELECT id, x / y AS a, x % 1.5 AS b, x * 2.0 - 1.0 AS c FROM t ORDER BY id",
        0,
    )
    .await;
    check(
        "SELECT id, abs(x) AS a, floor(y) AS c, ceil(x) AS e FROM t ORDER BY id",
        0,
    )
    .await;
    check("SELECT id, k & 12 AS a, n | 3 AS b FROM t ORDER BY id", 0).await;
    check(
        "SELECT id, CAST(k AS BIGINT) + n AS a, CAST(k AS DOUBLE) * x AS b FROM t ORDER BY id",
        0,
    )
    .await;
}

#[tokio::test]
async fn nulls_are_three_valued() {
    check("SELECT id FROM t WHERE b AND x > 0 ORDER BY id", 0).await;
    check(
        "SELECT id, b OR k > 0 AS a, NOT b AS c, b IS NULL AS e FROM t ORDER BY id",
        0,
    )
    .await;
    check(
        "SELECT id FROM t WHERE (x > 1 OR y < 0) AND NOT (k IS NULL) ORDER BY id",
        0,
    )
    .await;
    check(
        "SELECT id, CASE WHEN x > 0 THEN k WHEN y < 0 THEN -k ELSE 0 END AS a FROM t ORDER BY id",
        0,
    )
    .await;
    check(
        "SELECT id, CASE k WHEN 3 THEN 1.5 WHEN 4 THEN x END AS a FROM t ORDER BY id",
        0,
    )
    .await;
}

#[tokio::test]
async fn dates_and_decimals_compare_and_add() {
    check(
        "SELECT id FROM t WHERE d >= DATE '1994-01-01' AND d < DATE '1995-01-01' ORDER BY id",
        0,
    )
    .await;
    check(
        "SELECT id FROM t WHERE m BETWEEN 0.05 AND 70.07 ORDER BY id",
        0,
    )
    .await;
    check("SELECT id FROM t WHERE m < 24 ORDER BY id", 0).await;
    check(
        "SELECT id, m + m AS a, m - m AS b, -m AS e FROM t ORDER BY id",
        0,
    )
    .await;
    // The integers become DECIMAL(20, 0): 23 and 36 digits, i128 in kiln.
    check(
        "SELECT id, m - 1 AS b, m * 2 AS c, m + m AS a FROM t ORDER BY id",
        2,
    )
    .await;
    // 15 + 16 + 1 digits: an i128 product.
    check(
        "SELECT id, m * (1 - m) AS a, m + m AS b FROM t ORDER BY id",
        1,
    )
    .await;
}

#[tokio::test]
async fn what_kiln_does_not_compute_stays_datafusions() {
    // Strings, LIKE, and integer division by a column (it can fail on rows
    // DataFusion skips) stay DataFusion's; the rest of each query is kiln's.
    check("SELECT id, s || 'x' AS a, x + 1 AS b FROM t ORDER BY id", 1).await;
    check(
        "SELECT id, CASE WHEN n <> 0 THEN CAST(k AS BIGINT) / n END AS a, n + 1 AS b FROM t ORDER BY id",
        1,
    )
    .await;
    check(
        "SELECT id, s LIKE 's1%' AND x > 0 AS a, x > 0 AS b FROM t ORDER BY id",
        1,
    )
    .await;
}

#[tokio::test]
async fn decisions_say_why() {
    let (_, kilns) = contexts();
    let (_, decisions) = run(
        &kilns[0],
        "SELECT id, s || 'x' AS a, x + 1 AS b FROM t WHERE k / n > 0",
    )
    .await;
    let shown: Vec<String> = decisions.iter().map(|d| d.to_string()).collect();
    assert!(shown.iter().any(|d| d.contains("kiln: x@")), "{shown:#?}");
    assert!(
        shown
            .iter()
            .any(|d| d.starts_with("FilterExec: DataFusion") && d.contains("integer division")),
        "{shown:#?}"
    );
}
