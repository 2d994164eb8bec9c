"""kiln.aot: text as str, binaries as bytes, on each target."""

import pytest

import kiln
from conftest import EXAMPLES

FN = EXAMPLES / "fn.py"


def test_assembly_for_aarch64_is_one_fadd():
    asm = kiln.aot(FN, target="aarch64", emit="asm", name="forward")
    assert isinstance(asm, str)
    body = asm.split("forward:")[1].split("ret")[0]
    ops = [l.split()[0] for l in body.strip().splitlines() if not l.strip().startswith(".")]
    # x + 2.0, and nothing of the dead code: the constant and one fadd.
    assert ops == ["fmov", "fadd"]


@pytest.mark.parametrize(
    "target,magic",
    [("x86_64", b"\x7fELF"), ("aarch64", b"\x7fELF"), ("riscv64", b"\x7fELF")],
)
def test_objects_on_both_tiers(target, magic):
    for tier in ("llvm", "cranelift"):
        obj = kiln.aot(FN, target=target, emit="obj", tier=tier)
        assert isinstance(obj, bytes) and obj.startswith(magic)


def test_llvm_ir_bitcode_wasm_and_header():
    ir = kiln.aot("x * 2.0", emit="llvm-ir", name="twice")
    assert "define" in ir and "@twice" in ir and "fmul" in ir
    assert kiln.aot("x * 2.0", emit="bc").startswith(b"BC\xc0\xde")
    wasm = kiln.aot("x * 2.0", target="wasm32", emit="wasm")
    assert wasm.startswith(b"\0asm")
    header = kiln.aot("def f(x: float[n]): return x * 2.0", emit="header")
    assert "#include <stdint.h>" in header and "f(" in header


def test_bad_requests_are_value_errors():
    with pytest.raises(ValueError, match="emit must be one of obj, asm"):
        kiln.aot(FN, emit="exe")
    with pytest.raises(ValueError, match="`asm` needs the LLVM tier"):
        kiln.aot(FN, emit="asm", tier="cranelift")
    with pytest.raises(ValueError, match="not a C identifier"):
        kiln.aot(FN, emit="header", name="not a symbol")
    with pytest.raises(ValueError, match="opt_level must be 0 to 3"):
        kiln.aot(FN, opt_level=7)
    with pytest.raises(ValueError, match="tier must be 'llvm' or 'cranelift'"):
        kiln.aot(FN, tier="interp")
    with pytest.raises(ValueError):
        kiln.aot(FN, target="notatarget", emit="obj")
    with pytest.raises(kiln.ParseError):
        kiln.aot("x +", emit="header")


