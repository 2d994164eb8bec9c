//! Derivatives (`kiln::ir::grad`): each differentiable op's gradient
//! against central finite differences of the interpreter in `f64`, the
//! values torch gives at the points where a function has no derivative,
//! and every engine of this build bit for bit with the interpreter on the
//! derivative graphs (at every thread count, as the differential test
//! runs them).

use kiln::ir::grad::{gradient, jacobian};
use kiln::{Buffer, Data, Graph, Scalar, Verified};

fn verified(text: &str) -> Verified {
    kiln::verify(kiln::ir::text::parse(text).expect("parses")).expect("verifies")
}

/// Every engine agrees with the interpreter on `graph` over `inputs`.
fn on_every_engine(graph: Graph, inputs: &[Data]) {
    let case = kiln_fuzzgen::Case {
        graph,
        inputs: inputs.to_vec(),
    };
    if let Err(report) = kiln_fuzzgen::differential(&case) {
        panic!("{report}");
    }
}

fn f64s(data: &Data) -> Vec<f64> {
    match data {
        Data::Scalar(Scalar::F64(x)) => vec![*x],
        Data::Column(Buffer::F64(v)) => v.clone(),
        other => panic!("not f64: {other:?}"),
    }
}

fn with_element(data: &Data, idx: usize, x: f64) -> Data {
    match data {
        Data::Scalar(Scalar::F64(_)) => Data::Scalar(Scalar::F64(x)),
        Data::Column(Buffer::F64(v)) => {
            let mut v = v.clone();
            v[idx] = x;
            Data::Column(Buffer::F64(v))
        }
        other => panic!("not f64: {other:?}"),
    }
}

/// The sum of the elements of output `of` (in `f64`, in order).
fn summed(graph: &Verified, inputs: &[Data], of: usize) -> f64 {
    let outs = kiln::interp::run(graph, inputs).expect("runs");
    f64s(&outs[of]).iter().sum()
}

/// Checks the gradient of the sum of output `of` with respect to the
/// inputs named in `wrt` against central differences (steps of 1e-6
/// relative) with relative tolerance `tol`, then every engine on the
/// gradient graph.
fn check(text: &str, of: &str, wrt: &[&str], inputs: &[Data], tol: f64) {
    check_with_step(text, of, wrt, inputs, 1e-6, tol);
}

/// [`check`] with relative steps of `step`.
fn check_with_step(text: &str, of: &str, wrt: &[&str], inputs: &[Data], step: f64, tol: f64) {
    let graph = verified(text);
    let grad = gradient(&graph, Some(of), wrt, false).expect("differentiates");
    let grad = kiln::verify(grad).expect("the gradient graph verifies");
    let outs = kiln::interp::run(&grad, inputs).expect("the gradient graph runs");
    let n_out = graph.graph().outputs().len();
    let of_idx = graph
        .graph()
        .outputs()
        .iter()
        .position(|o| o.name == of)
        .expect("the output");
    for (k, name) in wrt.iter().enumerate() {
        let idx = graph
            .graph()
            .inputs()
            .iter()
            .position(|i| i.name == *name)
            .expect("the input");
        let grads = f64s(&outs[n_out + k]);
        let at = f64s(&inputs[idx]);
        assert_eq!(grads.len(), at.len(), "grad_{name} has the input's size");
        for (j, (&x, &g)) in at.iter().zip(&grads).enumerate() {
            let h = step * x.abs().max(1.0);
            let mut shifted = inputs.to_vec();
            shifted[idx] = with_element(&inputs[idx], j, x + h);
            let up = summed(&graph, &shifted, of_idx);
            shifted[idx] = with_element(&inputs[idx], j, x - h);
            let down = summed(&graph, &shifted, of_idx);
            let fd = (up - down) / (2.0 * h);
            assert!(
                (fd - g).abs() <= tol * g.abs().max(1.0),
                "{}: d{of}/d{name}[{j}] at {x}: kiln {g}, finite differences {fd}",
                graph.graph().name
            );
        }
    }
    on_every_engine(grad.into_graph(), inputs);
}

fn col(values: &[f64]) -> Data {
    Data::Column(Buffer::F64(values.to_vec()))
}

fn scalar(x: f64) -> Data {
    Data::Scalar(Scalar::F64(x))
}

/// `n` points in `lo..hi`, spread by a fixed sequence (no randomness
/// between runs).
fn points(n: usize, lo: f64, hi: f64, seed: u64) -> Vec<f64> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            lo + (hi - lo) * ((state >> 11) as f64 / (1u64 << 53) as f64)
        })
        .collect()
}

#[test]
fn every_unary_function_against_finite_differences() {
    let domains: &[(&str, f64, f64)] = &[
        ("neg", -3.0, 3.0),
        ("abs", 0.1, 3.0),
        ("abs", -3.0, -0.1),
        ("sqrt", 0.1, 4.0),
        ("floor", 0.1, 0.9),
        ("ceil", 1.1, 1.9),
        ("trunc", -1.9, -1.1),
        ("round", 2.1, 2.4),
        ("sin", -3.0, 3.0),
        ("cos", -3.0, 3.0),
        ("tan", -1.2, 1.2),
        ("asin", -0.9, 0.9),
        ("acos", -0.9, 0.9),
        ("atan", -3.0, 3.0),
        ("sinh", -3.0, 3.0),
        ("cosh", -3.0, 3.0),
        ("tanh", -3.0, 3.0),
        ("exp", -3.0, 3.0),
        ("exp2", -3.0, 3.0),
        ("expm1", -3.0, 3.0),
        ("log", 0.1, 5.0),
        ("log2", 0.1, 5.0),
        ("log10", 0.1, 5.0),
        ("log1p", -0.5, 5.0),
        ("cbrt", 0.1, 5.0),
        ("cbrt", -5.0, -0.1),
        ("asinh", -3.0, 3.0),
        ("acosh", 1.1, 5.0),
        ("atanh", -0.9, 0.9),
        ("erf", -2.5, 2.5),
        ("erfc", -2.5, 2.5),
    ];
    for (seed, &(op, lo, hi)) in domains.iter().enumerate() {
        let text = format!(
            "graph \"{op}\"\nv0: f64[n] = input \"x\"\nv1: f64[n] = {op} v0\noutput \"y\" = v1\n"
        );
        let x = points(16, lo, hi, seed as u64 + 1);
        check(&text, "y", &["x"], &[col(&x)], 1e-6);
    }
}

