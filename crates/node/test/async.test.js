'use strict';
// run(): the call on libuv's thread pool, a Promise of the outputs; the event
// loop goes on meanwhile, and many calls at once each get their own result.

const test = require('node:test');
const assert = require('node:assert/strict');
const kiln = require('..');

function random(n, seed) {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32 - 0.5;
  });
}

const MATMUL = 'def f(a, b):\n    return a @ b\n';

test('run resolves with the bits runSync returns', async () => {
  const f = kiln.compile(MATMUL, { tier: 'llvm', inputs: { a: 'f32[64, 96]', b: 'f32[96, 80]' } });
  const a = random(64 * 96, 1);
  const b = random(96 * 80, 2);
  const want = Object.values(f.runSync({ a, b }))[0];
  const pending = f.run({ a, b });
  assert.ok(pending instanceof Promise);
  const got = Object.values(await pending)[0];
  assert.deepEqual(got.shape, [64, 80]);
  assert.deepEqual(Buffer.from(got.data.buffer), Buffer.from(want.data.buffer));
});

test('the event loop keeps turning while kernels run', async () => {
  // Four 1024^3 matmuls on Cranelift: tens of milliseconds each.
  const f = kiln.compile(MATMUL, { tier: 'cranelift', inputs: { a: 'f32[1024, 1024]', b: 'f32[1024, 1024]' } });
  const a = random(1024 * 1024, 3);
  const b = random(1024 * 1024, 4);
  let turns = 0;
  let done = false;
  const spin = () => {
    turns += 1;
    if (!done) setImmediate(spin);
  };
  spin();
  const results = await Promise.all([0, 1, 2, 3].map(() => f.run({ a, b })));
  done = true;
  assert.ok(turns > 20, `the event loop turned ${turns} times while the kernels ran`);
  const first = Buffer.from(Object.values(results[0])[0].data.buffer);
  for (const r of results) assert.deepEqual(Buffer.from(Object.values(r)[0].data.buffer), first);
  // runSync, by contrast, holds the thread: no turn in between.
  const before = turns;
  done = false;
  spin();
  f.runSync({ a, b });
  assert.equal(turns, before + 1);
  done = true;
});

test('1000 concurrent runs each resolve with their own result', async () => {
  const f = kiln.compile('def f(x, k):\n    return x * k + 1.0\n', { tier: 'cranelift', inputs: { x: 'f64[n]', k: 'f64' } });
  const calls = Array.from({ length: 1000 }, (_, i) => f.run({ x: new Float64Array([i, -i, 0.5]), k: i }));
  const results = await Promise.all(calls);
  results.forEach((r, i) => {
    assert.deepEqual([...Object.values(r)[0].data], [i * i + 1, -i * i + 1, 0.5 * i + 1]);
  });
});

test('a failing run rejects with the error class; bad arguments reject too', async () => {
  const f = kiln.compile('def f(a, b):\n    return a % b\n', { tier: 'llvm', inputs: { a: 'i32[n]', b: 'i32[n]' } });
  await assert.rejects(f.run({ a: new Int32Array([5, 6]), b: new Int32Array([2, 0]) }), kiln.DivisionByZeroError);
  await assert.rejects(f.run({ a: new Int32Array(2), b: new Float32Array(2) }), TypeError);
  await assert.rejects(f.run({ a: new Int32Array(2), b: new Int32Array(3) }), RangeError);
  await assert.rejects(f.run(null), TypeError);
  const ok = await f.run({ a: new Int32Array([5, -7]), b: new Int32Array([3, 2]) });
  // Python's `%`: the sign of the divisor.
  assert.deepEqual([...Object.values(ok)[0].data], [2, 1]);
});
