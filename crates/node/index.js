'use strict';
// kiln for Node.js: compile a graph (the Python subset, .kiln text, torch.fx,
// a TensorFlow GraphDef) to native code and call it on typed arrays, on the
// event loop's thread (`runSync`) or on libuv's thread pool (`run`, a
// Promise). docs/node.md is the guide; index.d.ts the types.

const native = require('./kiln.node');

// No LLVM compile may be running while the process's exit handlers destroy
// LLVM's globals: a tier-up in flight finishes first, and none starts after.
process.on('exit', () => native.beforeExit());

/** kiln's errors: every one below is a KilnError. */
class KilnError extends Error {
  constructor(message) {
    super(message);
    this.name = new.target.name;
  }
}
/** The source does not parse (a located message: file:line:col). */
class ParseError extends KilnError {}
/** The graph does not verify, or the tier cannot compile it. */
class CompileError extends KilnError {}
/** A file cannot be read. */
class IoError extends KilnError {}
/** A run-time failure. */
class ExecError extends KilnError {}
/** Integer division (or remainder) by zero, naming the node. */
class DivisionByZeroError extends ExecError {}
/** An index (`gather`, `embedding`) outside its axis, naming the node. */
class IndexOutOfRangeError extends ExecError {}

const KINDS = {
  ParseError,
  CompileError,
  IoError,
  ExecError,
  DivisionByZeroError,
  IndexOutOfRangeError,
  TypeError,
  RangeError,
};

// The native module tags each error `KILN:<Kind>:`; this makes it that class.
function translate(e) {
  const m = e instanceof Error ? /^KILN:(\w+):/.exec(e.message) : null;
  if (!m || !KINDS[m[1]]) return e;
  return new KINDS[m[1]](e.message.slice(m[0].length));
}

const ARRAYS = [
  [Float32Array, 'f32'],
  [Float64Array, 'f64'],
  [Int32Array, 'i32'],
  [BigInt64Array, 'i64'],
  [Uint8Array, 'bool'],
];

function dtypeOf(data) {
  for (const [type, dtype] of ARRAYS) if (data instanceof type) return dtype;
  return null;
}

/**
 * A tensor: its elements in row-major order (a typed array, never copied)
 * and its shape. Outputs come back as tensors; inputs may be tensors or bare
 * typed arrays.
 */
class Tensor {
  constructor(data, shape, dtype) {
    if (!ArrayBuffer.isView(data) || dtypeOf(data) === null && !(data instanceof Uint32Array)) {
      throw new TypeError(
        'a tensor holds a Float32Array, Float64Array, Int32Array, BigInt64Array or Uint8Array (bool)');
    }
    if (shape === undefined) shape = [data.length];
    if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
      throw new TypeError('a tensor\'s shape is an array of non-negative integers');
    }
    this.data = data;
    this.shape = shape;
    this.dtype = dtype || dtypeOf(data);
  }

  /** The number of elements. */
  get size() {
    return this.data.length;
  }
}

/** `new Tensor(data, shape)`: a typed array with its shape. */
function tensor(data, shape) {
  return new Tensor(data, shape);
}

const OPTIONS = new Set(['tier', 'inputs', 'format', 'outputs', 'weights', 'modules', 'optimize']);

function nativeOptions(options) {
  if (options === undefined || options === null) return {};
  if (typeof options !== 'object') throw new TypeError('options must be an object');
  for (const key of Object.keys(options)) {
    if (!OPTIONS.has(key)) {
      throw new TypeError(`unknown option \`${key}\` (options: ${[...OPTIONS].join(', ')})`);
    }
  }
  const out = { ...options };
  if (out.weights !== undefined && !Buffer.isBuffer(out.weights)) {
    if (!ArrayBuffer.isView(out.weights)) throw new TypeError('options.weights must be a Buffer or Uint8Array');
    out.weights = Buffer.from(out.weights.buffer, out.weights.byteOffset, out.weights.byteLength);
  }
  return out;
}

function scalarOf(data, dtype) {
  const v = data[0];
  if (dtype === 'bool') return v !== 0;
  return v; // a number, or a BigInt for i64
}

/**
 * A compiled graph. `inputs` and `outputs` describe it (name, dtype, shape:
 * numbers and symbols); `run(values)` and `runSync(values)` take the inputs
 * by name and give the outputs by name.
 */
