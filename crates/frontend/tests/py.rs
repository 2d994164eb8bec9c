//! The Python subset, end to end through the interpreter: one `check` per feature.

use kiln_frontend::py::{self, Options};
use kiln_ir::{verify, Data, Dim, Scalar};

/// Parses `src`, runs it on scalar f64 `args` by input name and returns the
/// outputs as `name = value` lines, or the error.
fn run(src: &str, args: &[(&str, Data)]) -> String {
    let (graph, _) = match py::parse(src, &Options::default()) {
        Ok(g) => g,
        Err(e) => return format!("error: {e}"),
    };
    let verified = match verify(graph.clone()) {
        Ok(v) => v,
        Err(e) => return format!("verify: {e}"),
    };
    let inputs: Vec<Data> = graph
        .inputs()
        .iter()
        .map(|i| {
            args.iter()
                .find(|(n, _)| *n == i.name)
                .map(|(_, d)| d.clone())
                .unwrap_or_else(|| panic!("no arg {}", i.name))
        })
        .collect();
    match kiln_interp::run(&verified, &inputs) {
        Ok(outs) => graph
            .outputs()
            .iter()
            .zip(outs)
            .map(|(o, d)| format!("{} = {d}", o.name))
            .collect::<Vec<_>>()
            .join("; "),
        Err(e) => format!("run: {e}"),
    }
}

fn f(v: f64) -> Data {
    Data::Scalar(Scalar::F64(v))
}

fn i(v: i64) -> Data {
    Data::Scalar(Scalar::I64(v))
}

#[test]
fn plain_expressions() {
    assert_eq!(
        run(
            "(2+3*b+33*(10/2)+1+3/3+a)/2",
            &[("a", f(1.0)), ("b", f(2.0))]
        ),
        "out = 88.0"
    );
    assert_eq!(
        run("sin(x0) * (x1 + 2.5)", &[("x0", f(0.0)), ("x1", f(1.0))]),
        "out = 0.0"
    );
    assert_eq!(run("-2 ** 2", &[]), "out = -4.0");
    assert_eq!(run("2 ** -1", &[]), "out = 0.5");
    assert_eq!(
        run("7 // 2, -7 // 2, -7 % 3, 7 / 2", &[]),
        "out0 = 3; out1 = -4; out2 = 2; out3 = 3.5"
    );
    assert_eq!(
        run("-7.5 // 2.0, -7.5 % 2.0", &[]),
        "out0 = -4.0; out1 = 0.5"
    );
    assert_eq!(run("True + True", &[]), "out = 2");
    assert_eq!(run("1 < x <= 3", &[("x", f(3.0))]), "out = true");
    assert_eq!(run("1 < x <= 3", &[("x", f(1.0))]), "out = false");
    assert_eq!(
        run("a if a > b else b", &[("a", f(1.0)), ("b", f(5.0))]),
        "out = 5.0"
    );
    assert_eq!(run("not x or x > 3", &[("x", f(0.0))]), "out = true");
    assert_eq!(
        run("math.pi, np.e, -inf", &[]),
        "out0 = 3.141592653589793; out1 = 2.718281828459045; out2 = -inf"
    );
    assert_eq!(
        run("-9223372036854775808 // -1", &[]),
        "out = -9223372036854775808"
    );
    assert_eq!(
        run("min(x, 2, 1.5), max(x, 3)", &[("x", f(f64::NAN))]),
        "out0 = nan; out1 = nan"
    );
    assert_eq!(
        run("np.where(x > 0, x, 0.0)", &[("x", f(-3.0))]),
        "out = 0.0"
    );
    assert_eq!(
        run(
            "round(2.5), round(3.5), floor(-0.5), int(-2.7), float(3)",
            &[]
        ),
        "out0 = 2.0; out1 = 4.0; out2 = -1.0; out3 = -2; out4 = 3.0"
    );
    assert_eq!(
        run("1 << 65, -16 >> 2, 6 & 3, 6 | 3, 6 ^ 3, ~5", &[]),
        "out0 = 0; out1 = -4; out2 = 2; out3 = 7; out4 = 5; out5 = -6"
    );
    // NumPy's shifts: a count outside [0, 64) shifts every bit out.
    assert_eq!(
        run(
            "1 << 64, 1 << -1, -16 >> 64, 16 >> 64, -16 >> -1, 1 << 63",
            &[]
        ),
        "out0 = 0; out1 = 0; out2 = -1; out3 = 0; out4 = -1; out5 = -9223372036854775808"
    );
    assert_eq!(run("x = 1.5\nx * 2", &[]), "out = 3.0");
}

