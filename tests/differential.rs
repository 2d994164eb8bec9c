//! Differential property test: random valid graphs (`kiln-fuzzgen`) with
//! edge-biased inputs run on the interpreter and on every engine of this build,
//! as written and optimized; all must agree bit for bit (every NaN equal), or
//! report the same error. A failure is shrunk and printed as a ready-to-commit
//! filetest (`tests/filetests/regressions/`).
//!
//! CI runs `DIFFERENTIAL_CASES` cases (default 1000); set it higher for a long run.
//! Every case runs at 1, 2, 3 and 7 threads with every loop cut, once with
//! 7 chunks run last first, and once on 7 threads behind OpenMP's
//! `GOMP_parallel` interface (`kiln::threads::TESTED`). A case that
//! crashes the process is written to `KILN_CASE_DIR` first, when that is
//! set.

use arbitrary::Unstructured;
use proptest::prelude::*;

fn cases() -> u32 {
    std::env::var("DIFFERENTIAL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn every_engine_agrees_with_the_interpreter(bytes in prop::collection::vec(any::<u8>(), 16..1024)) {
        let mut u = Unstructured::new(&bytes);
        let Ok(case) = kiln_fuzzgen::generate(&mut u, 24) else { return Ok(()) };
        if let Err(report) = kiln_fuzzgen::differential(&case) {
            prop_assert!(false, "{}", report);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: (cases() / 4).max(100), failure_persistence: None, max_shrink_iters: 2000, ..ProptestConfig::default() })]

    /// The derivatives of random graphs (`kiln::ir::grad`: gradients and
    /// Jacobians) are graphs every engine runs with the interpreter's bits.
    /// Half the cases come from the generator's window mode, whose
    /// convolutions and pools the other half rarely differentiates.
    #[test]
    fn every_engine_agrees_on_derivatives(bytes in prop::collection::vec(any::<u8>(), 16..1024)) {
        let windows = bytes[0] & 1 == 1;
        let mut u = Unstructured::new(&bytes[1..]);
        let case = if windows {
            kiln_fuzzgen::generate_windows(&mut u, 24)
        } else {
            kiln_fuzzgen::generate(&mut u, 24)
        };
        let Ok(case) = case else { return Ok(()) };
        for jacobian in [false, true] {
            if let Some(derived) = kiln_fuzzgen::derivative(&case, jacobian) {
                if let Err(report) = kiln_fuzzgen::differential(&derived) {
                    prop_assert!(false, "{}", report);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: (cases() / 4).max(100), failure_persistence: None, max_shrink_iters: 2000, ..ProptestConfig::default() })]

    /// A graph split at the values that do not depend on its scalar inputs
    /// (`kiln::ir::hoist`, a fit's hoisted columns): the rest, given the
    /// hoisted values, computes the whole graph's outputs, and every engine
    /// runs it with the interpreter's bits.
    #[test]
    fn hoisted_graphs_compute_the_whole(bytes in prop::collection::vec(any::<u8>(), 16..1024)) {
        let mut u = Unstructured::new(&bytes);
        let Ok(case) = kiln_fuzzgen::generate(&mut u, 24) else { return Ok(()) };
        let Some((rest, whole)) = kiln_fuzzgen::hoisted(&case) else { return Ok(()) };
        let verified = kiln::verify(rest.graph.clone()).expect("the rest verifies");
        let got = kiln::interp::run(&verified, &rest.inputs).expect("the rest runs");
        for (k, (a, b)) in whole.iter().zip(&got).enumerate() {
            prop_assert!(a.same_data(b), "output {k}: whole {a}, rest {b}\n{}", kiln::ir::text::print(&case.graph));
        }
        if let Err(report) = kiln_fuzzgen::differential(&rest) {
            prop_assert!(false, "{}", report);
        }
    }
}