#[test]
fn every_binary_function_against_finite_differences() {
    // Points away from each function's jumps and ties.
    type Range = (f64, f64);
    let domains: &[(&str, Range, Range)] = &[
        ("add", (-3.0, 3.0), (-3.0, 3.0)),
        ("sub", (-3.0, 3.0), (-3.0, 3.0)),
        ("mul", (-3.0, 3.0), (-3.0, 3.0)),
        ("div", (-3.0, 3.0), (0.5, 3.0)),
        ("pow", (0.2, 3.0), (-2.0, 2.0)),
        ("min", (-3.0, -0.1), (0.1, 3.0)),
        ("max", (0.1, 3.0), (-3.0, -0.1)),
        ("copysign", (0.1, 3.0), (-3.0, -0.1)),
        ("atan2", (-3.0, 3.0), (0.2, 3.0)),
        ("hypot", (-3.0, 3.0), (0.2, 3.0)),
        ("rem", (0.1, 0.9), (1.0, 1.5)),
        ("mod", (-0.9, -0.1), (1.0, 1.5)),
        ("floordiv", (0.1, 0.9), (1.0, 1.5)),
    ];
    for (seed, &(op, (alo, ahi), (blo, bhi))) in domains.iter().enumerate() {
        let text = format!(
            "graph \"{op}\"\nv0: f64[n] = input \"a\"\nv1: f64[n] = input \"b\"\nv2: f64[n] = {op} v0, v1\noutput \"y\" = v2\n"
        );
        let a = points(12, alo, ahi, 2 * seed as u64 + 1);
        let b = points(12, blo, bhi, 2 * seed as u64 + 2);
        check(&text, "y", &["a", "b"], &[col(&a), col(&b)], 1e-6);
    }
}

/// A scalar broadcast over rows gets the sum of the rows' derivatives;
/// `select`, comparisons and casts through `f32` pass what torch passes.
#[test]
fn broadcasting_select_and_casts() {
    let text = r#"graph "mixed"
v0: f64[n] = input "x"
v1: f64 = input "w"
v2: f64[n] = mul v0, v1
v3: f64 = const 0.0
v4: bool[n] = gt v2, v3
v5: f64[n] = exp v2
v6: f64[n] = mul v2, v2
v7: f64[n] = select v4, v5, v6
v8: f32[n] = cast v7
v9: f32[n] = sin v8
v10: f64[n] = cast v9
v11: f64[n] = add v10, v7
output "y" = v11
"#;
    let x = points(10, -2.0, 2.0, 7);
    // Through f32, finite differences see its rounding: longer steps.
    check_with_step(text, "y", &["x", "w"], &[col(&x), scalar(0.7)], 1e-3, 1e-3);
}

#[test]
fn reductions_against_finite_differences() {
    let text = r#"graph "reductions"
v0: f64[n] = input "x"
v1: f64 = sum v0
v2: f64 = mean v0
v3: f64 = reduce_max v0
v4: f64 = reduce_min v0
v5: f64 = prod v0
v6: f64[n] = mul v0, v1
v7: f64[n] = add v6, v2
v8: f64[n] = mul v7, v3
v9: f64[n] = sub v8, v4
v10: f64[n] = add v9, v5
output "y" = v10
"#;
    let x = points(7, 0.5, 1.5, 11);
    check(text, "y", &["x"], &[col(&x)], 1e-6);
}

#[test]
fn tensor_ops_against_finite_differences() {
    let text = r#"graph "tensors"
v0: f64[2, 3] = input "x"
v1: f64[3, 4] = input "w"
v2: f64[4] = input "b"
v3: f64[2, 4] = matmul v0, v1
v4: f64[2, 4] = add v3, v2
v5: f64[4, 2] = transpose v4 [1, 0]
v6: f64[8] = reshape v5
v7: f64[3] = slice v6 [0:8:-3]
v8: f64[2, 2] = slice v4 [:, 0:4:2]
v9: f64[2, 6] = concat v8, v4 [1]
v10: f64[2, 1] = reduce_axes v9 [1] mean keepdim
v11: f64[2, 6] = mul v9, v10
v12: f64[3, 2, 6] = broadcast_to v11
v13: f64[2, 6] = reduce_axes v12 [0] reduce_max
v14: f64[6] = reduce_axes v13 [0] prod
v15: f64 = reduce_axes v7 [0] sum
v16: f64[6] = mul v14, v15
v17: f64[2, 6] = tanh v13
output "y" = v16
output "z" = v17
"#;
    let x = col(&points(6, -1.0, 1.0, 3));
    let w = col(&points(12, -1.0, 1.0, 4));
    let b = col(&points(4, -1.0, 1.0, 5));
    check(
        text,
        "y",
        &["x", "w", "b"],
        &[x.clone(), w.clone(), b.clone()],
        1e-6,
    );
    check(text, "z", &["x", "w", "b"], &[x, w, b], 1e-6);
}

