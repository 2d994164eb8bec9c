//! The torch.fx and TensorFlow importers on small hand-written graphs: every
//! feature the importers claim, including those no fixture uses, and bad input
//! (located errors, never a panic).

use kiln_frontend::{fx, tf};
use kiln_ir::{Buffer, DType, Data, Dim, Graph, Scalar, TensorType, Type};

fn scalar(d: DType) -> Type {
    Type::Tensor(TensorType::scalar(d))
}

fn column(d: DType) -> Type {
    Type::Tensor(TensorType {
        dtype: d,
        shape: vec![Dim::Sym("n".into())],
    })
}

fn run(g: &Graph, inputs: &[Data]) -> Vec<Data> {
    let g =
        kiln_ir::verify(g.clone()).unwrap_or_else(|e| panic!("{e}\n{}", kiln_ir::text::print(g)));
    kiln_interp::run(&g, inputs).expect("runs")
}

fn fx_graph(body: &str, inputs: &[(&str, Type)]) -> Result<Graph, String> {
    let opts = fx::Options {
        inputs: inputs
            .iter()
            .map(|(n, t)| (n.to_string(), t.clone()))
            .collect(),
        ..fx::Options::default()
    };
    fx::parse(&format!("graph():\n{body}"), &opts)
        .map(|(g, _)| g)
        .map_err(|e| e.to_string())
}

fn f64s(v: &[f64]) -> Data {
    Data::Column(Buffer::F64(v.to_vec()))
}

#[test]
fn fx_spellings_of_one_op_agree() {
    // operator, torch function, Tensor method, ATen overload, in-place ATen,
    // and print_tabular's `<built-in function …>` spelling.
    let g = fx_graph(
        "    %x : [num_users=6] = placeholder[target=x]
    %a : [num_users=1] = call_function[target=operator.add](args = (%x, 1.0), kwargs = {})
    %b : [num_users=1] = call_function[target=torch.add](args = (%x, 1.0), kwargs = {})
    %c : [num_users=1] = call_method[target=add](args = (%x, 1.0), kwargs = {})
    %d : [num_users=1] = call_function[target=torch.ops.aten.add.Tensor](args = (%x, 1.0), kwargs = {})
    %e : [num_users=1] = call_function[target=torch.ops.aten.add_.Scalar](args = (%x, 1.0), kwargs = {})
    %f : [num_users=1] = call_function[target=<built-in function add>](args = (%x, 1.0), kwargs = {})
    return (a, b, c, d, e, f)",
        &[("x", column(DType::F32))],
    )
    .unwrap();
    let out = run(&g, &[Data::Column(Buffer::F32(vec![1.5, -2.0]))]);
    assert_eq!(out.len(), 6);
    for o in &out {
        assert_eq!(o, &Data::Column(Buffer::F32(vec![2.5, -1.0])));
    }
}

#[test]
fn fx_promotion_follows_torch() {
    let g = fx_graph(
        "    %i : [num_users=4] = placeholder[target=i]
    %f : [num_users=1] = placeholder[target=f]
    %a : [num_users=1] = call_function[target=operator.truediv](args = (%i, 2), kwargs = {})
    %b : [num_users=1] = call_function[target=operator.mul](args = (%i, 2.5), kwargs = {})
    %c : [num_users=1] = call_function[target=operator.mul](args = (%f, 3), kwargs = {})
    %d : [num_users=1] = call_function[target=operator.floordiv](args = (%i, -2), kwargs = {})
    %e : [num_users=1] = call_function[target=operator.pow](args = (%i, 3), kwargs = {})
    %g : [num_users=1] = call_function[target=operator.gt](args = (%i, 0), kwargs = {})
    return (a, b, c, d, e, g)",
        &[("i", column(DType::I64)), ("f", column(DType::F64))],
    )
    .unwrap();
    let dtypes: Vec<DType> = g
        .outputs()
        .iter()
        .map(|o| g.ty(o.value).dtype().unwrap())
        .collect();
    // int / int is float32 (torch's default dtype); int * 2.5 too; f64 * 3 stays f64.
    assert_eq!(
        dtypes,
        [
            DType::F32,
            DType::F32,
            DType::F64,
            DType::I64,
            DType::I64,
            DType::Bool
        ]
    );
    let out = run(
        &g,
        &[Data::Column(Buffer::I64(vec![7, -7])), f64s(&[1.0, 2.0])],
    );
    assert_eq!(out[0], Data::Column(Buffer::F32(vec![3.5, -3.5])));
    assert_eq!(out[3], Data::Column(Buffer::I64(vec![-4, 3])));
    assert_eq!(out[4], Data::Column(Buffer::I64(vec![343, -343])));
}

#[test]
fn fx_kwargs_activations_and_conversions() {
    let g = fx_graph(
        "    %x : [num_users=7] = placeholder[target=x]
    %r : [num_users=1] = call_function[target=torch.nn.functional.relu](args = (%x,), kwargs = {inplace: False})
    %c : [num_users=1] = call_method[target=clamp](args = (%x,), kwargs = {min: -1.0, max: 1.0})
    %l : [num_users=1] = call_function[target=torch.nn.functional.leaky_relu](args = (%x,), kwargs = {negative_slope: 0.5})
    %h : [num_users=1] = call_function[target=torch.nn.functional.hardtanh](args = (%x, -0.5, 0.5), kwargs = {})
    %s : [num_users=1] = call_method[target=to](args = (%x, torch.float32), kwargs = {})
    %w : [num_users=1] = call_function[target=torch.where](args = (%r, %x, 0.0), kwargs = {})
    %d : [num_users=1] = call_function[target=torch.div](args = (%x, 2.0), kwargs = {rounding_mode: 'trunc'})
    return (r, c, l, h, s, w, d)",
        &[("x", column(DType::F64))],
    )
    .unwrap();
    let out = run(&g, &[f64s(&[-3.0, -0.0, 2.5, f64::NAN])]);
    let col = |o: &Data| match o {
        Data::Column(b) => b
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    };
    // relu lets NaN and -0.0 through, as torch's clamp_min does.
    assert_eq!(col(&out[0]), "0.0 -0.0 2.5 nan");
    assert_eq!(col(&out[1]), "-1.0 -0.0 1.0 nan");
    assert_eq!(col(&out[2]), "-1.5 -0.0 2.5 nan");
    assert_eq!(col(&out[3]), "-0.5 -0.0 0.5 nan");
    assert_eq!(g.ty(g.outputs()[4].value).dtype(), Some(DType::F32));
    assert_eq!(col(&out[6]), "-1.0 -0.0 1.0 nan");
}

#[test]
fn fx_modules_from_their_names_and_weights() {
    let mut opts = fx::Options::default();
    opts.inputs.insert("x".into(), scalar(DType::F64));
    let (g, _) = fx::parse(
        "graph():
    %x : [num_users=1] = placeholder[target=x]
    %act : [num_users=1] = call_module[target=act.sigmoid](args = (%x,), kwargs = {})
    %relu_1 : [num_users=1] = call_module[target=relu_1](args = (%act,), kwargs = {})
    return relu_1",
        &opts,
    )
    .unwrap();
    let out = run(&g, &[Data::Scalar(Scalar::F64(0.0))]);
    assert_eq!(out, vec![Data::Scalar(Scalar::F64(0.5))]);
    let err = fx::parse(
        "graph():
    %x : [num_users=1] = placeholder[target=x]
    %m : [num_users=1] = call_module[target=0](args = (%x,), kwargs = {})
    return m",
        &opts,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("call_module `0` (%m) of unknown type") && err.contains("--modules FILE"),
        "{err}"
    );
}

#[test]
fn fx_reports_every_unsupported_op_at_once() {
    let err = fx_graph(
        "    %x : [num_users=3] = placeholder[target=x]
    %a : [num_users=1] = call_function[target=torch.frobnicate](args = (%x,), kwargs = {})
    %b : [num_users=1] = call_function[target=torch.argmax](args = (%x,), kwargs = {})
    %c : [num_users=1] = call_method[target=wibble](args = (%x,), kwargs = {})
    return (a, b, c)",
        &[("x", column(DType::F32))],
    )
    .unwrap_err();
    assert!(err.starts_with("3:5: unsupported:"), "{err}");
    for needle in ["torch.frobnicate", "wibble", "tensor ops `torch.argmax`"] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
}

