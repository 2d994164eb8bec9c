//! The process-wide kernel cache. This test is alone in its binary on purpose:
//! `kiln_arrow::compilations()` counts every compilation in the process, so a
//! test compiling on another thread of the same binary would move it.

use arrow_array::{ArrayRef, Float64Array, RecordBatch};
use kiln_arrow::Filter;
use std::sync::Arc;

fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
    RecordBatch::try_from_iter(columns).expect("a valid batch")
}

#[test]
fn one_filter_on_many_threads_and_the_cache_reuses_code() {
    let x: ArrayRef = Arc::new(Float64Array::from_iter_values(
        (0..10_000).map(|i| (i % 10) as f64),
    ));
    let b = batch(vec![("x", x)]);
    let q = "(x > 2.0) & (x < 6.0) & (x != 4.25)";
    let f = Filter::query(b.schema(), q).unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..20 {
                    assert_eq!(f.count(&b).unwrap(), 3_000);
                }
            });
        }
    });
    let before = kiln_arrow::compilations();
    let again = Filter::query(b.schema(), q).unwrap();
    assert_eq!(again.count(&b).unwrap(), 3_000);
    assert_eq!(
        kiln_arrow::compilations(),
        before,
        "the same query is not compiled again"
    );
}