#[test]
fn matmul_in_every_rank_against_finite_differences() {
    let cases: &[(&str, &str, &str, usize, usize)] = &[
        ("f64[3]", "f64[3, 2]", "f64[2]", 3, 6),
        ("f64[2, 3]", "f64[3]", "f64[2]", 6, 3),
        ("f64[3]", "f64[3]", "f64", 3, 3),
        ("f64[2, 2, 3]", "f64[3, 2]", "f64[2, 2, 2]", 12, 6),
        ("f64[3]", "f64[2, 3, 2]", "f64[2, 2]", 3, 12),
        ("f64[2, 2, 3]", "f64[3]", "f64[2, 2]", 12, 3),
        ("f64[1, 2, 3]", "f64[2, 3, 2]", "f64[2, 2, 2]", 6, 12),
    ];
    for (seed, &(ta, tb, ty, na, nb)) in cases.iter().enumerate() {
        let text = format!(
            "graph \"mm\"\nv0: {ta} = input \"a\"\nv1: {tb} = input \"b\"\nv2: {ty} = matmul v0, v1\nv3: {ty} = sin v2\noutput \"y\" = v3\n"
        );
        let a = points(na, -1.0, 1.0, 100 + seed as u64);
        let b = points(nb, -1.0, 1.0, 200 + seed as u64);
        let wrap = |v: &[f64]| {
            if v.len() == 1 {
                scalar(v[0])
            } else {
                col(v)
            }
        };
        check(&text, "y", &["a", "b"], &[wrap(&a), wrap(&b)], 1e-6);
    }
}

/// Where a function has no derivative, kiln gives torch's value (checked
/// against torch in `crates/python/tests/test_grad.py` too).
#[test]
fn torch_choices_where_there_is_no_derivative() {
    let unary = |op: &str, x: &[f64]| -> Vec<f64> {
        let text = format!(
            "graph \"{op}\"\nv0: f64[n] = input \"x\"\nv1: f64[n] = {op} v0\noutput \"y\" = v1\n"
        );
        let g = kiln::verify(gradient(&verified(&text), None, &["x"], false).unwrap()).unwrap();
        on_every_engine(g.graph().clone(), &[col(x)]);
        f64s(&kiln::interp::run(&g, &[col(x)]).unwrap()[1])
    };
    let nan = f64::NAN;
    assert_eq!(unary("abs", &[0.0, -0.0, 2.0, -1.0]), [0.0, 0.0, 1.0, -1.0]);
    assert_eq!(unary("abs", &[nan])[0], 0.0);
    assert_eq!(unary("sqrt", &[0.0])[0], f64::INFINITY);
    assert_eq!(unary("floor", &[1.0, 2.5]), [0.0, 0.0]);
    assert_eq!(unary("log", &[0.0])[0], f64::INFINITY);
    let binary = |op: &str, a: &[f64], b: &[f64]| -> (Vec<f64>, Vec<f64>) {
        let text = format!(
            "graph \"{op}\"\nv0: f64[n] = input \"a\"\nv1: f64[n] = input \"b\"\nv2: f64[n] = {op} v0, v1\noutput \"y\" = v2\n"
        );
        let g =
            kiln::verify(gradient(&verified(&text), None, &["a", "b"], false).unwrap()).unwrap();
        on_every_engine(g.graph().clone(), &[col(a), col(b)]);
        let outs = kiln::interp::run(&g, &[col(a), col(b)]).unwrap();
        (f64s(&outs[1]), f64s(&outs[2]))
    };
    // torch.maximum: a tie splits, a NaN passes it to both.
    let (ga, gb) = binary("max", &[1.0, 2.0, nan], &[1.0, 1.0, 1.0]);
    assert_eq!(ga, [0.5, 1.0, 1.0]);
    assert_eq!(gb, [0.5, 0.0, 1.0]);
    // torch.pow: 0 where the exponent is 0; for the exponent, 0 where the
    // base is 0 and the exponent not negative.
    let (ga, gb) = binary("pow", &[0.0, 0.0, 2.0], &[0.0, 2.0, 0.0]);
    assert_eq!(ga, [0.0, 0.0, 0.0]);
    assert_eq!(gb[..2], [0.0, 0.0]);
    assert_eq!(gb[2], std::f64::consts::LN_2);
    let (ga, _) = binary("copysign", &[0.0, -0.0, 3.0], &[-1.0, -1.0, -1.0]);
    assert_eq!(ga, [0.0, 0.0, -1.0]);
    let reduce = |op: &str, x: &[f64]| -> Vec<f64> {
        let text = format!(
            "graph \"{op}\"\nv0: f64[n] = input \"x\"\nv1: f64 = {op} v0\noutput \"y\" = v1\n"
        );
        let g = kiln::verify(gradient(&verified(&text), None, &["x"], false).unwrap()).unwrap();
        on_every_engine(g.graph().clone(), &[col(x)]);
        f64s(&kiln::interp::run(&g, &[col(x)]).unwrap()[1])
    };
    // amax: an even split among the maxima; NaN everywhere when it is NaN.
    assert_eq!(reduce("reduce_max", &[1.0, 3.0, 3.0]), [0.0, 0.5, 0.5]);
    assert!(reduce("reduce_max", &[nan, 1.0]).iter().all(|g| g.is_nan()));
    // prod: with one zero, the product of the others there; with two, 0.
    assert_eq!(reduce("prod", &[2.0, 0.0, 3.0]), [0.0, 6.0, 0.0]);
    assert_eq!(reduce("prod", &[2.0, 0.0, 0.0]), [0.0, 0.0, 0.0]);
}

