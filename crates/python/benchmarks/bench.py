"""kiln from Python, measured as ../shared/peers measures its peers (run
`../shared/peers/run.sh w2 w4` in the same session: only ratios from one run
mean anything on a noisy machine).

  .venv/bin/python crates/python/benchmarks/bench.py [scalar] [population] [fit] [grad] [query] [torch] [linear]

- scalar: `f(1.0)` for f(x) = x + 2.0, 1M calls from a Python loop (W4's
  method: median of 7 interleaved repeats), with the empty loop and a Python
  function as baselines, and numba's `@njit` dispatcher interleaved with them
  when numba is installed.
- population: kiln.Population over ../shared/fixtures/gp (1000 expressions ×
  10,000 rows) in float64 and float32 (dtype=), 1 and 2 threads, the median of 3 by
  compile + evaluate (every value, as W2's peers and Operon compute them),
  after a warm-up on 20 expressions (as W2 warms Operon up), with the MSE
  against x0 timed apart.
- fit: constant fitting (issue 38): the 1,000 expressions of
  ../shared/fixtures/gp over its 10,000 rows, target x0, 10
  Levenberg-Marquardt steps, one thread: kiln.Population.fit_constants
  (default tier, the VM; compile included) against
  scipy.optimize.least_squares(method="lm") with NumPy residuals and its
  default finite-difference Jacobian, given the same 10 steps (max_nfev
  11: scipy's "lm" counts the first evaluation and each step's, not the
  Jacobian's finite differences); over the expressions with constants that
  scipy can start from, the share where kiln's final MSE is at most
  scipy's (within 1e-9, 1e-6 and 1e-2 relative), and how many end lower
  by more than 1e-6 on each side.
- grad: the gradient of one GP expression, `x1 * cos(x2 - c)` over 100
  rows (DynamicExpressions.jl's published example, 2.3 µs on its
  machine): with respect to the constant `c` (`grad=`, summed over the
  rows), its Jacobian column (`jacobian=`, per row) and with respect to
  `x1` and `x2`, on auto (the default) and each tier, as a Python call; against torch.autograd
  and, where installed, jax.grad under jax.jit, in the same process (best
  of 5 runs of 20,000 calls).
- query: the seed query `(x > 2.0) & (x < 6.0)` over 10M rows of a
  DataFrame: df.kiln.query (the default tier, auto; and cranelift, llvm)
  against df.query (numexpr engine) and a NumPy boolean mask (median of 7
  interleaved repeats).
- torch: the batch-64 784→256→10 MLP (Linear, ReLU, Linear) under
  torch.no_grad: eager, torch.compile's default backend (inductor) and
  torch.compile(backend="kiln") on both JIT tiers, with torch on 1 and 2
  threads; median of 7 interleaved repeats of 1000 calls, after warm-up.
- linear: a `Linear` (768→3072, 3072→768, 784→256) on a batch of 1, 2, 4
  and 8 rows under torch.no_grad, one thread: eager against
  torch.compile(backend="kiln") with its default options (auto) and on
  LLVM, with static shapes, and on LLVM with dynamic=True; median of 7
  interleaved repeats of 30 calls, after warm-up and kiln's tier-up. Then
  Hugging Face's GPT-2 `Conv1D` (`x @ w`, w `[in, out]`: 768→3072,
  3072→768, 768→2304) on 1 and 4 rows, the same way.
- train: one SGD step (forward, cross-entropy, backward, update) of a
  batch-4 8→8→4 MLP (kernels of next to nothing: the cost around them),
  of the batch-64 784→256→10 MLP and of torchvision's ResNet-18 (10 classes,
  4×3×64×64 images: convolutions', batch norms' and the max pool's backward
  on kiln) and of Hugging Face's GPT-2 language model (4 layers of width
  256, vocabulary 50,257) and BERT classifier (4 layers of width 256), on
  2×128 tokens, the loss inside the model, their default dropout (0.1;
  kiln's masks are eager's draws): eager, inductor and
  torch.compile(backend="kiln") (the backward graph on kiln too) on both
  JIT tiers and auto (the tiny MLP, the ResNet and the transformers on
  LLVM only), and for the MLPs backend="aot_eager" (eager's kernels in
  torch.compile's wrappers: the floor of any backend's step) and
  backend="eager" (Dynamo alone around eager's kernels and autograd), torch
  on 1 and 2 threads; median of 7 interleaved repeats of 200 steps (the
  tiny MLP's: 2,000; the ResNet's and BERT's: 5; GPT-2's: 3) after 3
  warm-up steps, kiln's tier-up finished (`kiln.wait_for_tier_up`) and
  one more step.
- resnet: ResNet-18 (the standard 64-128-256-512 layout,
  crates/python/tests/models.py, random weights, eval mode) on one
  1x3x224x224 image under torch.no_grad: eager on 1 and 2 threads against
  torch.compile(backend="kiln") on both JIT tiers and kiln.compile of its
  fx text (print(gm) and the state_dict; batch norms folded into the
  weights) on the VM and both JIT tiers (kiln runs a kernel on one thread);
  the first call's time (Dynamo, aot_autograd, kiln's compile) and the peak
  RSS after it, the fx text's compile time and scratch bytes, then the
  median of 5 interleaved repeats.
- resnet-layers: ResNet-18's kinds of layer one at a time (the first 7x7
  stride-2 convolution, a 3x3 convolution of each stage, a strided 3x3,
  batch norm + ReLU, the max pool), each through
  torch.compile(backend="kiln") on both JIT tiers against eager on one
  thread; medians of 5.

- models: the real models of issue 37 (crates/python/tests/models.py ZOO:
  torchvision ResNet-18/50, MobileNet-V2, EfficientNet-B0, ConvNeXt-tiny,
  ViT-B/16 on one 1x3x224x224 image; Hugging Face BERT and GPT-2, hidden
  256, 4 layers, on 128 tokens; random weights, eval mode, no_grad): eager,
  torch.compile's default backend (inductor) and
  torch.compile(backend="kiln") on both JIT tiers, torch on 1 then 2
  threads (everything compiled again for each), the first call's time,
  then the median of 7 interleaved calls. `models NAME...` picks models.

- scaling: threads, eager against kiln's LLVM tier, no inductor (its
  compile takes minutes on a big machine's budget): 512³ f32 matmul and
  `x @ w.T` of `Linear(768, 3072)` on 128 rows (GFLOP/s, kiln.compile
  against torch's matmul), then each model of the zoo through
  torch.compile(backend="kiln", tier llvm), compiled once, its median of 7
  (1 thread) or 11 calls at each thread count against eager's.
  `KILN_BENCH_THREADS=1,4,16` (default `1,2`) sets the thread counts,
  `scaling NAME...` picks models (default ResNet-50, ViT-B/16, BERT).

- tiers: the Cranelift tier against the LLVM tier, one thread: 512³ f32
  matmul (GFLOP/s, torch's beside them), then each model of the zoo
  through torch.compile(backend="kiln") on both tiers against eager,
  median of 5 interleaved calls; no inductor. `tiers NAME...` picks
  models.

- transformer-ops: a transformer's parts one at a time through
  torch.compile(backend="kiln") on both JIT tiers against eager, one thread
  (softmax of [1, 12, 197, 197], LayerNorm(768) of [1, 197, 768], GELU of
  [1, 197, 3072], scaled dot-product attention of three [1, 12, 197, 64],
  Linear(768, 3072) + GELU); medians of 21.

- tierup: the auto tier (issue 36). The compile-time ratio its rule uses
  (LLVM's background compile over the Cranelift compile, each program's
  own, code cache off) over GP expressions, row-wise kernels of 2 to 120
  math terms and torchvision ResNet-18 and MobileNet-V2 through
  torch.compile; then, for those two models at one thread, each step in a
  fresh process (after Dynamo's start-up, and with the first call of
  backend="aot_eager", Dynamo's and aot_autograd's own cost, as the floor):
  cranelift's first call (the default before auto); with an empty code
  cache, auto's first call, the calls until the switch, and auto's median
  call after it against the cranelift and llvm tiers'; then, with that
  cache, auto's first call against its median call.

- compile-times: kiln's own compile time (`Function.stats["compile_seconds"]`,
  what Dynamo and aot_autograd cost is not in it) of torchvision ResNet-18/50,
  MobileNet-V2, EfficientNet-B0, ConvNeXt-tiny, DenseNet-121 and ViT-B/16
  through torch.compile(backend="kiln") on each JIT tier, code cache off, one
  thread, each in a fresh process; with the first call and the first call of
  backend="aot_eager" (the floor). `compile-times NAME...` picks models.

Build the release wheel first (docs/performance.md has the commands).
"""

