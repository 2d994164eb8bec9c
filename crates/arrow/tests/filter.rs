//! kiln-arrow against hand-computed tables and against arrow-rs's own compute
//! kernels, on every tier.

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int32Type, Int64Type};
use arrow_array::{
    Array, ArrayRef, BooleanArray, Date32Array, Float32Array, Float64Array, Int32Array, Int64Array,
    RecordBatch, StringArray, UInt32Array,
};
use arrow_buffer::NullBuffer;
use arrow_schema::DataType;
use kiln_arrow::expr::{and, call, coalesce, field, if_then_else, lit, null, or};
use kiln_arrow::{query, Error, Filter, Projector, Tier};
use std::sync::Arc;

fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
    RecordBatch::try_from_iter(columns).expect("a valid batch")
}

fn rows(a: &UInt32Array) -> Vec<u32> {
    a.values().to_vec()
}

fn filter(b: &RecordBatch, q: &str, tier: Tier) -> Vec<u32> {
    let f = Filter::make_with(b.schema(), &query::parse(q).unwrap(), tier).unwrap();
    rows(&f.evaluate(b).unwrap())
}

#[test]
fn the_seed_query_selects_rows_3_4_5() {
    let x: ArrayRef = Arc::new(Float64Array::from_iter_values((0..10).map(f64::from)));
    let b = batch(vec![("x", x)]);
    for tier in Tier::all() {
        assert_eq!(
            filter(&b, "(x > 2.0) & (x < 6.0)", tier),
            [3, 4, 5],
            "{tier:?}"
        );
        let f = Filter::make_with(
            b.schema(),
            &and(vec![field("x").gt(lit(2.0)), field("x").lt(lit(6.0))]),
            tier,
        )
        .unwrap();
        assert_eq!(f.count(&b).unwrap(), 3);
        let mut reused = vec![7; 100];
        assert_eq!(f.evaluate_into(&b, &mut reused).unwrap(), 3);
        assert_eq!(reused, [3, 4, 5]);
        assert_eq!(f.evaluate_into(&b.slice(4, 6), &mut reused).unwrap(), 2);
        assert_eq!(
            reused,
            [0, 1],
            "rows of the slice, the buffer's old contents gone"
        );
        let kept = f.apply(&b).unwrap();
        assert_eq!(
            kept.column(0).as_primitive::<Float64Type>().values(),
            &[3.0, 4.0, 5.0]
        );
    }
}

/// Every pair of {true, false, null}: a is T T T F F F N N N, b is T F N … .
fn truth_table() -> RecordBatch {
    let v = [Some(true), Some(false), None];
    let a: Vec<_> = v.iter().flat_map(|&x| [x; 3]).collect();
    let b: Vec<_> = (0..3).flat_map(|_| v).collect();
    batch(vec![
        ("a", Arc::new(BooleanArray::from(a)) as ArrayRef),
        ("b", Arc::new(BooleanArray::from(b)) as ArrayRef),
    ])
}

fn project(b: &RecordBatch, q: &str, tier: Tier) -> ArrayRef {
    let p = Projector::make_with(b.schema(), &[("out", query::parse(q).unwrap())], tier).unwrap();
    p.evaluate(b).unwrap().column(0).clone()
}

fn bools(a: &ArrayRef) -> Vec<Option<bool>> {
    a.as_boolean().iter().collect()
}