/// A vector-Jacobian product takes the cotangent as an input.
#[test]
fn a_seeded_gradient_is_a_vector_jacobian_product() {
    let text = r#"graph "vjp"
v0: f64[n] = input "x"
v1: f64[n] = mul v0, v0
output "y" = v1
"#;
    let g = kiln::verify(gradient(&verified(text), None, &["x"], true).unwrap()).unwrap();
    let inputs = [col(&[1.0, 2.0, -3.0]), col(&[1.0, 0.5, 2.0])];
    let outs = kiln::interp::run(&g, &inputs).unwrap();
    assert_eq!(f64s(&outs[1]), [2.0, 2.0, -12.0]);
    on_every_engine(g.into_graph(), &inputs);
}

/// Forward mode through every function whose derivative divides (the
/// quotient rule, `log`, `sqrt`, `cbrt`, the inverse functions), at
/// `f(c0 x + c1) / (x² + 1)`: with respect to both constants, whose
/// tangents share one reciprocal of each divisor, and to `c0` alone,
/// where `x² + 1` holds no parameter and its reciprocal is computed once.
#[test]
fn jacobians_through_divisions_against_finite_differences() {
    let domains: &[(&str, f64, f64)] = &[
        ("sqrt", 0.1, 4.0),
        ("log", 0.1, 5.0),
        ("log2", 0.1, 5.0),
        ("log10", 0.1, 5.0),
        ("log1p", -0.5, 5.0),
        ("cbrt", 0.1, 5.0),
        ("asin", -0.9, 0.9),
        ("acos", -0.9, 0.9),
        ("atan", -3.0, 3.0),
        ("asinh", -3.0, 3.0),
        ("acosh", 1.1, 5.0),
        ("atanh", -0.9, 0.9),
    ];
    let (c0, c1) = (0.8, 0.05);
    for (seed, &(op, lo, hi)) in domains.iter().enumerate() {
        let text = format!(
            "graph \"{op}\"\nv0: f64[n] = input \"x\"\nv1: f64 = input \"c0\"\nv2: f64 = input \"c1\"\n\
             v3: f64[n] = mul v1, v0\nv4: f64[n] = add v3, v2\nv5: f64[n] = {op} v4\n\
             v6: f64[n] = mul v0, v0\nv7: f64 = const 1.0\nv8: f64[n] = add v6, v7\n\
             v9: f64[n] = div v5, v8\noutput \"y\" = v9\n"
        );
        // Arguments `c0 x + c1` inside the domain.
        let x: Vec<f64> = points(12, lo, hi, 50 + seed as u64)
            .iter()
            .map(|a| (a - c1) / c0)
            .collect();
        let at = [col(&x), scalar(c0), scalar(c1)];
        let graph = verified(&text);
        for wrt in [&["c0", "c1"][..], &["c0"]] {
            let jac =
                kiln::verify(jacobian(&graph, wrt).expect("differentiates")).expect("verifies");
            let outs = kiln::interp::run(&jac, &at).unwrap();
            for (k, name) in wrt.iter().enumerate() {
                let d = f64s(&outs[1 + k]);
                let p = 1 + usize::from(*name == "c1");
                let moved = |by: f64| {
                    let mut moved = at.to_vec();
                    moved[p] = scalar(f64s(&at[p])[0] + by);
                    f64s(&kiln::interp::run(&graph, &moved).unwrap()[0])
                };
                let h = 1e-6;
                let (up, down) = (moved(h), moved(-h));
                for (i, di) in d.iter().enumerate() {
                    let fd = (up[i] - down[i]) / (2.0 * h);
                    assert!(
                        (fd - di).abs() <= 1e-6 * di.abs().max(1.0),
                        "{op}: dy/d{name}[{i}]: kiln {di}, finite differences {fd}"
                    );
                }
            }
            on_every_engine(jac.into_graph(), &at);
        }
    }
}

/// Forward mode gives each row's derivative with respect to scalar
/// parameters: the Jacobian of a least-squares fit.
#[test]
fn the_jacobian_of_an_expression_with_respect_to_its_constants() {
    let text = r#"graph "gp"
v0: f64[n] = input "x"
v1: f64 = input "c0"
v2: f64 = input "c1"
v3: f64[n] = mul v0, v1
v4: f64[n] = sub v0, v2
v5: f64[n] = cos v4
v6: f64[n] = mul v3, v5
v7: f64 = sum v6
v8: f64[n] = div v6, v7
output "y" = v6
output "share" = v8
"#;
    let graph = verified(text);
    let jac = kiln::verify(jacobian(&graph, &["c0", "c1"]).unwrap()).unwrap();
    let names: Vec<&str> = jac
        .graph()
        .outputs()
        .iter()
        .map(|o| o.name.as_str())
        .collect();
    assert_eq!(
        names,
        ["y", "share", "dy/dc0", "dy/dc1", "dshare/dc0", "dshare/dc1"]
    );
    let x = points(9, -2.0, 2.0, 42);
    let (c0, c1) = (1.3, 0.4);
    let inputs = [col(&x), scalar(c0), scalar(c1)];
    let outs = kiln::interp::run(&jac, &inputs).unwrap();
    for (k, (name, at)) in [("c0", 1), ("c1", 2)].into_iter().enumerate() {
        for (out, first) in [(0, 2), (1, 4)] {
            let d = f64s(&outs[first + k]);
            let c = if at == 1 { c0 } else { c1 };
            let h = 1e-6;
            let mut up = inputs.to_vec();
            up[at] = scalar(c + h);
            let mut down = inputs.to_vec();
            down[at] = scalar(c - h);
            let yu = f64s(&kiln::interp::run(&graph, &up).unwrap()[out]);
            let yd = f64s(&kiln::interp::run(&graph, &down).unwrap()[out]);
            for row in 0..x.len() {
                let fd = (yu[row] - yd[row]) / (2.0 * h);
                assert!(
                    (fd - d[row]).abs() <= 1e-6 * d[row].abs().max(1.0),
                    "d{out}/d{name}[{row}]: kiln {}, finite differences {fd}",
                    d[row]
                );
            }
        }
    }
    on_every_engine(jac.into_graph(), &inputs);
}

