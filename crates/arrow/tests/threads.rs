//! Filters and projections over a large batch with nulls run their kernels
//! in chunks on kiln's threads (`kiln::threads`): the same selection and the
//! same values at 1, 2, 3 and 7 threads, on every compiling tier.

use arrow_array::{Array, ArrayRef, Float64Array, Int64Array, RecordBatch};
use kiln_arrow::{query, Filter, Projector, Tier};
use std::sync::Arc;

#[test]
fn a_million_rows_with_nulls_give_the_same_rows_at_every_thread_count() {
    let n: u64 = 1_000_003;
    let x: ArrayRef =
        Arc::new(Float64Array::from_iter((0..n).map(|i| {
            (i % 13 != 0).then_some((i * 7919 % 1000) as f64 / 10.0)
        })));
    let k: ArrayRef = Arc::new(Int64Array::from_iter(
        (0..n).map(|i| (i % 17 != 0).then_some(i as i64 % 97)),
    ));
    let b = RecordBatch::try_from_iter(vec![("x", x), ("k", k)]).expect("a batch");
    let cond = "(x > 25.0) & (k < 60) | k.isnull()";
    let proj = "x * 2.0 + k";
    let before = kiln::threads::chunked_runs();
    for tier in Tier::compiling() {
        let f = Filter::make_with(b.schema(), &query::parse(cond).unwrap(), tier).unwrap();
        let p =
            Projector::make_with(b.schema(), &[("p", query::parse(proj).unwrap())], tier).unwrap();
        let (want_rows, want_p) = kiln::threads::with_num_threads(1, || {
            (f.evaluate(&b).unwrap(), p.evaluate(&b).unwrap())
        });
        assert!(
            want_rows.len() > 100_000,
            "{tier}: {} rows",
            want_rows.len()
        );
        for threads in [2, 3, 7] {
            let (rows, out) = kiln::threads::with_num_threads(threads, || {
                (f.evaluate(&b).unwrap(), p.evaluate(&b).unwrap())
            });
            assert_eq!(rows, want_rows, "{tier} at {threads} threads");
            assert_eq!(
                out.column(0).to_data(),
                want_p.column(0).to_data(),
                "{tier} at {threads} threads"
            );
        }
    }
    assert!(kiln::threads::chunked_runs() > before, "the batch was cut");
}
