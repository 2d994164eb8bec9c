//! Graphs written by real torch.fx and real TensorFlow (`tests/fixtures/`,
//! copied from `shared/fixtures`), run on every engine of this build and
//! compared with the outputs those libraries computed: integers and booleans
//! exactly, floats within the fixture README's tolerance (relative 1e-6 for
//! f32, 1e-12 for f64; NaN equals NaN).
//!
//! TensorFlow flushes subnormals to zero on its CPU kernels; kiln keeps them
//! (docs/semantics.md). Runs of TF graphs get their subnormal inputs flushed
//! before kiln sees them, which reproduces what TF computed; the one run this
//! affects is named in the test.
//!
//! Cases with tensor ops (matmul, layout ops) type their inputs with their
//! exact shapes (a vector meeting a weight in a matmul has a fixed length).

use kiln::tensors::{tensor_from_json, Tensor};
use kiln::{Buffer, DType, Data, Format, LoadOptions, Scalar};
use serde_json::Value as Json;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

fn case(dir: &Path) -> Json {
    let text = std::fs::read_to_string(dir.join("case.json")).expect("case.json");
    serde_json::from_str(&text).expect("JSON")
}

fn close(want: Scalar, got: Scalar) -> bool {
    match (want, got) {
        (Scalar::F32(w), Scalar::F32(g)) => close_f(f64::from(w), f64::from(g), 1e-6),
        (Scalar::F64(w), Scalar::F64(g)) => close_f(w, g, 1e-12),
        (w, g) => w == g,
    }
}

/// How a case's floats are compared with the library's.
#[derive(Copy, Clone, PartialEq)]
enum Tol {
    /// Each element within [`close`]'s relative tolerance.
    Elementwise,
    /// Each element within that tolerance of the output's largest
    /// magnitude (`|want - got| <= rel * max |want|`, as `allclose` with an
    /// absolute tolerance at the output's scale): convolutions sum dozens of
    /// products in their own order, and where the sum cancels, an element's
    /// own relative error says nothing.
    OutputScale,
}

fn close_f(w: f64, g: f64, rel: f64) -> bool {
    (w.is_nan() && g.is_nan()) || w == g || (w - g).abs() <= rel * w.abs().max(g.abs())
}

/// Flushes subnormal floats to zero, as TensorFlow's CPU kernels read them.
fn flush(t: &Tensor) -> Tensor {
    let mut data = Buffer::with_capacity(t.data.dtype(), t.data.len());
    for s in t.data.iter() {
        data.push(match s {
            Scalar::F32(f) if f.is_subnormal() => Scalar::F32(0.0f32.copysign(f)),
            Scalar::F64(f) if f.is_subnormal() => Scalar::F64(0.0f64.copysign(f)),
            other => other,
        });
    }
    Tensor {
        shape: t.shape.clone(),
        data,
    }
}

fn has_subnormal(t: &Tensor) -> bool {
    t.data.iter().any(|s| match s {
        Scalar::F32(f) => f.is_subnormal(),
        Scalar::F64(f) => f.is_subnormal(),
        _ => false,
    })
}

/// Loads a case's graph, typed by its first run's inputs (fx) or by its
/// attrs (TF), with the case's outputs.
fn load(dir: &Path, c: &Json, format: Format) -> Result<kiln::Loaded, kiln::ParseError> {
    load_typed(dir, c, format, false, "graph.txt")
}

