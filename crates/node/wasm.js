'use strict';
// Runs the wasm32 modules kiln writes (`aot --emit wasm`, `kiln.aot(…, {
// emit: 'wasm' })`) on the JavaScript engine's own WebAssembly: the portable
// path, which needs no native add-on (`require('kiln/wasm')` loads nothing
// native). A module describes its own call in two custom sections
// (docs/abi.md, "wasm32 modules"): `kiln.abi` (inputs, outputs, each kernel
// parameter, the run-time checks) and `kiln.constants` (the weights). The
// loader places the weights in linear memory once, and each call's inputs,
// scratch and outputs above them.
//
// The module imports the fused multiply-add its matmuls and convolutions
// step with (`fmaf`, `fma`: wasm has no such instruction) and, on rare rows,
// a few C math functions. fma, fmaf, fmod, fmodf, nextafter and nextafterf
// are computed here exactly as C defines them, so a module's results are the native tiers'
// bits; the others (`sin`, `pow`, … on the rows kiln's inline math leaves to
// the C library: huge trigonometric arguments, pow's special cases) come
// from JavaScript's Math and may differ in the last bit there.

const { DivisionByZeroError, IndexOutOfRangeError, ExecError } = require('./errors');
const { Tensor, argumentsFor, resultsFor } = require('./tensor');

const SIZE = { f32: 4, f64: 8, i32: 4, i64: 8, bool: 1 };
const ARRAY = { f32: Float32Array, f64: Float64Array, i32: Int32Array, i64: BigInt64Array, bool: Uint8Array };

// ---------------------------------------------------------------------------
// Exact fused multiply-adds.

const scratch64 = new Float64Array(1);
const words = new Uint32Array(scratch64.buffer); // little-endian: [low, high]
const bits64 = new BigUint64Array(scratch64.buffer);

/**
 * fmaf: a*b + c rounded once to float32. The product of two float32s is
 * exact in float64; the sum is made exact as s + e (TwoSum), then s is
 * rounded to odd (an even s with e != 0 moves one ulp toward the exact
 * value), and the float32 rounding of that is the correctly rounded result
 * (53 bits >= 24 + 2: rounding to odd first never double-rounds).
 */
function fmaf(a, b, c) {
  const p = a * b;
  const s = p + c;
  if (!Number.isFinite(s)) return Math.fround(s);
  const z = s - p;
  const e = p - (s - z) + (c - z);
  if (e !== 0) {
    scratch64[0] = s;
    if ((words[0] & 1) === 0) {
      if (e > 0 === s > 0) {
        words[0] = (words[0] + 1) >>> 0;
        if (words[0] === 0) words[1] += 1;
      } else {
        if (words[0] === 0) words[1] -= 1;
        words[0] = (words[0] - 1) >>> 0;
      }
      return Math.fround(scratch64[0]);
    }
  }
  return Math.fround(s);
}

// A finite nonzero double as [sign, integer significand, exponent]: x = ±m·2^e.
function decompose(x) {
  scratch64[0] = x;
  const b = bits64[0];
  const negative = b >> 63n === 1n;
  const field = Number((b >> 52n) & 0x7ffn);
  const fraction = b & 0xfffffffffffffn;
  return field === 0
    ? [negative, fraction, -1074]
    : [negative, fraction | 0x10000000000000n, field - 1075];
}

function bitLength(m) {
  return m.toString(2).length;
}

// The double nearest to m·2^e (m > 0n), ties to even, with subnormals and
// overflow as IEEE 754 rounds them.
function roundScaled(m, e) {
  const lsb = Math.max(bitLength(m) - 1 + e - 52, -1074);
  let q;
  const shift = lsb - e;
  if (shift > 0) {
    const s = BigInt(shift);
    q = m >> s;
    const rest = m - (q << s);
    const half = 1n << (s - 1n);
    if (rest > half || (rest === half && (q & 1n) === 1n)) q += 1n;
  } else {
    q = m << BigInt(-shift);
  }
  // q has at most 54 bits and q·2^lsb is representable unless it overflows.
  if (lsb > 971) return Number(q) * 2 ** 971 * 2 ** (lsb - 971);
  return Number(q) * 2 ** lsb;
}