#[test]
fn kleene_logic_by_hand() {
    const T: Option<bool> = Some(true);
    const F: Option<bool> = Some(false);
    const N: Option<bool> = None;
    let t = truth_table();
    for tier in Tier::all() {
        // a:  T T T F F F N N N
        // b:  T F N T F N T F N
        assert_eq!(
            bools(&project(&t, "a & b", tier)),
            [T, F, N, F, F, F, N, F, N]
        );
        assert_eq!(
            bools(&project(&t, "a | b", tier)),
            [T, T, T, T, F, N, T, N, N]
        );
        assert_eq!(
            bools(&project(&t, "a and b", tier)),
            [T, F, N, F, F, F, N, F, N]
        );
        assert_eq!(bools(&project(&t, "~a", tier)), [F, F, F, T, T, T, N, N, N]);
        assert_eq!(
            bools(&project(&t, "a ^ b", tier)),
            [F, T, N, T, F, N, N, N, N]
        );
        assert_eq!(
            bools(&project(&t, "a == b", tier)),
            [T, F, N, F, T, N, N, N, N]
        );
        assert_eq!(
            bools(&project(&t, "isnull(a)", tier)),
            [F, F, F, F, F, F, T, T, T]
        );
        assert_eq!(
            bools(&project(&t, "b.notnull()", tier)),
            [T, T, F, T, T, F, T, T, F]
        );
        assert_eq!(
            bools(&project(&t, "coalesce(a, b)", tier)),
            [T, T, T, F, F, F, T, F, N]
        );
        // A filter keeps only true, never null.
        assert_eq!(filter(&t, "a & b", tier), [0]);
        assert_eq!(filter(&t, "a | b", tier), [0, 1, 2, 3, 6]);
        assert_eq!(filter(&t, "~(a | b)", tier), [4]);
        assert_eq!(filter(&t, "a & b | isnull(a) & isnull(b)", tier), [0, 8]);
        // Three-way and n-ary builder forms agree with the binary ones.
        let abn = and(vec![field("a"), field("b"), field("a").is_not_null()]);
        let f = Filter::make_with(t.schema(), &abn, tier).unwrap();
        assert_eq!(rows(&f.evaluate(&t).unwrap()), [0]);
        let any = or(vec![field("a"), field("b"), field("a").is_null()]);
        let f = Filter::make_with(t.schema(), &any, tier).unwrap();
        assert_eq!(rows(&f.evaluate(&t).unwrap()), [0, 1, 2, 3, 6, 7, 8]);
    }
}

#[test]
fn arithmetic_and_comparisons_on_nulls_are_null() {
    let x = Float64Array::from(vec![Some(1.0), None, Some(3.0), Some(-4.0), None]);
    let k = Int32Array::from(vec![Some(10), Some(20), None, Some(0), None]);
    let b = batch(vec![
        ("x", Arc::new(x) as ArrayRef),
        ("k", Arc::new(k) as ArrayRef),
    ]);
    for tier in Tier::all() {
        let sum = project(&b, "x + k", tier);
        let sum: Vec<_> = sum.as_primitive::<Float64Type>().iter().collect();
        assert_eq!(sum, [Some(11.0), None, None, Some(-4.0), None], "{tier:?}");
        let cmp = project(&b, "x * 2 < k", tier);
        assert_eq!(bools(&cmp), [Some(true), None, None, Some(true), None]);
        // Null rows never fail a division: only a valid zero divisor would.
        let q = project(&b, "k // 3 + k % 7", tier);
        let q: Vec<_> = q.as_primitive::<Int32Type>().iter().collect();
        assert_eq!(q, [Some(6), Some(12), None, Some(0), None]);
        let c = project(&b, "coalesce(x, k, -1)", tier);
        let c: Vec<_> = c.as_primitive::<Float64Type>().iter().collect();
        assert_eq!(
            c,
            [Some(1.0), Some(20.0), Some(3.0), Some(-4.0), Some(-1.0)]
        );
        let w = project(&b, "where(x > 0, k, -k)", tier);
        let w: Vec<_> = w.as_primitive::<Int32Type>().iter().collect();
        // A null condition picks the else branch (SQL CASE); -k is null in row 4.
        assert_eq!(w, [Some(10), Some(-20), None, Some(0), None]);
        let nul = Projector::make_with(
            b.schema(),
            &[("n", field("x") + null(kiln::DType::F64))],
            tier,
        )
        .unwrap()
        .evaluate(&b)
        .unwrap();
        assert_eq!(nul.column(0).null_count(), 5);
        assert_eq!(filter(&b, "x.isnull() | (k > 15)", tier), [1, 4]);
        assert_eq!(filter(&b, "notna(x) & notna(k)", tier), [0, 3]);
    }
}

