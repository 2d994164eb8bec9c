//! Filters over 50,000,000 f64 rows (`ROWS` to change it): kiln (Cranelift,
//! LLVM with the feature) against the same expression composed from arrow-rs's
//! compute kernels and against a hand-written branchless Rust loop, each
//! producing the same `u32` selection vector. Also the compile time of a new
//! filter on each tier, and TPC-H Q6's decimal conditions over 6M
//! `Decimal128(15, 2)` rows in the 8192-row batches DataFusion hands out
//! (kiln narrows each batch's decimals to `i64`s, checking their precision).
//!
//! `cargo bench -p kiln-arrow --features llvm --bench filter`
//!
//! Prints one line per (workload, contender): median and best of `REPEATS`
//! interleaved runs in ns per row. Figures and their discussion are in
//! docs/performance.md.

use arrow_arith::boolean::and_kleene;
use arrow_arith::numeric::{add, mul, sub};
use arrow_array::{
    ArrayRef, BooleanArray, Decimal128Array, Float64Array, RecordBatch, UInt32Array,
};
use arrow_ord::cmp::{gt, gt_eq, lt, lt_eq};
use kiln_arrow::{query, Filter, Tier};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

const REPEATS: usize = 7;

struct Rng(u64);

impl Rng {
    fn f64(&mut self) -> f64 {
        // xorshift64*: uniform in [0, 10).
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let bits = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11;
        bits as f64 / (1u64 << 53) as f64 * 10.0
    }
}

fn column(n: usize, seed: u64) -> Float64Array {
    let mut rng = Rng(seed);
    Float64Array::from_iter_values((0..n).map(|_| rng.f64()))
}

fn indices(mask: &BooleanArray) -> UInt32Array {
    // What arrow-rs's own filter kernels do to turn a mask into indices.
    let rows: Vec<u32> = mask.values().set_indices().map(|i| i as u32).collect();
    UInt32Array::from(rows)
}

type Contender<'a> = (String, Box<dyn Fn() -> usize + 'a>);

