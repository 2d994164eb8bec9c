//! `kiln::Population` on the GP fixture, grouped as it compiles by default,
//! against the interpreter bit for bit. Its own test binary: its buffers
//! (two of 200 × 10,000 values) would disturb `population.rs`'s measure of
//! memory.

use kiln::population::Element;
use kiln::{Population, PopulationOptions, Scalar};

fn vars(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// The GP fixture (200 expressions, 10,000 rows) on every compiling engine,
/// whose elementwise expressions compile in groups of up to
/// `kiln::population::group_size` (one kernel each): rows and mean squared errors
/// bit-identical to the interpreter's, on one thread and two, and `mse`'s
/// blocks of rows summed in row order; in `f64` and in `f32`.
#[test]
fn grouped_expressions_match_the_interpreter_bit_for_bit() {
    let (exprs, names, cols) = fixture();
    let wide = grouped_bits::<f64>(&exprs, &names, &cols);
    let narrow = grouped_bits::<f32>(&exprs, &names, &cols);
    // `f32` computes in `f32`: close to `f64`'s values where they are tame,
    // but not `f64`'s values rounded.
    let (mut close, mut differ, mut tame) = (0, 0, 0);
    for (w, n) in wide.iter().zip(&narrow) {
        if w.is_finite() && w.abs() > 1e-3 && w.abs() < 1e3 {
            tame += 1;
            close += usize::from(((*n as f64 - w) / w).abs() < 1e-3);
            differ += usize::from(*n != *w as f32);
        }
    }
    assert!(close as f64 > 0.99 * tame as f64, "{close} of {tame} close");
    assert!(
        differ > tame / 10,
        "{differ} of {tame} differ from f64 rounded"
    );
}

/// All 1,000 expressions on the VM, in groups of up to 1,024 (one group on
/// one thread, one per thread on two), over 4,500 rows (two blocks of
/// `evaluate`, five of `mse`): rows and mean squared errors bit-identical to
/// the interpreter's.
#[test]
fn groups_of_the_whole_population_match_the_interpreter() {
    let (_, names, cols) = fixture();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/gp");
    let text = std::fs::read_to_string(dir.join("gp_population.txt")).expect("the GP fixture");
    let exprs: Vec<&str> = text.lines().collect();
    assert!(exprs.len() > kiln::population::group_size(Some(kiln::Tier::Vm)) / 2);
    let cols: Vec<&[f64]> = cols.iter().map(|c| &c[..4500]).collect();
    let n = 4500;
    let run = |engine: &dyn kiln::DynEngine, threads| {
        let options = PopulationOptions {
            threads,
            ..Default::default()
        };
        let p = Population::compile(&exprs, &names, engine, &options);
        assert!(p.compile_errors().is_empty());
        let mut out = vec![f64::NAN; exprs.len() * n];
        assert!(p.evaluate(&cols, n, &mut out).iter().all(Option::is_none));
        let (mse, errors) = p.mse(&cols, cols[0]);
        assert!(errors.iter().all(Option::is_none));
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        (bits(&out), bits(&mse), p.kernels())
    };
    let want = run(&kiln::Interpreter, 1);
    let vm = kiln::Tier::Vm.engine().expect("the VM");
    for threads in [1, 2] {
        let got = run(&*vm, threads);
        assert_eq!(got.2, threads, "one group per thread");
        assert!(got.0 == want.0, "rows on {threads} threads");
        assert!(got.1 == want.1, "mse on {threads} threads");
    }
}

/// The first 200 expressions of the GP fixture, its variables and columns.
fn fixture() -> (Vec<String>, Vec<String>, Vec<Vec<f64>>) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/gp");
    let text = std::fs::read_to_string(dir.join("gp_population.txt")).expect("the GP fixture");
    // 200 of the 1000: four groups, and the LLVM tier compiles each
    // expression in tens of milliseconds.
    let exprs: Vec<String> = text.lines().take(200).map(str::to_string).collect();
    let data = std::fs::read_to_string(dir.join("gp_data.csv")).expect("the GP data");
    let mut lines = data.lines();
    let names = vars(
        &lines
            .next()
            .expect("a header")
            .split(',')
            .collect::<Vec<_>>(),
    );
    let mut cols = vec![Vec::new(); names.len()];
    for line in lines {
        for (col, v) in cols.iter_mut().zip(line.split(',')) {
            col.push(v.parse::<f64>().expect("a number"));
        }
    }
    (exprs, names, cols)
}