#[test]
fn literals_take_the_column_type_and_casts_convert() {
    let k = Int32Array::from(vec![1, 2, 3, 4]);
    let f = Float32Array::from(vec![0.5, 1.5, 2.5, 3.5]);
    let d = Date32Array::from(vec![19000, 19001, 19002, 19003]);
    let i = Int64Array::from(vec![i64::MAX, -1, 0, 7]);
    let b = batch(vec![
        ("k", Arc::new(k) as ArrayRef),
        ("f", Arc::new(f) as ArrayRef),
        ("d", Arc::new(d) as ArrayRef),
        ("i", Arc::new(i) as ArrayRef),
    ]);
    for tier in Tier::all() {
        let p = Projector::make_with(
            b.schema(),
            &[
                ("k2", query::parse("k * 2").unwrap()),
                ("f2", query::parse("f * 2.0").unwrap()),
                ("kf", query::parse("k / 2").unwrap()),
                ("kk", query::parse("k + i").unwrap()),
                ("one", query::parse("1.5").unwrap()),
            ],
            tier,
        )
        .unwrap();
        let out = p.evaluate(&b).unwrap();
        let types: Vec<_> = out
            .schema()
            .fields()
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        assert_eq!(
            types,
            [
                DataType::Int32,
                DataType::Float32,
                DataType::Float64,
                DataType::Int64,
                DataType::Float64
            ]
        );
        assert_eq!(
            out.column(2).as_primitive::<Float64Type>().values(),
            &[0.5, 1.0, 1.5, 2.0]
        );
        assert_eq!(
            out.column(4).as_primitive::<Float64Type>().values(),
            &[1.5; 4]
        );
        assert_eq!(filter(&b, "(d >= 19001) & (d < 19003)", tier), [1, 2]);
        assert_eq!(filter(&b, "i + 1 < 0", tier), [0], "i64 wraps");
        assert_eq!(filter(&b, "int(f) == k - 1", tier), [0, 1, 2, 3]);
    }
}

#[test]
fn bad_input_is_a_typed_error() {
    let x = Float64Array::from(vec![1.0, 2.0]);
    let k = Int32Array::from(vec![1, 0]);
    let s = StringArray::from(vec!["a", "b"]);
    let b = batch(vec![
        ("x", Arc::new(x) as ArrayRef),
        ("k", Arc::new(k) as ArrayRef),
        ("s", Arc::new(s) as ArrayRef),
    ]);
    let make = |q: &str| Filter::query(b.schema(), q);
    assert!(matches!(make("y > 1"), Err(Error::UnknownColumn { .. })));
    assert!(matches!(
        make("s > 1"),
        Err(Error::UnsupportedColumn { .. })
    ));
    assert!(matches!(make("x + 1"), Err(Error::Type(_))));
    assert!(matches!(make("x >"), Err(Error::Parse(_))));
    assert!(matches!(
        call("nope", vec![field("x")]),
        Err(Error::UnknownFunction(_))
    ));
    // Columns it does not read may have any type.
    assert_eq!(rows(&make("x > 1").unwrap().evaluate(&b).unwrap()), [1]);
    for tier in Tier::all() {
        let f = Filter::make_with(b.schema(), &query::parse("10 // k > 1").unwrap(), tier).unwrap();
        let err = f.evaluate(&b).unwrap_err();
        assert!(
            matches!(&err, Error::DivisionByZero { expr } if expr == "(10 // k)"),
            "{tier:?}: {err}"
        );
        let other = batch(vec![("x", Arc::new(Int32Array::from(vec![1])) as ArrayRef)]);
        assert!(matches!(f.evaluate(&other), Err(Error::SchemaMismatch(_))));
    }
    let deep = (0..2000).fold(field("x"), |e, _| e + lit(1.0)).gt(lit(0.0));
    assert!(matches!(
        Filter::make(b.schema(), &deep),
        Err(Error::TooDeep(_))
    ));
}