#[test]
fn fx_bad_input_is_located() {
    let cases: &[(&str, &str)] = &[
        ("", "empty graph"),
        ("graph():\n    %x : [num_users=1] = placeholder[target=x]\n", "no `return`"),
        ("graph():\n    return y\n", "unknown node `y`"),
        ("graph():\n    %x : [num_users=1] = wobble[target=x]\n    return x\n", "unknown node kind"),
        ("graph():\n    %a : [num_users=1] = call_function[target=operator.add](args = (%zz, 1), kwargs = {})\n    return a\n", "`%zz`, which is not defined"),
        ("graph():\n    %x : [num_users=1] = placeholder[target=x]\n    %x : [num_users=1] = placeholder[target=x]\n    return x\n", "duplicate node"),
        ("graph():\n    %x : [num_users=1] = placeholder[target=x]\n    return x\n", "type of placeholder `x` is unknown"),
        // Found by the parse_fx fuzz target: a misspelt `[num_users=` made the
        // parser take the next line's, and a node that used itself passed.
        ("graph():\n    %x : [nuo_users=1] = placeholder[target=x]\n    %y : [num_users=1] = placeholder[target=y]\n    return y\n", "expected `[num_users=N]`"),
        ("graph():\n    %a : [num_users=1] = call_function[target=operator.neg](args = (%a,), kwargs = {})\n    return a\n", "`%a` uses `%a`, which is not defined before it"),
        ("graph():\n    %a : [num_users=1] = call_function[target=operator.add](args = ((((1,),),), 'unterminated), kwargs = {})\n", "unterminated string"),
        ("graph():\n    %a : [num_users=1] = call_function[target=operator.add](args = (99999999999999999999, 1), kwargs = {})\n", "not a number kiln can hold"),
    ];
    for (src, want) in cases {
        let err = fx::parse(src, &fx::Options::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{src:?}: {err}");
    }
    // Deep nesting is an error, not a stack overflow.
    let deep = format!(
        "graph():\n    %a : [num_users=1] = call_function[target=operator.add](args = ({}1{}), kwargs = {{}})\n    return a\n",
        "(".repeat(100_000),
        ")".repeat(100_000)
    );
    let err = fx::parse(&deep, &fx::Options::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("nest deeper"), "{err}");
}

fn tf_graph(pbtxt: &str, outputs: &[&str]) -> Result<Graph, String> {
    let opts = tf::Options {
        outputs: outputs.iter().map(|s| s.to_string()).collect(),
        ..tf::Options::default()
    };
    tf::parse_text(pbtxt, &opts)
        .map(|(g, _)| g)
        .map_err(|e| e.to_string())
}

const PLACEHOLDER_X: &str = r#"node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_INT32 } } attr { key: "shape" value { shape { dim { size: -1 } } } } }"#;

#[test]
fn tf_unsorted_nodes_control_inputs_and_identity() {
    // Consumers before producers, a `^control` input, NoOp and Identity,
    // `node:0`, and a constant from `tensor_content`.
    let src = format!(
        r#"node {{ name: "out" op: "AddV2" input: "ident:0" input: "c" input: "^noop" }}
node {{ name: "ident" op: "Identity" input: "x" }}
node {{ name: "noop" op: "NoOp" input: "^x" }}
node {{ name: "c" op: "Const" attr {{ key: "value" value {{ tensor {{ dtype: DT_INT32 tensor_shape {{ dim {{ size: 1 }} }} tensor_content: "\003\000\000\000" }} }} }} }}
{PLACEHOLDER_X}
"#
    );
    let g = tf_graph(&src, &[]).unwrap();
    assert_eq!(g.outputs().len(), 1, "default outputs: nodes nobody reads");
    let out = run(&g, &[Data::Column(Buffer::I32(vec![1, i32::MAX]))]);
    assert_eq!(out, vec![Data::Column(Buffer::I32(vec![4, i32::MIN + 2]))]);
}

#[test]
fn tf_semantics_of_division_and_shifts() {
    let bin = |op: &str, dt: &str| {
        format!(
            r#"node {{ name: "a" op: "Placeholder" attr {{ key: "dtype" value {{ type: {dt} }} }} attr {{ key: "shape" value {{ shape {{ dim {{ size: 3 }} }} }} }} }}
node {{ name: "b" op: "Placeholder" attr {{ key: "dtype" value {{ type: {dt} }} }} attr {{ key: "shape" value {{ shape {{ dim {{ size: 3 }} }} }} }} }}
node {{ name: "r" op: "{op}" input: "a" input: "b" }}"#
        )
    };
    let i64s = |v: &[i64]| Data::Column(Buffer::I64(v.to_vec()));
    // (op, a, b, expected)
    type Case<'a> = (&'a str, &'a [i64], &'a [i64], &'a [i64]);
    let cases: &[Case] = &[
        ("FloorDiv", &[-7, 7, -8], &[2, -2, 3], &[-4, -4, -3]),
        ("FloorMod", &[-7, 7, -8], &[2, -2, 3], &[1, -1, 1]),
        ("TruncateDiv", &[-7, 7, -8], &[2, -2, 3], &[-3, -3, -2]),
        ("TruncateMod", &[-7, 7, -8], &[2, -2, 3], &[-1, 1, -2]),
        // TF clamps shift amounts to [0, 63].
        ("LeftShift", &[1, 1, 1], &[3, 64, -1], &[8, i64::MIN, 1]),
        ("RightShift", &[-16, -16, 16], &[2, 100, -5], &[-4, -1, 16]),
    ];
    for (op, a, b, want) in cases {
        let g = tf_graph(&bin(op, "DT_INT64"), &["r"]).unwrap();
        assert_eq!(run(&g, &[i64s(a), i64s(b)]), vec![i64s(want)], "{op}");
    }
    // Float FloorDiv is floor(x / y): 1.0 // 0.1 is 10 in TF (9 in Python).
    let g = tf_graph(&bin("FloorDiv", "DT_DOUBLE"), &["r"]).unwrap();
    let out = run(&g, &[f64s(&[1.0, -7.0, 7.0]), f64s(&[0.1, 2.0, 0.0])]);
    assert_eq!(out, vec![f64s(&[10.0, -4.0, f64::INFINITY])]);
}

#[test]
fn tf_reports_every_unsupported_op_and_bad_graphs() {
    let unknown = format!(
        r#"{PLACEHOLDER_X}
node {{ name: "m" op: "Tile" input: "x" input: "x" }}
node {{ name: "q" op: "Quux" input: "x" }}
node {{ name: "z" op: "Zorp" input: "x" }}"#
    );
    let err = tf_graph(&unknown, &[]).unwrap_err();
    for needle in ["Quux (`q`)", "Zorp (`z`)", "tensor ops Tile (`m`)"] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    let cases: &[(String, &str)] = &[
        (format!("{PLACEHOLDER_X}\n{PLACEHOLDER_X}"), "duplicate node name `x`"),
        (r#"node { name: "a" op: "Neg" input: "nowhere" }"#.into(), "there is no node `nowhere`"),
        (
            r#"node { name: "a" op: "Neg" input: "b" } node { name: "b" op: "Neg" input: "a" }"#.into(),
            "cycle",
        ),
        (r#"node { name: "a" op: "Placeholder" attr { key: "dtype" value { i: 3 } } }"#.into(), "attr `dtype` must be a type"),
        (
            r#"node { name: "c" op: "Const" attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape { dim { size: 4000000000 } dim { size: 4000000000 } dim { size: 4000000000 } } } } } }"#.into(),
            "overflows",
        ),
        (
            r#"node { name: "c" op: "Const" attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape { dim { size: 1000000000 } } } } } }"#.into(),
            "1000000000 elements",
        ),
        (r#"node { name: "a" op: "Neg" "#.into(), "not closed"),
        (r#"node { name: "a" op: 12 }"#.into(), "quoted string"),
        (r#"node { name: "a\x"#.into(), "escape"),
        (r#"nodes { }"#.into(), "unknown GraphDef field `nodes`"),
        // Found by the parse_tf fuzz target: a NUL byte was taken for the
        // root message's closing brace.
        ("\0'".into(), "expected a field name"),
    ];
    for (src, want) in cases {
        let err = tf_graph(src, &[]).unwrap_err();
        assert!(err.contains(want), "{src}: {err}");
    }
    // Nesting is bounded, iteratively.
    let deep = format!("{}{}", "node { ".repeat(100_000), "}".repeat(100_000));
    assert!(tf_graph(&deep, &[]).unwrap_err().contains("nest deeper"));
}

#[test]
fn tf_binary_graphdefs_decode_and_truncation_is_an_error() {
    use prost::Message;
    let src = format!("{PLACEHOLDER_X}\nnode {{ name: \"n\" op: \"Neg\" input: \"x\" }}");
    let g = tf::pbtxt::parse(&src).unwrap();
    let bytes = g.encode_to_vec();
    let (graph, _) = tf::parse_binary(&bytes, &tf::Options::default()).unwrap();
    assert_eq!(
        run(&graph, &[Data::Column(Buffer::I32(vec![5]))]),
        vec![Data::Column(Buffer::I32(vec![-5]))]
    );
    for cut in [1, bytes.len() / 2, bytes.len() - 1] {
        let err = tf::parse_binary(&bytes[..cut], &tf::Options::default()).unwrap_err();
        assert!(err.message.contains("not a binary GraphDef"), "{err}");
    }
}

#[test]
fn fx_weights_from_safetensors() {
    use safetensors::tensor::{serialize, Dtype, TensorView};
    let scale = 2.5f32.to_le_bytes();
    let matrix: Vec<u8> = [1.0f32, 2.0, 3.0, -1.0, 0.5, 0.25]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let tensors = vec![
        (
            "scale",
            TensorView::new(Dtype::F32, vec![], &scale).unwrap(),
        ),
        (
            "lin.weight",
            TensorView::new(Dtype::F32, vec![2, 3], &matrix).unwrap(),
        ),
    ];
    let bytes = serialize(tensors, None).unwrap();
    let weights = fx::read_weights(&bytes).unwrap();
    assert_eq!(weights["lin.weight"].shape, vec![2, 3]);
    let mut opts = fx::Options {
        weights,
        ..fx::Options::default()
    };
    opts.inputs.insert("x".into(), column(DType::F32));
    let (g, _) = fx::parse(
        "graph():
    %x : [num_users=1] = placeholder[target=x]
    %scale : [num_users=1] = get_attr[target=scale]
    %mul : [num_users=1] = call_function[target=operator.mul](args = (%x, %scale), kwargs = {})
    return mul",
        &opts,
    )
    .unwrap();
    let out = run(&g, &[Data::Column(Buffer::F32(vec![2.0]))]);
    assert_eq!(out, vec![Data::Column(Buffer::F32(vec![5.0]))]);
    // A module with `TARGET.weight` is a Linear layer: x @ W.T (no bias
    // here). Typed as a column, x does not multiply with the [2, 3] weight.
    let linear = "graph():
    %x : [num_users=1] = placeholder[target=x]
    %lin : [num_users=1] = call_module[target=lin](args = (%x,), kwargs = {})
    return lin";
    let err = fx::parse(linear, &opts).unwrap_err().to_string();
    assert!(err.contains("do not multiply"), "{err}");
    opts.inputs.insert(
        "x".into(),
        Type::Tensor(TensorType {
            dtype: DType::F32,
            shape: vec![Dim::Fixed(3)],
        }),
    );
    let (g, _) = fx::parse(linear, &opts).unwrap();
    let out = run(&g, &[Data::Column(Buffer::F32(vec![1.0, 10.0, 100.0]))]);
    // [1 2 3] · x = 321, [-1 0.5 0.25] · x = -1 + 5 + 25 = 29.
    assert_eq!(out, vec![Data::Column(Buffer::F32(vec![321.0, 29.0]))]);
    assert!(fx::read_weights(b"\x08\0\0\0\0\0\0\0{}garbage").is_err());
    assert!(fx::read_weights(&bytes[..bytes.len() - 3]).is_err());
}

#[test]
fn fx_gelu_exact_and_tanh() {
    let g = fx_graph(
        "    %x : [num_users=2] = placeholder[target=x]
    %g : [num_users=1] = call_function[target=torch.nn.functional.gelu](args = (%x,), kwargs = {})
    %t : [num_users=1] = call_function[target=torch.nn.functional.gelu](args = (%x,), kwargs = {approximate: 'tanh'})
    return (g, t)",
        &[("x", column(DType::F64))],
    )
    .unwrap();
    let out = run(&g, &[f64s(&[1.0, -2.0, 0.0])]);
    // torch's two formulas (ATen's GeluKernel), evaluated with Python's math
    // module: `x/2 (1 + erf(x/sqrt 2))` and the tanh approximation.
    let want = [
        [0.8413447460685429, -0.04550026389635842, 0.0],
        [0.8411919906082768, -0.04540230591222, 0.0],
    ];
    for (o, w) in out.iter().zip(want) {
        let Data::Column(Buffer::F64(got)) = o else {
            panic!("{o:?}")
        };
        for (g, w) in got.iter().zip(w) {
            assert!((g - w).abs() <= 1e-12 * w.abs().max(1e-300), "{g} vs {w}");
        }
    }
}

fn f32_tensor(dims: &[u64]) -> Type {
    Type::Tensor(TensorType {
        dtype: DType::F32,
        shape: dims.iter().map(|&d| Dim::Fixed(d)).collect(),
    })
}

fn f32s(v: &[f32]) -> Data {
    Data::Column(Buffer::F32(v.to_vec()))
}

#[test]
fn fx_reductions_and_softmax() {
    let g = fx_graph(
        "    %x : [num_users=4] = placeholder[target=x]
    %s : [num_users=1] = call_function[target=torch.sum](args = (%x, 1), kwargs = {})
    %m : [num_users=1] = call_function[target=torch.ops.aten.mean.dim](args = (%x, [0], True), kwargs = {})
    %a : [num_users=1] = call_method[target=amax](args = (%x,), kwargs = {dim: -1})
    %p : [num_users=1] = call_function[target=torch.softmax](args = (%x,), kwargs = {dim: 1})
    return (s, m, a, p)",
        &[("x", f32_tensor(&[2, 2]))],
    )
    .unwrap();
    let out = run(&g, &[f32s(&[1.0, 2.0, 3.0, 3.0])]);
    assert_eq!(out[0], f32s(&[3.0, 6.0]));
    assert_eq!(out[1], f32s(&[2.0, 2.5]));
    assert_eq!(out[2], f32s(&[2.0, 3.0]));
    // softmax([1, 2]) = [1 / (1 + e), e / (1 + e)] (as f32); equal entries split evenly.
    let Data::Column(Buffer::F32(p)) = &out[3] else {
        panic!("a tensor")
    };
    let e = std::f32::consts::E;
    assert!(
        (p[0] - 1.0 / (1.0 + e)).abs() < 1e-6 && (p[1] - e / (1.0 + e)).abs() < 1e-6,
        "{p:?}"
    );
    assert_eq!(&p[2..], &[0.5, 0.5]);
    let err = fx_graph(
        "    %x : [num_users=1] = placeholder[target=x]
    %s : [num_users=1] = call_function[target=torch.sum](args = (%x, 2), kwargs = {})
    return s",
        &[("x", f32_tensor(&[2, 2]))],
    )
    .unwrap_err();
    assert!(err.contains("rank-2"), "{err}");
}

#[test]
fn fx_max_of_one_tensor_reduces_and_max_dim_is_refused() {
    let g = fx_graph(
        "    %x : [num_users=2] = placeholder[target=x]
    %a : [num_users=1] = call_function[target=torch.max](args = (%x,), kwargs = {})
    %b : [num_users=1] = call_method[target=min](args = (%x,), kwargs = {})
    return (a, b)",
        &[("x", f32_tensor(&[2, 2]))],
    )
    .unwrap();
    let out = run(&g, &[f32s(&[1.0, -2.0, 3.0, 0.5])]);
    assert_eq!(out[0], Data::Scalar(Scalar::F32(3.0)));
    assert_eq!(out[1], Data::Scalar(Scalar::F32(-2.0)));
    // `max(x, 1)` is values and indices along axis 1, not max(x, 1.0).
    for call in [
        "call_function[target=torch.max](args = (%x, 1), kwargs = {})",
        "call_method[target=max](args = (%x,), kwargs = {dim: 0})",
        "call_function[target=torch.ops.aten.min.dim](args = (%x, 1, True), kwargs = {})",
    ] {
        let err = fx_graph(
            &format!("    %x : [num_users=1] = placeholder[target=x]\n    %m : [num_users=1] = {call}\n    return m"),
            &[("x", f32_tensor(&[2, 2]))],
        )
        .unwrap_err();
        assert!(err.contains("values and indices"), "{err}");
    }
    assert!(fx::supports("call_function", "torch.ops.aten.max.other"));
    assert!(fx::supports(
        "call_function",
        "torch.ops.aten.addmm.default"
    ));
    assert!(!fx::supports("call_function", "torch.ops.aten.max.dim"));
    assert!(!fx::supports(
        "call_function",
        "torch.ops.aten.sort.default"
    ));
    assert!(!fx::supports("call_module", "fc1"));
}

#[test]
fn tf_reductions_and_softmax() {
    let x = r#"node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 2 } dim { size: 2 } } } } }
node { name: "axis" op: "Const" attr { key: "dtype" value { type: DT_INT32 } } attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape { dim { size: 1 } } int_val: -1 } } } }
node { name: "s" op: "Sum" input: "x" input: "axis" attr { key: "keep_dims" value { b: true } } }
node { name: "mx" op: "Max" input: "x" input: "axis" }
node { name: "p" op: "Softmax" input: "x" }"#;
    let g = tf_graph(x, &["s", "mx", "p"]).unwrap();
    let out = run(&g, &[f32s(&[1.0, 2.0, 3.0, 3.0])]);
    assert_eq!(out[0], f32s(&[3.0, 6.0]));
    assert_eq!(out[1], f32s(&[2.0, 3.0]));
    let Data::Column(Buffer::F32(p)) = &out[2] else {
        panic!("a tensor")
    };
    assert_eq!(&p[2..], &[0.5, 0.5]);
    let bad = x.replace("int_val: -1", "int_val: 5");
    let err = tf_graph(&bad, &["s"]).unwrap_err();
    assert!(err.contains("out of range"), "{err}");
}

#[test]
fn tf_layout_ops() {
    let src = r#"node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 2 } dim { size: 3 } } } } }
node { name: "shape" op: "Const" attr { key: "dtype" value { type: DT_INT32 } } attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape { dim { size: 2 } } int_val: 3 int_val: -1 } } } }
node { name: "perm" op: "Const" attr { key: "dtype" value { type: DT_INT32 } } attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape { dim { size: 2 } } int_val: 1 int_val: 0 } } } }
node { name: "axis" op: "Const" attr { key: "dtype" value { type: DT_INT32 } } attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape { } int_val: 0 } } } }
node { name: "r" op: "Reshape" input: "x" input: "shape" }
node { name: "t" op: "Transpose" input: "x" input: "perm" }
node { name: "e" op: "ExpandDims" input: "x" input: "axis" }
node { name: "s" op: "Squeeze" input: "e" attr { key: "squeeze_dims" value { list { i: 0 } } } }"#;
    let g = tf_graph(src, &["r", "t", "e", "s"]).unwrap();
    let shapes: Vec<String> = g
        .outputs()
        .iter()
        .map(|o| g.ty(o.value).to_string())
        .collect();
    assert_eq!(
        shapes,
        ["f32[3, 2]", "f32[3, 2]", "f32[1, 2, 3]", "f32[2, 3]"]
    );
    let out = run(&g, &[f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])]);
    assert_eq!(out[0], f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
    assert_eq!(out[1], f32s(&[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]));
    let bad = src.replace("int_val: 3 int_val: -1", "int_val: 4 int_val: -1");
    assert!(tf_graph(&bad, &["r"]).unwrap_err().contains("cannot infer"));
}

