//! Where a GP loop's time goes, warm: the GP fixture's 1,000
//! expressions over its 10,000 rows, `ROUNDS` times in one process, on
//! `THREADS` threads (1 unless given) on `TIER` (the default tier unless
//! given; profile it with `perf record`). `fit`: their constants fitted to `x0`, 10
//! Levenberg–Marquardt steps; `compile`: the population compiled on the
//! default tier, and evaluated; `build`: compiled only. `compile` and
//! `build` in `f32` (the columns converted once, before the rounds) with
//! `KILN_GP_PRECISION=f32`. Run:
//! `cargo run --release -p kiln --example gp_timing -- fit|compile|build [ROUNDS [THREADS [TIER]]]`.

use std::time::Instant;

/// The CLI's and the Python module's allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let what = std::env::args().nth(1).unwrap_or_else(|| "fit".to_string());
    let rounds: usize = std::env::args()
        .nth(2)
        .map_or(5, |r| r.parse().expect("ROUNDS is a count"));
    let threads: usize = std::env::args()
        .nth(3)
        .map_or(1, |t| t.parse().expect("THREADS is a count"));
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
    let tier: kiln::Tier = std::env::args().nth(4).map_or(kiln::DEFAULT_TIER, |t| {
        t.parse().expect("TIER is a tier's name")
    });
    let engine = tier.engine().expect("the tier");
    if what == "compile" || what == "build" {
        let f32 = std::env::var("KILN_GP_PRECISION").is_ok_and(|p| p == "f32");
        let options = kiln::PopulationOptions {
            threads,
            precision: if f32 {
                kiln::Precision::F32
            } else {
                kiln::Precision::F64
            },
            ..kiln::PopulationOptions::default()
        };
        let columns32: Vec<Vec<f32>> = columns
            .iter()
            .map(|c| c.iter().map(|&v| v as f32).collect())
            .collect();
        let slices32: Vec<&[f32]> = columns32.iter().map(Vec::as_slice).collect();
        for round in 0..rounds {
            let start = Instant::now();
            let population = kiln::Population::compile(&exprs, &variables, &*engine, &options);
            let compiled = start.elapsed();
            if what == "build" {
                println!(
                    "round {round}: compile {:.1} ms",
                    compiled.as_secs_f64() * 1e3
                );
                continue;
            }
            // As Python's `Population.evaluate` and the CLI: into a new vector.
            // The values dropped after the clock stops.
            let (failed, evaluated, _values32, _values) = if f32 {
                let (values, failed) = population.evaluate_to_vec(&slices32, slices[0].len());
                (failed, start.elapsed(), values, Vec::new())
            } else {
                let (values, failed) = population.evaluate_to_vec(&slices, slices[0].len());
                (failed, start.elapsed(), Vec::new(), values)
            };
            println!(
                "round {round}: compile {:.1} ms, evaluate {:.1} ms, {} failed",
                compiled.as_secs_f64() * 1e3,
                (evaluated - compiled).as_secs_f64() * 1e3,
                failed.iter().filter(|f| f.is_some()).count()
            );
        }
        return;
    }
    assert_eq!(what, "fit", "fit or compile");
    let options = kiln::FitOptions {
        max_iter: 10,
        threads,
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