#[test]
fn sliced_batches_read_bitmaps_at_any_bit_offset() {
    let n = 203;
    let x = Float64Array::from_iter((0..n).map(|i| (i % 7 != 0).then_some(i as f64)));
    let p = BooleanArray::from_iter((0..n).map(|i| (i % 5 != 0).then_some(i % 3 == 0)));
    let full = batch(vec![
        ("x", Arc::new(x) as ArrayRef),
        ("p", Arc::new(p) as ArrayRef),
    ]);
    for tier in Tier::all() {
        let f = Filter::make_with(full.schema(), &query::parse("p | (x > 150)").unwrap(), tier)
            .unwrap();
        let all = rows(&f.evaluate(&full).unwrap());
        for offset in [0, 1, 3, 8, 13, 64, 65] {
            let len = n - offset - 5;
            let slice = full.slice(offset, len);
            let want: Vec<u32> = all
                .iter()
                .filter(|&&r| (r as usize) >= offset && (r as usize) < offset + len)
                .map(|&r| r - offset as u32)
                .collect();
            assert_eq!(
                rows(&f.evaluate(&slice).unwrap()),
                want,
                "{tier:?} offset {offset}"
            );
        }
    }
}

/// A tiny deterministic generator (no dependency, reproducible failures).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn f64(&mut self) -> f64 {
        self.below(2001) as f64 / 100.0 - 10.0
    }
}

/// arrow-rs's compute kernels: `((x > c1) & (y <= c2)) | ~(k == c3)` with
/// Kleene logic, then `x * y + k` (nulls propagate), the reference kiln must
/// match on random batches with random nulls, on every tier.
#[test]
fn random_batches_match_arrow_compute() {
    use arrow_arith::boolean::{and_kleene, not, or_kleene};
    use arrow_ord::cmp::{eq, gt, lt_eq};
    let mut rng = Rng(7);
    let tiers: Vec<Tier> = Tier::all().collect();
    for case in 0..60 {
        let n = rng.below(300) as usize;
        let null_rate = [0, 10, 50, 100][case % 4];
        let opt = |rng: &mut Rng| rng.below(100) >= null_rate;
        let x = Float64Array::from_iter((0..n).map(|_| opt(&mut rng).then(|| rng.f64())));
        let y = Float64Array::from_iter((0..n).map(|_| opt(&mut rng).then(|| rng.f64())));
        let k = Int32Array::from_iter((0..n).map(|_| opt(&mut rng).then(|| rng.below(5) as i32)));
        let (c1, c2, c3) = (rng.f64(), rng.f64(), rng.below(5) as i32);
        let b = batch(vec![
            ("x", Arc::new(x.clone()) as ArrayRef),
            ("y", Arc::new(y.clone()) as ArrayRef),
            ("k", Arc::new(k.clone()) as ArrayRef),
        ]);
        let mask = or_kleene(
            &and_kleene(
                &gt(&x, &Float64Array::new_scalar(c1)).unwrap(),
                &lt_eq(&y, &Float64Array::new_scalar(c2)).unwrap(),
            )
            .unwrap(),
            &not(&eq(&k, &Int32Array::new_scalar(c3)).unwrap()).unwrap(),
        )
        .unwrap();
        let want: Vec<u32> = (0..n)
            .filter(|&i| mask.is_valid(i) && mask.value(i))
            .map(|i| i as u32)
            .collect();
        let kf = arrow_cast_k(&k);
        let prod = arrow_arith::numeric::mul(&x, &y).unwrap();
        let want_proj = arrow_arith::numeric::add(&prod, &kf).unwrap();
        let cond =
            and(vec![field("x").gt(lit(c1)), field("y").le(lit(c2))]).or(!field("k").eq(lit(c3)));
        let proj = field("x") * field("y") + field("k").cast(kiln::DType::F64);
        for &tier in &tiers {
            let f = Filter::make_with(b.schema(), &cond, tier).unwrap();
            assert_eq!(rows(&f.evaluate(&b).unwrap()), want, "case {case} {tier:?}");
            assert_eq!(f.count(&b).unwrap(), want.len(), "case {case} {tier:?}");
            let p = Projector::make_with(b.schema(), &[("p", proj.clone())], tier).unwrap();
            let got = p.evaluate(&b).unwrap();
            assert_eq!(
                got.column(0).as_ref(),
                want_proj.as_ref(),
                "case {case} {tier:?}"
            );
            let masked = Projector::make_with(b.schema(), &[("m", cond.clone())], tier)
                .unwrap()
                .evaluate(&b)
                .unwrap();
            assert_eq!(masked.column(0).as_boolean(), &mask, "case {case} {tier:?}");
        }
    }
}