/// A `Const` node of int32s: a scalar for one value without `dims`.
fn tf_ints(name: &str, values: &[i64], vector: bool) -> String {
    let dims = if vector {
        format!("dim {{ size: {} }}", values.len())
    } else {
        String::new()
    };
    let vals: String = values.iter().map(|v| format!(" int_val: {v}")).collect();
    format!(
        r#"node {{ name: "{name}" op: "Const" attr {{ key: "value" value {{ tensor {{ dtype: DT_INT32 tensor_shape {{ {dims} }}{vals} }} }} }} }}"#
    )
}

#[test]
fn tf_concat_split_pack_unpack_and_slices() {
    // x = [[1 2 3 4] [5 6 7 8]]; `split:1` and `unpack:1` are second outputs.
    let src = [
        r#"node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 2 } dim { size: 4 } } } } }"#.to_string(),
        tf_ints("one", &[1], false),
        tf_ints("minus1", &[-1], false),
        tf_ints("sizes", &[1, -1], true),
        tf_ints("begin", &[1, 1], true),
        tf_ints("size", &[1, -1], true),
        tf_ints("sb", &[0, -1], true),
        tf_ints("se", &[0, 0], true),
        tf_ints("ss", &[1, 1], true),
        tf_ints("st", &[0, 0], true),
        tf_ints("st_end", &[2, 4], true),
        tf_ints("st_step", &[1, 2], true),
        tf_ints("bshape", &[3, 2, 4], true),
        tf_ints("rb", &[0, 3], true),
        tf_ints("re", &[0, 0], true),
        tf_ints("rs", &[-1, -2], true),
        r#"node { name: "split" op: "Split" input: "one" input: "x" attr { key: "num_split" value { i: 2 } } }"#.into(),
        r#"node { name: "cat" op: "ConcatV2" input: "split:1" input: "split" input: "minus1" input: "^x" }"#.into(),
        r#"node { name: "splitv" op: "SplitV" input: "x" input: "sizes" input: "one" attr { key: "num_split" value { i: 2 } } }"#.into(),
        r#"node { name: "unpack" op: "Unpack" input: "x" attr { key: "num" value { i: 2 } } }"#.into(),
        r#"node { name: "pack" op: "Pack" input: "unpack:1" input: "unpack" attr { key: "axis" value { i: 1 } } }"#.into(),
        r#"node { name: "slice" op: "Slice" input: "x" input: "begin" input: "size" }"#.into(),
        // x[:, -1] (shrink axis 1, begin mask on axis 0)
        r#"node { name: "last" op: "StridedSlice" input: "x" input: "sb" input: "se" input: "ss" attr { key: "begin_mask" value { i: 1 } } attr { key: "end_mask" value { i: 1 } } attr { key: "shrink_axis_mask" value { i: 2 } } }"#.into(),
        // x[0:2, 0:4:2]
        r#"node { name: "every2" op: "StridedSlice" input: "x" input: "st" input: "st_end" input: "st_step" }"#.into(),
        r#"node { name: "bcast" op: "BroadcastTo" input: "unpack" input: "bshape" }"#.into(),
        // x[::-1, 3:0:-2]
        r#"node { name: "back" op: "StridedSlice" input: "x" input: "rb" input: "re" input: "rs" attr { key: "begin_mask" value { i: 1 } } attr { key: "end_mask" value { i: 1 } } }"#.into(),
    ]
    .join("\n");
    let outputs = [
        "cat", "splitv:1", "unpack:1", "pack", "slice", "last", "every2", "bcast", "back",
    ];
    let g = tf_graph(&src, &outputs).unwrap();
    let shapes: Vec<String> = g
        .outputs()
        .iter()
        .map(|o| g.ty(o.value).to_string())
        .collect();
    assert_eq!(
        shapes,
        [
            "f32[2, 4]",
            "f32[2, 3]",
            "f32[4]",
            "f32[4, 2]",
            "f32[1, 3]",
            "f32[2]",
            "f32[2, 2]",
            "f32[3, 2, 4]",
            "f32[2, 2]"
        ]
    );
    let out = run(&g, &[f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])]);
    assert_eq!(out[0], f32s(&[3.0, 4.0, 1.0, 2.0, 7.0, 8.0, 5.0, 6.0]));
    assert_eq!(out[1], f32s(&[2.0, 3.0, 4.0, 6.0, 7.0, 8.0]));
    assert_eq!(out[2], f32s(&[5.0, 6.0, 7.0, 8.0]));
    assert_eq!(out[3], f32s(&[5.0, 1.0, 6.0, 2.0, 7.0, 3.0, 8.0, 4.0]));
    assert_eq!(out[4], f32s(&[6.0, 7.0, 8.0]));
    assert_eq!(out[5], f32s(&[4.0, 8.0]));
    assert_eq!(out[6], f32s(&[1.0, 3.0, 5.0, 7.0]));
    assert_eq!(out[7], f32s(&[1.0, 2.0, 3.0, 4.0].repeat(6)));
    assert_eq!(out[8], f32s(&[8.0, 6.0, 4.0, 2.0]));
    // Without --output, every output of an unread node: `split` is read, so
    // its siblings are not listed, but `splitv` and `splitv:1` are.
    let all = tf_graph(&src, &[]).unwrap();
    let names: Vec<&str> = all.outputs().iter().map(|o| o.name.as_str()).collect();
    assert!(
        names.contains(&"splitv") && names.contains(&"splitv:1"),
        "{names:?}"
    );
    // Bad references and shapes are errors naming the node.
    for (bad, want) in [
        (
            src.replace("\"split:1\"", "\"split:2\""),
            "reads output 2 of `split`, which has 2 output(s)",
        ),
        (
            src.replace(
                "num_split\" value { i: 2 } } }\nnode { name: \"cat",
                "num_split\" value { i: 3 } } }\nnode { name: \"cat",
            ),
            "Split of extent 4 into 3 equal pieces",
        ),
        (
            src.replace(
                &tf_ints("size", &[1, -1], true),
                &tf_ints("size", &[1, 9], true),
            ),
            "Slice 1..10 of axis 1",
        ),
    ] {
        let err = tf_graph(&bad, &outputs).unwrap_err();
        assert!(err.contains(want), "{want}: {err}");
    }
}

