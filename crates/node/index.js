'use strict';
// kiln for Node.js: compile a graph (the Python subset, .kiln text, torch.fx,
// a TensorFlow GraphDef) to native code and call it on typed arrays, on the
// event loop's thread (`runSync`) or on libuv's thread pool (`run`, a
// Promise). docs/node.md is the guide; index.d.ts the types.

const native = require('./kiln.node');

// No LLVM compile may be running while the process's exit handlers destroy
// LLVM's globals: a tier-up in flight finishes first, and none starts after.
process.on('exit', () => native.beforeExit());

const {
  KilnError,
  ParseError,
  CompileError,
  IoError,
  ExecError,
  DivisionByZeroError,
  IndexOutOfRangeError,
  translate,
} = require('./errors');
const wasm = require('./wasm');

const { Tensor, tensor, argumentsFor, resultsFor } = require('./tensor');

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

  /** Runs on this thread and returns the outputs by name. */
  runSync(values) {
    try {
      const [args, shapes] = argumentsFor(this.inputs, values);
      return resultsFor(this.outputs, this._native.runSync(args, shapes));
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
      const [args, shapes] = argumentsFor(this.inputs, values);
      pending = this._native.run(args, shapes);
    } catch (e) {
      return Promise.reject(translate(e));
    }
    return pending.then(
      (outputs) => resultsFor(this.outputs, outputs),
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

const REQUEST = ['emit', 'target', 'tier', 'optLevel', 'cpu', 'features', 'name'];

// Splits aot's options into the load's and the request's.
function aotOptions(options) {
  if (options === null || typeof options !== 'object' || typeof options.emit !== 'string') {
    throw new TypeError("aot needs options.emit: 'obj', 'asm', 'llvm-ir', 'bc', 'wasm' or 'header'");
  }
  const load = {};
  const request = {};
  for (const [key, value] of Object.entries(options)) {
    if (REQUEST.includes(key)) request[key] = value;
    else load[key] = value;
  }
  return [nativeOptions(load), request];
}

/**
 * Compiles source text ahead of time (the CLI's `aot`): `options.emit` is
 * `obj`, `asm`, `llvm-ir`, `bc`, `wasm` or `header`; `options.target`
 * `native` (default), `x86_64`, `aarch64`, `riscv64`, `wasm32` or a triple;
 * `tier` `llvm` or `cranelift`; `optLevel`, `cpu`, `features`, `name`; and
 * `compile`'s options. Text comes back as a string, the rest as a Buffer;
 * a wasm module runs with `kiln.wasm.instantiate`.
 */
function aot(source, options) {
  try {
    if (typeof source !== 'string' && !Buffer.isBuffer(source)) {
      throw new TypeError('aot takes source text (a string or a Buffer); aotLoad takes a file');
    }
    const [load, request] = aotOptions(options);
    return native.aot(source, null, load, request);
  } catch (e) {
    throw translate(e);
  }
}

/** `aot` of a file, read as `load` reads it. */
function aotLoad(path, options) {
  try {
    if (typeof path !== 'string') throw new TypeError('aotLoad takes a file path');
    const [load, request] = aotOptions(options);
    return native.aot(null, path, load, request);
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
  aot,
  aotLoad,
  wasm,
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
