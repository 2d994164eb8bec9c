//! Fitting constants (`kiln::fit_constants`): the AI Feynman equations'
//! constants recovered from their own rows, starting ±50 % away; the same
//! fit on every tier; failures that keep their constants and say why.

use kiln::{fit_constants, DynEngine, FitOptions, Fitted, MemberError};

/// An equation of the AI Feynman database (Udrescu and Tegmark, 2020) with
/// its numeric constants as `{k}` placeholders, their values, and each
/// variable's range where it is not AI Feynman's usual 1..5.
struct Equation {
    name: &'static str,
    template: &'static str,
    constants: &'static [f64],
    ranges: &'static [(&'static str, f64, f64)],
}

const PI: f64 = std::f64::consts::PI;

const EQUATIONS: &[Equation] = &[
    Equation {
        name: "I.6.2a",
        template: "{0} * exp(-(theta ** 2) / {1})",
        constants: &[0.3989422804014327, 2.0],
        ranges: &[],
    },
    Equation {
        name: "I.6.2",
        template: "exp(-((theta / sigma) ** 2) / {0}) / ({1} * sigma)",
        constants: &[2.0, 2.5066282746310002],
        ranges: &[],
    },
    Equation {
        name: "I.12.4",
        template: "q1 / ({0} * epsilon * r ** 2)",
        constants: &[4.0 * PI],
        ranges: &[],
    },
    Equation {
        name: "I.13.4",
        template: "{0} * m * (v ** 2 + u ** 2 + w ** 2)",
        constants: &[0.5],
        ranges: &[],
    },
    Equation {
        name: "I.14.3",
        template: "m * {0} * z",
        constants: &[9.81],
        ranges: &[],
    },
    Equation {
        name: "I.15.3x",
        template: "(x - u * t) / sqrt({0} - u ** 2 / c ** 2)",
        constants: &[1.0],
        ranges: &[("u", 1.0, 2.0), ("c", 3.0, 10.0)],
    },
    Equation {
        name: "I.24.6",
        template: "{0} * m * (omega ** 2 + omega_0 ** 2) * x ** 2",
        constants: &[0.25],
        ranges: &[],
    },
    Equation {
        name: "I.29.16",
        template: "sqrt(x1 ** 2 + x2 ** 2 - {0} * x1 * x2 * cos(theta1 - theta2))",
        constants: &[2.0],
        ranges: &[],
    },
    Equation {
        name: "I.32.5",
        template: "q ** 2 * a ** 2 / ({0} * epsilon * c ** 3)",
        constants: &[6.0 * PI],
        ranges: &[],
    },
    Equation {
        name: "I.37.4",
        template: "I1 + I2 + {0} * sqrt(I1 * I2) * cos(delta)",
        constants: &[2.0],
        ranges: &[],
    },
    Equation {
        name: "I.39.1",
        template: "{0} * pr * V",
        constants: &[1.5],
        ranges: &[],
    },
    Equation {
        name: "I.40.1",
        template: "n0 * exp(-m * {0} * x / (kb * T))",
        constants: &[9.81],
        ranges: &[],
    },
    Equation {
        name: "I.48.2",
        template: "m * c ** 2 / sqrt({0} - v ** 2 / c ** 2)",
        constants: &[1.0],
        ranges: &[("v", 1.0, 2.0), ("c", 3.0, 10.0)],
    },
    Equation {
        name: "II.3.24",
        template: "Pwr / ({0} * r ** 2)",
        constants: &[4.0 * PI],
        ranges: &[],
    },
    Equation {
        name: "II.4.23",
        template: "q / ({0} * epsilon * r)",
        constants: &[4.0 * PI],
        ranges: &[],
    },
    Equation {
        name: "II.6.15a",
        template: "{0} * p_d * z * sqrt(x ** 2 + y ** 2) / (epsilon * r ** 5)",
        constants: &[3.0 / (4.0 * PI)],
        ranges: &[],
    },
    Equation {
        name: "II.11.27",
        template: "n * alpha / ({0} - n * alpha / {1}) * epsilon * Ef",
        constants: &[1.0, 3.0],
        ranges: &[("n", 0.0, 1.0), ("alpha", 0.0, 1.0)],
    },
    Equation {
        name: "II.21.32",
        template: "q / ({0} * epsilon * r * ({1} - v / c))",
        constants: &[4.0 * PI, 1.0],
        ranges: &[("v", 1.0, 2.0), ("c", 3.0, 10.0)],
    },
    Equation {
        name: "II.24.17",
        template: "sqrt(omega ** 2 / c ** 2 - {0} / d ** 2)",
        constants: &[PI * PI],
        ranges: &[("omega", 4.0, 6.0), ("c", 1.0, 2.0), ("d", 2.0, 5.0)],
    },
    Equation {
        name: "II.34.29a",
        template: "q * h / ({0} * m)",
        constants: &[4.0 * PI],
        ranges: &[],
    },
    Equation {
        name: "III.4.33",
        template: "(h / {0}) * omega / (exp((h / {1}) * omega / (kb * T)) - {2})",
        constants: &[2.0 * PI, 2.0 * PI, 1.0],
        ranges: &[],
    },
    Equation {
        name: "III.7.38",
        template: "{0} * mom * B / h",
        constants: &[4.0 * PI],
        ranges: &[],
    },
    Equation {
        name: "III.15.12",
        template: "{0} * U * ({1} - cos(k * d))",
        constants: &[2.0, 1.0],
        ranges: &[],
    },
    Equation {
        name: "III.17.37",
        template: "beta * ({0} + alpha * cos(theta))",
        constants: &[1.0],
        ranges: &[],
    },
    Equation {
        name: "I.8.14w",
        template: "sqrt((x2 - x1) ** 2 + {0} * (y2 - y1) ** 2)",
        constants: &[1.0],
        ranges: &[],
    },
    Equation {
        name: "I.18.12w",
        template: "r * F * sin({0} * theta)",
        constants: &[1.0],
        ranges: &[("theta", 0.0, 1.0)],
    },
];