#[test]
fn fx_cat_split_chunk_stack_expand_and_indexing() {
    // x = [[1 2 3 4] [5 6 7 8]]
    let g = fx_graph(
        "    %x : [num_users=8] = placeholder[target=x]
    %split : [num_users=2] = call_method[target=split](args = (%x, 2, 1), kwargs = {})
    %a : [num_users=1] = call_function[target=operator.getitem](args = (%split, 0), kwargs = {})
    %b : [num_users=1] = call_function[target=operator.getitem](args = (%split, -1), kwargs = {})
    %cat : [num_users=1] = call_function[target=torch.cat](args = ([%b, %a],), kwargs = {dim: -1})
    %chunk : [num_users=1] = call_function[target=torch.chunk](args = (%x, 2), kwargs = {})
    %c1 : [num_users=1] = call_function[target=operator.getitem](args = (%chunk, 1), kwargs = {})
    %stack : [num_users=1] = call_function[target=torch.stack](args = ((%c1, %c1),), kwargs = {dim: 0})
    %col : [num_users=1] = call_function[target=operator.getitem](args = (%x, (slice(None, None, None), 1)), kwargs = {})
    %every2 : [num_users=1] = call_function[target=operator.getitem](args = (%x, (Ellipsis, slice(1, None, 2))), kwargs = {})
    %new : [num_users=1] = call_function[target=operator.getitem](args = (%x, (None, -1)), kwargs = {})
    %exp : [num_users=1] = call_method[target=expand](args = (%new, 3, -1, 4), kwargs = {})
    %sl : [num_users=1] = call_function[target=torch.ops.aten.slice.Tensor](args = (%x, 1, -3, 9223372036854775807), kwargs = {})
    %nar : [num_users=1] = call_method[target=narrow](args = (%x, 0, 1, 1), kwargs = {})
    %sel : [num_users=1] = call_function[target=torch.ops.aten.select.int](args = (%x, 1, 0), kwargs = {})
    %unbind : [num_users=1] = call_function[target=torch.ops.aten.unbind.int](args = (%x,), kwargs = {})
    %u0 : [num_users=1] = call_function[target=operator.getitem](args = (%unbind, 0), kwargs = {})
    return (cat, stack, col, every2, exp, sl, nar, sel, u0)",
        &[("x", f32_tensor(&[2, 4]))],
    )
    .unwrap();
    let shapes: Vec<String> = g
        .outputs()
        .iter()
        .map(|o| g.ty(o.value).to_string())
        .collect();
    assert_eq!(
        shapes,
        [
            "f32[2, 4]",
            "f32[2, 1, 4]",
            "f32[2]",
            "f32[2, 2]",
            "f32[3, 1, 4]",
            "f32[2, 3]",
            "f32[1, 4]",
            "f32[2]",
            "f32[4]"
        ]
    );
    let out = run(&g, &[f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])]);
    assert_eq!(out[0], f32s(&[3.0, 4.0, 1.0, 2.0, 7.0, 8.0, 5.0, 6.0]));
    assert_eq!(out[1], f32s(&[5.0, 6.0, 7.0, 8.0, 5.0, 6.0, 7.0, 8.0]));
    assert_eq!(out[2], f32s(&[2.0, 6.0]));
    assert_eq!(out[3], f32s(&[2.0, 4.0, 6.0, 8.0]));
    assert_eq!(out[4], f32s(&[5.0, 6.0, 7.0, 8.0].repeat(3)));
    assert_eq!(out[5], f32s(&[2.0, 3.0, 4.0, 6.0, 7.0, 8.0]));
    assert_eq!(out[6], f32s(&[5.0, 6.0, 7.0, 8.0]));
    assert_eq!(out[7], f32s(&[1.0, 5.0]));
    assert_eq!(out[8], f32s(&[1.0, 2.0, 3.0, 4.0]));
    // Bad items, bounds and uses of tuples are errors naming the node.
    let one = |line: &str, ret: &str| {
        fx_graph(
            &format!(
                "    %x : [num_users=1] = placeholder[target=x]
    %s : [num_users=1] = call_method[target=split](args = (%x, 2), kwargs = {{}})
{line}
    return {ret}"
            ),
            &[("x", f32_tensor(&[4]))],
        )
        .unwrap_err()
    };
    let cases = [
        ("    %g : [num_users=1] = call_function[target=operator.getitem](args = (%s, 2), kwargs = {})", "g", "item Int(2) of `%s`, a tuple of 2"),
        ("    %g : [num_users=1] = call_function[target=operator.neg](args = (%s,), kwargs = {})", "g", "`%s` is a tuple"),
        ("", "s", "returns `s`, a tuple"),
        ("    %g : [num_users=1] = call_function[target=operator.getitem](args = (%x, 4), kwargs = {})", "g", "index 4 is out of range for extent 4"),
        ("    %g : [num_users=1] = call_function[target=operator.getitem](args = (%x, slice(3, 1, None)), kwargs = {})", "g", "is empty"),
        ("    %g : [num_users=1] = call_function[target=operator.getitem](args = (%x, slice(None, None, -1)), kwargs = {})", "g", "slice step"),
        ("    %g : [num_users=1] = call_function[target=operator.getitem](args = (%x, (0, 0)), kwargs = {})", "g", "2 indices for a tensor of rank 1"),
        ("    %g : [num_users=1] = call_function[target=torch.cat](args = ([%x, %s],), kwargs = {})", "g", "`%s` is a tuple"),
    ];
    for (line, ret, want) in cases {
        let err = one(line, ret);
        assert!(err.contains(want), "{want}: {err}");
    }
}

#[test]
fn fx_aten_softmax_and_as_shapes() {
    let g = fx_graph(
        "    %x : [num_users=3] = placeholder[target=x]
    %r : [num_users=2] = placeholder[target=r]
    %s : [num_users=1] = call_function[target=torch.ops.aten._softmax.default](args = (%x, -1, False), kwargs = {})
    %e : [num_users=1] = call_method[target=expand_as](args = (%r, %x), kwargs = {})
    %v : [num_users=1] = call_method[target=view_as](args = (%x, %r), kwargs = {})
    return (s, e, v)",
        &[("x", f32_tensor(&[2, 2])), ("r", f32_tensor(&[1, 4]))],
    )
    .unwrap_err();
    // `view_as` a [1, 4] is fine, but `expand_as` a [1, 4] to [2, 2] is not.
    assert!(g.contains("does not broadcast"), "{g}");
    let g = fx_graph(
        "    %x : [num_users=2] = placeholder[target=x]
    %r : [num_users=1] = placeholder[target=r]
    %s : [num_users=1] = call_function[target=torch.ops.aten._softmax.default](args = (%x, -1, False), kwargs = {})
    %e : [num_users=1] = call_method[target=expand_as](args = (%r, %x), kwargs = {})
    %v : [num_users=1] = call_method[target=view_as](args = (%x, %e), kwargs = {})
    return (s, e, v)",
        &[("x", f32_tensor(&[2, 2])), ("r", f32_tensor(&[2]))],
    )
    .unwrap();
    let out = run(&g, &[f32s(&[1.0, 1.0, 3.0, 3.0]), f32s(&[7.0, 8.0])]);
    assert_eq!(out[0], f32s(&[0.5, 0.5, 0.5, 0.5]));
    assert_eq!(out[1], f32s(&[7.0, 8.0, 7.0, 8.0]));
    assert_eq!(out[2], f32s(&[1.0, 1.0, 3.0, 3.0]));
}

