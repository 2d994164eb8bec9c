//! The C ABI's `bool` rule on every compiling tier: a `bool` is a byte, and
//! any byte that is not zero is true, whether it arrives as a direct argument,
//! through a pointer or in a column (docs/abi.md). C callers may pass any
//! byte; every tier must read it the same way.

use kiln::{CompileOptions, Engine, Format, JitProgram, Tier};

fn programs(src: &str) -> Vec<(&'static str, JitProgram)> {
    let graph = kiln::load(src, Format::Py, &Default::default())
        .expect("parses")
        .graph;
    let graph = kiln::verify(graph).expect("verifies");
    Tier::compiling()
        .map(|tier| {
            let p = tier
                .backend()
                .expect("compiles")
                .compile(&graph, &CompileOptions::default());
            (tier.name(), p.expect("compiles"))
        })
        .collect()
}

const BYTES: [u8; 6] = [0, 1, 2, 0x80, 0xfe, 0xff];

#[test]
fn direct_bool_arguments_are_true_when_not_zero() {
    let src = "def f(a: bool, b: bool): return not a, b > a, np.int32(a), a == b";
    for (tier, p) in programs(src) {
        assert!(p.kernel().direct, "{tier}: scalars only, nothing can fail");
        // `bool f(bool a, bool b, bool* gt, int32_t* cast, bool* eq)`.
        type F = extern "C" fn(u8, u8, *mut u8, *mut i32, *mut u8) -> u8;
        // SAFETY: reading the address is safe; calls below.
        let native = unsafe { p.raw_fn_ptr() };
        let call = |a: u8, b: u8, gt: &mut u8, cast: &mut i32, eq: &mut u8| -> u8 {
            match native {
                // SAFETY: a direct kernel of two bool inputs and outputs
                // bool, bool, i32, bool has this signature (docs/abi.md);
                // `p` keeps it alive.
                Some(ptr) => {
                    let f = unsafe { std::mem::transmute::<*const u8, F>(ptr) };
                    f(a, b, gt, cast, eq)
                }
                // The VM has no machine code: the same bytes through the
                // uniform slots (the inputs by value, then the returned
                // output's cell).
                None => {
                    let mut not = 7u8;
                    let mut slots = [
                        u64::from(a),
                        u64::from(b),
                        &mut not as *mut u8 as u64,
                        gt as *mut u8 as u64,
                        cast as *mut i32 as u64,
                        eq as *mut u8 as u64,
                    ];
                    // SAFETY: one slot per parameter of this direct kernel.
                    assert_eq!(unsafe { p.call_slots(&mut slots) }, 0);
                    not
                }
            }
        };
        assert_eq!(native.is_none(), tier == "vm", "{tier}");
        for a in BYTES {
            for b in BYTES {
                let (mut gt, mut cast, mut eq) = (7u8, 7i32, 7u8);
                let not = call(a, b, &mut gt, &mut cast, &mut eq);
                let (ta, tb) = (a != 0, b != 0);
                let got = (not, gt, cast, eq);
                let want = (
                    u8::from(!ta),
                    u8::from(tb & !ta),
                    i32::from(ta),
                    u8::from(ta == tb),
                );
                assert_eq!(got, want, "{tier}: a = {a:#x}, b = {b:#x}");
            }
        }
    }
}

#[test]
fn bool_bytes_in_columns_and_behind_pointers_are_true_when_not_zero() {
    // Not direct (a column input): `int32_t f(uint8_t* a, uint8_t* k, int64_t n,
    // int64_t* count, int64_t* all)` through the uniform slots.
    let src = "def f(a: bool[n], k: bool): return sum(np.int64(a != k)), min(a | k)";
    for (tier, p) in programs(src) {
        for k in BYTES {
            let column = BYTES;
            let (mut count, mut all) = (0i64, 7i64);
            let mut slots = [
                column.as_ptr() as u64,
                &k as *const u8 as u64,
                column.len() as u64,
                &mut count as *mut i64 as u64,
                &mut all as *mut i64 as u64,
            ];
            // SAFETY: one slot per parameter, in order; the column has `n`
            // bytes; the outputs are two i64 cells (NumPy sums and reduces
            // bools as integers), not aliased.
            let status = unsafe { p.call_slots(&mut slots) };
            assert_eq!(status, 0, "{tier}");
            let kt = k != 0;
            let want = column.iter().filter(|&&a| (a != 0) != kt).count() as i64;
            // `a | k` is true in every row unless k is false (a has a 0 row).
            assert_eq!((count, all), (want, i64::from(kt)), "{tier}: k = {k:#x}");
        }
    }
}