import json
import pathlib
import statistics
import sys
import time

import numpy as np

import kiln

CALLS = 1_000_000
ROOT = pathlib.Path(__file__).resolve().parents[3]
GP = ROOT.parent / "shared" / "fixtures" / "gp"


def emit(**row):
    print(json.dumps(row), flush=True)


def interleaved(loops, repeats=7):
    times = [[] for _ in loops]
    for _ in range(repeats):
        for i, loop in enumerate(loops):
            t0 = time.perf_counter()
            loop()
            times[i].append(time.perf_counter() - t0)
    return times


def scalar():
    def call_loop(f):
        def run():
            for _ in range(CALLS):
                f(1.0)
        return run

    def empty():
        for _ in range(CALLS):
            pass

    peers = [("baseline-empty-python-loop", None), ("baseline-python-function", lambda x: x + 2.0)]
    try:
        # Not a test dependency: `pip install numba==0.68.1` (the peers'
        # version) to time its dispatcher interleaved with kiln's calls.
        import numba
    except ImportError:
        numba = None
    if numba is not None:
        t0 = time.perf_counter()
        g = numba.njit(lambda x: x + 2.0)
        assert g(1.0) == 3.0
        peers.append(("numba-njit-dispatcher", g, (time.perf_counter() - t0) * 1e3))
    for tier in ("auto", "cranelift", "llvm"):
        t0 = time.perf_counter()
        f = kiln.compile("x + 2.0", tier=tier)
        compile_ms = (time.perf_counter() - t0) * 1e3
        assert f(1.0) == 3.0
        peers.append((f"kiln-{tier}", f, compile_ms))
    loops = [empty if p[1] is None else call_loop(p[1]) for p in peers]
    for peer, ts in zip(peers, interleaved(loops)):
        emit(workload="scalar-call", peer=peer[0], ns_per_call=statistics.median(ts) / CALLS * 1e9,
             min_ns_per_call=min(ts) / CALLS * 1e9,
             **({"compile_ms": peer[2]} if len(peer) > 2 else {}))


