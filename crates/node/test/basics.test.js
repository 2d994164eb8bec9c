'use strict';
// The add-on's API on every tier: typed arrays in and out, shapes, scalars,
// the files the CLI reads, and every kind of bad input as its error class.

const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const fs = require('node:fs');
const kiln = require('..');

const ROOT = path.resolve(__dirname, '..', '..', '..');
const TIERS = [...kiln.tiers(), 'auto'];

test('tiers are the four engines', () => {
  assert.deepEqual(kiln.tiers(), ['interp', 'vm', 'cranelift', 'llvm']);
});

test('an f32 function on every tier: the same bits as computed by hand', () => {
  const x = new Float32Array([0, 1.5, -2, 3.25, 1e30, NaN]);
  const want = Float32Array.from(x, (v) => Math.fround(Math.fround(v * 2) + 1));
  for (const tier of TIERS) {
    const f = kiln.compile('def f(x):\n    return x * 2.0 + 1.0\n', { tier, inputs: { x: 'f32[n]' } });
    assert.equal(f.tier, tier);
    assert.deepEqual(f.inputs, [{ name: 'x', dtype: 'f32', shape: ['n'] }]);
    assert.equal(f.outputs.length, 1);
    assert.equal(f.outputs[0].dtype, 'f32');
    const { [f.outputs[0].name]: y } = f.runSync({ x });
    assert.ok(y instanceof kiln.Tensor);
    assert.ok(y.data instanceof Float32Array);
    assert.deepEqual(y.shape, [6]);
    assert.equal(y.dtype, 'f32');
    assert.deepEqual(Buffer.from(y.data.buffer), Buffer.from(want.buffer), tier);
  }
});

test('every dtype in and out, several outputs, scalars', () => {
  const src = [
    'def f(a, b, c, d, k, s):',
    '    return a * 3.0, b + 7, c * 2, d, a > 0.5, k * 2, s + 1.0',
    '',
  ].join('\n');
  const inputs = { a: 'f64[n]', b: 'i64[n]', c: 'i32[n]', d: 'bool[n]', k: 'i64', s: 'f32' };
  for (const tier of TIERS) {
    const f = kiln.compile(src, { tier, inputs });
    const out = f.runSync({
      a: new Float64Array([0.25, 1.5]),
      b: new BigInt64Array([-(2n ** 62n), 5n]),
      c: new Int32Array([-3, 2147483647]),
      d: new Uint8Array([1, 0]),
      k: 2n ** 40n,
      s: 2.5,
    });
    const [o0, o1, o2, o3, o4, o5, o6] = f.outputs.map((p) => out[p.name]);
    assert.deepEqual([...o0.data], [0.75, 4.5]);
    assert.deepEqual([...o1.data], [-(2n ** 62n) + 7n, 12n]);
    assert.ok(o1.data instanceof BigInt64Array);
    // i32 multiplication wraps.
    assert.deepEqual([...o2.data], [-6, -2]);
    assert.ok(o3.data instanceof Uint8Array);
    assert.deepEqual([...o3.data], [1, 0]);
    assert.equal(o3.dtype, 'bool');
    assert.deepEqual([...o4.data], [0, 1]);
    assert.equal(o5, 2n ** 41n);
    assert.equal(o6, 3.5);
  }
});

test('a scalar function takes numbers and returns numbers', () => {
  const f = kiln.compile('x * y + 1.0', { tier: 'cranelift' });
  const out = f.runSync({ x: 2, y: 3 });
  assert.deepEqual(Object.values(out), [7]);
});

test('a number for an integer input must be an integer', () => {
  const f = kiln.compile('def f(k):\n    return k + 1\n', { inputs: { k: 'i32' }, tier: 'cranelift' });
  assert.deepEqual(Object.values(f.runSync({ k: 41 })), [42]);
  assert.deepEqual(Object.values(f.runSync({ k: 41n })), [42]);
  assert.throws(() => f.runSync({ k: 1.5 }), TypeError);
  assert.throws(() => f.runSync({ k: 2 ** 40 }), RangeError);
});

test('shapes: given as a tensor, inferred from the length, checked', () => {
  const src = 'def f(x):\n    return x.sum(axis=1)\n';
  const f = kiln.compile(src, { tier: 'llvm', inputs: { x: 'f32[n, 3]' } });
  const data = new Float32Array([1, 2, 3, 4, 5, 6]);
  const byTensor = f.runSync({ x: kiln.tensor(data, [2, 3]) });
  const y = Object.values(byTensor)[0];
  assert.deepEqual(y.shape, [2]);
  assert.deepEqual([...y.data], [6, 15]);
  // A bare typed array: `n` from its length.
  assert.deepEqual([...Object.values(f.runSync({ x: data }))[0].data], [6, 15]);
  // A plain { data, shape } object is a tensor too.
  assert.deepEqual([...Object.values(f.runSync({ x: { data, shape: [2, 3] } }))[0].data], [6, 15]);
  assert.throws(() => f.runSync({ x: kiln.tensor(data, [3, 2]) }), (e) => e instanceof RangeError && /\[3, 2\]/.test(e.message));
  assert.throws(() => f.runSync({ x: kiln.tensor(data, [6]) }), (e) => e instanceof RangeError && /rank/.test(e.message));
  assert.throws(() => f.runSync({ x: new Float32Array(7) }), RangeError);
  assert.throws(() => kiln.tensor(data, [2, -3]), TypeError);
});

