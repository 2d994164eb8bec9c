'use strict';
// The portable path: modules `aot --emit wasm` writes, run by Node's own
// WebAssembly through wasm.js, bit-equal with the native add-on's calls;
// the exact fused multiply-adds they import.

const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const fs = require('node:fs');
const { execFileSync } = require('node:child_process');
const kiln = require('..');
const { fma, fmaf } = kiln.wasm;

const ROOT = path.resolve(__dirname, '..', '..', '..');

function sameBits(a, b, what) {
  assert.deepEqual(Buffer.from(a.buffer, a.byteOffset, a.byteLength), Buffer.from(b.buffer, b.byteOffset, b.byteLength), what);
}

// The exact value of a*b + c (finite, nonzero terms) rounded to `bits` of
// precision with `minExp` the least exponent of a last bit: an independent
// reference for fma (53, -1074) and fmaf (24, -149), by BigInt.
function parts(x) {
  const f = new Float64Array([x]);
  const b = new BigUint64Array(f.buffer)[0];
  const field = Number((b >> 52n) & 0x7ffn);
  const m = field === 0 ? b & 0xfffffffffffffn : (b & 0xfffffffffffffn) | (1n << 52n);
  return [b >> 63n ? -m : m, field === 0 ? -1074 : field - 1075];
}
function reference(a, b, c, bits, minExp) {
  const [ma, ea] = parts(a);
  const [mb, eb] = parts(b);
  const [mc, ec] = parts(c);
  const e = Math.min(ea + eb, ec);
  const exact = ((ma * mb) << BigInt(ea + eb - e)) + (mc << BigInt(ec - e));
  if (exact === 0n) return 0;
  const m = exact < 0n ? -exact : exact;
  const top = m.toString(2).length - 1 + e;
  const lsb = Math.max(top - (bits - 1), minExp);
  let q = lsb > e ? m >> BigInt(lsb - e) : m << BigInt(e - lsb);
  if (lsb > e) {
    const rest = m - (q << BigInt(lsb - e));
    const half = 1n << BigInt(lsb - e - 1);
    if (rest > half || (rest === half && q % 2n === 1n)) q += 1n;
  }
  const v = Number(q) * 2 ** lsb;
  return exact < 0n ? -v : v;
}

function f32s(n, seed, spread) {
  let s = seed >>> 0;
  const next = () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
  return Float32Array.from({ length: n }, () => (next() - 0.5) * 2 ** Math.floor((next() - 0.5) * spread));
}

test('fmaf rounds once: double rounding cases, and random ones', () => {
  // (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 is a float32 tie; 2^-80 tips it up.
  const a = Math.fround(1 + 2 ** -12);
  assert.equal(fmaf(a, a, 2 ** -80), Math.fround(1 + 2 ** -11 + 2 ** -23));
  assert.notEqual(Math.fround(a * a + 2 ** -80), fmaf(a, a, 2 ** -80));
  assert.equal(fmaf(a, a, -(2 ** -80)), Math.fround(1 + 2 ** -11));
  assert.equal(fmaf(-a, a, 2 ** -80), -Math.fround(1 + 2 ** -11));
  const xs = f32s(3 * 20000, 7, 40);
  for (let i = 0; i < xs.length; i += 3) {
    const [x, y, z] = [xs[i], xs[i + 1], xs[i + 2]];
    // Near-cancelling addends too: -x*y rounded, nudged.
    for (const c of [z, Math.fround(-x * y), Math.fround(-x * y * (1 + 2 ** -20))]) {
      if (x === 0 || y === 0 || c === 0) continue;
      assert.equal(fmaf(x, y, c), Math.fround(reference(x, y, c, 24, -149)), `fmaf(${x}, ${y}, ${c})`);
    }
  }
  // The wasm build modules call gives the same bits.
  const compiled = kiln.wasm.fmafWasm();
  for (let i = 0; i < xs.length; i += 3) {
    for (const c of [xs[i + 2], Math.fround(-xs[i] * xs[i + 1] * (1 + 2 ** -20)), 2 ** -80, -Infinity, NaN]) {
      assert.ok(Object.is(compiled(xs[i], xs[i + 1], c), fmaf(xs[i], xs[i + 1], c)), `fmaf(${xs[i]}, ${xs[i + 1]}, ${c})`);
    }
  }
  assert.equal(compiled(a, a, 2 ** -80), Math.fround(1 + 2 ** -11 + 2 ** -23));
  assert.ok(Object.is(compiled(0, -1, -0), -0));
  // Zeros, infinities, NaN, overflow, subnormal results.
  assert.ok(Object.is(fmaf(0, -1, -0), -0));
  assert.ok(Object.is(fmaf(1, 1, -1), 0));
  assert.ok(Number.isNaN(fmaf(Infinity, 0, 1)));
  assert.equal(fmaf(3e38, 3e38, -Infinity), -Infinity);
  assert.equal(fmaf(3e38, 2, 0), Infinity);
  assert.equal(fmaf(2 ** -75, 2 ** -75, 0), 0); // 2^-150 ties to even: 0
  assert.equal(fmaf(2 ** -75, 2 ** -74, 0), 2 ** -149);
});