def population():
    exprs = (GP / "gp_population.txt").read_text().splitlines()
    data = np.loadtxt(GP / "gp_data.csv", delimiter=",", skiprows=1)
    X = {f"x{j}": np.ascontiguousarray(data[:, j]) for j in range(data.shape[1])}
    y = X["x0"]
    for dtype in (np.float64, np.float32):
        # The columns in the population's dtype, as a float32 user holds them
        # (Operon's W2 figure converts its float64 data once, outside its timing).
        Xd = {k: v.astype(dtype) for k, v in X.items()}
        for threads in (1, 2):
            # A warm-up on the first 20 expressions, as W2 warms Operon up.
            kiln.Population(exprs[:20], variables=list(X), threads=threads, dtype=dtype).evaluate(Xd)
            # The run of median total among three, as W2 reports its peers.
            runs = []
            for _ in range(3):
                t0 = time.perf_counter()
                pop = kiln.Population(exprs, variables=list(X), threads=threads, dtype=dtype)
                pop.errors  # compiles (a population compiles on first use)
                t1 = time.perf_counter()
                values = pop.evaluate(Xd)
                t2 = time.perf_counter()
                mse = pop.mse(Xd, y)
                t3 = time.perf_counter()
                runs.append((t2 - t0, t1 - t0, t2 - t1, t3 - t2))
                del pop, values
            best = sorted(runs)[len(runs) // 2]
            emit(workload="gp-population", peer=f"kiln-python-vm-{np.dtype(dtype).name}",
                 threads=threads, total_s=best[0], compile_s=best[1],
                 compile_us_per_expr=best[1] / len(exprs) * 1e6, eval_s=best[2], mse_s=best[3],
                 finite_mse=int(np.isfinite(mse).sum()))
            # A GP loop that keeps one values array across generations
            # (`out=`), allocated and written before the timing, as Operon's
            # W2 caller keeps its buffer.
            # (np.full, not np.zeros: zeros come from calloc, pages untouched.)
            buf = np.full((len(exprs), len(y)), np.nan, dtype=dtype)
            runs = []
            for _ in range(3):
                t0 = time.perf_counter()
                pop = kiln.Population(exprs, variables=list(X), threads=threads, dtype=dtype)
                pop.errors
                t1 = time.perf_counter()
                pop.evaluate(Xd, out=buf)
                t2 = time.perf_counter()
                runs.append((t2 - t0, t1 - t0, t2 - t1))
                del pop
            best = sorted(runs)[len(runs) // 2]
            emit(workload="gp-population", peer=f"kiln-python-vm-{np.dtype(dtype).name}-out",
                 threads=threads, total_s=best[0], compile_s=best[1], eval_s=best[2])


def fit(max_iter=10):
    import re
    import warnings

    from scipy.optimize import least_squares

    exprs = (GP / "gp_population.txt").read_text().splitlines()
    data = np.loadtxt(GP / "gp_data.csv", delimiter=",", skiprows=1)
    X = {f"x{j}": np.ascontiguousarray(data[:, j]) for j in range(data.shape[1])}
    y = X["x0"]
    # kiln's first call in the process (compile included), then its best of
    # three more: a GP loop fits every generation's population.
    times = []
    for _ in range(4):
        t0 = time.perf_counter()
        pop = kiln.Population(exprs, variables=list(X), threads=1)
        result = pop.fit_constants(X, y, max_iter=max_iter)
        times.append(time.perf_counter() - t0)
    kiln_s, kiln_warm_s = times[0], min(times[1:])
    # scipy: each literal a parameter p[k] of a NumPy function.
    literal = re.compile(r"(?<![\w.])\d+\.\d*(?:[eE][-+]?\d+)?")
    names = {"sin": np.sin, "cos": np.cos, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
             "abs": np.abs, **X}
    scipy_mse = []
    t0 = time.perf_counter()
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for e in exprs:
            consts = [float(m.group()) for m in literal.finditer(e)]
            k = iter(range(len(consts)))
            body = literal.sub(lambda m: f"p[{next(k)}]", e)
            f = eval(f"lambda p: {body}", names)  # noqa: S307 - the fixture's expressions
            if not consts:
                scipy_mse.append(float(np.mean((f([]) - y) ** 2)))
                continue
            r = lambda p, f=f: np.broadcast_to(f(p) - y, y.shape)  # noqa: E731
            try:
                fit_ = least_squares(r, consts, method="lm", max_nfev=max_iter + 1)
                scipy_mse.append(float(np.mean(fit_.fun ** 2)))
            except ValueError:  # residuals not finite at the start
                scipy_mse.append(float("nan"))
    scipy_s = time.perf_counter() - t0
    kiln_mse = np.asarray(result.mse)
    scipy_mse = np.asarray(scipy_mse)
    fitted = np.array([len(c) > 0 for c in result.constants]) & np.isfinite(scipy_mse)
    k, s_ = kiln_mse[fitted], scipy_mse[fitted]
    # "The same or lower": at most scipy's MSE, relative tolerances from
    # exact (1e-9) to 1 %; and how many each run ends lower by more than 1e-6.
    as_good = {f"as_good_{t:g}_pct": 100 * float(np.mean(k <= s_ * (1 + t))) for t in (1e-9, 1e-6, 1e-2)}
    emit(workload="gp-fit", exprs=len(exprs), rows=len(y), fitted=int(fitted.sum()),
         max_iter=max_iter, kiln_s=kiln_s, kiln_warm_s=kiln_warm_s, scipy_s=scipy_s,
         speedup=scipy_s / kiln_s, speedup_warm=scipy_s / kiln_warm_s, **as_good,
         kiln_lower=int(np.sum(k < s_ * (1 - 1e-6))), scipy_lower=int(np.sum(s_ < k * (1 - 1e-6))),
         kiln_errors=len(result.errors))


def grad():
    rng = np.random.default_rng(0)
    x1, x2 = rng.normal(size=100), rng.normal(size=100)

    def best(f, n=20000):
        f()
        runs = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            runs.append((time.perf_counter() - t0) / n)
        return min(runs) * 1e6

    src, cols = "x1 * cos(x2 - c)", {"x1": "f64[n]", "x2": "f64[n]"}
    # auto (the default) first, before the llvm row fills the code cache: it
    # starts on Cranelift and moves to LLVM in the background once the calls
    # have paid for it, within the warm-up and the first runs; the best run
    # is the tier it settles on, with its dispatch.
    for tier in ("auto", "vm", "cranelift", "llvm"):
        fs = {
            "values": kiln.compile(src, inputs=cols, tier=tier),
            "grad_c": kiln.compile(src, inputs=cols, tier=tier, grad="c"),
            "jacobian_c": kiln.compile(src, inputs=cols, tier=tier, jacobian="c"),
            "grad_x1_x2": kiln.compile(src, inputs=cols, tier=tier, grad=("x1", "x2")),
        }
        emit(workload="grad", peer=f"kiln-{tier}", rows=100,
             **{f"{k}_us": best(lambda f=f: f(x1, x2, 3.2)) for k, f in fs.items()})
    import torch

    torch.set_num_threads(1)
    t1, t2 = torch.tensor(x1), torch.tensor(x2)
    c = torch.tensor(3.2, dtype=torch.float64, requires_grad=True)
    emit(workload="grad", peer="torch.autograd", rows=100,
         grad_c_us=best(lambda: torch.autograd.grad((t1 * torch.cos(t2 - c)).sum(), c), 5000))
    try:
        import jax
    except ImportError:
        return
    jax.config.update("jax_enable_x64", True)
    g = jax.jit(jax.grad(lambda c, a, b: (a * jax.numpy.cos(b - c)).sum()))
    ja, jb = jax.numpy.asarray(x1), jax.numpy.asarray(x2)
    emit(workload="grad", peer="jax.jit(jax.grad)", rows=100,
         grad_c_us=best(lambda: g(3.2, ja, jb).block_until_ready(), 5000))


def query():
    import pandas as pd

    n = 10_000_000
    rng = np.random.default_rng(42)
    df = pd.DataFrame({"x": rng.uniform(0.0, 10.0, n)})
    q = "(x > 2.0) & (x < 6.0)"
    x = df["x"].to_numpy()
    runs = [
        ("pandas-query-numexpr", lambda: df.query(q, engine="numexpr")),
        ("numpy-bool-mask", lambda: df[(x > 2.0) & (x < 6.0)]),
        ("kiln-df.kiln.query", lambda: df.kiln.query(q)),
        ("kiln-df.kiln.query-cranelift", lambda: df.kiln.query(q, tier="cranelift")),
        ("kiln-df.kiln.query-llvm", lambda: df.kiln.query(q, tier="llvm")),
        ("kiln-df.kiln.indices", lambda: df.kiln.indices(q)),
    ]
    assert df.kiln.query(q).equals(df.query(q))
    # The default tier (auto) starts on Cranelift; its figure below includes
    # the calls before the switch. After the switch:
    for _ in range(20):
        df.kiln.query(q)
    kiln.wait_for_tier_up()
    runs.append(("kiln-df.kiln.query-auto-switched", lambda: df.kiln.query(q)))
    times = interleaved([f for _, f in runs], repeats=7)
    for (peer, _), ts in zip(runs, times):
        emit(workload="df-query-10M", peer=peer, median_ms=statistics.median(ts) * 1e3,
             min_ms=min(ts) * 1e3)


def checked_no_grad(runs, x, calls, atol):
    """Each `(peer, f)` of `runs` checked against the first's `f(x)` and
    timed under torch.no_grad, after 3 more calls each and kiln's tier-up
    (`kiln.wait_for_tier_up`: the default `auto` tier's LLVM code, where
    its calls queued it): 7 interleaved repeats of `calls` calls."""
    import torch

    with torch.no_grad():
        want = runs[0][1](x)
        for _, f in runs:
            torch.testing.assert_close(f(x), want, rtol=1e-5, atol=atol)
            for _ in range(3):
                f(x)
        kiln.wait_for_tier_up()

        def loop(f):
            def run():
                for _ in range(calls):
                    f(x)
            return run

        return interleaved([loop(f) for _, f in runs], repeats=7)


def torch_mlp():
    import torch
    import torch._dynamo

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
    ).eval()
    x = torch.randn(64, 784)
    calls = 1000
    for threads in (1, 2):
        torch.set_num_threads(threads)
        torch._dynamo.reset()
        runs = [
            ("torch-eager", model),
            ("torch.compile-inductor", torch.compile(model)),
            ("kiln-cranelift", torch.compile(model, backend="kiln", options={"tier": "cranelift"})),
            ("kiln-llvm", torch.compile(model, backend="kiln", options={"tier": "llvm"})),
        ]
        times = checked_no_grad(runs, x, calls, atol=1e-6)
        for (peer, _), ts in zip(runs, times):
            emit(workload="mlp-784-256-10-batch64", peer=peer, threads=threads,
                 median_us=statistics.median(ts) / calls * 1e6, min_us=min(ts) / calls * 1e6)


def linear():
    """A `Linear` on a batch of 1 to 8 rows (a generation step, one-sample
    inference) under torch.no_grad, one thread: eager against
    torch.compile(backend="kiln") with its default options (the `auto`
    tier) and on LLVM, static shapes, and on LLVM with a dynamic batch
    (`dynamic=True`, which specializes 1); median of 7 interleaved repeats
    of 30 calls. Then GPT-2's `Conv1D` (Hugging Face's layer, `x @ w` of a
    `[in, out]` weight, `addmm`) on 1 and 4 rows, the same way."""
    import torch
    import torch._dynamo
    from transformers.pytorch_utils import Conv1D

    torch.set_num_threads(1)
    torch.manual_seed(0)
    calls = 30
    layers = [(f"linear-{i}-{o}", torch.nn.Linear(i, o), (1, 2, 4, 8), i)
              for i, o in ((768, 3072), (3072, 768), (784, 256))]
    layers += [(f"gpt2-conv1d-{i}-{o}", Conv1D(o, i), (1, 4), i)
               for i, o in ((768, 3072), (3072, 768), (768, 2304))]
    for name, layer, batches, fan_in in layers:
        for batch in batches:
            x = torch.randn(batch, fan_in)
            torch._dynamo.reset()
            runs = [
                ("torch-eager", layer),
                ("kiln-auto", torch.compile(layer, backend="kiln")),
                ("kiln-llvm", torch.compile(layer, backend="kiln", options={"tier": "llvm"})),
                ("kiln-llvm-dynamic", torch.compile(layer, backend="kiln", options={"tier": "llvm"}, dynamic=True)),
            ]
            times = checked_no_grad(runs, x, calls, atol=1e-5)
            for (peer, _), ts in zip(runs, times):
                emit(workload=f"{name}-batch{batch}", peer=peer, threads=1,
                     median_us=statistics.median(ts) / calls * 1e6, min_us=min(ts) / calls * 1e6)


def train():
    import torch
    import torchvision

    def mlp():
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
        )

    def resnet18():
        torch.manual_seed(0)
        return torchvision.models.resnet18(num_classes=10)

    gen = lambda seed: torch.Generator().manual_seed(seed)  # noqa: E731
    def tiny():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))

    # A model whose kernels take next to nothing: what a step costs around
    # them (Dynamo, aot_autograd, the backend's calls).
    train_step("mlp-train-step-8-8-4-batch4", tiny,
               torch.randn(4, 8, generator=gen(1)), torch.randint(0, 4, (4,), generator=gen(2)),
               steps=2000, tiers=("llvm",), floor=True)
    train_step("mlp-train-step-784-256-10-batch64", mlp,
               torch.randn(64, 784, generator=gen(1)), torch.randint(0, 10, (64,), generator=gen(2)),
               steps=200, tiers=("cranelift", "llvm", None), floor=True)
    # Not auto: it moves a program to LLVM once its Cranelift calls add up
    # to the LLVM compile's estimated cost, which for these training graphs
    # is tens of steps (3.4 times LLVM's time a step before).
    train_step("resnet18-train-step-4x3x64x64", resnet18,
               torch.randn(4, 3, 64, 64, generator=gen(1)), torch.randint(0, 10, (4,), generator=gen(2)),
               steps=5, tiers=("llvm",))

    def gpt2():
        # GPT-2's language model as Hugging Face builds it (vocabulary
        # 50,257, the loss inside the model, dropout 0.1), 4 layers of
        # width 256.
        from transformers import GPT2Config, GPT2LMHeadModel

        torch.manual_seed(0)
        config = GPT2Config(n_embd=256, n_layer=4, n_head=4)
        return GPT2LMHeadModel(config).train()

    ids = torch.randint(0, 50257, (2, 128), generator=gen(3))
    train_step("gpt2-lm-train-step-2x128", gpt2, ids, ids, steps=3, tiers=("llvm",),
               loss=lambda f, x, y: f(input_ids=x, labels=y).loss)

    def bert():
        # BERT's sequence classifier (3 labels), 4 layers of width 256,
        # vocabulary 30,522, dropout 0.1.
        from transformers import BertConfig, BertForSequenceClassification

        torch.manual_seed(0)
        config = BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                            intermediate_size=1024, num_labels=3)
        return BertForSequenceClassification(config).train()

    ids = torch.randint(0, 30522, (2, 128), generator=gen(4))
    train_step("bert-classifier-train-step-2x128", bert, ids, torch.tensor([0, 2]), steps=5,
               tiers=("llvm",), loss=lambda f, x, y: f(input_ids=x, labels=y).loss)