/// `conv2d`'s gradients with respect to the input and the weights, with
/// strides, asymmetric padding and dilation.
#[test]
fn convolution_against_finite_differences() {
    let configs = [
        ("", "f64[2, 2, 5, 5]"),
        (" stride [2, 1] pad [1, 0, 2, 1]", "f64[2, 2, 3, 8]"),
        (
            " stride [2, 2] pad [0, 1, 1, 1] dilation [2, 1]",
            "f64[2, 2, 2, 4]",
        ),
        (" dilation [1, 2] pad [1, 1, 0, 0]", "f64[2, 2, 7, 4]"),
    ];
    for (seed, (attrs, ty)) in configs.iter().enumerate() {
        let text = format!(
            "graph \"conv\"\nv0: f64[2, 3, 7, 6] = input \"x\"\nv1: f64[2, 3, 3, 2] = input \"w\"\nv2: {ty} = conv2d v0, v1{attrs}\nv3: {ty} = sin v2\noutput \"y\" = v3\n"
        );
        let x = col(&points(2 * 3 * 7 * 6, -1.0, 1.0, 300 + seed as u64));
        let w = col(&points(2 * 3 * 3 * 2, -1.0, 1.0, 400 + seed as u64));
        check(&text, "y", &["x", "w"], &[x.clone(), w.clone()], 1e-6);
        // Forward mode: the Jacobian with respect to a scale of the weights.
        let scaled = format!(
            "graph \"conv\"\nv0: f64[2, 3, 7, 6] = input \"x\"\nv1: f64[2, 3, 3, 2] = input \"w\"\nv2: f64 = input \"s\"\nv3: f64[2, 3, 3, 2] = mul v1, v2\nv4: {ty} = conv2d v0, v3{attrs}\nv5: {ty} = sin v4\noutput \"y\" = v5\n"
        );
        let graph = verified(&scaled);
        let jac =
            kiln::verify(jacobian(&graph, &["s"]).expect("differentiates")).expect("verifies");
        let at = [x.clone(), w.clone(), scalar(0.8)];
        let d = f64s(&kiln::interp::run(&jac, &at).unwrap()[1]);
        let h = 1e-6;
        let run = |s: f64| {
            f64s(&kiln::interp::run(&graph, &[x.clone(), w.clone(), scalar(s)]).unwrap()[0])
        };
        let (up, down) = (run(0.8 + h), run(0.8 - h));
        for (i, di) in d.iter().enumerate() {
            let fd = (up[i] - down[i]) / (2.0 * h);
            assert!(
                (fd - di).abs() <= 1e-6 * di.abs().max(1.0),
                "dy/ds[{i}]: kiln {di}, finite differences {fd}"
            );
        }
        on_every_engine(jac.into_graph(), &at);
    }
}

/// Checks the Jacobian of `text`'s first output with respect to its
/// scalar input `s` against central differences, then every engine on it.
fn check_jacobian(text: &str, at: &[Data], s_at: usize, tol: f64) {
    let graph = verified(text);
    let jac = kiln::verify(jacobian(&graph, &["s"]).expect("differentiates")).expect("verifies");
    let n_out = graph.graph().outputs().len();
    let d = f64s(&kiln::interp::run(&jac, at).unwrap()[n_out]);
    let s = f64s(&at[s_at])[0];
    let h = 1e-6;
    let run = |s: f64| {
        let mut moved = at.to_vec();
        moved[s_at] = scalar(s);
        f64s(&kiln::interp::run(&graph, &moved).unwrap()[0])
    };
    let (up, down) = (run(s + h), run(s - h));
    for (i, di) in d.iter().enumerate() {
        let fd = (up[i] - down[i]) / (2.0 * h);
        assert!(
            (fd - di).abs() <= tol * di.abs().max(1.0),
            "{}: dy/ds[{i}]: kiln {di}, finite differences {fd}",
            graph.graph().name
        );
    }
    on_every_engine(jac.into_graph(), at);
}