fn arrow_cast_k(k: &Int32Array) -> Float64Array {
    Float64Array::from_iter(k.iter().map(|v| v.map(f64::from)))
}

#[test]
fn if_then_else_and_coalesce_from_the_builder() {
    let x = Float64Array::from(vec![Some(1.0), None, Some(-3.0)]);
    let b = batch(vec![("x", Arc::new(x) as ArrayRef)]);
    for tier in Tier::all() {
        let p = Projector::make_with(
            b.schema(),
            &[
                (
                    "sign",
                    if_then_else(field("x").ge(lit(0.0)), lit(1i32), lit(-1i32)),
                ),
                ("filled", coalesce(vec![field("x"), lit(0.0)])),
            ],
            tier,
        )
        .unwrap();
        let out = p.evaluate(&b).unwrap();
        let sign: Vec<_> = out.column(0).as_primitive::<Int32Type>().iter().collect();
        assert_eq!(sign, [Some(1), Some(-1), Some(-1)]);
        assert_eq!(out.column(1).null_count(), 0);
        assert_eq!(
            out.column(1).as_primitive::<Float64Type>().values(),
            &[1.0, 0.0, -3.0]
        );
    }
}

/// Everything `kiln eval` accepts elementwise, a query accepts with the same
/// meaning (one function table), with pandas' precedence, and null in, null
/// out; values by hand from NumPy's definitions.
#[test]
fn queries_share_the_python_subsets_functions_and_pandas_precedence() {
    let x: ArrayRef = Arc::new(Float64Array::from(vec![
        Some(f64::NEG_INFINITY),
        Some(-0.0),
        Some(f64::NAN),
        Some(4.0),
        None,
        Some(f64::INFINITY),
    ]));
    let k: ArrayRef = Arc::new(Int32Array::from(vec![
        Some(1),
        Some(-8),
        None,
        Some(3),
        Some(0),
        Some(2),
    ]));
    let b = batch(vec![("x", x), ("k", k)]);
    let f64s = |a: &ArrayRef| -> Vec<Option<u64>> {
        a.as_primitive::<Float64Type>()
            .iter()
            .map(|v| v.map(|v| if v.is_nan() { u64::MAX } else { v.to_bits() }))
            .collect()
    };
    let bits = |v: &[Option<f64>]| -> Vec<Option<u64>> {
        v.iter()
            .map(|v| v.map(|v| if v.is_nan() { u64::MAX } else { v.to_bits() }))
            .collect()
    };
    let nan = f64::NAN;
    for tier in Tier::all() {
        // `inf`, `nan` and the float tests `kiln eval` knows.
        assert_eq!(
            filter(&b, "isinf(x) | isnan(x)", tier),
            [0, 2, 5],
            "{tier:?}"
        );
        assert_eq!(filter(&b, "isfinite(x)", tier), [1, 3]);
        assert_eq!(filter(&b, "x == -inf", tier), [0]);
        assert_eq!(filter(&b, "x != nan", tier), [0, 1, 2, 3, 5]);
        // pandas binds `&` and `|` looser than comparisons.
        assert_eq!(filter(&b, "x > 0 & k > 0", tier), [3, 5]);
        assert_eq!(filter(&b, "x < 0 | k == 3 & x > 0", tier), [0, 3]);
        // NumPy's `** 0.5` is sqrt: NaN at -inf, -0.0 at -0.0.
        assert_eq!(
            f64s(&project(&b, "x ** 0.5", tier)),
            bits(&[
                Some(nan),
                Some(-0.0),
                Some(nan),
                Some(2.0),
                None,
                Some(f64::INFINITY)
            ])
        );
        assert_eq!(
            f64s(&project(&b, "np.clip(x, -1.0, 1.0) * sign(x)", tier)),
            bits(&[Some(1.0), Some(-0.0), Some(nan), Some(1.0), None, Some(1.0)])
        );
        assert_eq!(
            f64s(&project(&b, "fmax(x, 0.5)", tier)),
            bits(&[
                Some(0.5),
                Some(0.5),
                Some(0.5),
                Some(4.0),
                None,
                Some(f64::INFINITY)
            ])
        );
        // NumPy's shifts: a count of 32 or more (or below 0) shifts every
        // bit out: 0, or -1 for a negative value shifted right. k << 31 is
        // MIN for odd k; (3 << 31) >> 48 is -1; -8 >> -128 is 0.
        let shifted = project(&b, "(k << 31) >> (k * 16)", tier);
        assert_eq!(
            shifted
                .as_primitive::<Int32Type>()
                .iter()
                .collect::<Vec<_>>(),
            [Some(-32768), Some(0), None, Some(-1), Some(0), Some(0)]
        );
        assert_eq!(
            project(&b, "signbit(k) & ~isinf(k)", tier)
                .as_boolean()
                .iter()
                .collect::<Vec<_>>(),
            [
                Some(false),
                Some(true),
                None,
                Some(false),
                Some(false),
                Some(false)
            ]
        );
    }
}