def train_step(workload, make, x, y, steps, tiers, loss=None, floor=False):
    """One SGD step of `make()`'s model on (x, y): eager, inductor and kiln
    on `tiers` (None: auto, the default), 1 and 2 threads. `loss(f, x, y)`:
    the loss of the model `f` (cross-entropy of `f(x)` by default). With
    `floor`, also `backend="aot_eager"`: Dynamo's and aot_autograd's
    wrappers around eager's own kernels, what any backend's step pays
    before its kernels, and `backend="eager"`: Dynamo's frame and guards
    alone around eager's kernels and autograd."""
    import torch
    import torch._dynamo

    for threads in (1, 2):
        torch.set_num_threads(threads)
        torch._dynamo.reset()
        peers = [("torch-eager", None), ("torch.compile-inductor", {})]
        if floor:
            peers.append(("torch.compile-eager", {"backend": "eager"}))
            peers.append(("torch.compile-aot_eager", {"backend": "aot_eager"}))
        for tier in tiers:
            options = {"backend": "kiln"}
            if tier is not None:
                options["options"] = {"tier": tier}
            peers.append((f"kiln-{tier or 'auto'}", options))
        loops = []
        for _, how in peers:
            model = make()
            f = model if how is None else torch.compile(model, **how)
            opt = torch.optim.SGD(model.parameters(), lr=0.01)

            def step(f=f, opt=opt):
                opt.zero_grad()
                if loss is None:
                    torch.nn.functional.cross_entropy(f(x), y).backward()
                else:
                    loss(f, x, y).backward()
                opt.step()

            for _ in range(3):  # compile (and tier up) before timing
                step()
            kiln.wait_for_tier_up()
            step()

            def run(step=step):
                for _ in range(steps):
                    step()

            loops.append(run)
        times = interleaved(loops, repeats=7)
        for (peer, _), ts in zip(peers, times):
            emit(workload=workload, peer=peer, threads=threads,
                 median_us=statistics.median(ts) / steps * 1e6, min_us=min(ts) / steps * 1e6)