fn fill(template: &str, constants: &[f64]) -> String {
    let mut text = template.to_string();
    for (k, c) in constants.iter().enumerate() {
        text = text.replace(&format!("{{{k}}}"), &format!("{c:?}"));
    }
    text
}

/// A fixed sequence in `lo..hi`.
fn uniform(state: &mut u64, lo: f64, hi: f64) -> f64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    lo + (hi - lo) * ((*state >> 11) as f64 / (1u64 << 53) as f64)
}

/// The equation's variables, rows drawn from their ranges, and the rows'
/// values of the equation (kiln's interpreter computes them).
fn rows(eq: &Equation, n: usize, state: &mut u64) -> (Vec<String>, Vec<Vec<f64>>, Vec<f64>) {
    let truth = fill(eq.template, eq.constants);
    let variables = kiln::population::variables_of(&[truth.as_str()]);
    let columns: Vec<Vec<f64>> = variables
        .iter()
        .map(|v| {
            let (lo, hi) = eq
                .ranges
                .iter()
                .find(|(name, _, _)| name == v)
                .map_or((1.0, 5.0), |&(_, lo, hi)| (lo, hi));
            (0..n).map(|_| uniform(state, lo, hi)).collect()
        })
        .collect();
    let refs: Vec<&[f64]> = columns.iter().map(Vec::as_slice).collect();
    let pop = kiln::Population::compile(
        &[truth.as_str()],
        &variables,
        &kiln::Interpreter,
        &Default::default(),
    );
    let mut target = vec![0.0; n];
    let errors = pop.evaluate(&refs, n, &mut target);
    assert!(errors[0].is_none(), "{}: {:?}", eq.name, errors[0]);
    (variables, columns, target)
}

fn fit_on(
    engine: &dyn DynEngine,
    exprs: &[String],
    variables: &[String],
    columns: &[Vec<f64>],
    target: &[f64],
) -> Vec<Result<Fitted, MemberError>> {
    let refs: Vec<&[f64]> = columns.iter().map(Vec::as_slice).collect();
    fit_constants(
        exprs,
        variables,
        &refs,
        target,
        engine,
        &FitOptions {
            threads: 1,
            ..FitOptions::default()
        },
    )
}