/// The population's rows in precision `T` on every engine, checked
/// bit-identical to the interpreter's (rows and MSEs against `x0`).
fn grouped_bits<T: Element>(exprs: &[String], names: &[String], cols: &[Vec<f64>]) -> Vec<T> {
    let cols: Vec<Vec<T>> = cols
        .iter()
        .map(|c| c.iter().map(|&v| T::of_scalar(Scalar::F64(v))).collect())
        .collect();
    let n = cols[0].len();
    assert!(
        n > 2 * 4096,
        "more rows than two blocks of mse and evaluate"
    );
    let columns: Vec<&[T]> = cols.iter().map(|c| &c[..]).collect();
    let target = &cols[0];
    let bits = |v: &[T]| v.iter().map(|&x| x.to_f64().to_bits()).collect::<Vec<_>>();
    let options = |threads| PopulationOptions {
        threads,
        precision: T::PRECISION,
        ..Default::default()
    };
    let oracle = Population::compile(exprs, names, &kiln::Interpreter, &options(1));
    assert_eq!(oracle.precision(), T::PRECISION);
    let mut want = vec![T::NAN; exprs.len() * n];
    assert!(oracle
        .evaluate(&columns, n, &mut want)
        .iter()
        .all(Option::is_none));
    let (want_mse, _) = oracle.mse(&columns, target);
    for engine in kiln::engines().into_iter().filter(|e| e.name() != "interp") {
        for threads in [1, 2] {
            let p = Population::compile(exprs, names, &*engine, &options(threads));
            assert!(p.compile_errors().is_empty());
            assert!(
                p.kernels()
                    <= exprs
                        .len()
                        .div_ceil(kiln::population::group_size(engine.name().parse().ok()))
                        + threads,
                "{}: {} kernels for {} expressions",
                engine.name(),
                p.kernels(),
                exprs.len()
            );
            let mut out = vec![T::NAN; exprs.len() * n];
            assert!(p
                .evaluate(&columns, n, &mut out)
                .iter()
                .all(Option::is_none));
            assert!(
                bits(&out) == bits(&want),
                "{} rows in {:?}",
                engine.name(),
                T::PRECISION
            );
            let (mse, errors) = p.mse(&columns, target);
            assert!(errors.iter().all(Option::is_none));
            assert_eq!(
                mse.iter().map(|m| m.to_bits()).collect::<Vec<_>>(),
                want_mse.iter().map(|m| m.to_bits()).collect::<Vec<_>>(),
                "{} mse in {:?}",
                engine.name(),
                T::PRECISION
            );
        }
    }
    want
}

/// `evaluate_to_vec` is `evaluate` into a new vector, whose memory nothing
/// writes before the evaluation: the same bits over blocks of rows (a
/// failing member's row NaN, a constant's row filled from its one value),
/// f64 and f32, on one and three threads. (Here, not beside
/// `population.rs`'s resident-memory test, which its outputs would disturb.)
#[test]
fn evaluate_to_vec_is_evaluate_into_a_new_vector() {
    let exprs = [
        "x0 * 2.0 + x1",
        "1.5",
        "float(int(x0) // int(x1))",
        "sin(x1)",
    ];
    let rows = 70_000; // 4 × 70,000 values: three parts
    let x0: Vec<f64> = (0..rows).map(|i| f64::from(i) * 0.25 - 9.0).collect();
    let x1: Vec<f64> = (0..rows).map(|i| f64::from(i % 7)).collect();
    fn check<T: Element>(exprs: &[&str], x0: &[f64], x1: &[f64]) {
        let cast =
            |c: &[f64]| -> Vec<T> { c.iter().map(|&v| T::of_scalar(Scalar::F64(v))).collect() };
        let (x0, x1) = (cast(x0), cast(x1));
        let n = x0.len();
        for threads in [1, 3] {
            let options = PopulationOptions {
                threads,
                precision: T::PRECISION,
                ..Default::default()
            };
            let p = Population::compile(exprs, &vars(&["x0", "x1"]), &kiln::Vm, &options);
            let mut want = vec![T::of_scalar(Scalar::F64(7.0)); exprs.len() * n];
            let want_errors = p.evaluate(&[&x0, &x1], n, &mut want);
            let (got, errors) = p.evaluate_to_vec(&[&x0, &x1], n);
            let bits = |v: &[T]| v.iter().map(|x| x.to_f64().to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{threads} thread(s)");
            assert_eq!(format!("{errors:?}"), format!("{want_errors:?}"));
            assert!(
                matches!(errors[2], Some(kiln::MemberError::Exec(_))),
                "{errors:?}"
            );
            assert!(got[2 * n..3 * n].iter().all(|v| v.to_f64().is_nan()));
            assert!(got[n..2 * n].iter().all(|v| v.to_f64() == 1.5));
        }
    }
    check::<f64>(&exprs, &x0, &x1);
    check::<f32>(&exprs, &x0, &x1);
}