test('fma rounds once in float64, subnormals and overflow included', () => {
  const t = 1 + 2 ** -27;
  assert.equal(fma(t, t, -1), 2 ** -26 + 2 ** -54);
  assert.equal(fma(1 + 2 ** -52, 1 + 2 ** -52, -(1 + 2 ** -51)), 2 ** -104);
  assert.equal(fma(2 ** -600, 2 ** -500, 0), 0); // 2^-1100, below half the least subnormal
  assert.equal(fma(2 ** -537, 2 ** -537, 0), 2 ** -1074);
  assert.equal(fma(1e308, 10, -1e308), Infinity); // 9e308 overflows
  assert.equal(fma(1e308, 10, -Infinity), -Infinity);
  assert.ok(Number.isNaN(fma(NaN, 1, 1)));
  // A product that underflows keeps its sign: -2^-1100 + 0 rounds to -0.
  assert.ok(Object.is(fma(-(2 ** -600), 2 ** -500, 0), -0));
  assert.ok(Object.is(fma(2 ** -600, 2 ** -500, -0), 0));
  assert.ok(Object.is(fma(0, -1, 0), 0));
  assert.ok(Object.is(fma(0, -1, -0), -0));
  assert.ok(Object.is(fmaf(-(2 ** -100), 2 ** -100, 0), -0));
  let s = 12345;
  const r = () => {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    return (s / 2 ** 32 - 0.5) * 2 ** ((s % 64) - 32);
  };
  for (let i = 0; i < 5000; i++) {
    const [x, y] = [r(), r()];
    const c = i % 2 ? r() : -x * y * (1 + 2 ** -40);
    if (x === 0 || y === 0 || c === 0) continue;
    assert.equal(fma(x, y, c), reference(x, y, c, 53, -1074), `fma(${x}, ${y}, ${c})`);
  }
});

test('a wasm module computes the native tiers\' bits: matmuls of f32 and f64', () => {
  for (const dtype of ['f32', 'f64']) {
    const src = 'def f(a, b):\n    return a @ b\n';
    const options = { inputs: { a: `${dtype}[n, 96]`, b: `${dtype}[96, 24]` } };
    const w = kiln.wasm.instantiateSync(kiln.aot(src, { ...options, emit: 'wasm', target: 'wasm32' }));
    assert.equal(w.tier, 'wasm');
    assert.deepEqual(w.inputs, [{ name: 'a', dtype, shape: ['n', 96] }, { name: 'b', dtype, shape: [96, 24] }]);
    const T = dtype === 'f32' ? Float32Array : Float64Array;
    const a = T.from(f32s(5 * 96, 1, 12));
    const b = T.from(f32s(96 * 24, 2, 12));
    const got = w.runSync({ a: kiln.tensor(a, [5, 96]), b }).out;
    const want = kiln.compile(src, { ...options, tier: 'llvm' }).runSync({ a: kiln.tensor(a, [5, 96]), b }).out;
    assert.deepEqual(got.shape, [5, 24]);
    sameBits(got.data, want.data, dtype);
  }
});

