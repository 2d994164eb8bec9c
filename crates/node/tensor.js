'use strict';
// Tensors, and inputs and outputs by name: what the add-on's functions
// (index.js) and the wasm loader's (wasm.js) share.

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

function scalarOf(data, dtype) {
  const v = data[0];
  if (dtype === 'bool') return v !== 0;
  return v; // a number, or a BigInt for i64
}

function describe(ports) {
  return ports.map((p) => `${p.name}: ${p.dtype}[${p.shape.join(', ')}]`).join(', ');
}

/**
 * The values of `ports` (the inputs) from an object by name, in order: each
 * a typed array or scalar, with the shape a tensor gave (else null).
 */
function argumentsFor(ports, values) {
  if (values === null || typeof values !== 'object' || ArrayBuffer.isView(values) || values instanceof Tensor) {
    throw new TypeError(
      `run takes an object of inputs by name (${describe(ports)}), such as { ${ports[0] ? ports[0].name : 'x'}: … }`);
  }
  const known = new Set(ports.map((p) => p.name));
  for (const key of Object.keys(values)) {
    if (!known.has(key)) throw new TypeError(`no input \`${key}\` (the inputs: ${describe(ports)})`);
  }
  const args = [];
  const shapes = [];
  for (const port of ports) {
    if (!(port.name in values)) throw new TypeError(`input \`${port.name}\` is missing (the inputs: ${describe(ports)})`);
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

/** The outputs by name: tensors, or a scalar output's value. */
function resultsFor(ports, outputs) {
  const result = {};
  outputs.forEach((o, i) => {
    const port = ports[i];
    result[port.name] =
      port.shape.length === 0 && port.dtype !== 'selection'
        ? scalarOf(o.data, port.dtype)
        : new Tensor(o.data, o.shape, port.dtype);
  });
  return result;
}

module.exports = { Tensor, tensor, dtypeOf, ARRAYS, argumentsFor, resultsFor };