/// Grouped and depthwise `conv2d`, and convolutions with enough channels
/// that the weights' adjoint is a matmul a tap: the gradients with respect
/// to the input and the weights, and the tangent of a scale of the
/// weights.
#[test]
fn grouped_convolution_against_finite_differences() {
    // (x's channels, w's shape, groups, attributes, the result's type)
    let configs = [
        (4, "f64[6, 2, 3, 2]", 2, "", "f64[2, 6, 5, 5]"),
        // 16 and 20 output × input channels a group: the weights' adjoint
        // as matmuls, a tap at a time.
        (
            8,
            "f64[8, 4, 3, 2]",
            2,
            " stride [2, 1] pad [1, 0, 2, 1]",
            "f64[2, 8, 3, 8]",
        ),
        (
            4,
            "f64[5, 4, 2, 3]",
            1,
            " stride [2, 2] pad [0, 1, 1, 1] dilation [2, 1]",
            "f64[2, 5, 3, 3]",
        ),
        (
            4,
            "f64[4, 1, 3, 3]",
            4,
            " stride [2, 2] pad [1, 1, 1, 1]",
            "f64[2, 4, 4, 3]",
        ),
        (
            6,
            "f64[3, 2, 2, 2]",
            3,
            " stride [1, 2] pad [0, 1, 1, 0] dilation [2, 1]",
            "f64[2, 3, 6, 3]",
        ),
    ];
    for (seed, (c, wty, groups, attrs, ty)) in configs.iter().enumerate() {
        let w_len: usize = wty
            .trim_start_matches("f64[")
            .trim_end_matches(']')
            .split(", ")
            .map(|d| d.parse::<usize>().unwrap())
            .product();
        let text = format!(
            "graph \"grouped\"\nv0: f64[2, {c}, 7, 6] = input \"x\"\nv1: {wty} = input \"w\"\nv2: {ty} = conv2d v0, v1{attrs} groups {groups}\nv3: {ty} = sin v2\noutput \"y\" = v3\n"
        );
        let x = col(&points(2 * c * 7 * 6, -1.0, 1.0, 500 + seed as u64));
        let w = col(&points(w_len, -1.0, 1.0, 600 + seed as u64));
        check(&text, "y", &["x", "w"], &[x.clone(), w.clone()], 1e-6);
        let scaled = format!(
            "graph \"grouped\"\nv0: f64[2, {c}, 7, 6] = input \"x\"\nv1: {wty} = input \"w\"\nv2: f64 = input \"s\"\nv3: {wty} = mul v1, v2\nv4: {ty} = conv2d v0, v3{attrs} groups {groups}\nv5: {ty} = sin v4\noutput \"y\" = v5\n"
        );
        check_jacobian(&scaled, &[x, w, scalar(0.8)], 2, 1e-6);
    }
}

/// The type of `[2, 2, 7, 5]` pooled by `attrs` (`kernel`, `stride`,
/// `pad`, `dilation`, `ceil_mode`).
fn pooled(
    kernel: [u32; 2],
    stride: [u32; 2],
    pad: [u32; 4],
    dilation: [u32; 2],
    ceil: bool,
) -> String {
    let count = |axis: usize, extent: u64| {
        kiln::ir::op::window_count(
            extent,
            kernel[axis],
            stride[axis],
            (pad[2 * axis], pad[2 * axis + 1]),
            dilation[axis],
            ceil,
        )
        .unwrap()
    };
    format!("f64[2, 2, {}, {}]", count(0, 7), count(1, 5))
}

/// The pools the derivative tests take: max and average with strides,
/// padding, dilation, `ceil_mode` and `count_include_pad`.
fn pools() -> Vec<(String, String)> {
    let mut out = Vec::new();
    type Config = ([u32; 2], [u32; 2], [u32; 4], [u32; 2], bool);
    let configs: [Config; 5] = [
        ([2, 2], [2, 2], [0; 4], [1, 1], false),
        ([3, 3], [2, 2], [1, 1, 1, 1], [1, 1], false),
        ([2, 2], [2, 2], [0; 4], [1, 1], true),
        ([3, 2], [2, 3], [1, 1, 1, 1], [1, 1], true),
        ([2, 3], [1, 2], [1, 1, 1, 1], [2, 2], true),
    ];
    for (kernel, stride, pad, dilation, ceil) in configs {
        let ty = pooled(kernel, stride, pad, dilation, ceil);
        let common = format!(
            " kernel [{}, {}] stride [{}, {}] pad [{}, {}, {}, {}]{}",
            kernel[0],
            kernel[1],
            stride[0],
            stride[1],
            pad[0],
            pad[1],
            pad[2],
            pad[3],
            if ceil { " ceil_mode" } else { "" }
        );
        out.push((
            format!(
                "max_pool2d v1{common} dilation [{}, {}]",
                dilation[0], dilation[1]
            ),
            ty.clone(),
        ));
        if dilation == [1, 1] {
            out.push((format!("avg_pool2d v1{common}"), ty.clone()));
            out.push((format!("avg_pool2d v1{common} count_include_pad"), ty));
        }
    }
    out
}

/// Max and average pooling: the gradient with respect to the input (and a
/// tangent of its scale) against central differences. Random inputs have
/// no ties, where a max pool has no derivative.
#[test]
fn pooling_against_finite_differences() {
    for (seed, (pool, ty)) in pools().into_iter().enumerate() {
        let text = format!(
            "graph \"pool\"\nv0: f64[2, 2, 7, 5] = input \"x\"\nv1: f64[2, 2, 7, 5] = sin v0\nv2: {ty} = {pool}\nv3: {ty} = mul v2, v2\noutput \"y\" = v3\n"
        );
        let x = col(&points(2 * 2 * 7 * 5, -2.0, 2.0, 700 + seed as u64));
        check(&text, "y", &["x"], std::slice::from_ref(&x), 1e-6);
        let scaled = format!(
            "graph \"pool\"\nv0: f64[2, 2, 7, 5] = input \"x\"\nv9: f64 = input \"s\"\nv1: f64[2, 2, 7, 5] = mul v0, v9\nv2: {ty} = {pool}\nv3: {ty} = mul v2, v2\noutput \"y\" = v3\n"
        );
        check_jacobian(&scaled, &[x, scalar(0.7)], 1, 1e-6);
    }
}