/// Derivatives are taken of a good share of the generated graphs: the
/// test above is not vacuous.
#[test]
fn the_generator_gives_graphs_to_differentiate() {
    let cases: Vec<kiln_fuzzgen::Case> =
        kiln_fuzzgen::seeded(0x51ed_270b_2760_39a9, 600, 512).collect();
    let gradients = cases
        .iter()
        .filter(|c| kiln_fuzzgen::derivative(c, false).is_some())
        .count();
    let jacobians = cases
        .iter()
        .filter(|c| kiln_fuzzgen::derivative(c, true).is_some())
        .count();
    assert!(
        gradients * 4 >= cases.len(),
        "{gradients} gradients of {} cases",
        cases.len()
    );
    assert!(
        jacobians * 20 >= cases.len(),
        "{jacobians} Jacobians of {} cases",
        cases.len()
    );
    // And a good share hoist something.
    let hoisted = cases
        .iter()
        .filter(|c| kiln_fuzzgen::hoisted(c).is_some())
        .count();
    assert!(
        hoisted * 4 >= cases.len(),
        "{hoisted} hoisted of {} cases",
        cases.len()
    );
    // A `sin x` beside a `cos x` (the generator's pairs, and the
    // derivatives of either), which the VM runs as one routine (`sincos`):
    // the cases, their gradients and their Jacobians reach it.
    let sincos = cases
        .iter()
        .flat_map(|c| {
            [
                Some(c.clone()),
                kiln_fuzzgen::derivative(c, false),
                kiln_fuzzgen::derivative(c, true),
            ]
        })
        .flatten()
        .filter(|d| {
            let of = |op| {
                d.graph
                    .nodes()
                    .filter(move |(_, n)| n.op == kiln::ir::Op::Unary(op))
                    .map(|(_, n)| n.args[0])
            };
            let sines: Vec<_> = of(kiln::ir::UnaryOp::Sin).collect();
            of(kiln::ir::UnaryOp::Cos).any(|x| sines.contains(&x))
        })
        .count();
    assert!(
        sincos >= 20,
        "{sincos} graphs with a sine and a cosine of one value"
    );
    // Of 3,000 more cases, Jacobians of column graphs whose derivative is
    // a constant spread over the rows (`d(x + c)/dc`: 18), which lowering
    // keeps on the column path (`tensor::spreads_a_scalar`), and Jacobians
    // with forward mode's reciprocals (a divisor without the parameter, or
    // shared by two: 34).
    let (mut spread, mut reciprocals) = (0, 0);
    for case in kiln_fuzzgen::seeded(0x51ed_270b_2760_39a9, 3000, 512) {
        let Some(d) = kiln_fuzzgen::derivative(&case, true) else {
            continue;
        };
        let column = |v| {
            d.graph
                .ty(v)
                .as_tensor()
                .is_some_and(|t| t.shape.len() <= 1)
        };
        let g = &d.graph;
        if g.nodes().all(|(v, _)| column(v))
            && g.nodes().any(|(_, n)| {
                matches!(n.op, kiln::ir::Op::BroadcastTo(_))
                    && g.ty(n.args[0]).as_tensor().is_some_and(|t| t.is_scalar())
            })
        {
            spread += 1;
        }
        let one = |v| matches!(&g.node(v).op, kiln::ir::Op::Const(c) if *c == kiln::ir::Scalar::one(c.dtype()));
        if g.nodes()
            .any(|(_, n)| n.op == kiln::ir::Op::Binary(kiln::ir::BinaryOp::Div) && one(n.args[0]))
        {
            reciprocals += 1;
        }
    }
    assert!(
        spread >= 10,
        "{spread} column Jacobians with a spread constant"
    );
    assert!(
        reciprocals >= 20,
        "{reciprocals} Jacobians with a reciprocal"
    );
    // Pools, grouped convolutions, gathers and index_adds are among the
    // ops the window mode's gradients reach, and pools among those its
    // Jacobians (forward mode) reach.
    let mut reached = std::collections::HashMap::new();
    for case in kiln_fuzzgen::seeded_windows(0x51ed_270b_2760_39a9, 600, 512) {
        if kiln_fuzzgen::derivative(&case, true).is_some() {
            for (_, node) in case.graph.nodes() {
                if matches!(node.op, kiln::ir::Op::Pool2d(_)) {
                    *reached.entry("pool in a Jacobian").or_insert(0) += 1;
                }
            }
        }
        if kiln_fuzzgen::derivative(&case, false).is_some() {
            for (_, node) in case.graph.nodes() {
                let what = match &node.op {
                    kiln::ir::Op::Pool2d(_) if node.ty.dtype().is_some_and(|d| d.is_float()) => {
                        node.op.mnemonic()
                    }
                    kiln::ir::Op::Conv2d(c) if c.groups > 1 => "grouped conv2d",
                    // A gather's adjoint is an `index_add`, whose own
                    // adjoint is a gather.
                    kiln::ir::Op::Gather(_) | kiln::ir::Op::IndexAdd(_)
                        if node.ty.dtype().is_some_and(|d| d.is_float()) =>
                    {
                        node.op.mnemonic()
                    }
                    // Weights that depend on an input: their adjoint too.
                    kiln::ir::Op::Conv2d(_)
                        if !matches!(case.graph.node(node.args[1]).op, kiln::ir::Op::Tensor(_)) =>
                    {
                        // 16 or more output × input channels a group: the
                        // adjoint a matmul a tap.
                        let w = case
                            .graph
                            .ty(node.args[1])
                            .as_tensor()
                            .map(|t| t.shape.clone());
                        match w.as_deref() {
                            Some([kiln::Dim::Fixed(o), kiln::Dim::Fixed(c), ..]) if o * c >= 16 => {
                                "conv2d of computed weights, by taps"
                            }
                            _ => "conv2d of computed weights",
                        }
                    }
                    _ => continue,
                };
                *reached.entry(what).or_insert(0) += 1;
            }
        }
    }
    for what in [
        "max_pool2d",
        "avg_pool2d",
        "grouped conv2d",
        "conv2d of computed weights",
        "conv2d of computed weights, by taps",
        "pool in a Jacobian",
        "gather",
        "index_add",
    ] {
        let n = reached.get(what).copied().unwrap_or(0);
        assert!(n >= 5, "{what} in {n} gradients: {reached:?}");
    }
}