/// Runs every contender `REPEATS` times round-robin; prints median and best.
fn measure(workload: &str, n: usize, contenders: &[Contender<'_>]) {
    let want = (contenders[0].1)();
    let mut times = vec![Vec::new(); contenders.len()];
    for _ in 0..REPEATS {
        for (idx, (name, f)) in contenders.iter().enumerate() {
            let start = Instant::now();
            let got = black_box(f());
            times[idx].push(start.elapsed().as_secs_f64());
            assert_eq!(got, want, "{name} selects {got} rows, not {want}");
        }
    }
    for ((name, _), t) in contenders.iter().zip(&mut times) {
        t.sort_by(f64::total_cmp);
        println!(
            "{workload:<14} {name:<28} median {:6.3} ns/row   best {:6.3} ns/row   ({want} of {n} rows)",
            t[t.len() / 2] / n as f64 * 1e9,
            t[0] / n as f64 * 1e9,
        );
    }
}

fn tiers() -> Vec<Tier> {
    vec![
        Tier::Cranelift,
        #[cfg(feature = "llvm")]
        Tier::Llvm,
    ]
}

fn compile_times(batch: &RecordBatch) {
    for tier in tiers() {
        let mut t = Vec::new();
        for i in 0..21 {
            // A new constant each time: the cache cannot help.
            let q = format!("(x > {}) & (x < 6.0)", 2.0 + i as f64 * 1e-6);
            let start = Instant::now();
            let f = Filter::make_with(batch.schema(), &query::parse(&q).unwrap(), tier).unwrap();
            t.push(start.elapsed().as_secs_f64());
            black_box(f);
        }
        t.sort_by(f64::total_cmp);
        println!(
            "compile        {:<28} median {:8.1} µs (parse + lower + optimize + codegen, seed query)",
            tier.name(),
            t[t.len() / 2] * 1e6
        );
    }
    let q = query::parse("(x > 2.0) & (x < 6.0)").unwrap();
    let _warm = Filter::make(batch.schema(), &q).unwrap();
    let start = Instant::now();
    for _ in 0..1000 {
        black_box(Filter::make(batch.schema(), &q).unwrap());
    }
    println!(
        "compile        {:<28} median {:8.1} µs (the same query again: the code cache)",
        "cranelift, cached",
        start.elapsed().as_secs_f64() / 1000.0 * 1e6
    );
}

fn main() {
    let n: usize = std::env::var("ROWS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50_000_000);
    let cols: Vec<Float64Array> = (1..=5).map(|s| column(n, 0x9E37_79B9 * s)).collect();
    let names = ["a", "b", "c", "d", "e"];
    let batch = RecordBatch::try_from_iter(
        std::iter::once(("x", Arc::new(cols[0].clone()) as ArrayRef)).chain(
            names
                .iter()
                .zip(&cols)
                .map(|(n, c)| (*n, Arc::new(c.clone()) as ArrayRef)),
        ),
    )
    .unwrap();
    compile_times(&batch);

    // The seed query.
    let x = &cols[0];
    let seed = "(x > 2.0) & (x < 6.0)";
    let mut contenders: Vec<Contender<'_>> = Vec::new();
    for tier in tiers() {
        let f = Filter::make_with(batch.schema(), &query::parse(seed).unwrap(), tier).unwrap();
        let b = &batch;
        contenders.push((
            format!("kiln {}", tier.name()),
            Box::new(move || f.evaluate(b).unwrap().len()),
        ));
    }
    for tier in tiers() {
        let f = Filter::make_with(batch.schema(), &query::parse(seed).unwrap(), tier).unwrap();
        let b = &batch;
        let buffer = std::cell::RefCell::new(Vec::new());
        contenders.push((
            format!("kiln {}, reused selection", tier.name()),
            Box::new(move || f.evaluate_into(b, &mut buffer.borrow_mut()).unwrap()),
        ));
    }
    let f = Filter::make(batch.schema(), &query::parse(seed).unwrap()).unwrap();
    let b = &batch;
    contenders.push((
        "kiln cranelift, 64K batches".into(),
        Box::new(move || {
            (0..n)
                .step_by(65_536)
                .map(|start| {
                    f.evaluate(&b.slice(start, 65_536.min(n - start)))
                        .unwrap()
                        .len()
                })
                .sum()
        }),
    ));
    contenders.push((
        "arrow-rs compute".into(),
        Box::new(|| {
            let lo = gt(x, &Float64Array::new_scalar(2.0)).unwrap();
            let hi = lt(x, &Float64Array::new_scalar(6.0)).unwrap();
            indices(&and_kleene(&lo, &hi).unwrap()).len()
        }),
    ));
    contenders.push((
        "hand-written Rust loop".into(),
        Box::new(|| {
            let v = x.values();
            let mut out = vec![0u32; v.len()];
            let mut k = 0;
            for (i, &x) in v.iter().enumerate() {
                out[k] = i as u32;
                k += usize::from((x > 2.0) & (x < 6.0));
            }
            out.truncate(k);
            black_box(&out);
            k
        }),
    ));
    measure("seed", n, &contenders);

    // Five columns: arithmetic, a comparison, and a conjunction.
    let five = "(a + b * 2.0 > c - d) & (e < 5.0)";
    let mut contenders: Vec<Contender<'_>> = Vec::new();
    for tier in tiers() {
        let f = Filter::make_with(batch.schema(), &query::parse(five).unwrap(), tier).unwrap();
        let b = &batch;
        contenders.push((
            format!("kiln {}", tier.name()),
            Box::new(move || f.evaluate(b).unwrap().len()),
        ));
    }
    let [a, b, c, d, e] = [&cols[0], &cols[1], &cols[2], &cols[3], &cols[4]];
    contenders.push((
        "arrow-rs compute".into(),
        Box::new(move || {
            let two = Float64Array::new_scalar(2.0);
            let lhs = add(a, &mul(b, &two).unwrap()).unwrap();
            let rhs = sub(c, d).unwrap();
            let left = gt(&lhs, &rhs).unwrap();
            let right = lt(e, &Float64Array::new_scalar(5.0)).unwrap();
            indices(&and_kleene(&left, &right).unwrap()).len()
        }),
    ));
    contenders.push((
        "hand-written Rust loop".into(),
        Box::new(move || {
            let (a, b, c, d, e) = (a.values(), b.values(), c.values(), d.values(), e.values());
            let mut out = vec![0u32; a.len()];
            let mut k = 0;
            let rows = a
                .iter()
                .zip(b.iter())
                .zip(c.iter())
                .zip(d.iter())
                .zip(e.iter());
            for (i, ((((a, b), c), d), e)) in rows.enumerate() {
                out[k] = i as u32;
                // `u8` arithmetic, not `&&`: keeps the loop free of branches.
                k += usize::from(u8::from(a + b * 2.0 > c - d) & u8::from(*e < 5.0));
            }
            out.truncate(k);
            black_box(&out);
            k
        }),
    ));
    measure("five columns", n, &contenders);
    decimals();
}

/// `l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24` (TPC-H Q6's
/// decimal conditions; kiln compares unscaled values) over 6M rows of
/// `Decimal128(15, 2)`, batch by batch.
fn decimals() {
    const ROWS: usize = 6_000_000;
    const BATCH: usize = 8192;
    let mut rng = Rng(0x51_7CC1);
    let mut decimal = |range: f64| {
        Decimal128Array::from_iter_values((0..ROWS).map(|_| (rng.f64() * range) as i128))
            .with_precision_and_scale(15, 2)
            .unwrap()
    };
    let (discount, quantity) = (decimal(1.1), decimal(5100.0));
    let batch = RecordBatch::try_from_iter([
        ("d", Arc::new(discount) as ArrayRef),
        ("q", Arc::new(quantity) as ArrayRef),
    ])
    .unwrap();
    let batches: Vec<RecordBatch> = (0..ROWS)
        .step_by(BATCH)
        .map(|start| batch.slice(start, BATCH.min(ROWS - start)))
        .collect();
    let condition = "(d >= 5) & (d <= 7) & (q < 2400)";
    let mut contenders: Vec<Contender<'_>> = Vec::new();
    for tier in tiers() {
        let f = Filter::make_with(batch.schema(), &query::parse(condition).unwrap(), tier).unwrap();
        let batches = &batches;
        let buffer = std::cell::RefCell::new(Vec::new());
        contenders.push((
            format!("kiln {}", tier.name()),
            Box::new(move || {
                let mut buffer = buffer.borrow_mut();
                batches
                    .iter()
                    .map(|b| f.evaluate_into(b, &mut buffer).unwrap())
                    .sum()
            }),
        ));
    }
    let scalar = |v: i128| {
        arrow_array::Scalar::new(
            Decimal128Array::from(vec![v])
                .with_precision_and_scale(15, 2)
                .unwrap(),
        )
    };
    let (five, seven, cap) = (scalar(5), scalar(7), scalar(2400));
    let batches = &batches;
    contenders.push((
        "arrow-rs compute".into(),
        Box::new(move || {
            batches
                .iter()
                .map(|b| {
                    let (d, q) = (b.column(0), b.column(1));
                    let between =
                        and_kleene(&gt_eq(d, &five).unwrap(), &lt_eq(d, &seven).unwrap()).unwrap();
                    indices(&and_kleene(&between, &lt(q, &cap).unwrap()).unwrap()).len()
                })
                .sum()
        }),
    ));
    measure("Q6 decimals", ROWS, &contenders);
}
