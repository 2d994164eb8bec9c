"""The ``auto`` tier from Python: the switch to LLVM between calls (from
several threads, with the interpreter's bits before and after), the
persistent code cache across processes (two filling it at once, a third
starting on LLVM), and process exit and ``fork()`` while a background
compile runs."""

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import kiln

SRC = "def f(x: f64[n], y: f64[n]):\n    z = sin(x) * 3.0 + exp(y * 0.25) - sqrt(abs(x * y))\n    return z, sum(z * x)\n"


def big_source(terms: int) -> str:
    """A graph whose LLVM compile takes a while: many math terms."""
    body = " + ".join(f"sin(x * {k + 1}.5) * cos(y - {k}.25)" for k in range(terms))
    return f"def f(x: f64[n], y: f64[n]):\n    return {body}\n"


def run_script(code: str, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KILN_CACHE", raising=False)
    return tmp_path / "cache"


def test_auto_is_the_default_and_switches_between_calls(cache_dir, monkeypatch):
    monkeypatch.setenv("KILN_TIER_UP_AFTER", "0")
    f = kiln.compile(SRC)
    oracle = kiln.compile(SRC, tier="interp")
    assert f.tier == "cranelift" and f.stats["state"] == "counting"
    rng = np.random.default_rng(1)
    x, y = rng.uniform(-4, 4, 5000), rng.uniform(-4, 4, 5000)
    before = f(x, y)
    assert f.wait_for_tier_up(120)
    stats = f.stats
    assert (f.tier, stats["first_tier"], stats["state"]) == ("llvm", "cranelift", "done")
    assert stats["calls"] >= 1 and stats["llvm_compile_seconds"] > 0
    after = f(x, y)
    want = oracle(x, y)
    for a, b, c in zip(before, after, want):
        np.testing.assert_array_equal(np.asarray(a).view(np.uint64), np.asarray(c).view(np.uint64))
        np.testing.assert_array_equal(np.asarray(b).view(np.uint64), np.asarray(c).view(np.uint64))
    # The object is in the cache now: the next compile starts on LLVM.
    g = kiln.compile(SRC)
    assert (g.tier, g.stats["cache_hit"], g.stats["state"]) == ("llvm", True, "settled")
    # Scalars take the direct path on either tier.
    h = kiln.compile("x * 2.0 + 1.0")
    assert h(20.0) == 41.0
    assert "on cranelift" in repr(h) or "on llvm" in repr(h)


def test_calls_from_threads_during_the_switch(cache_dir, monkeypatch):
    monkeypatch.setenv("KILN_TIER_UP_AFTER", "0")
    f = kiln.compile(big_source(40))
    oracle = kiln.compile(big_source(40), tier="interp")
    rng = np.random.default_rng(2)
    x, y = rng.uniform(-3, 3, 2000), rng.uniform(-3, 3, 2000)
    want = oracle(x, y).view(np.uint64)
    seen, errors = [], []

    def worker():
        tiers, on_llvm = [], 0
        try:
            while on_llvm < 20:
                tier = f.tier
                np.testing.assert_array_equal(f(x, y).view(np.uint64), want)
                if not tiers or tiers[-1] != tier:
                    tiers.append(tier)
                on_llvm += tier == "llvm"
        except Exception as e:  # reported below, with the thread's tiers
            errors.append(e)
        seen.append(tiers)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    # Each thread ran Cranelift's code, then LLVM's, never back.
    assert all(s in (["cranelift", "llvm"], ["llvm"]) for s in seen), seen
    assert ["cranelift", "llvm"] in seen


def test_two_processes_fill_the_cache_at_once_and_a_third_starts_on_llvm(cache_dir):
    fill = f"""
        import kiln, numpy as np
        x = np.linspace(-2, 2, 301)
        for k in range(8):
            src = "def f(x: f64[n]):\\n    return sin(x) * " + str(k) + ".5 + exp(x * 0.5)\\n"
            f = kiln.compile(src, tier="llvm")
            want = kiln.compile(src, tier="interp")(x)
            assert np.array_equal(f(x).view(np.uint64), want.view(np.uint64)), k
        print("filled")
    """
    env = {"KILN_CACHE_DIR": str(cache_dir)}
    procs = [
        subprocess.Popen([sys.executable, "-c", textwrap.dedent(fill)], env={**os.environ, **env},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and "filled" in out, err
    entries = list((cache_dir / "llvm").iterdir())
    assert len([e for e in entries if e.suffix == ".kobj"]) == 8
    assert not [e for e in entries if e.name.endswith(".tmp")]
    third = run_script(
        """
        import kiln, numpy as np
        x = np.linspace(-2, 2, 301)
        for k in range(8):
            src = "def f(x: f64[n]):\\n    return sin(x) * " + str(k) + ".5 + exp(x * 0.5)\\n"
            f = kiln.compile(src)
            assert (f.tier, f.stats["cache_hit"]) == ("llvm", True), f.stats
            want = kiln.compile(src, tier="interp")(x)
            assert np.array_equal(f(x).view(np.uint64), want.view(np.uint64)), k
        print("hits")
        """,
        env,
    )
    assert third.returncode == 0 and "hits" in third.stdout, third.stderr


def test_exit_while_a_background_compile_runs(cache_dir):
    # The process asks for a long LLVM compile and exits while it runs: the
    # exit waits for it (LLVM's globals outlive it), then the process ends
    # well.
    done = run_script(
        f"""
        import kiln, numpy as np, sys, time
        f = kiln.compile({big_source(120)!r})
        x = np.linspace(-1, 1, 100)
        f(x, x)
        # Inside LLVM's guard (a queued compile is dropped at exit instead).
        while f.stats["state"] != "compiling":
            time.sleep(0.001)
        print("exiting")
        sys.exit(0)
        """,
        {"KILN_CACHE_DIR": str(cache_dir), "KILN_TIER_UP_AFTER": "0"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "exiting"
    # What it compiled was whole when it was stored: the next process links it.
    again = run_script(
        f"""
        import kiln
        f = kiln.compile({big_source(120)!r})
        print(f.tier, f.stats["cache_hit"])
        """,
        {"KILN_CACHE_DIR": str(cache_dir)},
    )
    assert again.returncode == 0 and again.stdout.split() == ["llvm", "True"], again.stderr


def test_fork_while_a_background_compile_runs(cache_dir):
    # The parent forks while LLVM compiles on the background thread. The
    # child keeps calling its functions on Cranelift, refuses LLVM work with
    # a typed error (LLVM's locks are the parent's), warns once when its own
    # tier-up fails, and exits well; the parent's compile finishes.
    result = run_script(
        f"""
        import os, sys, time, warnings
        import numpy as np
        import kiln
        f = kiln.compile({big_source(120)!r})
        x = np.linspace(-1, 1, 100)
        want = kiln.compile({big_source(120)!r}, tier="interp")(x, x)
        f(x, x)
        while f.stats["state"] != "compiling":
            time.sleep(0.001)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                for _ in range(3):
                    assert np.array_equal(f(x, x), want)
                assert f.tier == "cranelift", f.tier
                try:
                    kiln.compile("x + 1.0", tier="llvm")
                    raise AssertionError("LLVM compiled in a child forked mid-compile")
                except kiln.CompileError as e:
                    assert "forked" in str(e), e
                g = kiln.compile("def g(x: f64[n]):\\n    return x * 2.0\\n")
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    g(x)
                    g.wait_for_tier_up(60)
                    for _ in range(3):
                        assert np.array_equal(g(x), x * 2.0)
                assert g.stats["state"] == "failed" and g.tier == "cranelift", g.stats
                assert len([w for w in caught if issubclass(w.category, RuntimeWarning)]) == 1, caught
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        assert f.wait_for_tier_up(300) and f.tier == "llvm", f.stats
        assert np.array_equal(f(x, x), want)
        print("ok")
        """,
        {"KILN_CACHE_DIR": str(cache_dir), "KILN_TIER_UP_AFTER": "0"},
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_tier_names_and_bad_options():
    with pytest.raises(ValueError, match="auto"):
        kiln.compile("x + 1.0", tier="fast")
    f = kiln.compile("x + 1.0", tier="cranelift")
    stats = f.stats
    assert stats.keys() == {"tier", "state", "compile_seconds"}
    assert (stats["tier"], stats["state"]) == ("cranelift", "settled")
    assert 0 < stats["compile_seconds"] < 60
    assert f.wait_for_tier_up(0)
    with pytest.raises(ValueError):
        kiln.compile("def f(x: f64[n]):\n    return x\n").wait_for_tier_up(-1)
