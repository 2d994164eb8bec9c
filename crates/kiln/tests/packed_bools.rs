//! `bool` columns passed as packed bitmaps (`LowerOptions::packed_bools`, the
//! layout of Arrow booleans and validity): every compiling tier against the
//! interpreter, for every row count around the byte boundaries.

use kiln::kernel::abi::pack_bits;
use kiln::kernel::{LowerOptions, Param};
use kiln::{Buffer, CompileOptions, Data, Engine, Format, Program, Tier, Verified};

const SRC: &str = "def m(p: bool[n], q: bool[n], x: float[n]):
    return filter(p & ~q), where(p | q, x, -x), sum(where(p ^ q, 1, 0)), p == q";

const PACKED: CompileOptions = CompileOptions {
    optimize: true,
    opt_level: kiln::OptLevel::O3,
    packed_bools: true,
    libm_calls: None,
    vectorize: None,
    parallel: None,
    cache: true,
};

fn graph() -> Verified {
    let graph = kiln::load(SRC, Format::Py, &Default::default())
        .expect("parses")
        .graph;
    kiln::verify(graph).expect("verifies")
}

/// A deterministic bit pattern that is not periodic in 8.
fn bits(n: usize, seed: u64) -> Vec<bool> {
    let mut state = seed;
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            state >> 63 == 1
        })
        .collect()
}

#[test]
fn the_kernel_takes_bitmaps() {
    let options = LowerOptions {
        packed_bools: true,
        ..LowerOptions::default()
    };
    let kernel = kiln::kernel::lower(&graph(), &options).expect("lowers");
    let packed = kernel
        .params
        .iter()
        .filter(|p| matches!(p, Param::BitmapIn { .. }))
        .count();
    assert_eq!(packed, 2, "p and q are bitmaps, x is not");
    let header = kiln::kernel::header::prototype(&kernel, "m");
    assert!(header.contains("const uint8_t* p_0"), "{header}");
}

#[test]
fn packed_columns_match_the_interpreter_at_every_length() {
    let graph = graph();
    let interp = kiln::Interpreter.compile(&graph, &PACKED).unwrap();
    let tiers: Vec<_> = Tier::compiling()
        .map(|t| {
            let backend = t.backend().expect("a compiling tier");
            (
                t.name(),
                backend.compile(&graph, &PACKED).expect("compiles"),
            )
        })
        .collect();
    for n in 0..=70 {
        let inputs = [
            Data::Column(Buffer::Bool(bits(n, 1 + n as u64))),
            Data::Column(Buffer::Bool(bits(n, 1000 + n as u64))),
            Data::Column(Buffer::F64((0..n).map(|i| i as f64 + 0.5).collect())),
        ];
        let want = interp.run(&inputs).unwrap();
        for (name, program) in &tiers {
            let got = program.run(&inputs).expect("runs");
            assert_eq!(got, want, "{name}, {n} rows");
        }
    }
}

#[test]
fn pack_bits_is_lsb_first() {
    let rows = [true, false, false, true, false, false, false, false, true];
    assert_eq!(pack_bits(&rows), vec![0b0000_1001, 0b1]);
    assert!(pack_bits(&[]).is_empty());
}