/// The LLVM tier's wasm32 modules (linked by wasm-ld, run under wasmi) agree
/// with the interpreter too: fewer cases, since each links a module.
#[cfg(feature = "llvm")]
#[test]
fn wasm_modules_agree_with_the_interpreter() {
    let engines: Vec<Box<dyn kiln::DynEngine>> = vec![Box::new(kiln_tests::wasm::Wasm)];
    let mut n_cases = 0;
    let tries = (cases() / 5).max(50) as usize;
    for case in kiln_fuzzgen::seeded(0x2545_f491_4f6c_dd1d, tries, 768) {
        n_cases += 1;
        if let Err(report) = kiln_fuzzgen::differential_with(&case, &engines) {
            panic!("{report}");
        }
    }
    assert!(n_cases >= 40, "only {n_cases} cases generated");
}

/// The generator really produces what the differential test claims to cover.
#[test]
fn the_generator_covers_every_op_and_dtype() {
    use std::collections::HashSet;
    let mut mnemonics = HashSet::new();
    let mut dtypes = HashSet::new();
    // Transposes of 16 rows and columns or more: the JIT tiers read them
    // in tiles (`store_all`).
    let mut wide_transposes = 0;
    // Matmuls of more than 128 steps: the JIT tiers' panels fold them in
    // `k` blocks.
    let mut long_sums = 0;
    // Float matmuls of 5 rows or more by a dense `b` exactly one of
    // AVX-512's panels wide (64 `f32` columns, 32 `f64`): the JIT tiers
    // read its `k` blocks in place.
    let mut in_place_panels = 0;
    // Matmuls of more than 2048 steps into 97 columns or more: the JIT
    // tiers stream `a` (f64 everywhere, f32 past 192 columns on AVX-512).
    let mut streamed = 0;
    let mut strided_b = 0;
    // In window mode: convolutions of 8 or more output channels whose
    // weights are a transpose (a strided view the LLVM panels read by its
    // strides); and convolutions of 8 or more output channels a group over
    // a batch of 2 or more planes of at most 16 positions, which the LLVM
    // tier runs as one matmul over the batch's gathered columns (f32 on
    // AVX-512; fewer positions for narrower panels).
    let (mut strided_weights, mut gathered) = (0, 0);
    for case in kiln_fuzzgen::seeded_windows(0x9e37_79b9_7f4a_7c15, 3000, 512) {
        let g = &case.graph;
        for (_, node) in g.nodes() {
            let kiln::ir::op::Op::Conv2d(attrs) = &node.op else {
                continue;
            };
            if g.node(node.args[1]).op.mnemonic() == "transpose" {
                strided_weights += 1;
            }
            let Some(out) = node.ty.as_tensor() else {
                continue;
            };
            let fixed: Vec<u64> = out
                .shape
                .iter()
                .map(|d| match d {
                    kiln::Dim::Fixed(n) => *n,
                    kiln::Dim::Sym(_) => 0,
                })
                .collect();
            if fixed[0] >= 2 && fixed[1] / u64::from(attrs.groups) >= 8 && fixed[2] * fixed[3] <= 16
            {
                gathered += 1;
            }
        }
    }
    assert!(
        strided_weights >= 10,
        "{strided_weights} convolutions of strided weights"
    );
    assert!(
        gathered >= 100,
        "{gathered} convolutions of gathered columns"
    );
    // Outputs that reshape a value another node reads too: lowering stores
    // the value in that output's buffer (`views.rs`' `dest`).
    let mut reshaped_outputs = 0;
    // Cheap nodes read by two elementwise nodes that are loops of their own:
    // each loop computes them (`fusion.rs`' shared nodes).
    let mut shared_nodes = 0;
    for case in kiln_fuzzgen::seeded(0x9e37_79b9_7f4a_7c15, 3000, 512) {
        for output in case.graph.outputs() {
            let node = case.graph.node(output.value);
            if node.op.mnemonic() != "reshape" {
                continue;
            }
            let base = node.args[0];
            let readers = case
                .graph
                .nodes()
                .filter(|(v, n)| *v != output.value && n.args.contains(&base))
                .count();
            if readers > 0 && case.graph.node(base).op.mnemonic() != "input" {
                reshaped_outputs += 1;
            }
        }
        shared_nodes += shared_candidates(&case.graph);
        for (_, node) in case.graph.nodes() {
            if node.op.mnemonic() == "matmul" {
                let a = case.graph.ty(node.args[0]).as_tensor();
                if a.and_then(|t| t.shape.last())
                    .is_some_and(|d| matches!(d, kiln::Dim::Fixed(k) if *k > 128))
                {
                    long_sums += 1;
                }
                let dims = |v| {
                    let t = case.graph.ty(v).as_tensor()?;
                    let dims: Option<Vec<u64>> = t
                        .shape
                        .iter()
                        .map(|d| match d {
                            kiln::Dim::Fixed(n) => Some(*n),
                            kiln::Dim::Sym(_) => None,
                        })
                        .collect();
                    Some((t.dtype, dims?))
                };
                // A transposed or sliced `b` under more than 4 rows (15 in
                // 3,000 cases): the JIT tiers' panels pack it by its
                // strides.
                let view = matches!(
                    case.graph.node(node.args[1]).op.mnemonic(),
                    "transpose" | "slice"
                );
                if view
                    && dims(node.args[0]).is_some_and(|(_, a)| a.len() >= 2 && a[a.len() - 2] > 4)
                {
                    strided_b += 1;
                }
                if let (Some((_, a)), Some((dtype, b))) = (dims(node.args[0]), dims(node.args[1])) {
                    let panel = match dtype {
                        kiln::DType::F32 => 64,
                        kiln::DType::F64 => 32,
                        _ => 0,
                    };
                    if a.len() == 2 && a[0] >= 5 && b.len() == 2 && b[1] == panel {
                        in_place_panels += 1;
                    }
                    if a.last().is_some_and(|&k| k > 2048) && b.last().is_some_and(|&n| n >= 97) {
                        streamed += 1;
                    }
                }
            }
            let wide = node.ty.as_tensor().is_some_and(|t| {
                t.shape.len() == 2
                    && t.shape
                        .iter()
                        .all(|d| matches!(d, kiln::Dim::Fixed(n) if *n >= 16))
            });
            if node.op.mnemonic() == "transpose" && wide {
                wide_transposes += 1;
            }
            mnemonics.insert(node.op.mnemonic());
            if let Some(d) = node.ty.dtype() {
                dtypes.insert(d);
            }
        }
    }
    let all: Vec<&str> = kiln::ir::UnaryOp::ALL
        .iter()
        .map(|o| o.name())
        .chain(kiln::ir::BinaryOp::ALL.iter().map(|o| o.name()))
        .chain(kiln::ir::CmpOp::ALL.iter().map(|o| o.name()))
        .chain(kiln::ir::ReduceOp::ALL.iter().map(|o| o.name()))
        .chain(["input", "const", "select", "cast", "filter", "isin"])
        .chain([
            "tensor",
            "matmul",
            "transpose",
            "reshape",
            "reduce_axes",
            "concat",
            "slice",
            "broadcast_to",
            "conv2d",
            "max_pool2d",
            "avg_pool2d",
            "gather",
            "index_add",
            "trees",
        ])
        .collect();
    let missing: Vec<&&str> = all.iter().filter(|m| !mnemonics.contains(**m)).collect();
    assert!(missing.is_empty(), "never generated: {missing:?}");
    assert_eq!(dtypes.len(), 5);
    assert!(wide_transposes >= 10, "{wide_transposes} wide transposes");
    assert!(
        long_sums >= 10,
        "{long_sums} matmuls of more than 128 steps"
    );
    assert!(streamed >= 3, "{streamed} matmuls streaming `a`");
    assert!(
        strided_b >= 10,
        "{strided_b} matmuls of a transposed or sliced `b` over more than 4 rows"
    );
    assert!(
        in_place_panels >= 10,
        "{in_place_panels} matmuls of a `b` one AVX-512 panel wide"
    );
    assert!(
        reshaped_outputs >= 50,
        "{reshaped_outputs} outputs reshaping a value that is read elsewhere too"
    );
    assert!(
        shared_nodes >= 50,
        "{shared_nodes} cheap nodes read by two elementwise nodes in loops of their own"
    );
}

