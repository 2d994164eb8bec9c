//! `kiln::Population` on every engine: results against hand-computed values
//! and the interpreter, errors per expression (the memory of a loop of
//! populations: `population_memory.rs`).

use kiln::{MemberError, Population, PopulationOptions, Precision};

fn vars(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[test]
fn rows_and_errors_per_expression_on_every_engine() {
    let exprs = [
        "x0 * 2.0 + x1",
        "sin(x0) ** 2 + cos(x0) ** 2",
        "1.5",
        "x1 > x0",
        "float(int(x0) // int(x1))",
        "x0 +",
        "x9 * 2.0",
    ];
    let x0 = [1.0, 2.0, 3.0, -4.0];
    let x1 = [0.5, 1.0, 0.0, 2.0];
    let target = [2.0, 5.0, 6.0, -6.0];
    let mut reference: Option<Vec<f64>> = None;
    for engine in kiln::engines() {
        for threads in [1, 3] {
            let options = PopulationOptions {
                threads,
                ..Default::default()
            };
            let p = Population::compile(&exprs, &vars(&["x0", "x1"]), &*engine, &options);
            assert_eq!(p.len(), 7);
            let compile_errors: Vec<usize> = p.compile_errors().iter().map(|(i, _)| *i).collect();
            assert_eq!(compile_errors, [5, 6], "{}", engine.name());
            assert!(matches!(p.compile_errors()[0].1, MemberError::Parse(_)));
            assert_eq!(p.compile_errors()[1].1.to_string(), "unknown variable `x9`");
            let mut out = vec![0.0f64; 7 * 4];
            let errors = p.evaluate(&[&x0, &x1], 4, &mut out);
            assert_eq!(&out[0..4], [2.5, 5.0, 6.0, -6.0]);
            assert!(out[4..8].iter().all(|v| (v - 1.0).abs() < 1e-15));
            assert_eq!(&out[8..12], [1.5; 4]);
            assert_eq!(
                &out[12..16],
                [0.0, 0.0, 0.0, 1.0],
                "bools become 0.0 and 1.0"
            );
            // Integer division by zero (row 2) fails that expression only.
            assert!(
                matches!(
                    errors[4],
                    Some(MemberError::Exec(kiln::ExecError::DivisionByZero { .. }))
                ),
                "{:?}",
                errors[4]
            );
            assert!(out[16..20].iter().all(|v| v.is_nan()));
            assert!(errors[..4].iter().all(Option::is_none));
            assert!(matches!(errors[5], Some(MemberError::Parse(_))));
            match &reference {
                None => reference = Some(out.clone()),
                Some(r) => assert_eq!(
                    r.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{} bit-identical to the interpreter",
                    engine.name()
                ),
            }
            let (mse, errors) = p.mse(&[&x0, &x1], &target);
            assert_eq!(mse[0], 0.25 * 0.25);
            assert_eq!(mse[2], (0.25 + 3.5 * 3.5 + 4.5 * 4.5 + 7.5 * 7.5) / 4.0);
            assert!(mse[4].is_nan() && errors[4].is_some() && errors[0].is_none());
        }
    }
}

#[test]
fn variables_are_named_by_first_appearance() {
    assert_eq!(
        kiln::population::variables_of(&["b + a", "c * a", "oops +"]),
        ["b", "a", "c"]
    );
    let empty: [&str; 0] = [];
    let p = Population::compile(&empty, &[], &kiln::Cranelift, &Default::default());
    assert!(p.is_empty());
    assert!(p.evaluate::<f64>(&[], 10, &mut []).is_empty());
}

/// An expression that can fail at run time (integer division) among
/// groupable ones: the error lands on it, its neighbours keep their values.
#[test]
fn a_failing_group_isolates_its_expression() {
    let mut exprs: Vec<String> = (0..10).map(|k| format!("x0 * {k}.0 + x1")).collect();
    exprs.insert(4, "float(int(x0) // int(x1))".to_string());
    let x0 = [1.0, 2.0, 3.0];
    let x1 = [1.0, 0.0, 2.0];
    for engine in kiln::engines() {
        let p = Population::compile(&exprs, &vars(&["x0", "x1"]), &*engine, &Default::default());
        let mut out = vec![0.0f64; exprs.len() * 3];
        let errors = p.evaluate(&[&x0, &x1], 3, &mut out);
        for (i, e) in errors.iter().enumerate() {
            assert_eq!(
                e.is_some(),
                i == 4,
                "{}: expression {i}: {e:?}",
                engine.name()
            );
        }
        assert!(out[12..15].iter().all(|v| v.is_nan()));
        assert_eq!(&out[15..18], [5.0, 8.0, 14.0], "x0 * 4.0 + x1");
        let (mse, errors) = p.mse(&[&x0, &x1], &x1);
        assert!(mse[4].is_nan() && errors[4].is_some());
        assert_eq!(mse[0], 0.0, "x0 * 0.0 + x1 against x1");
        assert_eq!(mse[1], (1.0 + 4.0 + 9.0) / 3.0, "x0 * 1.0 + x1 against x1");
    }
}

/// Without named variables, the population reads the expressions' free
/// names (first appearance first, as `variables_of`), parsing each once, and
/// computes what it computes with them named; with 3 threads, the names
/// come from every thread's expressions.
#[test]
fn variables_inferred_from_the_expressions() {
    let exprs = ["b * 2.0", "a + b", "c -", "sin(c) - a", "1.0"];
    let (a, b, c) = ([1.0, -2.0], [0.5, 4.0], [0.0, 3.0]);
    for threads in [1, 3] {
        let options = PopulationOptions {
            threads,
            ..Default::default()
        };
        let p = Population::compile_inferring(&exprs, &kiln::Vm, &options);
        assert_eq!(p.variables(), vars(&["b", "a", "c"]));
        assert_eq!(p.variables(), kiln::population::variables_of(&exprs));
        assert_eq!(p.compile_errors().len(), 1);
        let mut out = vec![0.0f64; 5 * 2];
        let errors = p.evaluate(&[&b, &a, &c], 2, &mut out);
        let named = Population::compile(&exprs, &vars(&["a", "b", "c"]), &kiln::Vm, &options);
        let mut want = vec![0.0; 5 * 2];
        named.evaluate(&[&a, &b, &c], 2, &mut want);
        assert_eq!(&out[..4], [1.0, 8.0, 1.5, 2.0]);
        assert_eq!(out[6..].to_vec(), want[6..].to_vec());
        assert!(errors[2].is_some() && errors[3].is_none());
    }
}

/// An `f32` population on every engine: its columns, arithmetic and values
/// in `f32` (hand-computed), constant subexpressions computed in `f64` and
/// rounded once (weak literals), constant expressions rounded to `f32`,
/// bools as 0 and 1, an integer division by zero failing its expression
/// only, grouped and alone alike; `mse` sums the squares in `f64`.
#[test]
fn f32_populations_compute_in_f32_on_every_engine() {
    let exprs = [
        "x0 * 0.1 + x1",
        "0.1",
        "sin(0.5) * x0",
        "x1 > x0",
        "float(int(x0) // int(x1))",
        "exp(x0) / x1",
    ];
    let x0 = [1.0f32, 2.5, 3.0, -4.0];
    let x1 = [0.5f32, 1.0, 0.0, 3.0];
    for engine in kiln::engines() {
        for threads in [1, 2] {
            let options = PopulationOptions {
                threads,
                precision: Precision::F32,
                ..Default::default()
            };
            let p = Population::compile(&exprs, &vars(&["x0", "x1"]), &*engine, &options);
            assert_eq!(p.precision(), Precision::F32);
            assert!(p.compile_errors().is_empty());
            let mut out = vec![0.0f32; exprs.len() * 4];
            let errors = p.evaluate(&[&x0, &x1], 4, &mut out);
            let name = engine.name();
            let want: Vec<f32> = x0.iter().zip(&x1).map(|(a, b)| a * 0.1f32 + b).collect();
            assert_eq!(&out[0..4], want, "{name}: f32 arithmetic");
            assert_eq!(&out[4..8], [0.1f32; 4], "{name}: 0.1 rounded to f32");
            let sin = 0.5f64.sin() as f32;
            let want: Vec<f32> = x0.iter().map(|a| sin * a).collect();
            assert_eq!(&out[8..12], want, "{name}: sin(0.5) in f64, rounded once");
            assert_eq!(&out[12..16], [0.0, 0.0, 0.0, 1.0], "{name}: bools");
            assert!(
                matches!(
                    errors[4],
                    Some(MemberError::Exec(kiln::ExecError::DivisionByZero { .. }))
                ),
                "{name}: {:?}",
                errors[4]
            );
            assert!(out[16..20].iter().all(|v| v.is_nan()));
            // exp in f32 is within an ulp or so of exp in f64 rounded.
            for (k, (a, b)) in x0.iter().zip(&x1).enumerate() {
                let wide = (f64::from(*a).exp() / f64::from(*b)) as f32;
                let got = out[20 + k];
                assert!(
                    got == wide || (got - wide).abs() <= 2.0 * f32::EPSILON * wide.abs(),
                    "{name}: exp({a}) / {b} = {got}, not near {wide}"
                );
            }
            assert!(errors
                .iter()
                .enumerate()
                .all(|(i, e)| e.is_some() == (i == 4)));
            let (mse, errors) = p.mse(&[&x0, &x1], &x1);
            let want = x0
                .iter()
                .zip(&x1)
                .map(|(&a, &b)| {
                    let d = f64::from(a * 0.1f32 + b) - f64::from(b);
                    d * d
                })
                .sum::<f64>()
                / 4.0;
            assert_eq!(mse[0], want, "{name}: f64 sums of f32 differences");
            assert!(mse[4].is_nan() && errors[4].is_some());
        }
    }
}

/// A population's columns must be of its precision: anything else is the
/// caller's bug, caught before any kernel runs.
#[test]
#[should_panic(expected = "columns of the population's precision")]
fn columns_of_another_precision_are_refused() {
    let options = PopulationOptions {
        precision: Precision::F32,
        ..Default::default()
    };
    let p = Population::compile(&["x0 + 1.0"], &vars(&["x0"]), &kiln::Vm, &options);
    let mut out = [0.0f64; 2];
    p.evaluate(&[&[1.0f64, 2.0][..]], 2, &mut out);
}

#[test]
fn precisions_are_named_as_numpy_and_kiln_name_them() {
    for (name, want) in [
        ("f64", Precision::F64),
        ("float64", Precision::F64),
        ("f32", Precision::F32),
        ("float32", Precision::F32),
    ] {
        assert_eq!(name.parse::<Precision>(), Ok(want));
    }
    assert_eq!(
        "f16".parse::<Precision>().unwrap_err(),
        "a population's dtype is f64 (float64) or f32 (float32), not `f16`"
    );
    assert_eq!(Precision::default(), Precision::F64);
}
