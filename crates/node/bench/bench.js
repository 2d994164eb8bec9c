'use strict';
// The add-on's benchmarks (docs/performance.md, "Node.js"):
//   node bench/bench.js            (npm run bench)
// 1. ResNet-18 forward, 1x3x224x224, the same exported model compiled on the
//    same tier from Node (runSync and run) and from Python (kiln.compile,
//    .venv's wheel, KILN_PYTHON to name another), rounds alternating between
//    the two processes; one kiln thread (KILN_NUM_THREADS=1) unless
//    KILN_BENCH_THREADS says otherwise.
// 2. 1000 concurrent run() calls of a small function: the wall time against
//    the same calls awaited one by one, and how late a 10 ms timer fired
//    meanwhile (the event loop's stall).
// 3. ResNet-18 as a wasm module (aot --emit wasm) on Node's WebAssembly
//    against the add-on's LLVM code.
// `node bench/bench.js resnet|concurrent|wasm` runs one.
// Each result is one JSON line.

const path = require('node:path');
const fs = require('node:fs');
const os = require('node:os');
const { execFileSync } = require('node:child_process');

const ROOT = path.resolve(__dirname, '..', '..', '..');
const PYTHON = process.env.KILN_PYTHON || path.join(ROOT, '.venv', 'bin', 'python');
const THREADS = process.env.KILN_BENCH_THREADS || '1';
process.env.KILN_NUM_THREADS = THREADS;
const kiln = require('..');

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

function timeIt(fn, calls) {
  const ts = [];
  for (let i = 0; i < calls; i++) {
    const t = process.hrtime.bigint();
    fn();
    ts.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  return median(ts);
}

async function timeAsync(fn, calls) {
  const ts = [];
  for (let i = 0; i < calls; i++) {
    const t = process.hrtime.bigint();
    await fn();
    ts.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  return median(ts);
}

const PY_TIMER = `
import pathlib, sys, time, statistics
import numpy as np
import kiln
kiln.set_num_threads(int(sys.argv[3]))
f = kiln.compile(pathlib.Path(sys.argv[1]), inputs={"x": "f32[1, 3, 224, 224]"}, tier=sys.argv[2])
x = np.fromfile(sys.argv[1].replace("module.txt", "input.f32"), dtype="<f4").reshape(1, 3, 224, 224)
for _ in range(3):
    f(x)
ts = []
for _ in range(int(sys.argv[4])):
    t = time.perf_counter(); f(x); ts.append((time.perf_counter() - t) * 1e3)
print(statistics.median(ts))
`;

async function resnet(tier, rounds, calls) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-bench-resnet-'));
  try {
    execFileSync(PYTHON, [path.join(__dirname, '..', 'test', 'export_resnet.py'), dir]);
    const file = path.join(dir, 'module.txt');
    const f = kiln.load(file, { tier, inputs: { x: 'f32[1, 3, 224, 224]' } });
    const bytes = fs.readFileSync(path.join(dir, 'input.f32'));
    const x = kiln.tensor(new Float32Array(new Uint8Array(bytes).buffer), [1, 3, 224, 224]);
    for (let i = 0; i < 3; i++) f.runSync({ x });
    const node = [];
    const nodeAsync = [];
    const python = [];
    for (let r = 0; r < rounds; r++) {
      node.push(timeIt(() => f.runSync({ x }), calls));
      nodeAsync.push(await timeAsync(() => f.run({ x }), calls));
      const out = execFileSync(PYTHON, ['-c', PY_TIMER, file, tier, THREADS, String(calls)], { encoding: 'utf8' });
      python.push(Number(out.trim().split('\n').pop()));
    }
    const [n, a, p] = [median(node), median(nodeAsync), median(python)];
    console.log(JSON.stringify({
      workload: 'resnet18-1x3x224x224', tier, threads: Number(THREADS),
      node_runSync_ms: +n.toFixed(2), node_run_ms: +a.toFixed(2), python_ms: +p.toFixed(2),
      node_vs_python: +(n / p).toFixed(3), node_run_vs_python: +(a / p).toFixed(3),
    }));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

// ResNet-18 as a wasm module on Node's WebAssembly against the add-on's
// LLVM code, same process, one thread.
async function wasmForward(calls) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-bench-wasm-'));
  try {
    execFileSync(PYTHON, [path.join(__dirname, '..', 'test', 'export_resnet.py'), dir]);
    const file = path.join(dir, 'module.txt');
    const options = { inputs: { x: 'f32[1, 3, 224, 224]' } };
    const bytes = fs.readFileSync(path.join(dir, 'input.f32'));
    const x = kiln.tensor(new Float32Array(new Uint8Array(bytes).buffer), [1, 3, 224, 224]);
    const native = kiln.load(file, { ...options, tier: 'llvm' });
    const net = await kiln.wasm.instantiate(kiln.aotLoad(file, { ...options, emit: 'wasm', target: 'wasm32' }));
    net.runSync({ x });
    native.runSync({ x });
    const w = timeIt(() => net.runSync({ x }), calls);
    const n = timeIt(() => native.runSync({ x }), calls);
    console.log(JSON.stringify({
      workload: 'resnet18-1x3x224x224-wasm', wasm_ms: +w.toFixed(1), native_llvm_ms: +n.toFixed(2),
      wasm_vs_native: +(w / n).toFixed(1),
    }));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

async function concurrent(count) {
  const f = kiln.compile('def f(x):\n    return sin(x) * exp(-x) + sqrt(abs(x))\n', { tier: 'llvm', inputs: { x: 'f64[n]' } });
  const x = Float64Array.from({ length: 20000 }, (_, i) => i / 1000);
  await f.run({ x });
  // Five rounds of each, alternating; medians.
  const serial = [];
  const together = [];
  let late = 0;
  for (let round = 0; round < 5; round++) {
    let t = process.hrtime.bigint();
    for (let i = 0; i < count; i++) await f.run({ x });
    serial.push(Number(process.hrtime.bigint() - t) / 1e6);
    // A 10 ms timer: how late does it fire while the calls run?
    let last = process.hrtime.bigint();
    const timer = setInterval(() => {
      const now = process.hrtime.bigint();
      late = Math.max(late, Number(now - last) / 1e6 - 10);
      last = now;
    }, 10);
    t = process.hrtime.bigint();
    await Promise.all(Array.from({ length: count }, () => f.run({ x })));
    together.push(Number(process.hrtime.bigint() - t) / 1e6);
    clearInterval(timer);
  }
  const [oneByOne, concurrentMs] = [median(serial), median(together)];
  console.log(JSON.stringify({
    workload: `concurrent-run-${count}x-20000-rows`, one_by_one_ms: +oneByOne.toFixed(1),
    concurrent_ms: +concurrentMs.toFixed(1), speedup: +(oneByOne / concurrentMs).toFixed(2),
    timer_max_late_ms: +late.toFixed(1), uv_threadpool_size: Number(process.env.UV_THREADPOOL_SIZE || 4),
    cpus: os.cpus().length,
  }));
}

(async () => {
  const which = process.argv.slice(2);
  if (which.length === 0 || which.includes('resnet')) {
    for (const tier of ['llvm', 'cranelift']) await resnet(tier, 5, 10);
  }
  if (which.length === 0 || which.includes('concurrent')) await concurrent(1000);
  if (which.length === 0 || which.includes('wasm')) await wasmForward(3);
})();
