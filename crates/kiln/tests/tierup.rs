//! The `auto` tier: programs that switch from Cranelift to LLVM between
//! calls, under load from several threads, with the interpreter's bits
//! before and after; the code cache that starts a program on LLVM; and
//! programs dropped while their compile waits or runs; a process that exits
//! while its tier-up compiles (`kiln::before_exit`, in a child process).
//! (Exit and `fork()` from Python: the Python tests.)
#![cfg(feature = "llvm")]

use kiln::{
    ArrayMut, ArrayRef, CompileOptions, Engine, Format, Interpreter, Program, Tier, TierUp,
    TierUpState, TieredProgram, Verified,
};
use std::sync::Once;
use std::time::Duration;

fn setup() {
    static DIR: Once = Once::new();
    DIR.call_once(|| {
        let dir = std::env::temp_dir().join(format!("kiln-tierup-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::env::set_var("KILN_CACHE_DIR", &dir);
        std::env::remove_var("KILN_CACHE");
    });
}

/// A row-wise graph with math and a reduction, so the tiers' code differs
/// (LLVM inlines and vectorizes the math; Cranelift calls it).
fn graph(scale: f64) -> Verified {
    let src = format!(
        "def f(x: f64[n], y: f64[n]):\n    \
         z = sin(x) * {scale} + exp(y * 0.25) - sqrt(abs(x * y))\n    \
         return z, sum(z * x)\n"
    );
    let graph = kiln::load(&src, Format::Py, &Default::default())
        .expect("parses")
        .graph;
    kiln::verify(graph).expect("verifies")
}

fn inputs(n: usize, seed: u64) -> (Vec<f64>, Vec<f64>) {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 11) as f64 / (1u64 << 53) as f64) * 8.0 - 4.0
    };
    (
        (0..n).map(|_| next()).collect(),
        (0..n).map(|_| next()).collect(),
    )
}

/// Runs `program` over `x, y`: the column and the sum, as bits.
fn run(program: &dyn Program, x: &[f64], y: &[f64]) -> (Vec<u64>, u64) {
    let mut z = vec![0.0; x.len()];
    let mut total = [0.0f64];
    program
        .run_arrays(
            &[ArrayRef::F64(x), ArrayRef::F64(y)],
            &mut [ArrayMut::F64(&mut z), ArrayMut::F64(&mut total)],
        )
        .expect("runs");
    (z.iter().map(|v| v.to_bits()).collect(), total[0].to_bits())
}

#[test]
fn a_program_switches_tier_under_load_with_the_same_bits() {
    setup();
    let graph = graph(3.0);
    // Off the cache: the switch itself is under test.
    let options = CompileOptions {
        cache: false,
        ..CompileOptions::default()
    };
    let oracle = Interpreter.compile(&graph, &options).unwrap();
    let program = TieredProgram::compile(&graph, &options, TierUp::After(Duration::ZERO)).unwrap();
    assert_eq!(program.tier(), Tier::Cranelift);
    let tiers = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4u64)
            .map(|t| {
                let (program, oracle) = (&program, &oracle);
                s.spawn(move || {
                    let mut seen = Vec::new();
                    let mut after_switch = 0;
                    for call in 0u64.. {
                        let (x, y) = inputs(1000 + (call % 7) as usize, t * 1000 + call);
                        let tier = program.tier();
                        assert_eq!(run(program, &x, &y), run(oracle, &x, &y), "call {call}");
                        if seen.last() != Some(&tier) {
                            seen.push(tier);
                        }
                        if tier == Tier::Llvm {
                            after_switch += 1;
                        }
                        if after_switch == 50 || call == 2_000_000 {
                            break;
                        }
                    }
                    seen
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap())
            .collect::<Vec<_>>()
    });
    for seen in tiers {
        // Each thread saw Cranelift and then LLVM, never back.
        assert_eq!(seen.last(), Some(&Tier::Llvm), "{seen:?}");
        assert!(seen.len() <= 2, "{seen:?}");
    }
    let stats = program.stats();
    assert_eq!(stats.state, TierUpState::Done);
    assert_eq!(
        (stats.tier, stats.first_tier),
        (Tier::Llvm, Tier::Cranelift)
    );
    assert!(stats.calls >= 1 && stats.llvm_compile_seconds.is_some());
    assert!(!stats.cache_hit);
}

#[test]
fn the_code_cache_starts_a_program_on_llvm() {
    setup();
    let graph = graph(5.0);
    let first = TieredProgram::compile(
        &graph,
        &CompileOptions::default(),
        TierUp::After(Duration::ZERO),
    )
    .unwrap();
    let (x, y) = inputs(100, 7);
    let before = run(&first, &x, &y);
    assert!(first.wait(Duration::from_secs(120)));
    assert_eq!(first.tier(), Tier::Llvm);
    assert_eq!(run(&first, &x, &y), before);
    // The tier-up stored its object: the next program links it at once.
    let second = TieredProgram::compile(&graph, &CompileOptions::default(), TierUp::Never).unwrap();
    let stats = second.stats();
    assert_eq!(
        (stats.tier, stats.cache_hit, stats.state),
        (Tier::Llvm, true, TierUpState::Settled)
    );
    assert_eq!(run(&second, &x, &y), before);
}