def peak_rss_mb():
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def resnet():
    import tempfile

    import torch
    import torch._dynamo

    sys.path.insert(0, str(ROOT / "crates" / "python" / "tests"))
    from models import resnet18, write_fx

    model = resnet18()
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(x)
        runs = []
        for tier in ("cranelift", "llvm"):
            torch._dynamo.reset()
            f = torch.compile(model, backend="kiln", options={"tier": tier})
            start = time.perf_counter()
            got = f(x)
            first = time.perf_counter() - start
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())
            emit(workload="resnet18-1x3x224x224", peer=f"kiln-{tier}", first_call_s=first,
                 peak_rss_mb=peak_rss_mb())
            runs.append((f"kiln-{tier}", lambda f=f: f(x), 1))
        # From fx text (print(gm) and the state_dict): batch norms folded
        # into the convolutions' weights.
        with tempfile.TemporaryDirectory() as d:
            path = write_fx(model, d)
            for tier in ("vm", "cranelift", "llvm"):
                start = time.perf_counter()
                g = kiln.compile(path, tier=tier, inputs={"input": "f32[1, 3, 224, 224]"})
                emit(workload="resnet18-1x3x224x224", peer=f"kiln-fx-{tier}",
                     compile_s=time.perf_counter() - start, scratch_mb=g.scratch_bytes / 1e6)
                runs.append((f"kiln-fx-{tier}", lambda g=g, arr=x.numpy(): g(arr), 1))
        for threads in (1, 2):
            runs.append((f"torch-eager-{threads}t", lambda: model(x), threads))

        def loop(f, threads):
            def run():
                torch.set_num_threads(threads)
                f()
            return run

        times = interleaved([loop(f, t) for _, f, t in runs], repeats=5)
    for (peer, _, _), ts in zip(runs, times):
        emit(workload="resnet18-1x3x224x224", peer=peer, median_ms=statistics.median(ts) * 1e3,
             min_ms=min(ts) * 1e3)