/// A query that reads no column (the arrow_query fuzzer's `0`) compiles to
/// a kernel that returns its scalar: a projection repeats it on every row, a
/// filter is a typed error.
#[test]
fn queries_without_a_column_are_constants_on_every_row() {
    let x: ArrayRef = Arc::new(Float64Array::from(vec![Some(1.0), None, Some(3.0)]));
    let b = batch(vec![("x", x)]);
    for tier in Tier::all() {
        let zero = project(&b, "0", tier);
        assert_eq!(zero.as_primitive::<Int64Type>().values(), &[0, 0, 0]);
        assert_eq!(zero.null_count(), 0, "{tier:?}");
        let product = project(&b, "1.5 * 3", tier);
        assert_eq!(product.as_primitive::<Float64Type>().values(), &[4.5; 3]);
        let truth = project(&b, "2 > 1", tier);
        assert_eq!(bools(&truth), [Some(true); 3], "{tier:?}");
        for (q, message) in [
            ("2 > 1", "the filter condition `(2 > 1)` reads no column"),
            ("2", "a filter condition must be bool, but `2` is i64"),
        ] {
            let e = Filter::make_with(b.schema(), &query::parse(q).unwrap(), tier).unwrap_err();
            assert_eq!(e.to_string(), format!("type error: {message}"), "{tier:?}");
        }
    }
}

#[test]
fn total_comparisons_put_nan_above_infinity() {
    let x: ArrayRef = Arc::new(Float64Array::from(vec![
        Some(f64::NAN),
        Some(f64::INFINITY),
        Some(-0.0),
        Some(0.0),
        None,
        Some(-1.0),
    ]));
    let y: ArrayRef = Arc::new(Float64Array::from(vec![
        Some(f64::NAN),
        Some(f64::NAN),
        Some(0.0),
        Some(f64::NAN),
        Some(1.0),
        Some(f64::NEG_INFINITY),
    ]));
    let b = batch(vec![("x", x), ("y", y)]);
    for tier in Tier::all() {
        let cmp = |name: &str| bools(&project(&b, &format!("{name}(x, y)"), tier));
        let (t, f) = (Some(true), Some(false));
        assert_eq!(cmp("total_eq"), [t, f, t, f, None, f], "{tier:?}");
        assert_eq!(cmp("total_ne"), [f, t, f, t, None, t], "{tier:?}");
        assert_eq!(cmp("total_lt"), [f, t, f, t, None, f], "{tier:?}");
        assert_eq!(cmp("total_le"), [t, t, t, t, None, f], "{tier:?}");
        assert_eq!(cmp("total_gt"), [f, f, f, f, None, t], "{tier:?}");
        assert_eq!(cmp("total_ge"), [t, f, t, f, None, t], "{tier:?}");
        // IEEE, for comparison: NaN compares false.
        let ieee = bools(&project(&b, "x == y", tier));
        assert_eq!(ieee, [f, f, t, f, None, f], "{tier:?}");
    }
}