#[test]
fn never_and_dropped_programs() {
    setup();
    let options = CompileOptions {
        cache: false,
        ..CompileOptions::default()
    };
    let (x, y) = inputs(64, 3);
    let stays = TieredProgram::compile(&graph(7.0), &options, TierUp::Never).unwrap();
    for _ in 0..10 {
        run(&stays, &x, &y);
    }
    assert_eq!(stays.tier(), Tier::Cranelift);
    assert_eq!(stays.stats().state, TierUpState::Settled);
    // Programs dropped right after asking for their compile (queued or
    // compiling): the thread skips or finishes them, and serves the next.
    for k in 0..3 {
        let p = TieredProgram::compile(
            &graph(8.0 + k as f64),
            &options,
            TierUp::After(Duration::ZERO),
        )
        .unwrap();
        run(&p, &x, &y);
        drop(p);
    }
    let last =
        TieredProgram::compile(&graph(11.0), &options, TierUp::After(Duration::ZERO)).unwrap();
    let expected = run(&last, &x, &y);
    assert!(last.wait(Duration::from_secs(120)));
    assert_eq!(last.tier(), Tier::Llvm);
    assert_eq!(run(&last, &x, &y), expected);
    // The measured rule: the threshold is the LLVM compile's estimate, from
    // the Cranelift compile and the kernel's math calls (`sin` and `exp`;
    // `sqrt` and `abs` are instructions).
    let measured = TieredProgram::compile(&graph(12.0), &options, TierUp::Measured).unwrap();
    let stats = measured.stats();
    let threshold = stats.threshold_seconds.expect("LLVM is built");
    assert!(
        (threshold - stats.llvm_estimate_seconds).abs() < 1e-6,
        "{stats:?}"
    );
    assert!(
        stats.size.math_calls == 2 && stats.size.statements > 10,
        "{:?}",
        stats.size
    );
    assert!(stats.llvm_estimate_seconds > 0.0);
}

/// Set in the child process [`exit_while_a_tier_up_compiles`] runs.
const EXIT_CHILD: &str = "KILN_TIERUP_EXIT_CHILD";

/// A process whose tier-up is inside LLVM when it exits: `before_exit`
/// waits for that compile (the program is on LLVM after it), refuses the
/// next, and the exit handlers then find LLVM idle. The child is this test
/// binary running [`exit_child`], and every run must exit 0. (A compile cut
/// off by LLVM's destructors died of SIGSEGV in 4 of 10 runs from the
/// static-LLVM wheel, `test_tierup.py`; this build's shared libLLVM has not
/// shown it.)
#[test]
fn exit_while_a_tier_up_compiles() {
    for _ in 0..3 {
        let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", "exit_child", "--nocapture", "--test-threads=1"])
            .env(EXIT_CHILD, "1")
            .env("KILN_CACHE", "0")
            .output()
            .expect("the child runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("exit_child: exiting"),
            "{:?}\n{text}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The child of [`exit_while_a_tier_up_compiles`] (does nothing in the
/// test run itself): a long LLVM compile in the background, the exit while
/// it runs.
#[test]
fn exit_child() {
    if std::env::var_os(EXIT_CHILD).is_none() {
        return;
    }
    let terms: Vec<String> = (0..40)
        .map(|k| format!("sin(x * {}.5) * cos(y - {k}.25)", k + 1))
        .collect();
    let src = format!(
        "def f(x: f64[n], y: f64[n]):\n    return {}\n",
        terms.join(" + ")
    );
    let graph = kiln::verify(
        kiln::load(&src, Format::Py, &Default::default())
            .expect("parses")
            .graph,
    )
    .expect("verifies");
    let options = CompileOptions {
        cache: false,
        ..CompileOptions::default()
    };
    let program = TieredProgram::compile(&graph, &options, TierUp::After(Duration::ZERO)).unwrap();
    let (x, y) = inputs(16, 5);
    let mut z = vec![0.0; 16];
    program
        .run_arrays(
            &[ArrayRef::F64(&x), ArrayRef::F64(&y)],
            &mut [ArrayMut::F64(&mut z)],
        )
        .expect("runs");
    while program.stats().state != TierUpState::Compiling {
        std::thread::sleep(Duration::from_millis(1));
    }
    kiln::before_exit();
    // The compile that ran has finished; no other starts.
    assert_eq!(program.stats().state, TierUpState::Done);
    let refused = kiln::Llvm.compile(&graph, &options).map(|_| ());
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.to_string().contains("exiting")),
        "a compile after before_exit: {refused:?}"
    );
    println!("exit_child: exiting");
    std::process::exit(0);
}