/// How many nodes of `graph` lowering computes in two loops at least: a
/// cheap elementwise node (`fusion.rs`' `cheap`) with at most one argument
/// of its shape, not returned, read by two or more elementwise nodes of its
/// shape that are each a loop of its own (returned, or read by a node that
/// is not elementwise).
fn shared_candidates(graph: &kiln::ir::Graph) -> usize {
    let cheap = [
        "add", "sub", "mul", "min", "max", "and", "or", "xor", "band", "bor", "bxor", "neg", "abs",
        "not", "bnot", "eq", "ne", "lt", "le", "gt", "ge", "select", "cast",
    ];
    let returned: Vec<kiln::ir::Value> = graph.outputs().iter().map(|o| o.value).collect();
    graph
        .nodes()
        .filter(|(value, node)| {
            let Some(shape) = node.ty.as_tensor().map(|t| &t.shape) else {
                return false;
            };
            let whole = node
                .args
                .iter()
                .filter(|&&a| graph.ty(a).as_tensor().map(|t| &t.shape) == Some(shape))
                .count();
            // A reader is a loop of its own where it is returned or read by
            // a node that is not elementwise (a reduction, a matmul).
            let root = |v: &kiln::ir::Value| {
                returned.contains(v)
                    || graph
                        .nodes()
                        .any(|(_, m)| m.args.contains(v) && !m.op.is_elementwise())
            };
            let readers = graph
                .nodes()
                .filter(|(v, n)| {
                    n.args.contains(value)
                        && root(v)
                        && n.op.is_elementwise()
                        && n.ty.as_tensor().map(|t| &t.shape) == Some(shape)
                })
                .count();
            !shape.is_empty()
                && cheap.contains(&node.op.mnemonic())
                && !returned.contains(value)
                && whole <= 1
                && readers >= 2
        })
        .count()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: (cases() / 10).max(50), failure_persistence: None, max_shrink_iters: 2000, ..ProptestConfig::default() })]

    /// Random GP populations (`+ - * /`, the GP functions, columns and
    /// literals, over edge-biased rows) in `f64` and `f32`: every engine, on
    /// one thread and two, returns what each expression returns alone on the
    /// interpreter, bit for bit, values and mean squared errors, so the
    /// grouping (one kernel for many expressions, their shared subtrees
    /// computed once, constants cast to the precision) changes nothing.
    #[test]
    fn every_engine_agrees_on_populations(bytes in prop::collection::vec(any::<u8>(), 16..1024)) {
        let mut u = Unstructured::new(&bytes);
        let Ok((exprs, columns)) = gp_population(&mut u) else { return Ok(()) };
        if let Err(report) = population_agrees::<f64>(&exprs, &columns) {
            prop_assert!(false, "{}", report);
        }
        if let Err(report) = population_agrees::<f32>(&exprs, &columns) {
            prop_assert!(false, "{}", report);
        }
    }
}