#[test]
fn fx_module_types_from_the_tree() {
    let tree = "Sequential(\n  (0): Linear(in_features=3, out_features=2, bias=True)\n  (1): LeakyReLU(negative_slope=0.5)\n)\n";
    let mut opts = fx::Options {
        modules: fx::modules::parse(tree).unwrap(),
        ..fx::Options::default()
    };
    opts.inputs.insert("x".into(), scalar(DType::F64));
    let graph = "graph():
    %x : [num_users=1] = placeholder[target=x]
    %_1 : [num_users=1] = call_module[target=1](args = (%x,), kwargs = {})
    return _1";
    let (g, _) = fx::parse(graph, &opts).unwrap();
    // LeakyReLU(negative_slope=0.5): -4 -> -2.
    assert_eq!(
        run(&g, &[Data::Scalar(Scalar::F64(-4.0))]),
        vec![Data::Scalar(Scalar::F64(-2.0))]
    );
    // A Linear the tree names but the weights lack is reported as such.
    let graph = "graph():
    %x : [num_users=1] = placeholder[target=x]
    %_0 : [num_users=1] = call_module[target=0](args = (%x,), kwargs = {})
    return _0";
    let err = fx::parse(graph, &opts).unwrap_err().to_string();
    assert!(
        err.contains("`nn.Linear` (%_0) without `0.weight` in the weights"),
        "{err}"
    );
}

/// A weight for fx tests: f32 of the given shape and values.
fn weight(shape: &[usize], values: &[f32]) -> fx::Weight {
    fx::Weight {
        dtype: DType::F32,
        shape: shape.to_vec(),
        data: values.iter().map(|&v| Scalar::F32(v)).collect(),
    }
}

/// Convolution, batch norm and pooling in their ATen and functional forms,
/// by hand: a 1-channel 3x3 input, a 2x2 kernel of ones with bias 1, then
/// a batch norm (folded into the convolution) and pools; and the errors of
/// what kiln does not compute.
#[test]
fn fx_convolutions_batch_norms_and_pools() {
    let mut opts = fx::Options::default();
    opts.inputs.insert("x".into(), f32_tensor(&[1, 1, 3, 3]));
    opts.weights
        .insert("w".into(), weight(&[1, 1, 2, 2], &[1.0; 4]));
    opts.weights.insert("b".into(), weight(&[1], &[1.0]));
    opts.weights.insert("gamma".into(), weight(&[1], &[2.0]));
    opts.weights.insert("beta".into(), weight(&[1], &[0.5]));
    opts.weights.insert("mean".into(), weight(&[1], &[1.0]));
    opts.weights.insert("var".into(), weight(&[1], &[3.0]));
    let head = "graph():
    %x : [num_users=1] = placeholder[target=x]
    %w : [num_users=1] = get_attr[target=w]
    %b : [num_users=1] = get_attr[target=b]
    %g : [num_users=1] = get_attr[target=gamma]
    %be : [num_users=1] = get_attr[target=beta]
    %m : [num_users=1] = get_attr[target=mean]
    %v : [num_users=1] = get_attr[target=var]
    %conv : [num_users=1] = call_function[target=torch.ops.aten.convolution.default](args = (%x, %w, %b, [1, 1], [1, 1], [1, 1], False, [0, 0], 1), kwargs = {})
    %empty : [num_users=0] = call_function[target=torch.ops.aten.empty.memory_format](args = ([0],), kwargs = {dtype: torch.uint8})
    %bn : [num_users=3] = call_function[target=torch.ops.aten._native_batch_norm_legit_no_training.default](args = (%conv, %g, %be, %m, %v, 0.1, 1.0), kwargs = {})
    %getitem : [num_users=1] = call_function[target=operator.getitem](args = (%bn, 0), kwargs = {})
    %getitem_1 : [num_users=0] = call_function[target=operator.getitem](args = (%bn, 1), kwargs = {})
";
    let parse = |tail: &str| fx::parse(&format!("{head}{tail}"), &opts).map(|(g, _)| g);
    let x = Data::Column(Buffer::F32(vec![
        1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0,
    ]));
    // conv with padding 1: 4x4 sums of the 2x2 windows, plus 1; the batch
    // norm: (y - 1) * 2 / sqrt(3 + 1) + 0.5 = y - 0.5.
    let g = parse("    return getitem").expect("imports");
    let want = [
        1.0, 3.0, 5.0, 3.0, 5.0, 12.0, 16.0, 9.0, 11.0, 24.0, 28.0, 15.0, 7.0, 15.0, 17.0, 9.0,
    ];
    let want: Vec<f32> = want.iter().map(|v| v + 0.5).collect();
    assert_eq!(run(&g, std::slice::from_ref(&x)), vec![f32s(&want)]);
    // Folded: no batch norm arithmetic is left after optimization.
    let verified = kiln_ir::verify(g).expect("verifies");
    let optimized = kiln_ir::text::print(kiln_ir::optimize(&verified).expect("optimizes").graph());
    assert!(
        !optimized.contains("sqrt") && !optimized.contains("mul"),
        "{optimized}"
    );
    // Pools: max 2x2 stride 2 ceil_mode with indices, avg 3x3 stride 1 pad 1
    // (count_include_pad by default), adaptive to 1x1.
    let g = parse(
        "    %mp : [num_users=2] = call_function[target=torch.ops.aten.max_pool2d_with_indices.default](args = (%getitem, [2, 2], [2, 2], [0, 0], [1, 1], True), kwargs = {})
    %p0 : [num_users=1] = call_function[target=operator.getitem](args = (%mp, 0), kwargs = {})
    %p1 : [num_users=1] = call_function[target=operator.getitem](args = (%mp, 1), kwargs = {})
    %ap : [num_users=1] = call_function[target=torch.ops.aten.avg_pool2d.default](args = (%x, [3, 3], [1, 1], [1, 1]), kwargs = {})
    %gp : [num_users=1] = call_function[target=torch.nn.functional.adaptive_avg_pool2d](args = (%x, 1), kwargs = {})
    return (p0, ap, gp, p1)",
    )
    .expect("imports");
    let out = run(&g, std::slice::from_ref(&x));
    assert_eq!(out[0], f32s(&[12.5, 16.5, 24.5, 28.5]));
    // The indices: where in the 4x4 plane each maximum is.
    assert_eq!(out[3], Data::Column(Buffer::I64(vec![5, 6, 9, 10])));
    let sums = [12.0, 21.0, 16.0, 27.0, 45.0, 33.0, 24.0, 39.0, 28.0];
    let avg: Vec<f32> = sums.iter().map(|s| s / 9.0).collect();
    assert_eq!(out[1], f32s(&avg));
    assert_eq!(out[2], f32s(&[5.0]));
    // torch's functional spelling with `return_indices=True`: the same
    // tuple, taken apart by getitem.
    let g = parse(
        "    %mp : [num_users=2] = call_function[target=torch.nn.functional.max_pool2d](args = (%getitem, 2), kwargs = {stride: 2, ceil_mode: True, return_indices: True})
    %p0 : [num_users=1] = call_function[target=operator.getitem](args = (%mp, 0), kwargs = {})
    %p1 : [num_users=1] = call_function[target=operator.getitem](args = (%mp, 1), kwargs = {})
    return (p0, p1)",
    )
    .expect("imports");
    let out = run(&g, std::slice::from_ref(&x));
    assert_eq!(out[0], f32s(&[12.5, 16.5, 24.5, 28.5]));
    assert_eq!(out[1], Data::Column(Buffer::I64(vec![5, 6, 9, 10])));
    // What kiln does not compute is an error where it is used.
    let err = parse(
        "    %r : [num_users=1] = call_function[target=torch.ops.aten.relu.default](args = (%getitem_1,), kwargs = {})
    return r",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains(
            "uses `%getitem_1`, a batch norm's saved statistics, which kiln does not compute"
        ),
        "{err}"
    );
    let err = parse("    return empty").unwrap_err().to_string();
    assert!(
        err.contains("the graph returns `empty`, an uninitialized tensor"),
        "{err}"
    );
    let err = parse(
        "    %t : [num_users=1] = call_function[target=torch.ops.aten.convolution.default](args = (%x, %w, None, [1, 1], [0, 0], [1, 1], True, [0, 0], 1), kwargs = {})
    return t",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("`%t`: unsupported: transposed convolution"),
        "{err}"
    );
    let err = parse(
        "    %t : [num_users=1] = call_function[target=torch.nn.functional.batch_norm](args = (%x, %m, %v), kwargs = {training: True})
    return t",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("batch norm in training mode"), "{err}");
    let err = parse(
        "    %t : [num_users=1] = call_function[target=torch.nn.functional.conv2d](args = (%x, %w), kwargs = {padding: -1})
    return t",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("`padding` must be an int of at least 0"),
        "{err}"
    );
    let err = parse(
        "    %t : [num_users=1] = call_function[target=torch.nn.functional.conv2d](args = (%x, %w), kwargs = {groups: 2})
    return t",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("2 groups must divide both the 1 input and the 1 output channels"),
        "{err}"
    );
    // padding='same' keeps the size (the extra row and column after).
    let g = parse(
        "    %s : [num_users=1] = call_function[target=torch.nn.functional.conv2d](args = (%x, %w), kwargs = {padding: 'same'})
    return s",
    )
    .expect("imports");
    assert_eq!(g.ty(g.outputs()[0].value).to_string(), "f32[1, 1, 3, 3]");
}