/// A max pool's derivative where it has none is torch's: a tie goes to the
/// first tap of the window (row by row), a NaN window's to its last NaN;
/// the padding takes none.
#[test]
fn max_pool_ties_and_nans_are_torchs() {
    let text = r#"graph "ties"
v0: f64[1, 1, 4, 4] = input "x"
v1: f64[1, 1, 2, 2] = max_pool2d v0 kernel [2, 2] stride [2, 2]
output "y" = v1
"#;
    let nan = f64::NAN;
    #[rustfmt::skip]
    let x = col(&[
        1.0, 1.0,   nan, 2.0,
        0.5, 1.0,   nan, 3.0,
        -0.0, 0.0,  -1.0, -2.0,
        0.0, -0.0,  -2.0, -1.0,
    ]);
    let grad = gradient(&verified(text), None, &["x"], false).unwrap();
    let grad = kiln::verify(grad).unwrap();
    let outs = kiln::interp::run(&grad, std::slice::from_ref(&x)).unwrap();
    #[rustfmt::skip]
    let want = [
        1.0, 0.0,  0.0, 0.0,
        0.0, 0.0,  1.0, 0.0,
        1.0, 0.0,  1.0, 0.0,
        0.0, 0.0,  0.0, 0.0,
    ];
    assert_eq!(f64s(&outs[1]), want);
    on_every_engine(grad.into_graph(), &[x]);
    // Padding: windows at the edges hold zeros of the padding, which are
    // never the maximum's tap even where every tap inside is below zero or
    // zero itself.
    let text = r#"graph "padded"
v0: f64[1, 1, 2, 2] = input "x"
v1: f64[1, 1, 2, 2] = max_pool2d v0 kernel [2, 2] stride [1, 1] pad [1, 0, 1, 0]
output "y" = v1
"#;
    let x = col(&[-1.0, 0.0, -3.0, -4.0]);
    let grad = kiln::verify(gradient(&verified(text), None, &["x"], false).unwrap()).unwrap();
    let outs = kiln::interp::run(&grad, std::slice::from_ref(&x)).unwrap();
    // Windows: {x00} -> x00; {x00, x01} -> x01; {x00, x10} -> x00; all -> x01.
    assert_eq!(f64s(&outs[1]), [2.0, 2.0, 0.0, 0.0]);
    on_every_engine(grad.into_graph(), &[x]);
    // A tap in the padding past a row's end has the index of the next
    // row's first element (`r * 2 + 2`); where the window takes that
    // element, forward mode still carries its tangent, not the padding's.
    let text = r#"graph "edge"
v0: f64[1, 1, 3, 2] = input "x"
v1: f64 = input "s"
v2: f64[1, 1, 3, 2] = mul v0, v1
v3: f64[1, 1, 2, 2] = max_pool2d v2 kernel [2, 3] stride [1, 1] pad [0, 0, 1, 1]
output "y" = v3
"#;
    let x = col(&[0.0, 1.0, 5.0, 2.0, 0.5, 0.25]);
    let jac = kiln::verify(jacobian(&verified(text), &["s"]).unwrap()).unwrap();
    let outs = kiln::interp::run(&jac, &[x.clone(), scalar(1.0)]).unwrap();
    // dy/ds is the taken element: each window's maximum.
    assert_eq!(f64s(&outs[1]), [5.0, 5.0, 5.0, 5.0]);
    on_every_engine(jac.into_graph(), &[x, scalar(1.0)]);
}

/// A max pool's indices (what the fx importer builds for
/// `max_pool2d_with_indices`) of an integer plane, padded: integers pad
/// with integer zeros, and the padding is never the tap.
#[test]
fn max_pool_indices_of_an_integer_plane() {
    use kiln::ir::op::{Pool2d, PoolKind};
    use kiln::ir::types::{TensorType, Type};
    use kiln::ir::Op;
    use kiln::{DType, Dim};
    let mut b = kiln::ir::Builder::new("indices");
    let shape = [1, 1, 3, 3].map(Dim::Fixed).to_vec();
    let x = b.input(
        "x",
        Type::Tensor(TensorType {
            dtype: DType::I32,
            shape,
        }),
    );
    let pool = Pool2d {
        kind: PoolKind::Max,
        kernel: [2, 2],
        stride: [2, 2],
        padding: [1, 0, 1, 0],
        dilation: [1, 1],
        ceil_mode: false,
        count_include_pad: false,
    };
    let y = b.op(Op::Pool2d(pool), &[x]).unwrap();
    let i = kiln::ir::grad::max_pool2d_indices(&mut b, x, y, &pool).unwrap();
    b.output("y", y);
    b.output("i", i);
    let graph = kiln::verify(b.finish()).unwrap();
    #[rustfmt::skip]
    let x = Data::Column(Buffer::I32(vec![
        -5, -1, -1,
        -2, 0, -7,
        -3, -9, -3,
    ]));
    let outs = kiln::interp::run(&graph, std::slice::from_ref(&x)).unwrap();
    // Windows {x00}, {x01, x02}, {x10, x20}, {x11, x12, x21, x22}: the
    // first maximum's index in the plane.
    assert_eq!(outs[0], Data::Column(Buffer::I32(vec![-5, -1, -2, 0])));
    assert_eq!(outs[1], Data::Column(Buffer::I64(vec![0, 1, 3, 4])));
    on_every_engine(graph.into_graph(), &[x]);
}

/// Ops kiln does not differentiate are errors naming the node, from the
/// frontends' graphs too.
#[test]
fn trees_are_refused_by_name() {
    let text = r#"graph "trees"
v0: f64[n, 1] = input "x"
v1: f64[n, 1] = trees v0 features 1 init [0.5] tree 0 [f0 le 0.5 none right l0 l1] [1.0, 2.0]
output "y" = v1
"#;
    let err = gradient(&verified(text), None, &["x"], false).expect_err("refused");
    assert!(err.message.contains("`trees`"), "{err}");
}

/// `i64` data of `dims`.
fn ids(values: &[i64]) -> Data {
    Data::Column(Buffer::I64(values.to_vec()))
}