/** fma: a*b + c rounded once to float64, by exact integer arithmetic. */
function fma(a, b, c) {
  // An infinite or NaN factor makes the product infinite or NaN, exactly as
  // a*b rounds it; a finite product (even one past float64's range) plus an
  // infinity or NaN is that. A zero factor makes an exact ±0 product, which
  // IEEE 754's addition then treats as fma does; a zero addend leaves the
  // nonzero exact product, rounded once, with its own sign even where it
  // underflows to zero (a*b + 0 would turn -0 into +0).
  if (!Number.isFinite(a) || !Number.isFinite(b)) return a * b + c;
  if (!Number.isFinite(c)) return c;
  if (a === 0 || b === 0) return a * b + c;
  if (c === 0) return a * b;
  const [sa, ma, ea] = decompose(a);
  const [sb, mb, eb] = decompose(b);
  const [sc, mc, ec] = decompose(c);
  const ep = ea + eb;
  const e = Math.min(ep, ec);
  const product = (ma * mb) << BigInt(ep - e);
  const addend = mc << BigInt(ec - e);
  const sum = (sa !== sb ? -product : product) + (sc ? -addend : addend);
  if (sum === 0n) return 0;
  const magnitude = roundScaled(sum < 0n ? -sum : sum, e);
  return sum < 0n ? -magnitude : magnitude;
}

// The same fmaf as a wasm function (fmaf/fmaf.ll, linked by fmaf/build.sh):
// a module's matmul calls it without leaving WebAssembly, several times
// faster than a call into JavaScript per step.
const FMAF_WASM =
  'AGFzbQEAAAABCAFgA319fQF9AwIBAAUDAQACBggBfwFBgIgECwcRAgZtZW1vcnkCAARmbWFmAAAKcQFvBAN8AX4BfAF/IAC7IAG7oiIDIAK7IgSgIgW9IgZCf0IBIAMgBSAFIAOhIgehoSAEIAehoCIDRAAAAAAAAAAAZCIIIAVEAAAAAAAAAABkcxt8IAYgCCADRAAAAAAAAAAAY3IbIAYgBkIBg1Abv7YL';
let wasmFmaf = null;

/** fmaf compiled to wasm (what modules import): the bits of `fmaf`. */
function fmafWasm() {
  if (wasmFmaf === null) {
    const bytes = Uint8Array.from(atob(FMAF_WASM), (ch) => ch.charCodeAt(0));
    wasmFmaf = new WebAssembly.Instance(new WebAssembly.Module(bytes)).exports.fmaf;
  }
  return wasmFmaf;
}

// C's pow where JavaScript's differs (C99 Annex F): pow(1, y) and pow(x, ±0)
// are 1 even for NaN; pow(-1, ±inf) is 1.
function pow(x, y) {
  if (x === 1 || y === 0) return 1;
  if (x === -1 && !Number.isFinite(y) && !Number.isNaN(y)) return 1;
  return Math.pow(x, y);
}

const scratch32 = new Float32Array(1);
const words32 = new Uint32Array(scratch32.buffer);

// C's nextafter and nextafterf: the neighbour of x toward y, by its bits
// (exact: no rounding is involved).
function nextafter(x, y) {
  if (Number.isNaN(x) || Number.isNaN(y)) return x + y;
  if (x === y) return y;
  if (x === 0) return y > 0 ? 2 ** -1074 : -(2 ** -1074);
  scratch64[0] = x;
  bits64[0] += x < y === x > 0 ? 1n : -1n;
  return scratch64[0];
}

function nextafterf(x, y) {
  if (Number.isNaN(x) || Number.isNaN(y)) return Math.fround(x + y);
  if (x === y) return y;
  if (x === 0) return y > 0 ? 2 ** -149 : -(2 ** -149);
  scratch32[0] = x;
  words32[0] += x < y === x > 0 ? 1 : -1;
  return scratch32[0];
}

const f32 = (f) => (...args) => Math.fround(f(...args));

/** The math functions a module may import from `env`, by their C names. */
const MATH = {
  fma,
  fmaf,
  // C's fmod is exact, and so is JavaScript's %.
  fmod: (x, y) => x % y,
  fmodf: (x, y) => Math.fround(x % y),
  pow,
  powf: f32(pow),
  nextafter,
  nextafterf,
};
for (const name of ['sin', 'cos', 'tan', 'asin', 'acos', 'atan', 'sinh', 'cosh', 'tanh', 'asinh', 'acosh',
  'atanh', 'exp', 'expm1', 'log', 'log2', 'log10', 'log1p', 'cbrt', 'atan2', 'hypot']) {
  MATH[name] = Math[name];
  MATH[`${name}f`] = f32(Math[name]);
}
MATH.exp2 = (x) => 2 ** x;
MATH.exp2f = f32(MATH.exp2);

// ---------------------------------------------------------------------------
// The module's description.

function customSection(module, name) {
  const sections = WebAssembly.Module.customSections(module, name);
  if (sections.length !== 1) {
    throw new TypeError(`not a module kiln wrote: no \`${name}\` section (write it with aot --emit wasm)`);
  }
  return new Uint8Array(sections[0]);
}

function imports(module) {
  const env = {};
  for (const { module: from, name, kind } of WebAssembly.Module.imports(module)) {
    if (from !== 'env' || kind !== 'function' || !(name in MATH)) {
      throw new TypeError(`the module imports ${from}.${name} (${kind}), which kiln's loader does not provide`);
    }
    env[name] = name === 'fmaf' ? fmafWasm() : MATH[name];
  }
  return { env };
}