#[test]
fn functions() {
    let fx_tutorial = "def fn(x):\n    a = x + 2.0\n    b = a + 2.0\n    b += b\n    c = b - a\n    e = a * 3\n    e = e / c\n    d = b + c + a\n    return a\n";
    assert_eq!(run(fx_tutorial, &[("x", f(2.0))]), "a = 4.0");
    let typed = "import math\ndef g(x: float, n: int, flag: bool) -> float:\n    \"\"\"Doc.\"\"\"\n    y = x * n\n    q, r = n // 3, n % 3\n    return y if flag else -y, q, r\n";
    assert_eq!(
        run(
            typed,
            &[
                ("x", f(1.5)),
                ("n", i(-7)),
                ("flag", Data::Scalar(Scalar::Bool(false)))
            ]
        ),
        "out0 = 10.5; q = -3; r = 2"
    );
    assert_eq!(
        run(
            "def h(a: f32): return a * 2.5",
            &[("a", Data::Scalar(Scalar::F32(1.5)))]
        ),
        "out = 3.75"
    );
    assert_eq!(
        run(
            "def h(a: i32): return a + 1",
            &[("a", Data::Scalar(Scalar::I32(i32::MAX)))]
        ),
        "out = -2147483648"
    );
}

#[test]
fn literals_are_weak() {
    let (graph, _) = py::parse(
        "def h(a: f32, k: i32): return a * 2.5, k + 1, k * 1.5",
        &Options::default(),
    )
    .unwrap();
    let types: Vec<String> = graph
        .outputs()
        .iter()
        .map(|o| graph.ty(o.value).to_string())
        .collect();
    assert_eq!(types, ["f32", "i32", "f64"]);
    let (graph, _) = py::parse(
        "def h(k: i32, p: bool): return floor(k), round(p)",
        &Options::default(),
    )
    .unwrap();
    let types: Vec<String> = graph
        .outputs()
        .iter()
        .map(|o| graph.ty(o.value).to_string())
        .collect();
    assert_eq!(types, ["i32", "i64"]);
}

#[test]
fn integer_division_by_zero_is_a_run_time_error() {
    assert_eq!(
        run(
            "def d(a: int, b: int):\n    q = a // b\n    return q\n",
            &[("a", i(1)), ("b", i(0))]
        ),
        "run: integer division by zero in v2 (`q`)"
    );
    assert_eq!(run("x / 0", &[("x", f(1.0))]), "out = inf");
}

#[test]
fn columns() {
    let opts = Options {
        default_shape: vec![Dim::Sym("n".into())],
        ..Options::default()
    };
    let (graph, _) = py::parse("(x > 2.0) & (x < 6.0)", &opts).unwrap();
    let graph = verify(graph).unwrap();
    let x = Data::from((0..10).map(f64::from).collect::<Vec<_>>());
    let out = kiln_interp::run(&graph, std::slice::from_ref(&x)).unwrap();
    assert_eq!(
        out[0].to_string(),
        "[false, false, false, true, true, true, false, false, false, false]"
    );
    let (graph, _) = py::parse(
        "filter((x > 2.0) & (x < 6.0)), sum(x), mean(x), len(x), min(x)",
        &opts,
    )
    .unwrap();
    let graph = verify(graph).unwrap();
    let out: Vec<String> = kiln_interp::run(&graph, &[x])
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(out, ["[3, 4, 5]", "45.0", "4.5", "10", "0.0"]);
}

#[test]
fn annotations_give_shapes() {
    let (graph, _) = py::parse(
        "def f(x: float[n], k: i32[4, m], s: bool): return x",
        &Options::default(),
    )
    .unwrap();
    let types: Vec<String> = graph
        .inputs()
        .iter()
        .map(|i| graph.ty(i.value).to_string())
        .collect();
    assert_eq!(types, ["f64[n]", "i32[4, m]", "bool"]);
    assert_eq!(
        run("def f(x: float[+]): return x", &[]),
        "error: 1:16: expected a dimension (a name or an integer), found `+`"
    );
}