/// `gather` (an embedding, an `index_select` along a middle axis, a
/// scalar index) and `index_add` (into its base and from its source):
/// gradients and tangents against central differences, with indices that
/// repeat, so an adjoint sums several rows in index order.
#[test]
fn gather_and_index_add_against_finite_differences() {
    // (the op and its result type, the inputs' types, the inputs)
    let embed = r#"graph "embedding"
v0: f64[5, 3] = input "table"
v1: i64[2, 4] = input "ids"
v2: f64[5, 3] = sin v0
v3: f64[2, 4, 3] = gather v2, v1 [0]
v4: f64[2, 4, 3] = mul v3, v3
output "y" = v4
"#;
    let table = col(&points(15, -2.0, 2.0, 91));
    let tokens = ids(&[4, 0, 4, 1, 2, 4, 0, 3]);
    check(
        embed,
        "y",
        &["table"],
        &[table.clone(), tokens.clone()],
        1e-6,
    );
    let middle = r#"graph "index_select"
v0: f64[2, 4, 3] = input "x"
v1: i32[5] = input "cols"
v2: f64[2, 4, 3] = exp v0
v3: f64[2, 5, 3] = gather v2, v1 [1]
v4: f64[2, 5, 3] = mul v3, v3
output "y" = v4
"#;
    let cols = Data::Column(Buffer::I32(vec![3, 1, 3, 3, 0]));
    let x = col(&points(24, -1.0, 1.0, 92));
    check(middle, "y", &["x"], &[x, cols], 1e-6);
    let one = r#"graph "one"
v0: f64[4] = input "x"
v1: i64 = input "at"
v2: f64 = gather v0, v1 [0]
v3: f64 = mul v2, v2
output "y" = v3
"#;
    check(
        one,
        "y",
        &["x"],
        &[col(&[0.5, -1.5, 2.0, 3.0]), Data::Scalar(Scalar::I64(2))],
        1e-6,
    );
    // index_add: the adjoint of the base passes through; the source's is
    // gathered at the index.
    let added = r#"graph "index_add"
v0: f64[5, 3] = input "base"
v1: i64[2, 4] = input "ids"
v2: f64[2, 4, 3] = input "src"
v3: f64[2, 4, 3] = sin v2
v4: f64[5, 3] = index_add v0, v1, v3 [0]
v5: f64[5, 3] = mul v4, v4
output "y" = v5
"#;
    let src = col(&points(24, -2.0, 2.0, 93));
    let inputs = [table.clone(), tokens.clone(), src.clone()];
    check(added, "y", &["base", "src"], &inputs, 1e-6);
    // Forward mode: a scale of the table through an embedding, and of the
    // source through an index_add.
    let scaled = r#"graph "embedding"
v0: f64[5, 3] = input "table"
v1: i64[2, 4] = input "ids"
v9: f64 = input "s"
v2: f64[5, 3] = mul v0, v9
v3: f64[2, 4, 3] = gather v2, v1 [0]
v4: f64[2, 4, 3] = mul v3, v3
output "y" = v4
"#;
    check_jacobian(
        scaled,
        &[table.clone(), tokens.clone(), scalar(0.7)],
        2,
        1e-6,
    );
    let scaled = r#"graph "index_add"
v0: f64[5, 3] = input "base"
v1: i64[2, 4] = input "ids"
v2: f64[2, 4, 3] = input "src"
v9: f64 = input "s"
v3: f64[2, 4, 3] = mul v2, v9
v4: f64[5, 3] = index_add v0, v1, v3 [0]
v5: f64[5, 3] = mul v4, v4
output "y" = v5
"#;
    check_jacobian(scaled, &[table, tokens, src, scalar(0.7)], 3, 1e-6);
}

/// An embedding's gradient sums each token's rows in token order, from
/// zero, as torch's `embedding_dense_backward` does on the CPU: by hand,
/// where the order decides the sum; then on every engine over 20,000
/// tokens into 7 rows (long enough that the engines split loops among
/// threads, which must not split the loop over the tokens).
#[test]
fn an_embeddings_gradient_sums_in_token_order() {
    let text = r#"graph "embedding"
v0: f32[3, 2] = input "table"
v1: i64[n] = input "ids"
v2: f32[n, 2] = gather v0, v1 [0]
v3: f32[n, 2] = input "seed"
v4: f32[n, 2] = mul v2, v3
output "y" = v4
"#;
    let graph = verified(text);
    let grad = kiln::verify(gradient(&graph, Some("y"), &["table"], false).unwrap()).unwrap();
    let table = Data::Column(Buffer::F32(vec![1.0; 6]));
    // Row 1 gets 1e8, -1e8 and 1 (in that order: 1; the reverse: 0).
    let tokens = ids(&[1, 0, 1, 1]);
    let seed = Data::Column(Buffer::F32(vec![1e8, 2.0, 5.0, 6.0, -1e8, 3.0, 1.0, 4.0]));
    let outs = kiln::interp::run(&grad, &[table, tokens, seed]).unwrap();
    assert_eq!(
        outs[1],
        Data::Column(Buffer::F32(vec![5.0, 6.0, 1.0, 9.0, 0.0, 0.0]))
    );
    let n = 20_000;
    let tokens: Vec<i64> = (0..n).map(|i| ((i * 7919) % 13 % 7) as i64 % 3).collect();
    let seed: Vec<f32> = points(2 * n, -1.0, 1.0, 94)
        .iter()
        .map(|&v| v as f32)
        .collect();
    let table = Data::Column(Buffer::F32(
        points(6, -1.0, 1.0, 95).iter().map(|&v| v as f32).collect(),
    ));
    on_every_engine(
        grad.into_graph(),
        &[table, ids(&tokens), Data::Column(Buffer::F32(seed))],
    );
}
