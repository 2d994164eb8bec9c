//! `kiln::Population` on the GP fixture, grouped as it compiles by default,
//! against the interpreter bit for bit. Its own test binary: its buffers
//! (two of 200 × 10,000 values) would disturb `population.rs`'s measure of
//! memory.

use kiln::{Population, PopulationOptions};

fn vars(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// The GP fixture (200 expressions, 10,000 rows) on every compiling engine,
/// whose elementwise expressions compile in groups of up to
/// `kiln::population::GROUP` (one kernel each): rows and mean squared errors
/// bit-identical to the interpreter's, on one thread and two, and `mse`'s
/// blocks of rows summed in row order.
#[test]
fn grouped_expressions_match_the_interpreter_bit_for_bit() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/gp");
    let text = std::fs::read_to_string(dir.join("gp_population.txt")).expect("the GP fixture");
    // 200 of the 1000: four groups, and the LLVM tier compiles each
    // expression in tens of milliseconds.
    let exprs: Vec<&str> = text.lines().take(200).collect();
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
    let n = cols[0].len();
    assert!(n > 2 * 4096, "more rows than two of mse's blocks");
    let columns: Vec<&[f64]> = cols.iter().map(|c| &c[..]).collect();
    let target = &cols[0];
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();

    let one = PopulationOptions {
        threads: 1,
        ..Default::default()
    };
    let oracle = Population::compile(&exprs, &names, &kiln::Interpreter, &one);
    let mut want = vec![0.0; exprs.len() * n];
    assert!(oracle
        .evaluate(&columns, n, &mut want)
        .iter()
        .all(Option::is_none));
    let (want_mse, _) = oracle.mse(&columns, target);
    for engine in kiln::engines().into_iter().filter(|e| e.name() != "interp") {
        for threads in [1, 2] {
            let options = PopulationOptions {
                threads,
                ..Default::default()
            };
            let p = Population::compile(&exprs, &names, &*engine, &options);
            assert!(p.compile_errors().is_empty());
            assert!(
                p.kernels() <= exprs.len().div_ceil(kiln::population::GROUP) + threads,
                "{}: {} kernels for {} expressions",
                engine.name(),
                p.kernels(),
                exprs.len()
            );
            let mut out = vec![0.0; exprs.len() * n];
            assert!(p
                .evaluate(&columns, n, &mut out)
                .iter()
                .all(Option::is_none));
            assert!(bits(&out) == bits(&want), "{} rows", engine.name());
            let (mse, errors) = p.mse(&columns, target);
            assert!(errors.iter().all(Option::is_none));
            assert_eq!(bits(&mse), bits(&want_mse), "{} mse", engine.name());
        }
    }
}