test('bad arguments are TypeErrors naming the input', () => {
  const f = kiln.compile('def f(x, y):\n    return x + y\n', { inputs: { x: 'f32[n]', y: 'f32[n]' }, tier: 'cranelift' });
  const x = new Float32Array([1, 2]);
  assert.throws(() => f.runSync({ x }), (e) => e instanceof TypeError && /`y` is missing/.test(e.message));
  assert.throws(() => f.runSync({ x, y: x, z: x }), (e) => e instanceof TypeError && /no input `z`/.test(e.message));
  assert.throws(() => f.runSync({ x, y: new Float64Array(2) }), (e) => e instanceof TypeError && /Float32Array/.test(e.message) && /Float64Array/.test(e.message));
  assert.throws(() => f.runSync({ x, y: [1, 2] }), TypeError);
  assert.throws(() => f.runSync({ x, y: 1 }), TypeError);
  assert.throws(() => f.runSync(x), TypeError);
  // Columns of one symbol must agree.
  assert.throws(() => f.runSync({ x, y: new Float32Array(3) }), RangeError);
});

test('a bool input reads any nonzero byte as true', () => {
  const f = kiln.compile('def f(m, x):\n    return where(m, x, 0.0)\n', { inputs: { m: 'bool[n]', x: 'f64[n]' }, tier: 'llvm' });
  const out = Object.values(f.runSync({ m: new Uint8Array([0, 1, 7, 255]), x: new Float64Array([1, 2, 3, 4]) }))[0];
  assert.deepEqual([...out.data], [0, 2, 3, 4]);
});

test('an input view of a larger buffer reads only its elements', () => {
  const f = kiln.compile('def f(x):\n    return x + 1.0\n', { inputs: { x: 'f64[n]' }, tier: 'llvm' });
  const whole = new Float64Array([10, 20, 30, 40, 50]);
  const out = Object.values(f.runSync({ x: whole.subarray(1, 4) }))[0];
  assert.deepEqual([...out.data], [21, 31, 41]);
});

test('errors: parse, verify, integer division by zero, options', () => {
  assert.throws(() => kiln.compile('def f(x):\n    return x +\n'), (e) => e instanceof kiln.ParseError && e instanceof kiln.KilnError && /^<source>:\d+:\d+: error: /.test(e.message));
  assert.throws(() => kiln.compile('foo(x)'), kiln.KilnError);
  assert.throws(() => kiln.compile('graph "g"\nv0: f32 = input "x"\nv1: f32 = add v0, v9\noutput "y" = v1\n', { format: 'kiln' }), kiln.KilnError);
  assert.throws(() => kiln.compile('x + 1.0', { tier: 'fast' }), (e) => e instanceof TypeError && /cranelift/.test(e.message));
  assert.throws(() => kiln.compile('x + 1.0', { tiers: 'llvm' }), (e) => e instanceof TypeError && /unknown option `tiers`/.test(e.message));
  assert.throws(() => kiln.compile('x + 1.0', { format: 'onnx' }), TypeError);
  assert.throws(() => kiln.compile('x', { inputs: { x: 'f16[n]' } }), TypeError);
  assert.throws(() => kiln.compile(42), TypeError);
  for (const tier of TIERS) {
    const f = kiln.compile('def f(a, b):\n    return a // b\n', { tier, inputs: { a: 'i64[n]', b: 'i64[n]' } });
    assert.throws(
      () => f.runSync({ a: new BigInt64Array([1n, 2n]), b: new BigInt64Array([1n, 0n]) }),
      (e) => e instanceof kiln.DivisionByZeroError && e instanceof kiln.ExecError && /division by zero/.test(e.message),
      tier,
    );
  }
});

test('load: a .kiln file, as the CLI reads it', () => {
  const file = path.join(ROOT, 'tests', 'filetests', 'ops', 'tensor_reduce.kiln');
  for (const tier of TIERS) {
    const f = kiln.load(file, { tier });
    const out = f.runSync({
      x: kiln.tensor(new Float32Array([1, 2, 3, 4, 5, 6]), [2, 3]),
      k: kiln.tensor(new Int32Array([1, 2, 3, 4, 5, 6]), [2, 3]),
    });
    assert.deepEqual([...out.rows.data], [6, 15]);
    assert.deepEqual(out.cols.shape, [1, 3]);
    assert.equal(out.mean, 3.5);
    assert.deepEqual([...out.count.data], [2n, 2n, 2n]);
    assert.deepEqual([...out.prod.data], [4, 10, 18]);
  }
  assert.throws(() => kiln.load(path.join(ROOT, 'no', 'such', 'file.kiln')), kiln.IoError);
  assert.throws(() => kiln.load(path.join(ROOT, 'README.md')), TypeError);
});