/// A float constant node of `dims` with `values` (`float_val`).
fn tf_floats(name: &str, dims: &[i64], values: &[f32]) -> String {
    let dims: String = dims
        .iter()
        .map(|d| format!("dim {{ size: {d} }} "))
        .collect();
    let vals: String = values
        .iter()
        .map(|v| format!(" float_val: {v:?}"))
        .collect();
    format!(
        r#"node {{ name: "{name}" op: "Const" attr {{ key: "value" value {{ tensor {{ dtype: DT_FLOAT tensor_shape {{ {dims}}}{vals} }} }} }} }}"#
    )
}

/// TF's window ops on an NHWC 3x3 image of 1..9, by hand: a depthwise
/// convolution (multiplier 2), `SAME` pools (the extra padding after; the
/// average divides by the taps inside), `Pad`, `EXPLICIT` padding, an NCHW
/// `data_format`, and the errors.
#[test]
fn tf_convolutions_pools_and_pads() {
    let nodes = [
        r#"node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 1 } dim { size: 3 } dim { size: 3 } dim { size: 1 } } } } }"#.to_string(),
        // [kh, kw, in, multiplier]: m = 0 all ones, m = 1 [[1, 0], [0, -1]].
        tf_floats("dwf", &[2, 2, 1, 2], &[1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, -1.0]),
        r#"node { name: "dw" op: "DepthwiseConv2dNative" input: "x" input: "dwf" attr { key: "padding" value { s: "VALID" } } attr { key: "strides" value { list { i: 1 i: 1 i: 1 i: 1 } } } }"#.to_string(),
        r#"node { name: "avg" op: "AvgPool" input: "x" attr { key: "ksize" value { list { i: 1 i: 2 i: 2 i: 1 } } } attr { key: "strides" value { list { i: 1 i: 2 i: 2 i: 1 } } } attr { key: "padding" value { s: "SAME" } } }"#.to_string(),
        r#"node { name: "max" op: "MaxPool" input: "x" attr { key: "ksize" value { list { i: 1 i: 2 i: 2 i: 1 } } } attr { key: "strides" value { list { i: 1 i: 2 i: 2 i: 1 } } } attr { key: "padding" value { s: "SAME" } } }"#.to_string(),
        tf_ints("pads", &[0, 0, 1, 0, 0, 1, 0, 0], true).replace("dim { size: 8 }", "dim { size: 4 } dim { size: 2 }"),
        r#"node { name: "pad" op: "Pad" input: "x" input: "pads" }"#.to_string(),
        tf_floats("ones", &[2, 2, 1, 1], &[1.0; 4]),
        r#"node { name: "conv" op: "Conv2D" input: "x" input: "ones" attr { key: "padding" value { s: "EXPLICIT" } } attr { key: "explicit_paddings" value { list { i: 0 i: 0 i: 1 i: 0 i: 0 i: 1 i: 0 i: 0 } } } attr { key: "strides" value { list { i: 1 i: 1 i: 1 i: 1 } } } }"#.to_string(),
        r#"node { name: "nchw" op: "MaxPool" input: "x" attr { key: "ksize" value { list { i: 1 i: 1 i: 3 i: 1 } } } attr { key: "strides" value { list { i: 1 i: 1 i: 1 i: 1 } } } attr { key: "padding" value { s: "VALID" } } attr { key: "data_format" value { s: "NCHW" } } }"#.to_string(),
    ]
    .join("\n");
    let g = tf_graph(&nodes, &["dw", "avg", "max", "pad", "conv", "nchw"]).unwrap();
    let x = f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
    let out = run(&g, &[x]);
    assert_eq!(
        out[0],
        f32s(&[12.0, -4.0, 16.0, -4.0, 24.0, -4.0, 28.0, -4.0])
    );
    assert_eq!(out[1], f32s(&[3.0, 4.5, 7.5, 9.0]));
    assert_eq!(out[2], f32s(&[5.0, 6.0, 8.0, 9.0]));
    let padded = [
        0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 0.0, 4.0, 5.0, 6.0, 0.0, 7.0, 8.0, 9.0, 0.0,
    ];
    assert_eq!(out[3], f32s(&padded));
    assert_eq!(
        out[4],
        f32s(&[3.0, 5.0, 3.0, 12.0, 16.0, 9.0, 24.0, 28.0, 15.0])
    );
    // NCHW [1, 3, 3, 1]: 3 channels of 3 rows and one column; a window of
    // all 3 rows.
    assert_eq!(out[5], f32s(&[3.0, 6.0, 9.0]));
    let err = tf_graph(
        &nodes.replace(
            r#"s: "VALID" } } attr { key: "strides""#,
            r#"s: "FULL" } } attr { key: "strides""#,
        ),
        &["dw"],
    )
    .unwrap_err();
    assert!(err.contains("unknown padding \"FULL\""), "{err}");
    let err = tf_graph(
        &nodes.replace(
            "i: 1 i: 2 i: 2 i: 1 } } } attr { key: \"strides\"",
            "i: 2 i: 2 i: 2 i: 1 } } } attr { key: \"strides\"",
        ),
        &["avg"],
    )
    .unwrap_err();
    assert!(
        err.contains("moves along the batch or channel axis"),
        "{err}"
    );
    let bn = format!(
        "{nodes}\n{}\n{}\n{}\n{}\n{}",
        tf_floats("g", &[1], &[2.0]),
        tf_floats("b", &[1], &[1.0]),
        tf_floats("m", &[1], &[5.0]),
        tf_floats("v", &[1], &[4.0]),
        r#"node { name: "bn" op: "FusedBatchNormV3" input: "x" input: "g" input: "b" input: "m" input: "v" attr { key: "epsilon" value { f: 0.0 } } attr { key: "is_training" value { b: false } } }"#,
    );
    let g = tf_graph(&bn, &["bn"]).unwrap();
    let out = run(&g, &[f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])]);
    assert_eq!(
        out[0],
        f32s(&[-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    );
    let err = tf_graph(&bn.replace("b: false", "b: true"), &["bn"]).unwrap_err();
    assert!(err.contains("batch norm in training mode"), "{err}");
    let err = tf_graph(&bn, &["bn:1"]).unwrap_err();
    assert!(
        err.contains("reads output 1 of `bn`, which has 1 output(s)"),
        "{err}"
    );
}

fn i64_tensor(dims: &[u64]) -> Type {
    Type::Tensor(TensorType {
        dtype: DType::I64,
        shape: dims.iter().map(|&d| Dim::Fixed(d)).collect(),
    })
}

#[test]
fn fx_lookups_moments_attention_from_text() {
    // The torch-level spellings a traced transformer prints: embedding,
    // gather, index_select, var_mean through getitem, arange, and
    // F.scaled_dot_product_attention (hand-computed values).
    let g = fx_graph(
        "    %w : [num_users=2] = placeholder[target=w]
    %ids : [num_users=1] = placeholder[target=ids]
    %e : [num_users=1] = call_function[target=torch.nn.functional.embedding](args = (%ids, %w), kwargs = {})
    %pos : [num_users=1] = call_function[target=torch.arange](args = (2,), kwargs = {})
    %sel : [num_users=1] = call_function[target=torch.index_select](args = (%w, 1, %pos), kwargs = {})
    %vm : [num_users=2] = call_function[target=torch.var_mean](args = (%sel,), kwargs = {dim: 1, correction: 0})
    %v : [num_users=1] = call_function[target=operator.getitem](args = (%vm, 0), kwargs = {})
    %m : [num_users=1] = call_function[target=operator.getitem](args = (%vm, 1), kwargs = {})
    %ix : [num_users=1] = call_function[target=torch.tensor](args = ([[1, 0], [0, 0], [2, 1]],), kwargs = {})
    return (e, v, m)",
        &[("w", f32_tensor(&[3, 2])), ("ids", i64_tensor(&[2]))],
    );
    // `torch.tensor` of a literal is not an op kiln builds: reported.
    assert!(g.as_ref().unwrap_err().contains("torch.tensor"), "{g:?}");
    let g = fx_graph(
        "    %w : [num_users=3] = placeholder[target=w]
    %ids : [num_users=1] = placeholder[target=ids]
    %g : [num_users=1] = placeholder[target=g]
    %e : [num_users=1] = call_function[target=torch.nn.functional.embedding](args = (%ids, %w), kwargs = {})
    %pos : [num_users=1] = call_function[target=torch.arange](args = (2,), kwargs = {})
    %sel : [num_users=1] = call_function[target=torch.index_select](args = (%w, 1, %pos), kwargs = {})
    %vm : [num_users=2] = call_function[target=torch.var_mean](args = (%sel,), kwargs = {dim: 1, correction: 0})
    %v : [num_users=1] = call_function[target=operator.getitem](args = (%vm, 0), kwargs = {})
    %m : [num_users=1] = call_function[target=operator.getitem](args = (%vm, 1), kwargs = {})
    %t : [num_users=1] = call_function[target=torch.gather](args = (%w, 1, %g), kwargs = {})
    return (e, v, m, t)",
        &[
            ("w", f32_tensor(&[3, 2])),
            ("ids", i64_tensor(&[2])),
            ("g", i64_tensor(&[3, 1])),
        ],
    )
    .unwrap();
    let w = f32s(&[1.0, 3.0, 0.0, 4.0, 5.0, 5.0]);
    let ids = Data::Column(Buffer::I64(vec![2, 0]));
    let picks = Data::Column(Buffer::I64(vec![1, 0, 1]));
    let out = run(&g, &[w.clone(), ids.clone(), picks]);
    assert_eq!(out[0], f32s(&[5.0, 5.0, 1.0, 3.0]));
    assert_eq!(out[1], f32s(&[1.0, 4.0, 0.0]));
    assert_eq!(out[2], f32s(&[2.0, 2.0, 5.0]));
    assert_eq!(out[3], f32s(&[3.0, 0.0, 5.0]));
    // An index outside the axis: a run-time error naming the node.
    let g = kiln_ir::verify(g).unwrap();
    let bad = Data::Column(Buffer::I64(vec![1, 2, 0]));
    let err = kiln_interp::run(&g, &[w, ids, bad]).unwrap_err();
    assert!(
        matches!(err, kiln_ir::ExecError::IndexOutOfRange { ref name, .. } if name.as_deref() == Some("t")),
        "{err}"
    );

    // The gradients of lookups, as aot_autograd's backward graph spells
    // them: an embedding's (padding row 1 adds nothing, repeats sum) and
    // index_select's (`index_add`); with `scale_grad_by_freq`, each token's
    // row times 1 / its token's count first.
    let backward = |scale: &str| {
        fx_graph(
            &format!(
                "    %go : [num_users=1] = placeholder[target=go]
    %ids : [num_users=1] = placeholder[target=ids]
    %x : [num_users=1] = placeholder[target=x]
    %i : [num_users=1] = placeholder[target=i]
    %s : [num_users=1] = placeholder[target=s]
    %eb : [num_users=1] = call_function[target=torch.ops.aten.embedding_dense_backward.default](args = (%go, %ids, 4, 1, {scale}), kwargs = {{}})
    %ia : [num_users=1] = call_function[target=torch.ops.aten.index_add.default](args = (%x, 1, %i, %s), kwargs = {{}})
    return (eb, ia)"
            ),
            &[
                ("go", f32_tensor(&[2, 2, 2])),
                ("ids", i64_tensor(&[2, 2])),
                ("x", f32_tensor(&[2, 3])),
                ("i", i64_tensor(&[2])),
                ("s", f32_tensor(&[2, 2])),
            ],
        )
    };
    let inputs = || {
        [
            f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]),
            Data::Column(Buffer::I64(vec![3, 1, 3, 0])),
            f32s(&[1.0, 1.0, 1.0, 2.0, 2.0, 2.0]),
            Data::Column(Buffer::I64(vec![2, 2])),
            f32s(&[10.0, 20.0, 30.0, 40.0]),
        ]
    };
    let out = run(&backward("False").unwrap(), &inputs());
    assert_eq!(out[0], f32s(&[7.0, 8.0, 0.0, 0.0, 0.0, 0.0, 6.0, 8.0]));
    assert_eq!(out[1], f32s(&[1.0, 1.0, 31.0, 2.0, 2.0, 72.0]));
    // Token 3 twice (rows 1, 2 and 5, 6: halves), token 0 once, token 1 the
    // padding (counted, adds nothing).
    let out = run(&backward("True").unwrap(), &inputs());
    assert_eq!(out[0], f32s(&[7.0, 8.0, 0.0, 0.0, 0.0, 0.0, 3.0, 4.0]));

    // A language model's loss and mask ops (hand-computed): nll_loss
    // (mean over the targets not ignored, and its backward), tril, triu,
    // constant_pad_nd (a cut and a fill), _safe_softmax of a row masked
    // whole, select_backward and slice_backward.
    let g = fx_graph(
        "    %lp : [num_users=2] = placeholder[target=lp]
    %t : [num_users=2] = placeholder[target=t]
    %go : [num_users=1] = placeholder[target=go]
    %nl : [num_users=2] = call_function[target=torch.ops.aten.nll_loss_forward.default](args = (%lp, %t, None, 1, -100), kwargs = {})
    %loss : [num_users=1] = call_function[target=operator.getitem](args = (%nl, 0), kwargs = {})
    %tw : [num_users=2] = call_function[target=operator.getitem](args = (%nl, 1), kwargs = {})
    %nb : [num_users=1] = call_function[target=torch.ops.aten.nll_loss_backward.default](args = (%go, %lp, %t, None, 1, -100, %tw), kwargs = {})
    %lo : [num_users=1] = call_function[target=torch.ops.aten.tril.default](args = (%lp, -1), kwargs = {})
    %up : [num_users=1] = call_function[target=torch.ops.aten.triu.default](args = (%lp,), kwargs = {})
    %pd : [num_users=1] = call_function[target=torch.ops.aten.constant_pad_nd.default](args = (%lp, [-1, 1, 1, 0], 9.0), kwargs = {})
    %sm : [num_users=1] = call_function[target=torch.ops.aten._safe_softmax.default](args = (%lp, -1), kwargs = {})
    %sb : [num_users=1] = call_function[target=torch.ops.aten.select_backward.default](args = (%go, [3], 0, -2), kwargs = {})
    %lb : [num_users=1] = call_function[target=torch.ops.aten.slice_backward.default](args = (%lp, [5, 2], 0, 1, 4, 1), kwargs = {})
    %ls : [num_users=1] = call_function[target=torch.ops.aten.slice_backward.default](args = (%lp, [6, 2], 0, 1, 9223372036854775807, 2), kwargs = {})
    return (loss, tw, nb, lo, up, pd, sm, sb, lb, ls)",
        &[
            ("lp", f32_tensor(&[3, 2])),
            ("t", i64_tensor(&[3])),
            ("go", f32_tensor(&[])),
        ],
    )
    .unwrap();
    let ninf = f32::NEG_INFINITY;
    let lp = f32s(&[-1.0, -2.0, -3.0, -4.0, ninf, ninf]);
    let t = Data::Column(Buffer::I64(vec![1, -100, 0]));
    let out = run(&g, &[lp, t, Data::Scalar(Scalar::F32(4.0))]);
    // Rows 0 and 2 count: -(-2 + -inf) / 2.
    assert_eq!(out[0], Data::Scalar(Scalar::F32(f32::INFINITY)));
    assert_eq!(out[1], Data::Scalar(Scalar::F32(2.0)));
    assert_eq!(out[2], f32s(&[0.0, -2.0, 0.0, 0.0, -2.0, 0.0]));
    assert_eq!(out[3], f32s(&[0.0, 0.0, -3.0, 0.0, ninf, ninf]));
    assert_eq!(out[4], f32s(&[-1.0, -2.0, 0.0, -4.0, 0.0, 0.0]));
    assert_eq!(out[5], f32s(&[9.0, 9.0, -2.0, 9.0, -4.0, 9.0, ninf, 9.0]));
    let e = (-1.0f32).exp();
    let Data::Column(Buffer::F32(sm)) = &out[6] else {
        panic!("a tensor")
    };
    assert!((sm[0] - 1.0 / (1.0 + e)).abs() < 1e-6, "{sm:?}");
    assert_eq!(sm[4..], [0.0, 0.0]);
    assert_eq!(out[7], f32s(&[0.0, 4.0, 0.0]));
    assert_eq!(
        out[8],
        f32s(&[0.0, 0.0, -1.0, -2.0, -3.0, -4.0, ninf, ninf, 0.0, 0.0])
    );
    // Rows 1, 3 and 5 of 6 (`x[1::2]`).
    assert_eq!(
        out[9],
        f32s(&[0.0, 0.0, -1.0, -2.0, 0.0, 0.0, -3.0, -4.0, 0.0, 0.0, ninf, ninf])
    );
    // A segmentation model's loss (hand-computed): nll_loss2d over
    // [N=1, C=2, H=1, W=3] log-probabilities, a class weight, class 0
    // ignored: the sum of -x[t] * w[t] over the pixels kept, and its
    // backward at each kept pixel's class.
    let g = fx_graph(
        "    %lp : [num_users=2] = placeholder[target=lp]
    %t : [num_users=2] = placeholder[target=t]
    %w : [num_users=2] = placeholder[target=w]
    %go : [num_users=1] = placeholder[target=go]
    %nl : [num_users=2] = call_function[target=torch.ops.aten.nll_loss2d_forward.default](args = (%lp, %t, %w, 2, 0), kwargs = {})
    %loss : [num_users=1] = call_function[target=operator.getitem](args = (%nl, 0), kwargs = {})
    %tw : [num_users=2] = call_function[target=operator.getitem](args = (%nl, 1), kwargs = {})
    %nb : [num_users=1] = call_function[target=torch.ops.aten.nll_loss2d_backward.default](args = (%go, %lp, %t, %w, 2, 0, %tw), kwargs = {})
    return (loss, tw, nb)",
        &[
            ("lp", f32_tensor(&[1, 2, 1, 3])),
            ("t", i64_tensor(&[1, 1, 3])),
            ("w", f32_tensor(&[2])),
            ("go", f32_tensor(&[])),
        ],
    )
    .unwrap();
    // Pixel 0 is class 1 (x = -2), pixel 1 class 0 (ignored), pixel 2
    // class 1 (x = -6); class 1 weighs 3: 3·2 + 3·6 = 24 over weight 6.
    let lp = f32s(&[-1.0, -3.0, -5.0, -2.0, -4.0, -6.0]);
    let t = Data::Column(Buffer::I64(vec![1, 0, 1]));
    let w = f32s(&[0.5, 3.0]);
    let out = run(&g, &[lp, t, w, Data::Scalar(Scalar::F32(2.0))]);
    assert_eq!(out[0], Data::Scalar(Scalar::F32(24.0)));
    assert_eq!(out[1], Data::Scalar(Scalar::F32(6.0)));
    assert_eq!(out[2], f32s(&[0.0, 0.0, 0.0, -6.0, 0.0, -6.0]));

    // Bad arguments are errors naming the node.
    let bad = |call: &str| {
        fx_graph(
            &format!(
                "    %lp : [num_users=1] = placeholder[target=lp]
    %t : [num_users=1] = placeholder[target=t]
    %x : [num_users=1] = call_function[target={call}, kwargs = {{}})
    return x"
            ),
            &[("lp", f32_tensor(&[3, 2])), ("t", i64_tensor(&[2]))],
        )
        .unwrap_err()
    };
    for (call, message) in [
        (
            "torch.ops.aten.nll_loss_backward.default](args = (%lp, %lp, %t, None, 1, -100, %lp)",
            "`nll_loss` takes float [N, C] or [C] log-probabilities and [N] or 0-D targets",
        ),
        (
            "torch.ops.aten.nll_loss2d_forward.default](args = (%lp, %t, None, 1, -100)",
            "`nll_loss2d` takes float [N, C, H, W] log-probabilities and [N, H, W] targets",
        ),
        (
            "torch.ops.aten.constant_pad_nd.default](args = (%lp, [-1, -1])",
            "`pad` cuts every element of axis 1",
        ),
        (
            "torch.ops.aten.constant_pad_nd.default](args = (%lp, [1])",
            "`pad` of 1 ints for a tensor of 2 axes",
        ),
        (
            "torch.ops.aten.constant_pad_nd.default](args = (%lp, [-9223372036854775808, 0])",
            "`pad` cuts every element of axis 1",
        ),
        (
            "torch.ops.aten.select_backward.default](args = (%lp, [3], 0, 3)",
            "`index` 3 outside an axis of 3",
        ),
        (
            "torch.ops.aten.slice_backward.default](args = (%lp, [4, 2], 0, 0, 2, 1)",
            "not what `slice_backward` took of [4, 2]",
        ),
        (
            "torch.ops.aten.slice_backward.default](args = (%lp, [6, 2], 0, 0, 6, 0)",
            "`step` must be positive, not 0",
        ),
        (
            "torch.ops.aten.slice_backward.default](args = (%lp, [6, 2], 0, 0, 6, 9223372036854775807)",
            "not what `slice_backward` took of [6, 2]",
        ),
    ] {
        let err = bad(call);
        assert!(err.contains("`%x`") && err.contains(message), "{err}");
    }

    // Losses and the elementwise ops of their gradients, by hand: xlogy's
    // zero and NaN cases, sgn of both zeros and NaN, masked_fill, MSE (the
    // mean) and its backward (2/numel), binary cross-entropy's floor at
    // -100.
    let g = fx_graph(
        "    %a : [num_users=5] = placeholder[target=a]
    %b : [num_users=3] = placeholder[target=b]
    %xl : [num_users=1] = call_function[target=torch.ops.aten.xlogy.Tensor](args = (%a, %b), kwargs = {})
    %sg : [num_users=1] = call_function[target=torch.ops.aten.sgn.default](args = (%a,), kwargs = {})
    %m : [num_users=1] = call_function[target=torch.ops.aten.gt.Scalar](args = (%a, 0.5), kwargs = {})
    %mf : [num_users=1] = call_function[target=torch.ops.aten.masked_fill.Scalar](args = (%b, %m, -1.0), kwargs = {})
    %ms : [num_users=1] = call_function[target=torch.ops.aten.mse_loss.default](args = (%a, %b), kwargs = {})
    %mb : [num_users=1] = call_function[target=torch.ops.aten.mse_loss_backward.default](args = (%ms, %a, %b, 1), kwargs = {})
    %be : [num_users=1] = call_function[target=torch.ops.aten.binary_cross_entropy.default](args = (%b, %b, None, 0), kwargs = {})
    return (xl, sg, mf, ms, mb, be)",
        &[("a", f32_tensor(&[4])), ("b", f32_tensor(&[4]))],
    )
    .unwrap();
    let nan = f32::NAN;
    let a = f32s(&[0.0, -0.0, 2.0, nan]);
    let b = f32s(&[nan, 0.0, 1.0, 0.0]);
    let out = run(&g, &[a, b]);
    let bits = |d: &Data| match d {
        Data::Column(Buffer::F32(v)) => v.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        Data::Scalar(Scalar::F32(x)) => vec![x.to_bits()],
        other => panic!("{other:?}"),
    };
    // xlogy(0, NaN) is NaN, xlogy(-0, 0) is 0, 2 * log(1) = 0, NaN * log(0).
    let Data::Column(Buffer::F32(xl)) = &out[0] else {
        panic!()
    };
    assert!(
        xl[0].is_nan() && xl[1] == 0.0 && xl[2] == 0.0 && xl[3].is_nan(),
        "{xl:?}"
    );
    assert_eq!(bits(&out[1]), bits(&f32s(&[0.0, 0.0, 1.0, 0.0])));
    assert_eq!(bits(&out[2]), bits(&f32s(&[nan, 0.0, -1.0, 0.0])));
    // (a - b)² has a NaN: the mean is NaN, and so is its backward.
    assert!(matches!(out[3], Data::Scalar(Scalar::F32(x)) if x.is_nan()));
    // binary_cross_entropy(b, b) per element: NaN, 0 at 0 (t = 0: -1 *
    // log1p(0)), 0 at 1 (t * max(log(1), -100)), 0 at 0.
    let Data::Column(Buffer::F32(be)) = &out[5] else {
        panic!()
    };
    assert!(be[0].is_nan() && be[1..] == [0.0, 0.0, 0.0], "{be:?}");
    let err = fx_graph(
        "    %a : [num_users=2] = placeholder[target=a]
    %ms : [num_users=1] = call_function[target=torch.ops.aten.mse_loss.default](args = (%a, %a, 3), kwargs = {})
    return ms",
        &[("a", f32_tensor(&[4]))],
    )
    .unwrap_err();
    assert!(
        err.contains("`reduction` must be 0, 1 or 2, not 3"),
        "{err}"
    );
    // Smooth L1 of |d| = 0.25 and 2 with beta 1: 0.5 * 0.0625 and 2 - 0.5;
    // Huber with delta 1 the same; a beta of 0 (L1) is refused.
    let smooth = |call: &str| {
        fx_graph(
            &format!(
                "    %a : [num_users=1] = placeholder[target=a]
    %b : [num_users=1] = placeholder[target=b]
    %l : [num_users=1] = call_function[target=torch.ops.aten.{call}, kwargs = {{}})
    return l"
            ),
            &[("a", f32_tensor(&[2])), ("b", f32_tensor(&[2]))],
        )
    };
    for call in [
        "smooth_l1_loss.default](args = (%a, %b, 0, 1.0)",
        "huber_loss.default](args = (%a, %b, 0, 1.0)",
    ] {
        let g = smooth(call).unwrap();
        let out = run(&g, &[f32s(&[1.25, -1.0]), f32s(&[1.0, 1.0])]);
        assert_eq!(out[0], f32s(&[0.03125, 1.5]), "{call}");
    }
    let err = smooth("smooth_l1_loss.default](args = (%a, %b, 1, 0.0)").unwrap_err();
    assert!(err.contains("`beta` of 0"), "{err}");
    // index_put with accumulate (advanced indexing's gradient): repeated
    // indices sum; an assignment is refused.
    let put = |accumulate: &str| {
        fx_graph(
            &format!(
                "    %x : [num_users=1] = placeholder[target=x]
    %i : [num_users=1] = placeholder[target=i]
    %v : [num_users=1] = placeholder[target=v]
    %p : [num_users=1] = call_function[target=torch.ops.aten.index_put.default](args = (%x, [None, %i], %v, {accumulate}), kwargs = {{}})
    return p"
            ),
            &[
                ("x", f32_tensor(&[2, 3])),
                ("i", i64_tensor(&[3])),
                ("v", f32_tensor(&[3])),
            ],
        )
    };
    let g = put("True").unwrap();
    let x = f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let i = Data::Column(Buffer::I64(vec![2, 0, -1]));
    let out = run(&g, &[x, i, f32s(&[10.0, 20.0, 30.0])]);
    assert_eq!(out[0], f32s(&[21.0, 2.0, 43.0, 24.0, 5.0, 46.0]));
    let err = put("False").unwrap_err();
    assert!(err.contains("without `accumulate=True`"), "{err}");

    // Attention of one query over two keys, scale 1: softmax([0, 1]).
    let g = fx_graph(
        "    %q : [num_users=1] = placeholder[target=q]
    %k : [num_users=1] = placeholder[target=k]
    %v : [num_users=1] = placeholder[target=v]
    %a : [num_users=1] = call_function[target=torch._C._nn.scaled_dot_product_attention](args = (%q, %k, %v), kwargs = {scale: 1.0})
    return a",
        &[
            ("q", f32_tensor(&[1, 1])),
            ("k", f32_tensor(&[2, 1])),
            ("v", f32_tensor(&[2, 1])),
        ],
    )
    .unwrap();
    let out = run(&g, &[f32s(&[1.0]), f32s(&[0.0, 1.0]), f32s(&[0.0, 1.0])]);
    let e = std::f32::consts::E;
    let Data::Column(Buffer::F32(a)) = &out[0] else {
        panic!("a tensor")
    };
    assert!((a[0] - e / (1.0 + e)).abs() < 1e-6, "{a:?}");
}