def resnet_layers():
    import torch
    import torch._dynamo
    from torch import nn

    torch.set_num_threads(1)
    layers = {
        "conv1-7x7-s2-3-64-at-224": (nn.Conv2d(3, 64, 7, 2, 3, bias=False), (1, 3, 224, 224)),
        "conv-3x3-64-64-at-56": (nn.Conv2d(64, 64, 3, 1, 1, bias=False), (1, 64, 56, 56)),
        "conv-3x3-128-128-at-28": (nn.Conv2d(128, 128, 3, 1, 1, bias=False), (1, 128, 28, 28)),
        "conv-3x3-256-256-at-14": (nn.Conv2d(256, 256, 3, 1, 1, bias=False), (1, 256, 14, 14)),
        "conv-3x3-512-512-at-7": (nn.Conv2d(512, 512, 3, 1, 1, bias=False), (1, 512, 7, 7)),
        "conv-3x3-s2-64-128-at-56": (nn.Conv2d(64, 128, 3, 2, 1, bias=False), (1, 64, 56, 56)),
        "bn-relu-64-at-112": (nn.Sequential(nn.BatchNorm2d(64), nn.ReLU()), (1, 64, 112, 112)),
        "maxpool-3x3-s2-64-at-112": (nn.MaxPool2d(3, 2, 1), (1, 64, 112, 112)),
    }
    for name, (module, shape) in layers.items():
        module.eval()
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(3))
        runs = [("torch-eager-1t", module)]
        for tier in ("cranelift", "llvm"):
            torch._dynamo.reset()
            runs.append((f"kiln-{tier}", torch.compile(module, backend="kiln", options={"tier": tier})))
        with torch.no_grad():
            for _, f in runs:
                f(x)
            times = interleaved([lambda f=f: f(x) for _, f in runs], repeats=5)
        for (peer, _), ts in zip(runs, times):
            emit(workload=name, peer=peer, median_ms=statistics.median(ts) * 1e3)


def models(names=()):
    import warnings

    import torch
    import torch._dynamo

    sys.path.insert(0, str(ROOT / "crates" / "python" / "tests"))
    from models import ZOO, output_tensor

    warnings.simplefilter("ignore")
    for name in names or list(ZOO):
        build, inputs = ZOO[name]
        model, x = build(), inputs()
        with torch.no_grad():
            want = output_tensor(model(*x))
        scale = want.abs().max().item()
        for threads in (1, 2):
            torch.set_num_threads(threads)
            torch._dynamo.reset()
            runs = [
                ("torch-eager", model),
                ("torch.compile-inductor", torch.compile(model)),
                ("kiln-cranelift", torch.compile(model, backend="kiln", options={"tier": "cranelift"})),
                ("kiln-llvm", torch.compile(model, backend="kiln", options={"tier": "llvm"})),
            ]
            with torch.no_grad():
                for peer, f in runs:
                    start = time.perf_counter()
                    got = output_tensor(f(*x))
                    first = time.perf_counter() - start
                    error = (got - want).abs().max().item() / scale
                    if peer.startswith("kiln"):
                        assert error <= 1e-5, f"{name} {peer}: error {error:.2g} of the output's scale"
                    emit(workload=name, peer=peer, threads=threads, first_call_s=round(first, 3),
                         error=float(f"{error:.2g}"))
                times = interleaved([lambda f=f: f(*x) for _, f in runs], repeats=7)
            eager = statistics.median(times[0])
            for (peer, _), ts in zip(runs, times):
                emit(workload=name, peer=peer, threads=threads,
                     median_ms=round(statistics.median(ts) * 1e3, 2),
                     vs_eager=round(statistics.median(ts) / eager, 3))


def scaling(names=()):
    import os
    import warnings

    import torch
    import torch._dynamo

    sys.path.insert(0, str(ROOT / "crates" / "python" / "tests"))
    from models import ZOO, output_tensor

    warnings.simplefilter("ignore")
    counts = [int(t) for t in os.environ.get("KILN_BENCH_THREADS", "1,2").split(",")]

    def median(f, repeats):
        return statistics.median(interleaved([f], repeats)[0])

    rng = np.random.default_rng(0)
    products = {
        "matmul-512x512x512": ("def f(a: f32[512, 512], b: f32[512, 512]):\n    return a @ b\n",
                               (512, 512), (512, 512), False, 2 * 512**3),
        "linear-xwT-128x768x3072": ("def f(a: f32[128, 768], b: f32[3072, 768]):\n    return a @ b.T\n",
                                    (128, 768), (3072, 768), True, 2 * 128 * 768 * 3072),
    }
    for name, (src, sa, sb, transposed, flops) in products.items():
        f = kiln.compile(src, tier="llvm")
        a, b = rng.random(sa, dtype=np.float32), rng.random(sb, dtype=np.float32)
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        tb = tb.T if transposed else tb
        for threads in counts:
            torch.set_num_threads(threads)
            kiln.set_num_threads(threads)
            f(a=a, b=b)
            k, t = median(lambda: f(a=a, b=b), 30), median(lambda: ta @ tb, 30)
            emit(workload=name, threads=threads, kiln_llvm_gflops=round(flops / k / 1e9, 1),
                 torch_gflops=round(flops / t / 1e9, 1))
    for name in names or ["resnet50", "vit_b_16", "bert"]:
        build, inputs = ZOO[name]
        model, x = build(), inputs()
        with torch.no_grad():
            want = output_tensor(model(*x))
            torch._dynamo.reset()
            f = torch.compile(model, backend="kiln", options={"tier": "llvm"})
            start = time.perf_counter()
            got = output_tensor(f(*x))
            first = time.perf_counter() - start
            error = (got - want).abs().max().item() / want.abs().max().item()
            assert error <= 1e-5, f"{name}: error {error:.2g} of the output's scale"
            emit(workload=name, first_call_s=round(first, 2), error=float(f"{error:.2g}"))
            for threads in counts:
                torch.set_num_threads(threads)
                f(*x)
                model(*x)
                repeats = 7 if threads == 1 else 11
                times = interleaved([lambda: model(*x), lambda: f(*x)], repeats)
                eager, kiln_ms = (statistics.median(ts) * 1e3 for ts in times)
                emit(workload=name, threads=threads, eager_ms=round(eager, 2),
                     kiln_llvm_ms=round(kiln_ms, 2), vs_eager=round(kiln_ms / eager, 3))