#[test]
fn decimals_of_up_to_18_digits_are_their_unscaled_i64s() {
    use arrow_array::Decimal128Array;
    let m = Decimal128Array::from(vec![Some(-250), None, Some(99_999_999_999_999), Some(7)])
        .with_precision_and_scale(15, 2)
        .unwrap();
    let b = batch(vec![("m", Arc::new(m) as ArrayRef)]);
    for tier in Tier::all() {
        assert_eq!(filter(&b, "m > 0", tier), [2, 3], "{tier:?}");
        let sum = project(&b, "m + m", tier);
        let sum = sum.as_primitive::<Int64Type>();
        assert_eq!(sum.value(0), -500);
        assert!(sum.is_null(1));
        assert_eq!(sum.value(2), 199_999_999_999_998);
    }
    // Arrow does not enforce precision: a valid value beyond i64 is an
    // error (kiln-datafusion gives that batch to DataFusion), a null one is not.
    // 10^18 fits an i64 but not 18 digits: doubled or multiplied, a value
    // beyond the precision could overflow the i64 where arrow's i128 would not.
    let m = Decimal128Array::from(vec![Some(10i128.pow(18))])
        .with_precision_and_scale(18, 0)
        .unwrap();
    let b = batch(vec![("m", Arc::new(m) as ArrayRef)]);
    let f = Filter::make(b.schema(), &query::parse("m > 0").unwrap()).unwrap();
    assert!(matches!(f.evaluate(&b), Err(Error::DecimalRange { .. })));
    let wide = Decimal128Array::from(vec![Some(1), Some(i128::from(i64::MAX) + 1), None])
        .with_precision_and_scale(18, 0)
        .unwrap();
    let b = batch(vec![("m", Arc::new(wide) as ArrayRef)]);
    for tier in Tier::all() {
        let f = Filter::make_with(b.schema(), &query::parse("m > 0").unwrap(), tier).unwrap();
        assert!(matches!(f.evaluate(&b), Err(Error::DecimalRange { column }) if column == "m"));
        let ok = b.slice(2, 1);
        assert_eq!(
            rows(&f.evaluate(&ok).unwrap()),
            Vec::<u32>::new(),
            "{tier:?}"
        );
    }
    // The range test reads validity only when some value is out of range: a
    // null slot holding any i128 is fine at any offset (bitmaps sliced
    // inside a byte too), the extremes of the precision are in range, one
    // more digit in a valid row is not.
    let bound = 10i128.pow(4);
    let n = 2100;
    let raw: Vec<i128> = (0..n)
        .map(|i| match i {
            1030 => i128::MAX,
            1031 => i128::MIN,
            7 => bound - 1,
            8 => 1 - bound,
            i => i as i128 % 200 - 100,
        })
        .collect();
    let nulls = NullBuffer::from((0..n).map(|i| i != 1030 && i != 1031).collect::<Vec<_>>());
    let m = Decimal128Array::new(raw.clone().into(), Some(nulls))
        .with_precision_and_scale(4, 0)
        .unwrap();
    let b = batch(vec![("m", Arc::new(m) as ArrayRef)]);
    for tier in Tier::all() {
        let f = Filter::make_with(b.schema(), &query::parse("m > 90").unwrap(), tier).unwrap();
        for offset in [0, 3, 1024, 1029] {
            let s = b.slice(offset, n - offset);
            let want: Vec<u32> = (offset..n)
                .filter(|&i| i != 1030 && i != 1031 && raw[i] > 90)
                .map(|i| (i - offset) as u32)
                .collect();
            assert_eq!(rows(&f.evaluate(&s).unwrap()), want, "{tier:?} {offset}");
        }
    }
    let mut beyond = raw;
    beyond[2050] = bound;
    let m = Decimal128Array::from(beyond)
        .with_precision_and_scale(4, 0)
        .unwrap();
    let b = batch(vec![("m", Arc::new(m) as ArrayRef)]);
    let f = Filter::make(b.schema(), &query::parse("m > 0").unwrap()).unwrap();
    for offset in [0, 3, 2049, 2050] {
        let s = b.slice(offset, n - offset);
        assert!(
            matches!(f.evaluate(&s), Err(Error::DecimalRange { .. })),
            "{offset}"
        );
    }
    assert!(f.evaluate(&b.slice(2051, n - 2051)).is_ok());
    let wide = Decimal128Array::from(vec![Some(1)])
        .with_precision_and_scale(19, 0)
        .unwrap();
    let b = batch(vec![("m", Arc::new(wide) as ArrayRef)]);
    let err = Filter::make(b.schema(), &query::parse("m > 0").unwrap()).unwrap_err();
    assert!(matches!(err, Error::UnsupportedColumn { .. }), "{err}");
}