const align8 = (n) => (n + 7) & ~7;

/**
 * A kiln wasm module, instantiated: `inputs`, `outputs`, `runSync(values)`
 * and `run(values)` as the add-on's functions have them. Calls run on the
 * calling thread (a Promise from `run` settles after the call).
 */
class WasmFunction {
  constructor(module, instance) {
    this._abi = JSON.parse(new TextDecoder().decode(customSection(module, 'kiln.abi')));
    if (this._abi.version !== 1) throw new TypeError(`kiln.abi version ${this._abi.version}: this loader reads version 1`);
    this.inputs = this._abi.inputs;
    this.outputs = this._abi.outputs;
    this.tier = 'wasm';
    this._memory = instance.exports.memory;
    this._kernel = instance.exports[this._abi.symbol];
    if (typeof this._kernel !== 'function') throw new TypeError(`the module exports no \`${this._abi.symbol}\``);
    // The weights, once, at the heap's base; each call's buffers above them.
    const constants = customSection(module, 'kiln.constants');
    this._constants = align8(instance.exports.__heap_base.value);
    this._base = align8(this._constants + constants.length);
    this._reserve(this._base);
    new Uint8Array(this._memory.buffer, this._constants, constants.length).set(constants);
  }

  _reserve(end) {
    const have = this._memory.buffer.byteLength;
    if (end > have) this._memory.grow(Math.ceil((end - have) / 65536));
  }

  // The symbols' extents from the inputs (given shapes, else one symbol per
  // input taken from the length), checked as the native tiers check them.
  _bind(args, shapes) {
    const extents = new Map();
    this.inputs.forEach((port, i) => {
      const data = args[i];
      if (port.shape.length === 0) return;
      const length = data.length;
      const given = shapes[i];
      if (given) {
        if (given.length !== port.shape.length) {
          throw new RangeError(`input \`${port.name}\`: shape [${given.join(', ')}] has rank ${given.length}, the input is [${port.shape.join(', ')}] (rank ${port.shape.length})`);
        }
        port.shape.forEach((d, k) => {
          const want = typeof d === 'number' ? d : extents.get(d);
          if (want === undefined) extents.set(d, given[k]);
          else if (want !== given[k]) {
            throw new RangeError(`input \`${port.name}\`: shape [${given.join(', ')}] does not match [${port.shape.join(', ')}] (dimension \`${d}\` is ${want})`);
          }
        });
      }
      let known = 1;
      let unbound = null;
      for (const d of port.shape) {
        const n = typeof d === 'number' ? d : extents.get(d);
        if (n !== undefined) known *= n;
        else if (unbound === null || unbound === d) unbound = d;
        else throw new TypeError(`input \`${port.name}\`: two unbound dimensions; give its shape`);
      }
      if (unbound !== null) {
        const repeats = port.shape.filter((d) => d === unbound).length;
        if (known === 0 || repeats !== 1 || length % known !== 0) {
          throw new RangeError(`input \`${port.name}\` has ${length} elements, not a multiple of ${known}`);
        }
        extents.set(unbound, length / known);
      } else if (known !== length) {
        throw new RangeError(`input \`${port.name}\` has ${length} elements; [${port.shape.join(', ')}] holds ${known}`);
      }
    });
    return extents;
  }

  _check(port, value) {
    const scalar = port.shape.length === 0;
    if (scalar) {
      const ok = port.dtype === 'bool' ? typeof value === 'boolean'
        : port.dtype === 'i64' || port.dtype === 'i32' ? typeof value === 'bigint' || Number.isInteger(value)
          : typeof value === 'number';
      if (!ok) throw new TypeError(`input \`${port.name}\` (${port.dtype}) takes a scalar, not ${typeof value}`);
      if (port.dtype === 'i32' && (value < -(2 ** 31) || value > 2 ** 31 - 1)) {
        throw new RangeError(`input \`${port.name}\` (i32): ${value} is out of range`);
      }
      if (port.dtype === 'i64' && typeof value === 'number' && !Number.isSafeInteger(value)) {
        throw new TypeError(`input \`${port.name}\` (i64) takes a BigInt or a safe integer, not ${value}`);
      }
      return;
    }
    if (!(value instanceof ARRAY[port.dtype])) {
      const got = ArrayBuffer.isView(value) ? `a ${value.constructor.name}` : typeof value;
      throw new TypeError(`input \`${port.name}\` (${port.dtype}) takes a ${ARRAY[port.dtype].name}, not ${got}`);
    }
  }

