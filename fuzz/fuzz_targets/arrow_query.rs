//! Any text as a pandas query over a fixed Arrow batch with nulls, NaN, -0.0,
//! infinities and extreme integers: an error or a result, never a panic, and
//! the Cranelift tier agrees with the interpreter exactly (the same rows, the
//! same projected values and nulls, the same errors), on the batch and on a
//! slice of it at an odd bit offset.
#![no_main]

use arrow_array::{
    Array, ArrayRef, BooleanArray, Float32Array, Float64Array, Int32Array, Int64Array, RecordBatch,
};
use kiln_arrow::{query, Filter, Projector, Tier};
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, OnceLock};

fn batch() -> &'static RecordBatch {
    static BATCH: OnceLock<RecordBatch> = OnceLock::new();
    BATCH.get_or_init(|| {
        let x = Float64Array::from(vec![
            Some(0.0),
            Some(-0.0),
            None,
            Some(2.5),
            Some(f64::NAN),
            Some(f64::INFINITY),
            Some(-3.0),
            Some(1e308),
            None,
            Some(6.0),
            Some(-1e-310),
            Some(9.75),
            Some(4.0),
        ]);
        let y = Float32Array::from(vec![
            1.5,
            -2.0,
            0.0,
            f32::NAN,
            3.25,
            -0.0,
            7.0,
            f32::MAX,
            0.5,
            -9.0,
            2.0,
            6.5,
            1.0,
        ]);
        let k = Int32Array::from(vec![
            Some(0),
            Some(1),
            Some(-1),
            None,
            Some(i32::MIN),
            Some(i32::MAX),
            Some(7),
            Some(3),
            None,
            Some(-8),
            Some(2),
            Some(5),
            Some(0),
        ]);
        let i = Int64Array::from(vec![
            i64::MIN,
            -1,
            0,
            1,
            2,
            i64::MAX,
            10,
            -10,
            3,
            4,
            5,
            6,
            7,
        ]);
        let p = BooleanArray::from(vec![
            Some(true),
            Some(false),
            None,
            Some(true),
            Some(true),
            None,
            Some(false),
            Some(false),
            Some(true),
            None,
            Some(true),
            Some(false),
            Some(true),
        ]);
        RecordBatch::try_from_iter([
            ("x", Arc::new(x) as ArrayRef),
            ("y", Arc::new(y) as ArrayRef),
            ("k", Arc::new(k) as ArrayRef),
            ("i", Arc::new(i) as ArrayRef),
            ("p", Arc::new(p) as ArrayRef),
        ])
        .expect("a valid batch")
    })
}

/// A projected column as comparable text: every NaN is "NaN" (payloads are
/// unspecified), nulls are "null", values keep their sign and bits otherwise.
fn cells(a: &dyn Array) -> Vec<String> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float32Type, Float64Type, Int32Type, Int64Type};
    let text = |row: usize| -> String {
        if a.is_null(row) {
            return "null".into();
        }
        let float = |v: f64| {
            if v.is_nan() {
                "NaN".to_string()
            } else {
                format!("{v:?}")
            }
        };
        match a.data_type() {
            arrow_schema::DataType::Boolean => a.as_boolean().value(row).to_string(),
            arrow_schema::DataType::Int32 => a.as_primitive::<Int32Type>().value(row).to_string(),
            arrow_schema::DataType::Int64 => a.as_primitive::<Int64Type>().value(row).to_string(),
            arrow_schema::DataType::Float32 => {
                float(f64::from(a.as_primitive::<Float32Type>().value(row)))
            }
            arrow_schema::DataType::Float64 => float(a.as_primitive::<Float64Type>().value(row)),
            other => panic!("a projection of {other}"),
        }
    };
    (0..a.len()).map(text).collect()
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(expr) = query::parse(text) else { return };
    let full = batch();
    let schema = full.schema();
    for b in [full.clone(), full.slice(3, 9)] {
        let interp = Filter::make_with(schema.clone(), &expr, Tier::Interp);
        let jit = Filter::make_with(schema.clone(), &expr, Tier::Cranelift);
        match (interp, jit) {
            (Ok(i), Ok(j)) => {
                let (ri, rj) = (i.evaluate(&b), j.evaluate(&b));
                match (&ri, &rj) {
                    (Ok(ri), Ok(rj)) => assert_eq!(ri, rj, "{text}: selections differ"),
                    (Err(ei), Err(ej)) => assert_eq!(ei.to_string(), ej.to_string(), "{text}"),
                    _ => panic!("{text}: interpreter {ri:?}, Cranelift {rj:?}"),
                }
            }
            (Err(ei), Err(ej)) => assert_eq!(ei.to_string(), ej.to_string(), "{text}"),
            (i, j) => panic!("{text}: interpreter {i:?}, Cranelift {j:?}"),
        }
        let interp = Projector::make_with(schema.clone(), &[("v", expr.clone())], Tier::Interp);
        let jit = Projector::make_with(schema.clone(), &[("v", expr.clone())], Tier::Cranelift);
        match (interp, jit) {
            (Ok(i), Ok(j)) => match (i.evaluate(&b), j.evaluate(&b)) {
                (Ok(oi), Ok(oj)) => {
                    assert_eq!(
                        cells(oi.column(0)),
                        cells(oj.column(0)),
                        "{text}: projections differ"
                    )
                }
                (Err(ei), Err(ej)) => assert_eq!(ei.to_string(), ej.to_string(), "{text}"),
                (oi, oj) => panic!("{text}: interpreter {oi:?}, Cranelift {oj:?}"),
            },
            (Err(ei), Err(ej)) => assert_eq!(ei.to_string(), ej.to_string(), "{text}"),
            (i, j) => panic!("{text}: interpreter {i:?}, Cranelift {j:?}"),
        }
    }
});