/// [`load`], with fx inputs of their exact shapes when `exact` (a matmul
/// against a weight fixes a vector's length; `f32[n]` would not multiply).
fn load_typed(
    dir: &Path,
    c: &Json,
    format: Format,
    exact: bool,
    fx_file: &str,
) -> Result<kiln::Loaded, kiln::ParseError> {
    let mut opts = LoadOptions::default();
    let inputs = c["inputs"].as_object().expect("inputs");
    let bytes = match format {
        Format::Fx => {
            for (name, t) in inputs {
                let t = tensor_from_json(t).expect("a fixture tensor");
                let ty = if exact {
                    Ok(t.exact_type())
                } else {
                    t.input_type()
                };
                if let Ok(ty) = ty {
                    opts.fx.inputs.insert(name.clone(), ty);
                }
            }
            if let Ok(w) = std::fs::read(dir.join("weights.safetensors")) {
                opts.fx.weights = kiln::frontend::fx::read_weights(&w).expect("weights");
            }
            // `print(gm)`: what gives each call_module its type.
            if let Ok(m) = std::fs::read_to_string(dir.join("module.txt")) {
                opts.fx.modules = kiln::frontend::fx::modules::parse(&m).expect("module.txt");
            }
            std::fs::read(dir.join(fx_file)).expect("the fx file")
        }
        _ => {
            opts.tf.outputs = c["output_names"]
                .as_array()
                .expect("output_names")
                .iter()
                .map(|n| n.as_str().expect("a name").to_string())
                .collect();
            std::fs::read(dir.join("graph.pbtxt")).expect("graph.pbtxt")
        }
    };
    kiln::load_bytes(&bytes, format, &opts)
}

/// Runs every run of a case on every engine; returns the failures and the
/// number of (engine, run) pairs checked.
fn check_case(dir: &Path, format: Format, flushed_runs: &mut Vec<String>) -> (Vec<String>, usize) {
    check_case_on(dir, format, flushed_runs, false, Tol::Elementwise)
}

/// [`check_case`]; with `tensors`, inputs take their exact shapes. Every
/// compiled engine must also return the interpreter's bits.
fn check_case_on(
    dir: &Path,
    format: Format,
    flushed_runs: &mut Vec<String>,
    tensors: bool,
    tol: Tol,
) -> (Vec<String>, usize) {
    let c = case(dir);
    let name = dir.file_name().unwrap().to_string_lossy().to_string();
    let loaded =
        load_typed(dir, &c, format, tensors, "graph.txt").unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut graphs = vec![loaded.graph.clone()];
    if format == Format::Fx {
        // `print(gm)` (the module tree and the generated code) reads into the
        // same graph as `print(gm.graph)`.
        let from_code = load_typed(dir, &c, format, tensors, "module.txt")
            .unwrap_or_else(|e| panic!("{name}/module.txt: {e}"));
        assert_eq!(
            kiln::ir::text::print(&from_code.graph),
            kiln::ir::text::print(&loaded.graph),
            "{name}: module.txt and graph.txt differ"
        );
    }
    if format == Format::Tf {
        // The binary encoding of the same graph gives the same graph.
        let pb = std::fs::read(dir.join("graph.pb")).expect("graph.pb");
        let mut opts = LoadOptions::default();
        opts.tf.outputs = loaded
            .graph
            .outputs()
            .iter()
            .map(|o| o.name.clone())
            .collect();
        let binary = kiln::load_bytes(&pb, Format::Tf, &opts).expect("graph.pb loads");
        assert_eq!(
            kiln::ir::text::print(&binary.graph),
            kiln::ir::text::print(&loaded.graph),
            "{name}: .pb and .pbtxt differ"
        );
        graphs.push(binary.graph);
    }
    let mut failures = Vec::new();
    let mut checked = 0;
    // The interpreter's outputs per run, which every other engine must equal.
    let mut oracle: Vec<Vec<Data>> = Vec::new();
    for engine in kiln::engines() {
        let program = kiln_tests::compile(&*engine, &graphs[0], true)
            .unwrap_or_else(|e| panic!("{name} on {}: {e}", engine.name()));
        for (run_idx, run) in c["runs"].as_array().expect("runs").iter().enumerate() {
            let mut inputs = Vec::new();
            for input in loaded.graph.inputs() {
                let t = tensor_from_json(&run["inputs"][&input.name]).expect("run input");
                let t = if format == Format::Tf && has_subnormal(&t) {
                    flushed_runs.push(format!("{name} run {run_idx} input {}", input.name));
                    flush(&t)
                } else {
                    t
                };
                inputs.push(t.to_data().expect("scalar or column"));
            }
            let got = match program.run(&inputs) {
                Ok(got) => got,
                Err(e) => {
                    failures.push(format!("{name} run {run_idx} on {}: {e}", engine.name()));
                    continue;
                }
            };
            // The same bits at every thread count, every loop cut.
            kiln::threads::set_grain(0);
            for (mode, again) in kiln::threads::in_tested_modes(|| program.run(&inputs)) {
                let same = again.as_ref().is_ok_and(|again| {
                    again.len() == got.len() && again.iter().zip(&got).all(|(a, g)| a.same_data(g))
                });
                if !same {
                    failures.push(format!(
                        "{name} run {run_idx} on {} ({mode}): other bits",
                        engine.name()
                    ));
                }
            }
            if engine.name() == "interp" {
                oracle.push(got.clone());
            } else if let Some(want) = oracle.get(run_idx) {
                let same =
                    want.len() == got.len() && want.iter().zip(&got).all(|(w, g)| w.same_data(g));
                if !same {
                    failures.push(format!(
                        "{name} run {run_idx} on {}: not the interpreter's bits",
                        engine.name()
                    ));
                }
            }
            for (out_idx, want) in run["outputs"]
                .as_array()
                .expect("outputs")
                .iter()
                .enumerate()
            {
                let want_t = tensor_from_json(want).expect("output tensor");
                let got_data = &got[out_idx];
                let got_scalars: Vec<Scalar> = match got_data {
                    Data::Scalar(s) => vec![*s],
                    Data::Column(b) => b.iter().collect(),
                    Data::Selection(_) => panic!("no selections in fixtures"),
                };
                let want_scalars: Vec<Scalar> = want_t.data.iter().collect();
                let scale = match tol {
                    Tol::Elementwise => 0.0,
                    Tol::OutputScale => want_scalars
                        .iter()
                        .filter_map(|w| match w {
                            Scalar::F32(w) => Some(f64::from(*w)),
                            _ => None,
                        })
                        .fold(0.0, |m: f64, w| m.max(w.abs())),
                };
                let ok = want_scalars.len() == got_scalars.len()
                    && want_scalars.iter().zip(&got_scalars).all(|(w, g)| {
                        close(*w, *g)
                            || matches!((w, g), (Scalar::F32(w), Scalar::F32(g))
                                if (f64::from(*w) - f64::from(*g)).abs() <= 1e-6 * scale)
                    });
                if !ok {
                    failures.push(format!(
                        "{name} run {run_idx} output {} on {}: want {:?}, got {:?}",
                        want["name"],
                        engine.name(),
                        want_scalars,
                        got_scalars
                    ));
                }
            }
            checked += 1;
        }
    }
    let runs = c["runs"].as_array().expect("runs").len();
    assert_eq!(oracle.len(), runs, "{name}: the interpreter ran every run");
    (failures, checked)
}