test('load: a torch.fx CNN with its weights beside it matches torch', () => {
  const dir = path.join(ROOT, 'tests', 'fixtures', 'fx', 'cnn_modules');
  const c = JSON.parse(fs.readFileSync(path.join(dir, 'case.json'), 'utf8'));
  const [inputName] = c.input_names;
  const input = c.inputs[inputName];
  const [want] = c.outputs;
  const scale = Math.max(...want.data.map(Math.abs));
  let reference = null;
  for (const tier of TIERS) {
    const f = kiln.load(path.join(dir, 'graph.txt'), { tier, inputs: { [inputName]: `f32[${input.shape.join(', ')}]` } });
    const y = Object.values(f.runSync({ [inputName]: kiln.tensor(Float32Array.from(input.data), input.shape) }))[0];
    assert.deepEqual(y.shape, want.shape);
    y.data.forEach((v, i) => assert.ok(Math.abs(v - want.data[i]) <= 1e-6 * scale, `${tier}: element ${i}`));
    // Every tier returns the interpreter's bits.
    if (reference === null) reference = Buffer.from(y.data.buffer);
    else assert.deepEqual(Buffer.from(y.data.buffer), reference, tier);
  }
});

test('a filter returns its selected rows', () => {
  const f = kiln.compile('graph "q"\nv0: f64[n] = input "x"\nv1: f64 = const 0.5\nv2: bool[n] = gt v0, v1\nv3: sel[n] = filter v2\noutput "rows" = v3\n', { format: 'kiln', tier: 'cranelift' });
  assert.equal(f.outputs[0].dtype, 'selection');
  const out = f.runSync({ x: new Float64Array([0.1, 0.9, 0.2, 0.7]) });
  assert.ok(out.rows.data instanceof Uint32Array);
  assert.deepEqual([...out.rows.data], [1, 3]);
  assert.deepEqual(out.rows.shape, [2]);
});

test('setNumThreads checks its argument', () => {
  assert.throws(() => kiln.setNumThreads(0), RangeError);
  assert.throws(() => kiln.setNumThreads(1.5), RangeError);
  kiln.setNumThreads(2);
});

test('load: TensorFlow GraphDefs, text and binary, match TensorFlow', () => {
  const dir = path.join(ROOT, 'tests', 'fixtures', 'tf', 'cnn_frozen');
  const c = JSON.parse(fs.readFileSync(path.join(dir, 'case.json'), 'utf8'));
  const input = c.inputs.image;
  const [want] = c.outputs;
  const scale = Math.max(...want.data.map(Math.abs));
  for (const file of ['graph.pbtxt', 'graph.pb']) {
    for (const tier of ['llvm', 'cranelift']) {
      const f = kiln.load(path.join(dir, file), { tier, inputs: { image: 'f32[2, 16, 16, 3]' }, outputs: ['Identity'] });
      const y = Object.values(f.runSync({ image: kiln.tensor(Float32Array.from(input.data), input.shape) }))[0];
      assert.deepEqual(y.shape, want.shape);
      y.data.forEach((v, i) => assert.ok(Math.abs(v - want.data[i]) <= 1e-6 * scale, `${file} on ${tier}: element ${i}`));
    }
  }
  // int64 with TensorFlow's floor division and wraparound: exact.
  const ints = path.join(ROOT, 'tests', 'fixtures', 'tf', 'int64_ops');
  const k = JSON.parse(fs.readFileSync(path.join(ints, 'case.json'), 'utf8'));
  const f = kiln.load(path.join(ints, 'graph.pbtxt'), {
    tier: 'llvm',
    inputs: { x: 'i64[8]', y: 'i64[8]' },
    outputs: k.output_names,
  });
  const big = (v) => BigInt64Array.from(v.data, (n) => BigInt(n));
  const out = f.runSync({ x: big(k.inputs.x), y: big(k.inputs.y) });
  const results = f.outputs.map((p) => out[p.name]);
  k.outputs.forEach((o, i) => assert.deepEqual([...results[i].data], o.data.map((n) => BigInt(n)), o.name));
});

test('an output too large for memory is a RangeError, not a crash', () => {
  // [n] in, [n, n, n] out: n = 2^21 asks for 2^63 elements.
  const src = 'graph "g"\nv0: f32[n] = input "x"\nv1: f32[n, 1, 1] = reshape v0\nv2: f32[1, n, 1] = reshape v0\nv3: f32[1, 1, n] = reshape v0\nv4: f32[n, n, 1] = mul v1, v2\nv5: f32[n, n, n] = mul v4, v3\noutput "y" = v5\n';
  const f = kiln.compile(src, { format: 'kiln', tier: 'cranelift' });
  assert.throws(() => f.runSync({ x: new Float32Array(2 ** 21) }), (e) => e instanceof RangeError && /no room/.test(e.message));
  assert.deepEqual(Object.values(f.runSync({ x: new Float32Array([1, 2]) }))[0].shape, [2, 2, 2]);
});