def tiers(names=()):
    import warnings

    import torch
    import torch._dynamo

    sys.path.insert(0, str(ROOT / "crates" / "python" / "tests"))
    from models import ZOO, output_tensor

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    kiln.set_num_threads(1)
    src = "def f(a: f32[512, 512], b: f32[512, 512]):\n    return a @ b\n"
    rng = np.random.default_rng(0)
    a, b = rng.random((512, 512), dtype=np.float32), rng.random((512, 512), dtype=np.float32)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    fs = [kiln.compile(src, tier=t) for t in ("cranelift", "llvm")]
    for f in fs:
        f(a=a, b=b)
    times = interleaved([lambda f=f: f(a=a, b=b) for f in fs] + [lambda: ta @ tb], 15)
    cl, ll, tt = (2 * 512**3 / statistics.median(ts) / 1e9 for ts in times)
    emit(workload="matmul-512x512x512", cranelift_gflops=round(cl, 1), llvm_gflops=round(ll, 1),
         torch_gflops=round(tt, 1))
    for name in names or list(ZOO):
        build, inputs = ZOO[name]
        model, x = build(), inputs()
        with torch.no_grad():
            want = output_tensor(model(*x))
            runs = []
            for tier in ("cranelift", "llvm"):
                torch._dynamo.reset()
                f = torch.compile(model, backend="kiln", options={"tier": tier})
                got = output_tensor(f(*x))
                error = (got - want).abs().max().item() / want.abs().max().item()
                assert error <= 1e-5, f"{name} on {tier}: error {error:.2g} of the output's scale"
                runs.append(f)
            times = interleaved([lambda: model(*x)] + [lambda f=f: f(*x) for f in runs], 5)
            eager, cl, ll = (statistics.median(ts) * 1e3 for ts in times)
            emit(workload=name, eager_ms=round(eager, 1), cranelift_ms=round(cl, 1),
                 llvm_ms=round(ll, 1), cranelift_vs_llvm=round(cl / ll, 2),
                 llvm_vs_eager=round(ll / eager, 3))


def transformer_ops():
    import warnings

    import torch
    import torch._dynamo
    from torch import nn

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    kiln.set_num_threads(1)
    g = torch.Generator().manual_seed(5)
    parts = {
        "softmax-12x197x197": (lambda x: torch.softmax(x, -1), (torch.randn(1, 12, 197, 197, generator=g),)),
        "layernorm-197x768": (nn.LayerNorm(768).eval(), (torch.randn(1, 197, 768, generator=g),)),
        "gelu-197x3072": (nn.GELU(), (torch.randn(1, 197, 3072, generator=g),)),
        "sdpa-12x197x64": (
            lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v),
            tuple(torch.randn(1, 12, 197, 64, generator=g) for _ in range(3)),
        ),
        "linear-gelu-197x768x3072": (
            nn.Sequential(nn.Linear(768, 3072), nn.GELU()).eval(),
            (torch.randn(1, 197, 768, generator=g),),
        ),
    }
    with torch.no_grad():
        for name, (f, x) in parts.items():
            runs = [("torch-eager", f)]
            for tier in ("cranelift", "llvm"):
                torch._dynamo.reset()
                runs.append((f"kiln-{tier}", torch.compile(f, backend="kiln", options={"tier": tier})))
            for _, r in runs:
                r(*x)
            times = interleaved([lambda r=r: r(*x) for _, r in runs], repeats=21)
            for (peer, _), ts in zip(runs, times):
                emit(workload=name, peer=peer, median_us=round(statistics.median(ts) * 1e6, 1))


GP_RATIO_EXPRS = 24


def _tierup_ratio_child():
    """One process, code cache off, every program tiered up at its first
    call: each program's Cranelift compile and LLVM compile."""
    import gc
    import warnings

    rows = []

    def measure(label, f, *args):
        f(*args)
        kiln.wait_for_tier_up()
        s = f.stats
        assert s["state"] == "done", s
        rows.append((label, s))

    exprs = [line.strip() for line in (GP / "gp_population.txt").read_text().splitlines() if line.strip()]
    x = np.linspace(0.5, 2.0, 1000)
    for k, e in enumerate(exprs[:GP_RATIO_EXPRS]):
        names = sorted({f"x{i}" for i in range(10) if f"x{i}" in e})
        f = kiln.compile(e, inputs={n: "f64[n]" for n in names})
        measure(f"gp-{k}", f, *([x] * len(names)))
    for terms in (2, 8, 30, 120):
        body = " + ".join(f"sin(x * {k + 1}.5) * cos(y - {k}.25)" for k in range(terms))
        f = kiln.compile(f"def f(x: f64[n], y: f64[n]):\n    return {body}\n")
        measure(f"rowwise-{terms}-terms", f, x, x)
    import torch
    import torchvision
    from kiln.torch import _KilnGraph as KilnGraph

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    for name in ("resnet18", "mobilenet_v2"):
        model = getattr(torchvision.models, name)().eval()
        img = torch.randn(1, 3, 224, 224)
        with torch.no_grad():
            torch.compile(model, backend="kiln")(img)
            kiln.wait_for_tier_up()
        graphs = [o for o in gc.get_objects() if type(o) is KilnGraph]
        fns = [f for g in graphs for f in g.cache.values()]
        assert fns, "kiln compiled the model"
        for f in fns:
            s = f.stats
            # The model's program, not the small graphs around it.
            if s["llvm_compile_seconds"] is not None and s["kernel_statements"] > 1000:
                rows.append((f"torch-{name}", s))
        torch._dynamo.reset()
        del fns, graphs
        gc.collect()
    for label, s in rows:
        c, l = s["first_tier_compile_seconds"], s["llvm_compile_seconds"]
        emit(workload="tierup-estimate", graph=label, statements=s["kernel_statements"],
             math_calls=s["math_calls"], cranelift_s=round(c, 4), llvm_s=round(l, 4),
             estimate_s=round(s["llvm_estimate_seconds"], 4), ratio_to_cranelift=round(l / c, 1))