#[test]
fn torch_fx_cases_match_what_torch_computed() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for case in ["seed_scalar", "nnc_fused", "methods_and_ops"] {
        let (f, n) = check_case(&root().join("fx").join(case), Format::Fx, &mut Vec::new());
        failures.extend(f);
        checked += n;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(checked >= 2 * 7, "checked only {checked} runs");
}

#[test]
fn tensorflow_cases_match_what_tensorflow_computed() {
    let mut failures = Vec::new();
    let mut flushed = Vec::new();
    let mut checked = 0;
    for case in ["seed_int32", "scalar_f64_math", "int64_ops"] {
        let (f, n) = check_case(&root().join("tf").join(case), Format::Tf, &mut flushed);
        failures.extend(f);
        checked += n;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(checked >= 2 * 20, "checked only {checked} runs");
    flushed.sort();
    flushed.dedup();
    assert_eq!(
        flushed,
        ["scalar_f64_math run 8 input y"],
        "the runs whose subnormal inputs TF flushed"
    );
}

/// The tutorials: fx `seed_scalar` gives 4.0 for 2.0 and loses its dead nodes
/// when optimized; TF `seed_int32` is `input + 103` with int32 wraparound.
#[test]
fn the_tutorial_graphs() {
    let dir = root().join("fx/seed_scalar");
    let loaded = load(&dir, &case(&dir), Format::Fx).unwrap();
    let verified = kiln::verify(loaded.graph.clone()).unwrap();
    let opt = kiln::optimize(&verified).unwrap();
    let opt = opt.graph();
    assert!(
        opt.len() < loaded.graph.len() && opt.len() <= 3,
        "{}",
        kiln::ir::text::print(opt)
    );
    for engine in kiln::engines() {
        let out = kiln_tests::compile(&*engine, &loaded.graph, true)
            .unwrap()
            .run(&[Data::Scalar(Scalar::F64(2.0))])
            .unwrap();
        assert_eq!(
            out,
            vec![Data::Scalar(Scalar::F64(4.0))],
            "{}",
            engine.name()
        );
    }
    let dir = root().join("tf/seed_int32");
    let loaded = load(&dir, &case(&dir), Format::Tf).unwrap();
    // Its placeholder is a fixed `int32[1]`, as TF declared it.
    for engine in kiln::engines() {
        let program = kiln_tests::compile(&*engine, &loaded.graph, true).unwrap();
        for (x, want) in [(10, 113), (i32::MAX, i32::MIN + 102), (-7, 96)] {
            let out = program.run(&[Data::Column(Buffer::I32(vec![x]))]).unwrap();
            assert_eq!(
                out,
                vec![Data::Column(Buffer::I32(vec![want]))],
                "{}",
                engine.name()
            );
        }
    }
}

/// The Linear layer, the MLPs (matmul, transpose, broadcast bias, tensor
/// constants) and the CNNs (convolutions, batch norms folded into them,
/// pooling; call_module and ATen forms) match torch and TensorFlow on every
/// engine.
#[test]
fn tensor_cases_match_what_torch_and_tensorflow_computed() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for (name, format, tol) in [
        ("fx/linear_module", Format::Fx, Tol::Elementwise),
        ("fx/mlp_aten", Format::Fx, Tol::Elementwise),
        ("fx/cnn_modules", Format::Fx, Tol::OutputScale),
        ("fx/resblock_aten", Format::Fx, Tol::OutputScale),
        ("tf/mlp_frozen", Format::Tf, Tol::Elementwise),
        ("tf/cnn_frozen", Format::Tf, Tol::OutputScale),
        // nn.Sequential traced to call_module nodes whose types only
        // module.txt gives (written by real torch: fx_local/make_fixtures.py).
        ("fx_local/seq_activations", Format::Fx, Tol::Elementwise),
    ] {
        let (f, n) = check_case_on(&root().join(name), format, &mut Vec::new(), true, tol);
        failures.extend(f);
        checked += n;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        checked >= 4 * kiln::engines().len(),
        "checked only {checked} runs"
    );
}