def test_matmul_assembly_fits_the_cpus_vector_registers():
    """A matmul's panels in the named CPU's widest vectors, stepping with
    fused multiply-adds, with the accumulators in registers: 512-bit on
    Intel's AVX-512 cores (which LLVM tunes to prefer 256), 256-bit and
    narrower panels on an AVX2 CPU, where 256-byte panels spilled. `k`
    (256) runs in blocks on AVX-512 (128 steps), whose first block LLVM
    may compile apart from the others: each copy of the panel's loop is
    16 (8) fused multiply-adds of registers, on AVX-512 beside a prefetch
    of the next row block's `a` (one a step: the loop holds no other load
    of `a`'s rows but its 4 broadcasts); AVX2's panels prefetch nothing.
    A `k` of a few steps is a loop too, in vectors: LLVM unrolled such
    short nests fully before vectorizing and left them scalar (256 scalar
    fused multiply-adds for `k` 4). (A `k` of 1 has no loop to keep: on
    AVX2 its 16 columns still run scalar.) The rows past the last block
    and a blocked `k`'s first sums are vectors too."""

    def fmas(asm, reg):
        lines = [line for line in asm.splitlines() if "vfmadd" in line]
        assert lines and all(f"vfmadd231ps\t%{reg}" in line and "(" not in line for line in lines), lines
        return len(lines)

    src = "def f(a: f32[256, 256], b: f32[256, 256]):\n    return a @ b\n"
    intel = kiln.aot(src, target="x86_64", cpu="emeraldrapids", emit="asm")
    assert fmas(intel, "zmm") in (16, 32) and "ymm" not in intel
    assert intel.count("prefetcht0") == fmas(intel, "zmm") // 16
    avx2 = kiln.aot(src, target="x86_64", cpu="x86-64-v3", emit="asm")
    assert fmas(avx2, "ymm") in (8, 16) and "zmm" not in avx2
    assert "prefetch" not in avx2
    assert avx2.count("(%rsp)") < 40
    for k in (2, 4, 8, 10):
        src = f"def f(a: f32[64, {k}], b: f32[{k}, 256]):\n    return a @ b\n"
        intel = kiln.aot(src, target="x86_64", cpu="emeraldrapids", emit="asm")
        assert fmas(intel, "zmm") in (16, 32), k
        avx2 = kiln.aot(src, target="x86_64", cpu="x86-64-v3", emit="asm")
        assert fmas(avx2, "ymm") in (8, 16), k
    # The rows past the last block of 4 (all of them below 4): on AVX2 one
    # padded block of 4 in vectors, where one-row panels ran as scalar
    # fused multiply-adds (`[1, 784] @ [784, 256]` 3.3x MKL's time); on
    # AVX-512 a row of 64 columns is vectors on its own.
    # (A row's `b` vectors may be operands of its fused multiply-adds.)
    def packed(asm, reg):
        lines = [line for line in asm.splitlines() if "vfmadd" in line]
        assert lines and all("vfmadd231ps\t" in line and f"%{reg}" in line for line in lines), lines
        return len(lines)

    for m in (1, 2, 3, 10):
        src = f"def f(a: f32[{m}, 64], b: f32[64, 256]):\n    return a @ b\n"
        intel = kiln.aot(src, target="x86_64", cpu="emeraldrapids", emit="asm")
        assert packed(intel, "zmm") >= 4, m
        avx2 = kiln.aot(src, target="x86_64", cpu="x86-64-v3", emit="asm")
        assert packed(avx2, "ymm") >= 8, m
    # A convolution of 128 input channels folds its 1,152 steps in blocks,
    # each block's sums starting from the identity or from what the block
    # before stored: in vectors, where LLVM had unrolled that choice of 16
    # columns into 64 scalar stores behind 64 branches a block.
    src = (
        'graph "conv"\nv0: f32[2, 128, 8, 8] = input "x"\n'
        'v1: f32[64, 128, 3, 3] = input "w"\n'
        "v2: f32[2, 64, 8, 8] = conv2d v0, v1 stride [1, 1] pad [1, 1, 1, 1] "
        "dilation [1, 1] groups 1\noutput \"y\" = v2\n"
    )
    avx2 = kiln.aot(src, target="x86_64", cpu="x86-64-v3", emit="asm", format="kiln")
    assert fmas(avx2, "ymm") >= 8
    assert "vmovss" not in avx2


def test_a_batch_1_linear_transposes_its_weight_in_registers():
    """`x @ w.T` of one row (a batch-1 `Linear`, torch's `[out, in]`
    weight): the pack of `w.T` loads 8 rows of `w` a tile and transposes
    them with 24 shuffles (unpacks of pairs of lanes, of pairs of pairs,
    then of 128-bit halves: `vunpcklps`, `vunpcklpd`, `vperm2f128` and
    their kin, in the integer domain on Emerald Rapids), where LLVM's loop
    vectorizer had gathered each column of 8 with 7 `vinsertps`; then
    packed fused multiply-adds. On AVX-512 as on AVX2."""
    src = "def f(x: f32[1, 768], w: f32[256, 768]):\n    return x @ w.T\n"
    kinds = ("vunpck", "vpunpck", "vshufps", "vperm2f128", "vinsertf128")
    for cpu, reg in (("x86-64-v3", "ymm"), ("emeraldrapids", "zmm")):
        asm = kiln.aot(src, target="x86_64", cpu=cpu, emit="asm")
        assert "vinsertps" not in asm, cpu
        shuffles = [line for line in asm.splitlines() if line.lstrip().startswith(kinds)]
        assert len(shuffles) >= 24, (cpu, shuffles)
        fmas = [line for line in asm.splitlines() if "vfmadd" in line]
        assert fmas and all("vfmadd231ps" in line and f"%{reg}" in line for line in fmas), cpu
