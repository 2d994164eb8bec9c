'use strict';
// The workflow of the libtorch add-on post, without libtorch: a Python script
// exports torchvision's ResNet-18 as kiln's fx importer reads it; Node loads
// it and runs a 1x3x224x224 image; the logits match eager torch's, on every
// JIT tier and as a wasm module.

const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const fs = require('node:fs');
const os = require('node:os');
const { execFileSync } = require('node:child_process');
const kiln = require('..');

const ROOT = path.resolve(__dirname, '..', '..', '..');
const PYTHON = process.env.KILN_PYTHON || path.join(ROOT, '.venv', 'bin', 'python');

function floats(file) {
  const bytes = fs.readFileSync(file);
  return new Float32Array(new Uint8Array(bytes).buffer);
}

test('ResNet-18 exported by torch runs from Node and matches eager', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-resnet-'));
  try {
    execFileSync(PYTHON, [path.join(__dirname, 'export_resnet.py'), dir], { stdio: 'inherit' });
    const x = kiln.tensor(floats(path.join(dir, 'input.f32')), [1, 3, 224, 224]);
    const want = floats(path.join(dir, 'logits.f32'));
    const scale = want.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
    let reference = null;
    for (const tier of ['auto', 'llvm', 'cranelift']) {
      const f = kiln.load(path.join(dir, 'module.txt'), { tier, inputs: { x: 'f32[1, 3, 224, 224]' } });
      assert.deepEqual(f.inputs, [{ name: 'x', dtype: 'f32', shape: [1, 3, 224, 224] }]);
      const y = Object.values(await f.run({ x }))[0];
      assert.deepEqual(y.shape, [1, 1000]);
      let worst = 0;
      y.data.forEach((v, i) => {
        worst = Math.max(worst, Math.abs(v - want[i]));
      });
      assert.ok(worst <= 1e-5 * scale, `${tier}: error ${worst} at scale ${scale}`);
      // Every tier returns the same bits, async or not.
      const sync = Buffer.from(Object.values(f.runSync({ x }))[0].data.buffer);
      assert.deepEqual(Buffer.from(y.data.buffer), sync, tier);
      if (reference === null) reference = sync;
      else assert.deepEqual(sync, reference, tier);
    }
    // The portable path: the same model as a wasm module on Node's own
    // WebAssembly, the native bits.
    const bytes = kiln.aotLoad(path.join(dir, 'module.txt'), { inputs: { x: 'f32[1, 3, 224, 224]' }, emit: 'wasm', target: 'wasm32' });
    const net = await kiln.wasm.instantiate(bytes);
    const y = Object.values(net.runSync({ x }))[0];
    assert.deepEqual(Buffer.from(y.data.buffer), reference, 'wasm');
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