#[test]
fn bad_input_is_located() {
    let err = |src: &str| run(src, &[]);
    assert_eq!(
        err("(1 + "),
        "error: 1:6: expected an expression, found end of input"
    );
    assert_eq!(
        err("1 +* 2"),
        "error: 1:4: expected an expression, found `*`"
    );
    assert_eq!(err("foo(1)"), "error: 1:1: unknown function `foo`");
    assert_eq!(
        err("os.system(1)"),
        "error: 1:1: unknown module in `os.system`; use math, np, numpy, torch or F"
    );
    assert_eq!(
        err("sin(1, 2)"),
        "error: 1:1: `sin` takes 1 argument(s), got 2"
    );
    assert_eq!(
        err("1.5 & 2"),
        "error: 1:1: bitwise operators take bools or ints, got f64"
    );
    assert_eq!(
        err("def f(x):\n    return y\n"),
        "error: 2:12: name `y` is not defined"
    );
    assert_eq!(
        err("def f(x):\n    y = x\n"),
        "error: 3:1: function `f` does not return a value"
    );
    assert_eq!(
        err("def f(x):\n    return x\n    y = 1\n"),
        "error: 3:5: unreachable statement after `return`"
    );
    assert_eq!(
        err("def f(x: str): return x"),
        "error: 1:7: unknown type annotation `str`; use float, int, bool, f32 or i32"
    );
    assert_eq!(
        err("99999999999999999999"),
        "error: 1:1: integer literal out of range for int64"
    );
    assert_eq!(
        err("def f(k: i32): return k + 3000000000"),
        "error: 1:23: integer literal 3000000000 is out of range for i32"
    );
    assert_eq!(
        err("x = 1"),
        "error: 1:6: expected an expression to compute"
    );
    assert_eq!(err("a, b = 1"), "error: 1:1: cannot unpack into 2 names");
    assert_eq!(
        err("f(x=1)"),
        "error: 1:1: `f` takes no keyword arguments (`x=`)"
    );
    assert_eq!(err("\u{0}"), "error: 1:1: unexpected character `\u{0}`");
    assert_eq!(err(""), "error: 1:1: expected an expression to compute");
    // Found by fuzz/parse_py: an empty tuple made a graph without outputs.
    assert_eq!(
        err("(\n)\n"),
        "error: 1:1: an empty tuple has nothing to return"
    );
    assert_eq!(
        err("def f(x): return ()"),
        "error: 1:18: an empty tuple has nothing to return"
    );
    assert_eq!(
        err("sum(1.0)"),
        "error: 1:1: `sum` takes a column (one dimension), got f64"
    );
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    for (open, close) in [
        ("(", ")"),
        ("-", ""),
        ("not ", ""),
        ("sin(", ")"),
        ("2 ** ", ""),
        ("1 if x else ", ""),
    ] {
        let src = format!("{}x{}", open.repeat(100_000), close.repeat(100_000));
        let out = run(&src, &[]);
        assert!(
            out.contains("expression nested too deeply (more than 200 levels)"),
            "{open}: {out}"
        );
    }
    // Long flat chains are fine: the parser loops and lowering does not recurse.
    let chain = vec!["x"; 50_000].join(" + ");
    assert_eq!(run(&chain, &[("x", f(1.0))]), "out = 50000.0");
    let nested_ok = format!("{}x{}", "(".repeat(150), ")".repeat(150));
    assert_eq!(run(&nested_ok, &[("x", f(1.0))]), "x = 1.0");
}

#[test]
fn membership_in_constant_sets() {
    let opts = Options {
        default_shape: vec![Dim::Sym("n".into())],
        ..Options::default()
    };
    let column = |src: &str, x: Data| -> String {
        let (graph, _) = match py::parse(src, &opts) {
            Ok(g) => g,
            Err(e) => return format!("error: {e}"),
        };
        let graph = verify(graph).unwrap();
        kiln_interp::run(&graph, &[x]).unwrap()[0].to_string()
    };
    let xs = Data::from(vec![1.0, 2.5, -0.0, f64::NAN, 3.0, 7.0]);
    // NumPy's `==`: -0.0 is 0.0, NaN is in no set (not even one holding NaN).
    assert_eq!(
        column("x in (1, 2.5, 0.0, nan)", xs.clone()),
        "[true, true, true, false, false, false]"
    );
    assert_eq!(
        column("x not in [3, 7, -inf]", xs.clone()),
        "[true, true, true, true, false, false]"
    );
    assert_eq!(
        column("np.isin(x, [7.0, 1.0], invert=True)", xs.clone()),
        "[false, true, true, true, true, false]"
    );
    assert_eq!(
        column("x.isin([2.5])", xs.clone()),
        "[false, true, false, false, false, false]"
    );
    // An int column meets a float value as float64; an int too large for
    // int32 equals nothing (twenty values and more).
    let ints = Data::Column(kiln_ir::Buffer::I64(vec![1, 2, 3, 40, -5, i64::MAX]));
    assert_eq!(
        column("def f(x: int[n]): return x in (2.0, 3.5, 40)", ints.clone()),
        "[false, true, false, true, false, false]"
    );
    let many: Vec<String> = (0..20).map(|v| (v * 2 - 6).to_string()).collect();
    let src = format!(
        "def f(x: i32[n]): return x in ({}, 3000000000, 2147483647)",
        many.join(", ")
    );
    let i32s = Data::Column(kiln_ir::Buffer::I32(vec![1, 2, 3, 40, -5, i32::MAX]));
    assert_eq!(
        column(&src, i32s),
        "[false, true, false, false, false, true]"
    );
    for (src, says) in [
        ("x in x", "a tuple or list of numbers"),
        ("x in (1, y)", "number literals only"),
        ("x < 2 in (1, 2)", "cannot be chained"),
        ("x in (1, 2) == True", "cannot be chained"),
        ("(x > 1) in (1, 2)", "not in a bool array"),
        ("np.isin(x, [1], invert=1)", "True or False"),
        ("x is 2", "`is` is not supported"),
    ] {
        let (graph, _) = (py::parse(src, &opts).map(|_| ()), ());
        let e = graph.expect_err(src).to_string();
        assert!(e.contains(says), "{src}: {e}");
    }
}