/// Up to 8 random GP expressions over `x0`, `x1`, `x2` (one case in 32
/// repeats them past a group of 1,024), and up to 300 rows of them (one
/// case in 16 up to 5,000, past an evaluation block of 4,096; zeros of both
/// signs, infinities, NaN, huge and tiny values among ordinary ones).
fn gp_population(u: &mut Unstructured) -> arbitrary::Result<(Vec<String>, Vec<Vec<f64>>)> {
    fn expr(u: &mut Unstructured, depth: u32) -> arbitrary::Result<String> {
        if depth == 0 || u.ratio(1, 4)? {
            return Ok(match u.int_in_range(0..=4)? {
                0..=2 => format!("x{}", u.int_in_range(0..=2)?),
                3 => format!("{:?}", f64::from(u.int_in_range(-50..=50)?) / 8.0),
                _ => format!("{:?}", f64::from(u.int_in_range(1..=1000)?) * 0.0173),
            });
        }
        let a = expr(u, depth - 1)?;
        Ok(match u.int_in_range(0..=10)? {
            0 => format!("({a} + {})", expr(u, depth - 1)?),
            1 => format!("({a} - {})", expr(u, depth - 1)?),
            2 => format!("({a} * {})", expr(u, depth - 1)?),
            3 => format!("({a} / {})", expr(u, depth - 1)?),
            4 => format!("sin({a})"),
            5 => format!("cos({a})"),
            6 => format!("exp({a})"),
            7 => format!("log(abs({a}))"),
            8 => format!("sqrt(abs({a}))"),
            9 => format!("tanh({a})"),
            _ => format!("({a} ** 2)"),
        })
    }
    let n_exprs = u.int_in_range(1..=8)?;
    let mut exprs = (0..n_exprs)
        .map(|_| expr(u, 4))
        .collect::<arbitrary::Result<Vec<_>>>()?;
    if u.ratio(1, 32)? {
        // Two groups (1,024 members each on the VM and Cranelift): the
        // same texts again, so the interpreter's reference stays cheap.
        exprs = exprs.iter().cycle().take(1030).cloned().collect();
    }
    let rows = if u.ratio(1, 16)? {
        u.int_in_range(1..=5000)?
    } else {
        u.int_in_range(1..=300)?
    };
    let edges = [
        0.0,
        -0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        1e300,
        -1e-300,
        3.5e38,
        1e-40,
    ];
    let columns = (0..3)
        .map(|_| {
            (0..rows)
                .map(|_| {
                    Ok(if u.ratio(1, 8)? {
                        *u.choose(&edges)?
                    } else {
                        f64::from(u.int_in_range(-5000..=5000)?) / 1000.0
                    })
                })
                .collect()
        })
        .collect::<arbitrary::Result<Vec<Vec<f64>>>>()?;
    Ok((exprs, columns))
}

