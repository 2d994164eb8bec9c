//! Where a population's constant fitting spends its time, warm: the GP
//! fixture's 1,000 expressions over its 10,000 rows, target `x0`, 10
//! Levenberg–Marquardt steps on one thread, fitted `ROUNDS` times in one
//! process (a GP loop's case; profile it with `perf record`). Run:
//! `cargo run --release -p kiln --example fit_timing [ROUNDS]`.

use std::time::Instant;

/// The CLI's and the Python module's allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map_or(5, |r| r.parse().expect("ROUNDS is a count"));
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gp");
    let text = std::fs::read_to_string(dir.join("gp_population.txt")).expect("the population");
    let exprs: Vec<&str> = text.lines().collect();
    let csv = std::fs::read_to_string(dir.join("gp_data.csv")).expect("the data");
    let mut lines = csv.lines();
    let variables: Vec<String> = lines
        .next()
        .expect("a header")
        .split(',')
        .map(str::to_string)
        .collect();
    let mut columns = vec![Vec::new(); variables.len()];
    for line in lines {
        for (c, v) in columns.iter_mut().zip(line.split(',')) {
            c.push(v.parse::<f64>().expect("numbers"));
        }
    }
    let slices: Vec<&[f64]> = columns.iter().map(Vec::as_slice).collect();
    let engine = kiln::DEFAULT_TIER.engine().expect("the default tier");
    let options = kiln::FitOptions {
        max_iter: 10,
        threads: 1,
        compile: kiln::CompileOptions::default(),
    };
    for round in 0..rounds {
        let start = Instant::now();
        let fits = kiln::fit_constants(&exprs, &variables, &slices, slices[0], &*engine, &options);
        let fitted = fits.iter().filter(|f| f.is_ok()).count();
        println!(
            "round {round}: {:.1} ms, {fitted} of {} fitted",
            start.elapsed().as_secs_f64() * 1e3,
            exprs.len()
        );
    }
}