def _tierup_model_child(name, mode):
    import gc
    import warnings

    import torch
    import torch._dynamo
    import torchvision
    from kiln.torch import _KilnGraph as KilnGraph

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    model = getattr(torchvision.models, name)().eval()
    img = torch.randn(1, 3, 224, 224)
    warm = mode == "warm"
    process = {"cold": "first", "warm": "second", "cranelift": "cranelift-only"}[mode]

    def first_call(f):
        start = time.perf_counter()
        f(img)
        return time.perf_counter() - start

    def functions():
        graphs = [o for o in gc.get_objects() if type(o) is KilnGraph]
        return [f for g in graphs for f in g.cache.values()]

    with torch.no_grad():
        # Dynamo's one-time start-up, paid before anything is timed.
        torch.compile(torch.nn.Linear(4, 4), backend="aot_eager")(torch.randn(2, 4))
        # What Dynamo and aot_autograd cost without any compiler: the floor
        # of every backend's first call.
        floor = first_call(torch.compile(model, backend="aot_eager"))
        emit(workload=f"tierup-{name}", peer="aot_eager", process=process, first_call_s=round(floor, 3))
        torch._dynamo.reset()
        crane = torch.compile(model, backend="kiln", options={"tier": "cranelift"})
        if mode == "cranelift":
            # Today's default, alone in its process: the first call auto's
            # is held to.
            emit(workload=f"tierup-{name}", peer="kiln-cranelift", process=process,
                 first_call_s=round(first_call(crane), 3))
            return
        before = set(map(id, functions()))
        auto = torch.compile(model, backend="kiln")
        start = time.perf_counter()
        first = first_call(auto)
        mine = [f for f in functions() if id(f) not in before]
        kiln_compile = sum(f.stats["compile_seconds"] for f in mine)
        calls = 1
        while any(f.stats["state"] not in ("done", "failed", "settled") for f in mine):
            auto(img)
            calls += 1
        switched = time.perf_counter() - start
        states = sorted({(f.stats["first_tier"], f.stats["tier"], f.stats["state"]) for f in mine})
        emit(workload=f"tierup-{name}", peer="kiln-auto", process=process, first_call_s=round(first, 3),
             kiln_compile_s=round(kiln_compile, 3), calls_to_switch=calls,
             switch_s=round(switched, 2), tiers=states)
        runs = [("kiln-auto", auto)]
        if not warm:
            runs += [("kiln-cranelift", crane),
                     ("kiln-llvm", torch.compile(model, backend="kiln", options={"tier": "llvm"}))]
            for _, f in runs[1:]:
                f(img)  # compiled here, after auto's first call
        times = interleaved([lambda f=f: f(img) for _, f in runs], repeats=9)
        for (peer, _), ts in zip(runs, times):
            median = statistics.median(ts)
            row = dict(workload=f"tierup-{name}", peer=peer, process=process,
                       median_ms=round(median * 1e3, 2))
            if peer == "kiln-auto":
                row.update(first_over_median=round(first / median, 1),
                           beyond_floor_over_median=round((first - floor) / median, 1))
            emit(**row)


COMPILE_MODELS = ("resnet18", "resnet50", "mobilenet_v2", "efficientnet_b0", "convnext_tiny",
                  "densenet121", "vit_b_16")


def _compile_time_child(name, tier):
    import gc
    import warnings

    import torch
    import torch._dynamo
    import torchvision
    from kiln.torch import _KilnGraph as KilnGraph

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    model = getattr(torchvision.models, name)().eval()
    img = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        torch.compile(torch.nn.Linear(4, 4), backend="aot_eager")(torch.randn(2, 4))
        start = time.perf_counter()
        torch.compile(model, backend="aot_eager")(img)
        floor = time.perf_counter() - start
        torch._dynamo.reset()
        f = torch.compile(model, backend="kiln", options={"tier": tier})
        start = time.perf_counter()
        f(img)
        first = time.perf_counter() - start
    graphs = [o for o in gc.get_objects() if type(o) is KilnGraph]
    functions = [fn for g in graphs for fn in g.cache.values()]
    emit(workload=f"compile-{name}", peer=f"kiln-{tier}", programs=len(functions),
         kiln_compile_s=round(sum(fn.stats["compile_seconds"] for fn in functions), 3),
         first_call_s=round(first, 3), aot_eager_first_call_s=round(floor, 3))


def compile_times(names=()):
    import os
    import subprocess

    for name in names or COMPILE_MODELS:
        for tier in ("cranelift", "llvm"):
            subprocess.run([sys.executable, __file__, "_compile-time", name, tier],
                           env={**os.environ, "KILN_CACHE": "0"}, check=True)


def tierup():
    import os
    import subprocess
    import tempfile

    def child(*args, **env):
        subprocess.run([sys.executable, __file__, *args], env={**os.environ, **env}, check=True)

    child("_tierup-ratio", KILN_CACHE="0", KILN_TIER_UP_AFTER="0")
    for name in ("resnet18", "mobilenet_v2"):
        with tempfile.TemporaryDirectory() as cache:
            child("_tierup-model", name, "cranelift", KILN_CACHE_DIR=cache)
            child("_tierup-model", name, "cold", KILN_CACHE_DIR=cache)
            child("_tierup-model", name, "warm", KILN_CACHE_DIR=cache)


if __name__ == "__main__":
    if sys.argv[1:2] == ["_tierup-ratio"]:
        _tierup_ratio_child()
        sys.exit(0)
    if sys.argv[1:2] == ["_compile-time"]:
        _compile_time_child(sys.argv[2], sys.argv[3])
        sys.exit(0)
    if sys.argv[1:2] == ["_tierup-model"]:
        _tierup_model_child(sys.argv[2], sys.argv[3])
        sys.exit(0)
    which = sys.argv[1:] or ["scalar", "population", "query", "torch"]
    if which[0] == "models":
        models(which[1:])
    elif which[0] == "compile-times":
        compile_times(which[1:])
    elif which[0] == "scaling":
        scaling(which[1:])
    elif which[0] == "tiers":
        tiers(which[1:])
    else:
        for w in which:
            {"scalar": scalar, "population": population, "fit": fit, "grad": grad,
             "query": query,
             "torch": torch_mlp, "linear": linear, "train": train,
             "resnet": resnet, "resnet-layers": resnet_layers,
             "transformer-ops": transformer_ops, "tierup": tierup}[w]()
