//! A GP loop's memory: populations compiled, evaluated and dropped in a
//! loop keep the process's resident memory flat. Alone in its test binary:
//! tests running beside it in one process (the harness runs a binary's
//! tests on several threads) allocated and freed as it measured, and made
//! it fail one run in four.

use kiln::Population;

fn vars(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// Resident memory in KiB, from /proc.
fn rss_kib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("Linux");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4
}

#[test]
fn compiling_and_dropping_populations_keeps_memory_flat() {
    // 200 distinct expressions, so nothing is shared between rounds.
    let exprs: Vec<String> = (0..200)
        .map(|i| format!("sin(x0 * {i}.5) + x1 * exp(-x0) - {i}.0 / (x1 + 3.0)"))
        .collect();
    let variables = vars(&["x0", "x1"]);
    let x0: Vec<f64> = (0..100).map(|i| i as f64 / 10.0).collect();
    let x1: Vec<f64> = (0..100).map(|i| 1.0 - i as f64 / 50.0).collect();
    let round = || {
        let p = Population::compile(&exprs, &variables, &kiln::Cranelift, &Default::default());
        let (mse, _) = p.mse(&[&x0, &x1], &x0);
        assert_eq!(mse.len(), exprs.len());
    };
    for _ in 0..10 {
        round();
    }
    let settled = rss_kib();
    for _ in 0..60 {
        round();
    }
    let grown = rss_kib().saturating_sub(settled);
    assert!(grown < 8 * 1024, "RSS grew {grown} KiB over 60 populations");
}
