//! The LLVM tier's persistent code cache through the facade: a second
//! compile links the stored object, weights are not part of the code, and a
//! bad entry is compiled again, never linked. (Entry format, eviction and
//! the directory rules: `kiln_llvm::cache`'s unit tests; two processes at
//! once: the Python tests.)
#![cfg(feature = "llvm")]

use kiln::llvm::cache;
use kiln::{Buffer, CompileOptions, Data, Engine, Format, Llvm, Program, Scalar, Verified};
use std::sync::{Mutex, Once};

/// One cache directory for this test binary, set before any compile reads
/// the environment; the tests take turns, since they read the process's
/// counters.
fn setup() -> std::sync::MutexGuard<'static, ()> {
    static DIR: Once = Once::new();
    static TURN: Mutex<()> = Mutex::new(());
    DIR.call_once(|| {
        let dir = std::env::temp_dir().join(format!("kiln-cache-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::env::set_var("KILN_CACHE_DIR", &dir);
        std::env::remove_var("KILN_CACHE");
    });
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// `y = x @ w` for a `[4, cols]` weight whose elements are `scale * k`
/// (each test its own `cols`: the code depends on the shapes only).
fn graph(scale: f32, cols: usize) -> Verified {
    let weights: Vec<String> = (0..4 * cols)
        .map(|k| format!("{:.1}", scale * k as f32))
        .collect();
    let text = format!(
        "graph \"cached\"\nv0: f32[2, 4] = input \"x\"\nv1: f32[4, {cols}] = tensor {}\n\
         v2: f32[2, {cols}] = matmul v0, v1\noutput \"y\" = v2\n",
        weights.join(", ")
    );
    let graph = kiln::load(&text, Format::Kiln, &Default::default())
        .expect("parses")
        .graph;
    kiln::verify(graph).expect("verifies")
}

fn run(graph: &Verified) -> Vec<f32> {
    let program = Llvm
        .compile(graph, &CompileOptions::default())
        .expect("compiles");
    let x = Data::Column(Buffer::F32((1..=8).map(|v| v as f32).collect()));
    match program.run(&[x]).expect("runs").pop() {
        Some(Data::Column(Buffer::F32(y))) => y,
        other => panic!("one f32 tensor out, got {other:?}"),
    }
}

/// `x @ w` by hand.
fn expected(scale: f32, cols: usize) -> Vec<f32> {
    let mut y = vec![0f32; 2 * cols];
    for i in 0..2 {
        for j in 0..cols {
            for k in 0..4 {
                y[i * cols + j] += ((i * 4 + k + 1) as f32) * (scale * (k * cols + j) as f32);
            }
        }
    }
    y
}

#[test]
fn a_second_compile_links_the_stored_object_and_weights_are_not_code() {
    let _turn = setup();
    let before = cache::counters();
    assert_eq!(run(&graph(1.0, 16)), expected(1.0, 16));
    let first = cache::counters();
    assert_eq!(first.writes, before.writes + 1, "a miss writes its object");
    assert_eq!(run(&graph(1.0, 16)), expected(1.0, 16));
    let second = cache::counters();
    assert_eq!((second.hits, second.writes), (first.hits + 1, first.writes));
    // Other weights, same code: a hit, computing with the new weights.
    assert_eq!(run(&graph(0.5, 16)), expected(0.5, 16));
    assert_eq!(cache::counters().hits, second.hits + 1);
    // Without the cache: nothing read or written.
    let off = CompileOptions {
        cache: false,
        ..CompileOptions::default()
    };
    let now = cache::counters();
    let program = Llvm.compile(&graph(1.0, 16), &off).expect("compiles");
    assert_eq!(cache::counters(), now);
    let x = Data::Column(Buffer::F32(vec![0.0; 8]));
    assert_eq!(
        program.run(&[x]).unwrap(),
        vec![Data::Column(Buffer::F32(vec![0.0; 32]))]
    );
}

#[test]
fn a_bad_entry_is_compiled_again_and_replaced() {
    let _turn = setup();
    let graph = graph(2.0, 8);
    assert_eq!(run(&graph), expected(2.0, 8));
    let dir = std::path::PathBuf::from(std::env::var_os("KILN_CACHE_DIR").unwrap()).join("llvm");
    for damage in ["truncate", "flip", "foreign"] {
        // Every entry of the directory damaged: this graph's among them.
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let mut bytes = std::fs::read(&path).unwrap();
            match damage {
                "truncate" => bytes.truncate(bytes.len() / 2),
                "flip" => {
                    let middle = bytes.len() / 2;
                    bytes[middle] ^= 0x40;
                }
                _ => bytes[20] ^= 1, // the stored key is another's
            }
            std::fs::write(&path, bytes).unwrap();
        }
        let before = cache::counters();
        assert_eq!(run(&graph), expected(2.0, 8), "{damage}");
        let after = cache::counters();
        assert_eq!(
            (after.hits, after.writes),
            (before.hits, before.writes + 1),
            "{damage}: compiled again and stored"
        );
        assert_eq!(run(&graph), expected(2.0, 8));
        assert_eq!(
            cache::counters().hits,
            after.hits + 1,
            "{damage}: whole again"
        );
    }
    // A scalar graph too (direct kernels have a uniform entry as well).
    let scalar = kiln::verify(
        kiln::load("x * 3.0 + 1.0", Format::Py, &Default::default())
            .unwrap()
            .graph,
    )
    .unwrap();
    for _ in 0..2 {
        let p = Llvm.compile(&scalar, &CompileOptions::default()).unwrap();
        let out = p.run(&[Data::Scalar(Scalar::F64(2.0))]).unwrap();
        assert_eq!(out, vec![Data::Scalar(Scalar::F64(7.0))]);
    }
}
