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