class KilnFunction {
  constructor(handle) {
    this._native = handle;
    this.inputs = handle.inputs;
    this.outputs = handle.outputs;
    this.tier = handle.tier;
  }

  _arguments(values) {
    if (values === null || typeof values !== 'object' || ArrayBuffer.isView(values) || values instanceof Tensor) {
      throw new TypeError(
        `run takes an object of inputs by name (${this._names()}), such as { ${this.inputs[0] ? this.inputs[0].name : 'x'}: … }`);
    }
    const known = new Set(this.inputs.map((p) => p.name));
    for (const key of Object.keys(values)) {
      if (!known.has(key)) throw new TypeError(`no input \`${key}\` (the inputs: ${this._names()})`);
    }
    const args = [];
    const shapes = [];
    for (const port of this.inputs) {
      if (!(port.name in values)) throw new TypeError(`input \`${port.name}\` is missing (the inputs: ${this._names()})`);
      const v = values[port.name];
      if (v instanceof Tensor || (v !== null && typeof v === 'object' && !ArrayBuffer.isView(v) && 'data' in v)) {
        args.push(v.data);
        shapes.push(v.shape === undefined ? null : v.shape);
      } else {
        args.push(v);
        shapes.push(null);
      }
    }
    return [args, shapes];
  }

  _names() {
    return this.inputs.map((p) => `${p.name}: ${p.dtype}[${p.shape.join(', ')}]`).join(', ');
  }

  _results(outputs) {
    const result = {};
    outputs.forEach((o, i) => {
      const port = this.outputs[i];
      result[port.name] =
        port.shape.length === 0 && port.dtype !== 'selection'
          ? scalarOf(o.data, port.dtype)
          : new Tensor(o.data, o.shape, port.dtype);
    });
    return result;
  }

  /** Runs on this thread and returns the outputs by name. */
  runSync(values) {
    try {
      const [args, shapes] = this._arguments(values);
      return this._results(this._native.runSync(args, shapes));
    } catch (e) {
      throw translate(e);
    }
  }

  /**
   * Runs on libuv's thread pool (the event loop goes on); a Promise of the
   * outputs by name. The input arrays are read in place until it settles.
   */
  run(values) {
    let pending;
    try {
      const [args, shapes] = this._arguments(values);
      pending = this._native.run(args, shapes);
    } catch (e) {
      return Promise.reject(translate(e));
    }
    return pending.then(
      (outputs) => this._results(outputs),
      (e) => {
        throw translate(e);
      },
    );
  }
}

/**
 * Compiles source text: the Python subset by default, `.kiln` text, torch.fx
 * or TensorFlow with `options.format`. `options.tier`: `auto` (default),
 * `cranelift`, `llvm`, `vm`, `interp`; `options.inputs`: types by name
 * (`{ x: 'f32[n, 3]' }`).
 */
function compile(source, options) {
  try {
    if (typeof source !== 'string' && !Buffer.isBuffer(source)) {
      throw new TypeError('compile takes source text (a string or a Buffer); load takes a file');
    }
    return new KilnFunction(native.compile(source, nativeOptions(options)));
  } catch (e) {
    throw translate(e);
  }
}

/**
 * Loads a file as kiln's CLI does (its format from its name; a torch.fx
 * graph's `weights.safetensors` and `module.txt` beside it) and compiles it.
 */
function load(path, options) {
  try {
    if (typeof path !== 'string') throw new TypeError('load takes a file path');
    return new KilnFunction(native.load(path, nativeOptions(options)));
  } catch (e) {
    throw translate(e);
  }
}

/** The tiers `options.tier` names (besides `auto`). */
function tiers() {
  return native.tiers();
}

/** How many threads kiln's kernels use (default: the cores, or KILN_NUM_THREADS). */
function setNumThreads(n) {
  try {
    if (!Number.isSafeInteger(n) || n <= 0) {
      throw new RangeError(`setNumThreads: the number of threads must be a positive integer, not ${n}`);
    }
    native.setNumThreads(n);
  } catch (e) {
    throw translate(e);
  }
}

module.exports = {
  compile,
  load,
  tensor,
  tiers,
  setNumThreads,
  Tensor,
  Function: KilnFunction,
  KilnError,
  ParseError,
  CompileError,
  IoError,
  ExecError,
  DivisionByZeroError,
  IndexOutOfRangeError,
};
