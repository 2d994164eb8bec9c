"""Kernels on several threads: kiln.set_num_threads/get_num_threads, the
same bits at every count, concurrent callers (a ThreadPoolExecutor), the
count changed while others call, work below the grain, a pool used before
fork() (multiprocessing's fork start method), and the torch.compile
backend following torch.get_num_threads()."""

import multiprocessing
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import kiln

SRC = "def f(x: f64[n], y: f64[n]): return sin(x) * y + 1.5"


def bits(a):
    return np.ascontiguousarray(a).tobytes()


@pytest.fixture
def restore_threads():
    before = kiln.get_num_threads()
    yield
    kiln.set_num_threads(before)


def columns(n):
    rng = np.random.default_rng(7)
    return rng.standard_normal(n) * 100.0, rng.standard_normal(n)


def test_the_count_is_set_and_read_and_checked(restore_threads):
    kiln.set_num_threads(3)
    assert kiln.get_num_threads() == 3
    for bad in (0, -1):
        with pytest.raises(ValueError, match="positive integer"):
            kiln.set_num_threads(bad)
    with pytest.raises(TypeError):
        kiln.set_num_threads("two")
    assert kiln.get_num_threads() == 3


def test_the_same_bits_at_every_count(tier, restore_threads):
    f = kiln.compile(SRC, tier=tier)
    x, y = columns(1_000_003)
    kiln.set_num_threads(1)
    want = bits(f(x, y))
    if tier == "interp":
        return
    for n in (2, 3, 7):
        kiln.set_num_threads(n)
        assert bits(f(x, y)) == want, n
    # Small calls (below the grain) and a filter keep their bits too.
    kiln.set_num_threads(1)
    small = bits(f(x[:1000], y[:1000]))
    kiln.set_num_threads(2)
    assert bits(f(x[:1000], y[:1000])) == small
    g = kiln.compile("def g(x: f64[n]): return filter(x > 50.0)", tier=tier)
    np.testing.assert_array_equal(g(x), np.flatnonzero(x > 50.0))


def test_concurrent_callers_while_the_count_changes(restore_threads):
    f = kiln.compile(SRC, tier="cranelift")
    x, y = columns(400_000)
    kiln.set_num_threads(1)
    want = bits(f(x, y))
    stop = threading.Event()

    def churn():
        n = 1
        while not stop.is_set():
            kiln.set_num_threads(n % 5 + 1)
            n += 1

    changer = threading.Thread(target=churn)
    changer.start()
    try:
        with ThreadPoolExecutor(max_workers=6) as pool:
            results = list(pool.map(lambda _: bits(f(x, y)), range(48)))
    finally:
        stop.set()
        changer.join()
    assert all(r == want for r in results)


def _child(queue):
    f = kiln.compile(SRC, tier="cranelift")
    x, y = columns(400_000)
    queue.put(bits(f(x, y)))


def test_a_pool_used_before_fork_works_in_the_child(restore_threads):
    kiln.set_num_threads(2)
    f = kiln.compile(SRC, tier="cranelift")
    x, y = columns(400_000)
    want = bits(f(x, y))  # the pool's threads exist now
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child, args=(queue,))
    child.start()
    got = queue.get(timeout=120)
    child.join(timeout=120)
    assert child.exitcode == 0
    assert got == want


def test_torch_compile_follows_torch_threads(restore_threads):
    import torch

    import kiln.torch  # noqa: F401

    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 3, padding=1)
    ).eval()
    x = torch.randn(1, 3, 64, 64)
    compiled = torch.compile(model, backend="kiln")
    before = torch.get_num_threads()
    try:
        outs = []
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            with torch.no_grad():
                outs.append(compiled(x).numpy().tobytes())
    finally:
        torch.set_num_threads(before)
    assert outs[0] == outs[1] == outs[2]
    # The override is the call's: the process's count is untouched.
    kiln.set_num_threads(5)
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            compiled(x)
    finally:
        torch.set_num_threads(before)
    assert kiln.get_num_threads() == 5


_SHARED_TEAM_CHILD = """
import torch, kiln, kiln.torch
from kiln import _kiln

torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 3, padding=1)
).eval()
x = torch.randn(1, 3, 64, 64)
compiled = torch.compile(model, backend="kiln")
outs = []
for n in (1, 3):
    torch.set_num_threads(n)
    with torch.no_grad():
        outs.append(compiled(x).numpy().tobytes())
chunked, pool = _kiln._thread_counts()
print(chunked, outs[0] == outs[1], pool)
"""


def test_torch_compile_runs_kernels_on_torchs_openmp_threads():
    # A fresh process: kiln's stages ran in chunks at 3 threads, with the
    # bits of 1 thread, and kiln made no pool of its own: the chunks ran on
    # torch's OpenMP threads.
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _SHARED_TEAM_CHILD], capture_output=True,
                          text=True, timeout=600, check=True)
    chunked, same, pool = done.stdout.split()
    assert int(chunked) > 0
    assert same == "True"
    assert pool == "0"


def test_sharing_an_openmp_runtime_checks_the_library():
    import kiln.torch

    with pytest.raises(ValueError, match="not loaded in this process"):
        kiln._kiln._share_openmp("/nonexistent/libgomp.so.1")
    with pytest.raises(ValueError, match="no GOMP_parallel"):
        kiln._kiln._share_openmp(kiln._kiln.__file__)
    # The one torch runs on is found and shared.
    path = kiln.torch._torch_openmp()
    assert path is not None and "omp" in path
    kiln._kiln._share_openmp(path)
