"""Issue 35's figures: torchvision's ResNet-18 (eval, 1x3x224x224) through
torch.compile(backend="kiln") on each tier against eager PyTorch, at 1 and 2
threads (torch.set_num_threads, which the kiln backend follows), interleaved
in one process; and the NNC kernel from Python at each count.

    .venv/bin/pip install ./crates/python            # the release wheel
    .venv/bin/pip install torchvision pillow         # the model (not a test dependency)
    .venv/bin/python crates/python/benchmarks/threads.py [THREADS...]

Prints one JSON object per figure (medians of interleaved runs)."""

import os
import statistics
import sys
import time

import numpy as np
import torch
import torch._dynamo
import torchvision

import kiln
import kiln.torch  # noqa: F401  (registers the backend)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import emit, interleaved  # noqa: E402  (the harness's helpers)


def main():
    counts = [int(a) for a in sys.argv[1:]] or [1, 2]
    emit(cpu=os.uname().machine, cores=os.cpu_count(), kiln_default_threads=kiln.get_num_threads())
    model = torchvision.models.resnet18().eval()
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    runs = []
    with torch.no_grad():
        want = model(x)
        for tier in ("cranelift", "llvm"):
            torch._dynamo.reset()
            f = torch.compile(model, backend="kiln", options={"tier": tier})
            start = time.perf_counter()
            got = f(x)
            emit(workload="resnet18", peer=f"kiln-{tier}", first_call_s=time.perf_counter() - start)
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5 * want.abs().max().item())
            for t in counts:
                runs.append((f"kiln-{tier}", t, f))
        for t in counts:
            runs.append(("torch-eager", t, model))

        def loop(f, t):
            def run():
                torch.set_num_threads(t)
                f(x)
            return run

        times = interleaved([loop(f, t) for _, t, f in runs], repeats=15)
    for (peer, t, _), ts in zip(runs, times):
        emit(workload="resnet18", peer=peer, threads=t, median_ms=round(statistics.median(ts) * 1e3, 2),
             min_ms=round(min(ts) * 1e3, 2))
    # The NNC kernel over 10M f64 from Python, LLVM tier.
    nnc = kiln.compile("def nnc(x: float[n]):\n    a = x * x\n    b = sin(a)\n    c = cos(b)\n"
                       "    d = c * c\n    f = d * d\n    return d + f", tier="llvm")
    xs = np.linspace(-5.0, 5.0, 10_000_000)
    out = np.empty_like(xs)
    before = kiln.get_num_threads()

    def call(t):
        def run():
            kiln.set_num_threads(t)
            nnc(xs, out=out)
        return run

    times = interleaved([call(t) for t in counts], repeats=9)
    kiln.set_num_threads(before)
    for t, ts in zip(counts, times):
        emit(workload="nnc-10M-f64", peer="kiln-llvm", threads=t, median_ms=round(statistics.median(ts) * 1e3, 2))


if __name__ == "__main__":
    main()