/// The population of `exprs` in precision `T` on every engine against each
/// expression alone on the interpreter; the first difference, described.
fn population_agrees<T: kiln::population::Element>(
    exprs: &[String],
    columns: &[Vec<f64>],
) -> Result<(), String> {
    use kiln::{Population, PopulationOptions};
    let names: Vec<String> = ["x0", "x1", "x2"].map(String::from).to_vec();
    let columns: Vec<Vec<T>> = columns
        .iter()
        .map(|c| {
            c.iter()
                .map(|&v| T::of_scalar(kiln::Scalar::F64(v)))
                .collect()
        })
        .collect();
    let refs: Vec<&[T]> = columns.iter().map(Vec::as_slice).collect();
    let n = columns[0].len();
    let target = &columns[0];
    // Every NaN equal, as in `kiln_fuzzgen::same`: kiln does not define a
    // NaN's sign or payload.
    let bits = |v: &[T]| v.iter().map(|x| canonical(x.to_f64())).collect::<Vec<_>>();
    let options = |threads| PopulationOptions {
        threads,
        precision: T::PRECISION,
        ..Default::default()
    };
    let mut want = Vec::with_capacity(exprs.len() * n);
    let mut want_mse = Vec::with_capacity(exprs.len());
    // Each distinct text once (a case past a group repeats them).
    let mut alone: std::collections::HashMap<&str, (Vec<T>, u64)> = Default::default();
    for e in exprs {
        if !alone.contains_key(e.as_str()) {
            let p = Population::compile(&[e], &names, &kiln::Interpreter, &options(1));
            if let Some((_, err)) = p.compile_errors().first() {
                return Err(format!("{e}: {err}"));
            }
            let mut row = vec![T::NAN; n];
            p.evaluate(&refs, n, &mut row);
            alone.insert(e, (row, canonical(p.mse(&refs, target).0[0])));
        }
        let (row, mse) = &alone[e.as_str()];
        want.extend_from_slice(row);
        want_mse.push(*mse);
    }
    for engine in kiln::engines() {
        for threads in [1, 2] {
            let p = Population::compile(exprs, &names, &*engine, &options(threads));
            let mut out = vec![T::NAN; exprs.len() * n];
            let mut errors = p.evaluate(&refs, n, &mut out);
            if threads == 2 {
                // Two callers at once share kiln's pool: the second's
                // parts run on its own thread, to the same bits (the second
                // into a new vector, as the Python module evaluates).
                let (other, other_errors) = std::thread::scope(|s| {
                    let second = s.spawn(|| p.evaluate_to_vec(&refs, n));
                    errors = p.evaluate(&refs, n, &mut out);
                    second.join().expect("the second caller")
                });
                if bits(&other) != bits(&out) || other_errors.iter().any(Option::is_some) {
                    return Err(format!(
                        "{}: two callers at once differ ({other_errors:?})\nexpressions: {exprs:?}",
                        engine.name()
                    ));
                }
            }
            let (mse, _) = p.mse(&refs, target);
            let mse: Vec<u64> = mse.iter().map(|&m| canonical(m)).collect();
            let (got, wanted) = (bits(&out), bits(&want));
            if got != wanted || mse != want_mse || errors.iter().any(Option::is_some) {
                let k = (0..got.len()).find(|&k| got[k] != wanted[k]).unwrap_or(0);
                return Err(format!(
                    "{} on {threads} thread(s), {:?}: expression {} ({}) row {}: {:?}, alone on the interpreter {:?}; mse {:?} against {:?}; errors {errors:?}\nexpressions: {exprs:?}\ncolumns: {columns:?}",
                    engine.name(),
                    T::PRECISION,
                    k / n.max(1),
                    exprs[k / n.max(1)],
                    k % n.max(1),
                    out[k],
                    want[k],
                    mse,
                    want_mse,
                ));
            }
        }
    }
    Ok(())
}

/// `x`'s bits, one NaN for every NaN.
fn canonical(x: f64) -> u64 {
    if x.is_nan() {
        f64::NAN.to_bits()
    } else {
        x.to_bits()
    }
}