#[test]
fn fx_refuses_what_it_cannot_build_with_located_errors() {
    // (graph body, its placeholders' types, what the error says)
    type Case<'a> = (&'a str, &'a [(&'a str, Type)], &'a str);
    let cases: &[Case] = &[
        (
            "    %x : [num_users=1] = placeholder[target=x]
    %a : [num_users=1] = call_function[target=torch.ops.aten.as_strided.default](args = (%x, [2, 2], [1, 2]), kwargs = {})
    return a",
            &[("x", f32_tensor(&[2, 2]))],
            "not a view of the input's elements in order",
        ),
        (
            "    %a : [num_users=1] = call_function[target=torch.arange](args = (3, 3), kwargs = {})
    return a",
            &[],
            "kiln has no empty tensors",
        ),
        (
            "    %x : [num_users=1] = placeholder[target=x]
    %i : [num_users=1] = placeholder[target=i]
    %a : [num_users=1] = call_function[target=torch.gather](args = (%x, 0, %i), kwargs = {})
    return a",
            &[("x", f32_tensor(&[2, 2])), ("i", i64_tensor(&[2]))],
            "an index of the input's rank 2",
        ),
        (
            "    %x : [num_users=1] = placeholder[target=x]
    %i : [num_users=1] = placeholder[target=i]
    %a : [num_users=1] = call_function[target=torch.nn.functional.embedding](args = (%i, %x), kwargs = {})
    return a",
            &[("x", f32_tensor(&[2, 2])), ("i", f32_tensor(&[2]))],
            "must be an int32 or int64 tensor",
        ),
        (
            "    %q : [num_users=3] = placeholder[target=q]
    %a : [num_users=1] = call_function[target=torch._C._nn.scaled_dot_product_attention](args = (%q, %q, %q), kwargs = {dropout_p: 0.1})
    return a",
            &[("q", f32_tensor(&[2, 2]))],
            "kiln draws no random numbers",
        ),
        (
            "    %x : [num_users=1] = placeholder[target=x]
    %m : [num_users=1] = placeholder[target=m]
    %a : [num_users=1] = call_function[target=torch.ops.aten.index.Tensor](args = (%x, [%m]), kwargs = {})
    return a",
            &[("x", f32_tensor(&[2, 2])), ("m", Type::Tensor(TensorType { dtype: DType::Bool, shape: vec![Dim::Fixed(2)] }))],
            "bool mask",
        ),
    ];
    for (body, inputs, want) in cases {
        let err = fx_graph(body, inputs).unwrap_err();
        assert!(err.contains(want), "{body}: {err}");
        // Located: `line:col: `%node`: ...`.
        assert!(
            err.starts_with(|c: char| c.is_ascii_digit()) && err.contains("`%a`"),
            "located: {err}"
        );
    }
}