/// `fx/cnn_modules` (real torch): without its module tree, a convolution's
/// rank-4 weight is not taken for a Linear layer's: the untyped modules are
/// named together. (With the tree, it runs: see above.)
#[test]
fn modules_without_their_tree_are_named_together() {
    let dir = root().join("fx/cnn_modules");
    let graph = std::fs::read_to_string(dir.join("graph.txt")).expect("graph.txt");
    let mut opts = LoadOptions::default();
    let weights = std::fs::read(dir.join("weights.safetensors")).expect("weights");
    opts.fx.weights = kiln::frontend::fx::read_weights(&weights).expect("weights");
    let err = kiln::load_bytes(graph.as_bytes(), Format::Fx, &opts)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("call_module `0` (%_0), `1` (%_1), `2` (%_2), `3` (%_3), `4` (%_4)"),
        "{err}"
    );
    let tree = std::fs::read_to_string(dir.join("module.txt")).expect("module.txt");
    opts.fx.modules = kiln::frontend::fx::modules::parse(&tree).expect("the tree parses");
    assert_eq!(opts.fx.modules.len(), 10);
    assert_eq!(opts.fx.modules["0"].kind, "Conv2d");
}

#[test]
fn dtypes_of_fixture_outputs_are_kept() {
    let dir = root().join("fx/nnc_fused");
    let loaded = load(&dir, &case(&dir), Format::Fx).unwrap();
    let out = loaded.graph.outputs()[0].value;
    assert_eq!(loaded.graph.ty(out).dtype(), Some(DType::F32));
}