  /** Runs on this thread; the outputs by name. */
  runSync(values) {
    const [args, shapes] = argumentsFor(this.inputs, values);
    this.inputs.forEach((port, i) => this._check(port, args[i]));
    const extents = this._bind(args, shapes);
    const elements = (shape) => shape.reduce((n, d) => n * (typeof d === 'number' ? d : extents.get(d)), 1);
    // Where each parameter goes: offsets first, then one grow, then writes.
    let next = this._base;
    const place = (bytes) => {
      const at = align8(next);
      next = at + Math.max(bytes, 8);
      return at;
    };
    const plan = this._abi.params.map((p) => {
      switch (p.kind) {
        case 'input':
          if (p.wasm !== 'i32' || p.shape.length === 0 && this._abi.direct) return { p };
          return { p, at: place(elements(p.shape) * SIZE[p.dtype]) };
        case 'const':
          return { p, at: this._constants + p.offset };
        case 'scratch':
          return { p, at: place(elements(p.shape) * SIZE[p.dtype]), zero: elements(p.shape) * SIZE[p.dtype] };
        case 'output':
          return { p, at: p.returned ? null : place(elements(p.shape) * SIZE[p.dtype]), len: elements(p.shape) };
        case 'selection':
          return { p, at: place(elements(p.shape) * 4), len: elements(p.shape) };
        case 'count':
          return { p, at: place(8) };
        case 'extent':
          return { p };
        default:
          throw new TypeError(`kiln.abi: a parameter of kind \`${p.kind}\` this loader does not know`);
      }
    });
    this._reserve(next);
    const bytes = new Uint8Array(this._memory.buffer);
    const callArgs = [];
    for (const { p, at, zero } of plan) {
      let value;
      if (p.kind === 'input') {
        const v = args[p.input];
        // A scalar as its dtype's JavaScript type: BigInt for i64, a number
        // for the rest (a bool as 0 or 1).
        const cellValue = () => (p.dtype === 'i64' ? BigInt(v) : Number(v));
        if (at === undefined) {
          value = cellValue();
        } else if (p.shape.length === 0) {
          new ARRAY[p.dtype](this._memory.buffer, at, 1)[0] = cellValue();
          value = at;
        } else if (p.dtype === 'bool') {
          // Any nonzero byte is true, as the add-on reads it.
          bytes.set(Uint8Array.from(v, (b) => (b ? 1 : 0)), at);
          value = at;
        } else {
          bytes.set(new Uint8Array(v.buffer, v.byteOffset, v.byteLength), at);
          value = at;
        }
      } else if (p.kind === 'extent') {
        value = BigInt(extents.get(p.symbol));
      } else {
        if (zero) bytes.fill(0, at, at + zero);
        value = at;
      }
      if (p.returned) continue;
      callArgs[p.arg] = value;
    }
    const result = this._kernel(...callArgs);
    if (!this._abi.direct && result !== 0) {
      const check = this._abi.checks[result >> 8];
      if ((result & 0xff) === 1 && check) {
        throw new (check.error === 'IndexOutOfRangeError' ? IndexOutOfRangeError : DivisionByZeroError)(check.message);
      }
      throw new ExecError(`kernel returned status ${result}`);
    }
    // The outputs, copied out of linear memory (the next call reuses it).
    const outputs = [];
    for (const { p, at, len } of plan) {
      if (p.kind === 'output') {
        let data;
        if (p.returned) {
          data = new ARRAY[p.dtype](1);
          data[0] = p.dtype === 'bool' ? Number(result) & 0xff ? 1 : 0 : result;
        } else {
          data = new ARRAY[p.dtype](this._memory.buffer, at, len).slice();
        }
        outputs[p.output] = { data, shape: p.shape.map((d) => (typeof d === 'number' ? d : extents.get(d))) };
      } else if (p.kind === 'selection') {
        outputs[p.output] = { at, len };
      } else if (p.kind === 'count') {
        const sel = outputs[p.output];
        const count = Number(new BigInt64Array(this._memory.buffer, at, 1)[0]);
        outputs[p.output] = { data: new Uint32Array(this._memory.buffer, sel.at, count).slice(), shape: [count] };
      }
    }
    return resultsFor(this.outputs, outputs);
  }

  /** `runSync` as a Promise (it still runs on this thread). */
  run(values) {
    try {
      return Promise.resolve(this.runSync(values));
    } catch (e) {
      return Promise.reject(e);
    }
  }
}

/** Compiles and instantiates a kiln wasm module (its bytes). */
async function instantiate(bytes) {
  const module = await WebAssembly.compile(bytes);
  const instance = await WebAssembly.instantiate(module, imports(module));
  return new WasmFunction(module, instance);
}

/** `instantiate`, synchronously. */
function instantiateSync(bytes) {
  const module = new WebAssembly.Module(bytes);
  return new WasmFunction(module, new WebAssembly.Instance(module, imports(module)));
}

module.exports = { instantiate, instantiateSync, fma, fmaf, fmafWasm, Tensor };
