'use strict';
// A line-by-line host for kiln's differential test of wasm.js
// (tests/node_wasm.rs): each stdin line is a JSON request { module, inputs }
// (a .wasm path; inputs in signature order as { dtype, shape, bits } with
// every element's bits in hex); each stdout line the outputs in order as
// { dtype, bits } (a selection as dtype "selection"), or { error, message }.
// It lives outside test/ because it is no test: `node --test` would run it
// and wait on its stdin.

const fs = require('node:fs');
const readline = require('node:readline');
const wasm = require('../wasm');

const modules = new Map();

function fromBits(dtype, hex) {
  const n = hex.length;
  switch (dtype) {
    case 'f32':
      return new Float32Array(Uint32Array.from(hex, (h) => parseInt(h, 16)).buffer);
    case 'f64':
      return new Float64Array(BigUint64Array.from(hex, (h) => BigInt(`0x${h}`)).buffer);
    case 'i32':
      return new Int32Array(Uint32Array.from(hex, (h) => parseInt(h, 16)).buffer);
    case 'i64':
      return new BigInt64Array(BigUint64Array.from(hex, (h) => BigInt(`0x${h}`)).buffer);
    case 'bool':
      return Uint8Array.from(hex, (h) => parseInt(h, 16));
    default:
      throw new Error(`dtype ${dtype} (${n})`);
  }
}

function toBits(data) {
  if (data instanceof Float32Array) return [...new Uint32Array(data.buffer, data.byteOffset, data.length)].map((b) => b.toString(16));
  if (data instanceof Float64Array) return [...new BigUint64Array(data.buffer, data.byteOffset, data.length)].map((b) => b.toString(16));
  if (data instanceof Int32Array) return [...new Uint32Array(data.buffer, data.byteOffset, data.length)].map((b) => b.toString(16));
  if (data instanceof BigInt64Array) return [...new BigUint64Array(data.buffer, data.byteOffset, data.length)].map((b) => b.toString(16));
  return [...data].map((b) => b.toString(16));
}

function scalar(dtype, value) {
  const data = fromBits(dtype, [value]);
  if (dtype === 'bool') return data[0] !== 0;
  return data[0];
}

function run(request) {
  let fn = modules.get(request.module);
  if (!fn) {
    // One instance at a time: a program's runs come together, and V8
    // reserves address space per wasm memory (thousands would exhaust it).
    modules.clear();
    fn = wasm.instantiateSync(fs.readFileSync(request.module));
    modules.set(request.module, fn);
  }
  const values = {};
  fn.inputs.forEach((port, i) => {
    const input = request.inputs[i];
    values[port.name] = input.scalar
      ? scalar(input.dtype, input.bits[0])
      : wasm.Tensor ? new wasm.Tensor(fromBits(input.dtype, input.bits), input.shape) : null;
  });
  const out = fn.runSync(values);
  return {
    ok: fn.outputs.map((port) => {
      const v = out[port.name];
      if (v instanceof wasm.Tensor) return { dtype: port.dtype, bits: toBits(v.data) };
      const cell = new (port.dtype === 'f32' ? Float32Array : port.dtype === 'f64' ? Float64Array
        : port.dtype === 'i32' ? Int32Array : port.dtype === 'i64' ? BigInt64Array : Uint8Array)(1);
      cell[0] = port.dtype === 'bool' ? Number(v) : v;
      return { dtype: port.dtype, bits: toBits(cell) };
    }),
  };
}

const lines = readline.createInterface({ input: process.stdin });
lines.on('line', (line) => {
  let reply;
  try {
    reply = run(JSON.parse(line));
  } catch (e) {
    reply = { error: e.constructor.name, message: String(e.message) };
  }
  process.stdout.write(`${JSON.stringify(reply)}\n`);
});