#[test]
fn isin_as_pandas_and_sql_mean_it() {
    let x: ArrayRef = Arc::new(Float64Array::from(vec![
        Some(1.0),
        Some(-0.0),
        Some(f64::NAN),
        None,
        Some(2.5),
        Some(7.0),
    ]));
    let k: ArrayRef = Arc::new(Int32Array::from(vec![
        Some(1),
        Some(2),
        None,
        Some(40),
        Some(-5),
        Some(i32::MAX),
    ]));
    let b = batch(vec![("x", x), ("k", k)]);
    let many: Vec<String> = (0..30).map(|v| (v * 3 - 9).to_string()).collect();
    let many = many.join(", ");
    for tier in Tier::all() {
        // pandas' isin: NaN in the list matches NaN, -0.0 matches 0.0; a
        // null row is null (so not selected).
        assert_eq!(
            filter(&b, "x in [0.0, nan, 7]", tier),
            [1, 2, 5],
            "{tier:?}"
        );
        assert_eq!(filter(&b, "x == [1, 2.5]", tier), [0, 4]);
        assert_eq!(filter(&b, "x.isin([2.5, 9])", tier), [4]);
        assert_eq!(filter(&b, "x not in [1, 2.5]", tier), [1, 2, 5]);
        assert_eq!(filter(&b, "~(x != [7.0])", tier), [5]);
        assert_eq!(filter(&b, "[2.5, 1] == x", tier), [0, 4]);
        assert_eq!(filter(&b, "[2.5, 1] not in x", tier), [1, 2, 5]);
        assert_eq!(
            filter(&b, &format!("k in [{many}, 2147483647, 5000000000]"), tier),
            [5]
        );
        assert_eq!(filter(&b, "k in (1, 2.0, 40.5)", tier), [0, 1]);
        assert_eq!(
            bools(&project(&b, "k in [1, 2]", tier)),
            [
                Some(true),
                Some(true),
                None,
                Some(false),
                Some(false),
                Some(false)
            ]
        );
        // SQL's IN with a NULL: true where found, else null.
        let with_null = kiln_arrow::expr::Expr::Call(
            kiln_arrow::expr::Func::In,
            vec![field("k"), lit(1i32), null(kiln::DType::I32)],
        );
        let p = Projector::make_with(b.schema(), &[("c", with_null)], tier).unwrap();
        let out = p.evaluate(&b).unwrap();
        assert_eq!(
            bools(out.column(0)),
            [Some(true), None, None, None, None, None],
            "{tier:?}"
        );
    }
    for (q, says) in [
        ("x in y", "`in` takes a list"),
        ("x + [1, 2] > 0", "a list or tuple is only what"),
        ("x < [1, 2]", "a list or tuple is only what"),
        ("[1, 2]", "a list or tuple is only what"),
        ("[1] in [2]", "a list or tuple is only what"),
        ("x in [1, k]", "isin looks for number literals"),
    ] {
        let e = match query::parse(q) {
            Err(e) => e.to_string(),
            Ok(e) => Filter::make_with(b.schema(), &e, Tier::Vm)
                .err()
                .map_or_else(|| "no error".to_string(), |e| e.to_string()),
        };
        assert!(e.contains(says), "{q}: {e}");
    }
}
