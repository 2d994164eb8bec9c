//! Properties of the passes and the text format on random expressions:
//! the optimized graph gives the same results (and the same errors) as the
//! graph as written, in the interpreter; printing then parsing gives the same
//! graph. Random graphs over every op arrive with `kiln-fuzzgen`; these use
//! Python-subset expressions, so constants, identities and shared
//! subexpressions appear often enough to exercise every pass.

use kiln::{Buffer, Data, Dim, Format, LoadOptions, PyOptions, Scalar};
use proptest::prelude::*;

const FLOAT_LEAVES: &[&str] = &[
    "x", "y", "x", "y", "0.0", "-0.0", "1.0", "-1.0", "2.0", "0.5", "3.0", "inf", "nan", "1e-310",
];
const INT_LEAVES: &[&str] = &[
    "a",
    "b",
    "a",
    "b",
    "0",
    "1",
    "-1",
    "2",
    "3",
    "63",
    "64",
    "-9223372036854775808",
];

fn expr(
    leaves: &'static [&'static str],
    ops: &'static [&'static str],
    funcs: &'static [&'static str],
) -> impl Strategy<Value = String> {
    let leaf = prop::sample::select(leaves).prop_map(str::to_string);
    leaf.prop_recursive(5, 48, 3, move |inner| {
        prop_oneof![
            (inner.clone(), prop::sample::select(ops), inner.clone())
                .prop_map(|(a, op, b)| format!("({a} {op} {b})")),
            (prop::sample::select(funcs), inner.clone()).prop_map(|(f, a)| f.replace('@', &a)),
            (inner.clone(), inner.clone(), inner.clone(), inner)
                .prop_map(|(c, d, a, b)| format!("({a} if {c} < {d} else {b})")),
        ]
    })
}

fn float_expr() -> impl Strategy<Value = String> {
    let funcs = &[
        "sin(@)",
        "abs(@)",
        "sqrt(@)",
        "exp(@)",
        "floor(@)",
        "round(@)",
        "-(@)",
        "min(1.0, @)",
        "max(x, @)",
        "(@ * 1.0)",
        "(@ - 0.0)",
    ];
    expr(FLOAT_LEAVES, &["+", "-", "*", "/", "//", "%", "**"], funcs)
}

fn int_expr() -> impl Strategy<Value = String> {
    expr(
        INT_LEAVES,
        &["+", "-", "*", "//", "%", "&", "|", "^", "<<", ">>"],
        &["abs(@)", "-(@)", "~(@)", "max(a, @)", "(@ * 1)", "(@ | 0)"],
    )
}

fn edge_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        prop::sample::select(vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            2.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            5e-324,
            f64::MAX,
            1e300
        ]),
        any::<f64>(),
        -100.0..100.0f64,
    ]
}

fn edge_i64() -> impl Strategy<Value = i64> {
    prop_oneof![
        prop::sample::select(vec![0, 1, -1, 2, 63, 64, i64::MIN, i64::MAX]),
        any::<i64>(),
        -100..100i64
    ]
}

/// Cases per property: `PROPERTY_CASES` (default 256, what CI runs).
fn cases() -> u32 {
    std::env::var("PROPERTY_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

/// Checks that `other` gives the interpreter's results bit for bit (NaN equal
/// to NaN), or the same kind of error.
fn agree(
    src: &str,
    who: &str,
    oracle: &kiln::ExecResult<Vec<Data>>,
    other: &kiln::ExecResult<Vec<Data>>,
) -> Result<(), TestCaseError> {
    match (oracle, other) {
        (Ok(a), Ok(b)) => {
            prop_assert_eq!(a.len(), b.len());
            for (x, y) in a.iter().zip(b) {
                prop_assert!(
                    x.same_data(y),
                    "{}: interpreter {} but {} {}",
                    src,
                    x,
                    who,
                    y
                );
            }
        }
        (Err(a), Err(b)) => prop_assert_eq!(
            std::mem::discriminant(a),
            std::mem::discriminant(b),
            "{}: {} vs {}",
            src,
            a,
            b
        ),
        _ => prop_assert!(
            false,
            "{}: interpreter {:?} but {} {:?}",
            src,
            oracle,
            who,
            other
        ),
    }
    Ok(())
}

/// Runs `src` over columns as written and optimized in the interpreter, and on
/// the Cranelift tier; all must agree, and the text must round-trip.
fn check_same(src: &str, columns: Vec<(&str, Buffer)>) -> Result<(), TestCaseError> {
    let opts = LoadOptions {
        py: PyOptions {
            default_shape: vec![Dim::Sym("n".into())],
            ..PyOptions::default()
        },
        ..LoadOptions::default()
    };
    let graph = kiln::load(src, Format::Py, &opts)
        .map_err(|e| TestCaseError::fail(format!("{src}: {e}")))?
        .graph;
    let inputs: Vec<Data> = graph
        .inputs()
        .iter()
        .map(|i| {
            Data::Column(
                columns
                    .iter()
                    .find(|(n, _)| *n == i.name)
                    .expect("known input")
                    .1
                    .clone(),
            )
        })
        .collect();
    let plain = kiln_tests::compile(&kiln::Interpreter, &graph, false)
        .expect("valid")
        .run(&inputs);
    let optimized = kiln_tests::compile(&kiln::Interpreter, &graph, true)
        .expect("valid")
        .run(&inputs);
    agree(src, "the optimized graph", &plain, &optimized)?;
    // Every compiled tier must agree with the interpreter, optimized or not.
    for optimize in [false, true] {
        let compiled = kiln_tests::compile(&kiln::Cranelift, &graph, optimize)
            .expect("compiles")
            .run(&inputs);
        agree(src, "cranelift", &plain, &compiled)?;
    }
    let printed = kiln::ir::text::print(&graph);
    prop_assert_eq!(
        kiln::ir::text::parse(&printed).expect("printed text parses"),
        graph
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn float_passes_preserve_results(src in float_expr(), xs in prop::collection::vec(edge_f64(), 1..8), ys in prop::collection::vec(edge_f64(), 8)) {
        let n = xs.len();
        // `x` and `y` must both be inputs, so the column lengths are checked.
        check_same(&format!("0.0 * x * y + {src}"), vec![("x", Buffer::F64(xs)), ("y", Buffer::F64(ys[..n].to_vec()))])?;
    }

    #[test]
    fn int_passes_preserve_results_and_errors(src in int_expr(), a_vals in prop::collection::vec(edge_i64(), 1..8), b_vals in prop::collection::vec(edge_i64(), 8)) {
        let n = a_vals.len();
        let src = format!("def f(a: int, b: int): return {src}");
        check_same(&src, vec![("a", Buffer::I64(a_vals)), ("b", Buffer::I64(b_vals[..n].to_vec()))])?;
    }
}

#[test]
fn scalar_literal_round_trip_in_graphs() {
    for v in [
        0.0,
        -0.0,
        f64::NAN,
        f64::from_bits(0x7ff8_0000_0000_0001),
        5e-324,
        f64::MAX,
        0.1,
    ] {
        let mut b = kiln::ir::Builder::new("c");
        let c = b.constant(Scalar::F64(v));
        b.output("c", c);
        let g = b.finish();
        assert_eq!(
            kiln::ir::text::parse(&kiln::ir::text::print(&g)).unwrap(),
            g
        );
    }
}