#[test]
fn the_feynman_equations_constants_are_recovered_from_half_off() {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let engine = kiln::Tier::Vm.engine().expect("the VM");
    let mut missed = Vec::new();
    for eq in EQUATIONS {
        let (variables, columns, target) = rows(eq, 200, &mut state);
        let start: Vec<f64> = eq
            .constants
            .iter()
            .map(|c| c * (1.0 + 0.5 * uniform(&mut state, -1.0, 1.0)))
            .collect();
        let expr = fill(eq.template, &start);
        let fit = fit_on(
            &*engine,
            std::slice::from_ref(&expr),
            &variables,
            &columns,
            &target,
        )
        .pop()
        .expect("one fit")
        .unwrap_or_else(|e| panic!("{}: {e}", eq.name));
        assert_eq!(fit.initial, start);
        let recovered = fit
            .constants
            .iter()
            .zip(eq.constants)
            .all(|(got, want)| (got - want).abs() <= 1e-6 * want.abs());
        if !recovered {
            missed.push(format!(
                "{}: {:?} from {:?} (mse {:e}, {} steps)",
                eq.name, fit.constants, start, fit.mse, fit.iterations
            ));
        }
    }
    eprintln!(
        "missed {} of {}:\n{}",
        missed.len(),
        EQUATIONS.len(),
        missed.join("\n")
    );
    assert!(
        missed.len() * 10 <= EQUATIONS.len(),
        "more than 10 % missed:\n{}",
        missed.join("\n")
    );
}

/// Every tier fits to the same bits: the same values and Jacobians, and the
/// same arithmetic between them.
#[test]
fn every_tier_fits_the_same_constants() {
    let mut state = 7u64;
    let eq = &EQUATIONS[20];
    let (variables, columns, target) = rows(eq, 300, &mut state);
    let exprs = vec![
        fill(eq.template, &[5.0, 8.0, 0.7]),
        "x0 +".to_string(),
        fill(EQUATIONS[1].template, &[1.0, 2.0]),
    ];
    let mut first: Option<Vec<Result<Fitted, MemberError>>> = None;
    for engine in kiln::engines() {
        let fits = fit_on(&*engine, &exprs, &variables, &columns, &target);
        assert!(
            matches!(fits[1], Err(MemberError::Parse(_))),
            "{}",
            engine.name()
        );
        assert!(
            matches!(fits[2], Err(MemberError::UnknownVariable(_))),
            "{}",
            engine.name()
        );
        let fit = fits[0].as_ref().expect("fits");
        assert!(fit.mse < 1e-12, "{}: {fit:?}", engine.name());
        match &first {
            None => first = Some(fits),
            Some(f) => assert_eq!(&fits, f, "{} differs", engine.name()),
        }
    }
}

#[test]
fn fits_that_cannot_start_keep_their_constants_and_say_why() {
    let x: Vec<f64> = (0..50).map(|i| i as f64 / 10.0).collect();
    let y: Vec<f64> = x.iter().map(|x| 2.0 * x + 1.0).collect();
    let exprs = [
        "x * 2.0 + 1.0",          // exact already
        "sqrt(x - 3.0) * 1.5",    // NaN at its constants
        "x * floor(1.5)",         // no constant changes its value
        "x * 1.5 + 0.2",          // fits
        "3.0",                    // a constant: one value for every row
        "x + float(int(x) // 0)", // fails at run time
        // fails at run time where its column without constants is computed
        "x * 1.5 + float(int(x) // 0)",
    ];
    let engine = kiln::Tier::Cranelift.engine().expect("cranelift");
    let fits = fit_constants(
        &exprs,
        &["x".to_string()],
        &[&x],
        &y,
        &*engine,
        &FitOptions::default(),
    );
    let ok = |i: usize| fits[i].as_ref().expect("a fit");
    assert_eq!(
        (ok(0).mse, ok(0).iterations, ok(0).failure.clone()),
        (0.0, 0, None)
    );
    assert!(
        ok(1)
            .failure
            .as_deref()
            .unwrap()
            .contains("NaN or infinite"),
        "{:?}",
        ok(1)
    );
    assert_eq!(ok(1).constants, [3.0, 1.5]);
    assert!(
        ok(2)
            .failure
            .as_deref()
            .unwrap()
            .contains("Jacobian is zero"),
        "{:?}",
        ok(2)
    );
    assert!(
        (ok(3).constants[0] - 2.0).abs() < 1e-7 && (ok(3).constants[1] - 1.0).abs() < 1e-7,
        "{:?}",
        ok(3)
    );
    assert_eq!(
        ok(3).expr,
        format!("x * {:?} + {:?}", ok(3).constants[0], ok(3).constants[1])
    );
    // The mean of the target minimizes a constant's squared error.
    let mean = y.iter().sum::<f64>() / y.len() as f64;
    assert!((ok(4).constants[0] - mean).abs() < 1e-7, "{:?}", ok(4));
    for failed in &fits[5..] {
        assert!(matches!(failed, Err(MemberError::Exec(_))), "{failed:?}");
    }
}
