//! What the transform builds and refuses, checked on the graphs it makes;
//! the values are checked against finite differences and on every engine
//! in the workspace tests (`tests/grad.rs`).

use super::{gradient, jacobian};
use crate::{text, verify, Verified};

fn graph(text: &str) -> Verified {
    verify(text::parse(text).expect("parses")).expect("verifies")
}

const AFFINE: &str = r#"graph "affine"
v0: f64[n] = input "x"
v1: f64 = input "w"
v2: i64[n] = input "k"
v3: f64[n] = mul v0, v1
v4: f64[n] = sin v3
output "y" = v4
"#;

#[test]
fn gradient_outputs_follow_the_originals_with_the_inputs_types() {
    let g = gradient(&graph(AFFINE), None, &["w", "x"], false).expect("differentiates");
    let g = verify(g).expect("the gradient graph verifies");
    let outs: Vec<(String, String)> = g
        .graph()
        .outputs()
        .iter()
        .map(|o| (o.name.clone(), g.graph().ty(o.value).to_string()))
        .collect();
    assert_eq!(
        outs,
        [("y", "f64[n]"), ("grad_w", "f64"), ("grad_x", "f64[n]")]
            .map(|(a, b)| (a.to_string(), b.to_string()))
    );
}

#[test]
fn a_seeded_gradient_takes_the_cotangent_as_an_input() {
    let g = gradient(&graph(AFFINE), Some("y"), &["x"], true).expect("differentiates");
    let names: Vec<&str> = g.inputs().iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["x", "w", "k", "grad_y"]);
    verify(g).expect("verifies");
}

#[test]
fn jacobian_outputs_name_output_and_parameter() {
    let g = jacobian(&graph(AFFINE), &["w"]).expect("differentiates");
    let g = verify(g).expect("verifies");
    let last = g.graph().outputs().last().expect("an output");
    assert_eq!(last.name, "dy/dw");
    assert_eq!(g.graph().ty(last.value).to_string(), "f64[n]");
}

/// The `div` nodes of `graph` after the standard passes.
fn divisions(graph: crate::Graph) -> usize {
    let g = crate::optimize(&verify(graph).expect("verifies")).expect("optimizes");
    g.graph()
        .nodes()
        .filter(|(_, n)| matches!(n.op, crate::Op::Binary(crate::BinaryOp::Div)))
        .count()
}

#[test]
fn tangents_divide_once_per_divisor() {
    // `(c0 * x) / (x + c1)`: the value's division, then one reciprocal
    // for both parameters' tangents, not a division each (and `b²`'s).
    let quotient = graph(
        r#"graph "q"
v0: f64[n] = input "x"
v1: f64 = input "c0"
v2: f64 = input "c1"
v3: f64[n] = mul v1, v0
v4: f64[n] = add v0, v2
v5: f64[n] = div v3, v4
output "y" = v5
"#,
    );
    assert_eq!(divisions(jacobian(&quotient, &["c0", "c1"]).unwrap()), 2);
    // With `c0` alone a parameter, `x + c1` is constant: its reciprocal
    // replaces the tangent's division all the same.
    assert_eq!(divisions(jacobian(&quotient, &["c0"]).unwrap()), 2);
    // `log(c * x) / (x + 2)` for one parameter: the divisor without a
    // parameter is a reciprocal, which a fit computes once (hoisted out
    // of its steps); `log`'s `t / (c x)` divides, as with one parameter.
    let by_column = graph(
        r#"graph "l"
v0: f64[n] = input "x"
v1: f64 = input "c"
v2: f64[n] = mul v1, v0
v3: f64[n] = log v2
v4: f64 = const 2.0
v5: f64[n] = add v0, v4
v6: f64[n] = div v3, v5
output "y" = v6
"#,
    );
    let j = crate::optimize(&verify(jacobian(&by_column, &["c"]).unwrap()).unwrap()).unwrap();
    let column = |t: &crate::Type| t.as_tensor().is_some_and(|t| t.shape.len() == 1);
    let split = crate::hoist::hoist(j.graph(), &["c"], column).expect("1 / (x + 2) is hoisted");
    assert_eq!(divisions(split.invariant), 1);
    assert_eq!(divisions(split.rest), 2);
}

#[test]
fn bad_requests_are_errors_naming_what_is_wrong() {
    let g = graph(AFFINE);
    let err = |r: super::GradResult<crate::Graph>| r.expect_err("an error").message;
    assert!(err(gradient(&g, None, &["k"], false)).contains("input `k` of type i64[n]"));
    assert!(err(gradient(&g, None, &["z"], false)).contains("no such input (it has x, w, k)"));
    assert!(err(gradient(&g, Some("q"), &["x"], false)).contains("no output `q`"));
    assert!(err(gradient(&g, None, &[], false)).contains("at least one input"));
    assert!(err(gradient(&g, None, &["x", "x"], false)).contains("named twice"));
    assert!(err(jacobian(&g, &["x"])).contains("scalar inputs; `x` is f64[n]"));
    let next = graph(
        r#"graph "n"
v0: f64 = input "x"
v1: f64 = const 1.0
v2: f64 = nextafter v0, v1
output "y" = v2
"#,
    );
    let e = gradient(&next, None, &["x"], false).expect_err("no derivative");
    assert_eq!(e.node.map(|v| v.to_string()), Some("v2".to_string()));
    assert!(e.message.contains("`nextafter`"));
}

#[test]
fn values_that_do_not_depend_on_the_input_get_a_zero_gradient() {
    let g = gradient(&graph(AFFINE), None, &["w"], false).expect("differentiates");
    verify(g).expect("verifies");
    let ints = graph(
        r#"graph "i"
v0: f64 = input "x"
v1: i64 = cast v0
v2: f64 = cast v1
output "y" = v2
"#,
    );
    let g =
        verify(gradient(&ints, None, &["x"], false).expect("differentiates")).expect("verifies");
    let grad = g.graph().outputs()[1].value;
    assert!(matches!(g.graph().node(grad).op, crate::Op::Const(_)));
}