test('a torch.fx CNN with its weights as a wasm module: the native bits', async () => {
  const dir = path.join(ROOT, 'tests', 'fixtures', 'fx', 'cnn_modules');
  const c = JSON.parse(fs.readFileSync(path.join(dir, 'case.json'), 'utf8'));
  const [name] = c.input_names;
  const input = c.inputs[name];
  const options = { inputs: { [name]: `f32[${input.shape.join(', ')}]` } };
  const bytes = kiln.aotLoad(path.join(dir, 'graph.txt'), { ...options, emit: 'wasm', target: 'wasm32' });
  assert.ok(Buffer.isBuffer(bytes));
  const w = await kiln.wasm.instantiate(bytes);
  const x = kiln.tensor(Float32Array.from(input.data), input.shape);
  const got = Object.values(await w.run({ [name]: x }))[0];
  const want = Object.values(kiln.load(path.join(dir, 'graph.txt'), { ...options, tier: 'llvm' }).runSync({ [name]: x }))[0];
  sameBits(got.data, want.data, 'cnn_modules');
  // A second call reuses the module's memory and gets the same bits.
  sameBits(Object.values(w.runSync({ [name]: x }))[0].data, want.data, 'again');
});

test('wasm: scalars, i64, bools, selections and errors as the add-on gives them', () => {
  const kilnText = 'graph "q"\nv0: f64[n] = input "x"\nv1: f64 = const 0.5\nv2: bool[n] = gt v0, v1\nv3: sel[n] = filter v2\noutput "rows" = v3\noutput "big" = v2\n';
  const q = kiln.wasm.instantiateSync(kiln.aot(kilnText, { format: 'kiln', emit: 'wasm', target: 'wasm32' }));
  const out = q.runSync({ x: new Float64Array([0.1, 0.9, 0.2, 0.7]) });
  assert.deepEqual([...out.rows.data], [1, 3]);
  assert.deepEqual([...out.big.data], [0, 1, 0, 1]);
  const scalar = kiln.wasm.instantiateSync(kiln.aot('x * y + 1.0', { emit: 'wasm', target: 'wasm32' }));
  assert.deepEqual(Object.values(scalar.runSync({ x: 2, y: 3 })), [7]);
  const src = 'def f(a, b, k):\n    return a // b + k\n';
  const options = { inputs: { a: 'i64[n]', b: 'i64[n]', k: 'i64' } };
  const w = kiln.wasm.instantiateSync(kiln.aot(src, { ...options, emit: 'wasm', target: 'wasm32' }));
  const n = kiln.compile(src, { ...options, tier: 'cranelift' });
  const args = { a: new BigInt64Array([7n, -7n]), b: new BigInt64Array([2n, 2n]), k: 10n };
  assert.deepEqual([...w.runSync(args).out.data], [13n, 6n]);
  const bad = { ...args, b: new BigInt64Array([2n, 0n]) };
  let native;
  try {
    n.runSync(bad);
  } catch (e) {
    native = e;
  }
  assert.throws(() => w.runSync(bad), (e) => e instanceof kiln.DivisionByZeroError && e.message === native.message);
  assert.throws(() => w.runSync({ ...args, b: new Float64Array(2) }), TypeError);
  assert.throws(() => w.runSync({ ...args, b: new BigInt64Array(3) }), RangeError);
  assert.throws(() => w.runSync({ a: args.a }), TypeError);
  // Integer scalars as numbers or BigInts, range-checked; bool bytes as the add-on reads them.
  assert.deepEqual([...w.runSync({ ...args, k: 10 }).out.data], [13n, 6n]);
  const k32 = kiln.wasm.instantiateSync(kiln.aot('def f(x, k):\n    return where(x, k, 0)\n', { inputs: { x: 'bool[n]', k: 'i32' }, emit: 'wasm', target: 'wasm32' }));
  assert.deepEqual([...k32.runSync({ x: new Uint8Array([0, 1, 7]), k: 5n }).out.data], [0, 5, 5]);
  assert.throws(() => k32.runSync({ x: new Uint8Array(1), k: 2 ** 40 }), RangeError);
});

test('wasm.js needs no native add-on; a module kiln did not write is refused', () => {
  const loaded = execFileSync(process.execPath, ['-e', `require(${JSON.stringify(path.join(__dirname, '..', 'wasm.js'))}); console.log(Object.keys(require.cache).join('\\n'))`], { encoding: 'utf8' });
  assert.ok(!/\.node$/m.test(loaded), loaded);
  // The smallest valid module: no kiln.abi section.
  const empty = new Uint8Array([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0]);
  assert.throws(() => kiln.wasm.instantiateSync(empty), (e) => e instanceof TypeError && /kiln\.abi/.test(e.message));
});
