// kiln for Node.js: the types of index.js (docs/node.md is the guide).

/** A dtype kiln computes with; `selection` is a filter's row indices. */
export type DType = 'f32' | 'f64' | 'i32' | 'i64' | 'bool';

/** The typed array each dtype comes in (bool: 0 or 1 bytes). */
export type TypedArray = Float32Array | Float64Array | Int32Array | BigInt64Array | Uint8Array;

/** An input or output: name, dtype and shape (numbers and symbols' names). */
export interface Port {
  name: string;
  dtype: DType | 'selection';
  shape: Array<number | string>;
}

/** Elements in row-major order (never copied) and their shape. */
export class Tensor<T extends TypedArray | Uint32Array = TypedArray | Uint32Array> {
  constructor(data: T, shape?: number[], dtype?: DType | 'selection');
  readonly data: T;
  readonly shape: number[];
  readonly dtype: DType | 'selection';
  /** The number of elements. */
  readonly size: number;
}

/** `new Tensor(data, shape)`. */
export function tensor<T extends TypedArray>(data: T, shape?: number[]): Tensor<T>;

/** An input value: a tensor (or `{ data, shape }`), a bare typed array, or a scalar. */
export type Value = Tensor | { data: TypedArray; shape?: number[] } | TypedArray | number | bigint | boolean;

/** An output: a tensor, or a scalar output's number, BigInt (i64) or boolean. */
export type Result = Tensor | number | bigint | boolean;

export interface Options {
  /** `auto` (the default), `cranelift`, `llvm`, `vm` or `interp`. */
  tier?: 'auto' | 'cranelift' | 'llvm' | 'vm' | 'interp';
  /** Input types by name, as the CLI's `--input` writes them: `f32[n, 3]`. */
  inputs?: Record<string, string>;
  /** The source's format where its name does not say (`compile`: `py`). */
  format?: 'py' | 'kiln' | 'fx' | 'tf';
  /** TensorFlow: the outputs (`node` or `node:k`). */
  outputs?: string[];
  /** torch.fx: the state_dict as safetensors bytes. */
  weights?: Buffer | Uint8Array;
  /** torch.fx: the text `print(gm)` writes. */
  modules?: string;
  /** kiln's graph optimizations first (default true). */
  optimize?: boolean;
}

/** A compiled graph. */
export class Function {
  readonly inputs: Port[];
  readonly outputs: Port[];
  /** The tier that compiled it. */
  readonly tier: string;
  /** Runs on this thread; the outputs by name. */
  runSync(values: Record<string, Value>): Record<string, Result>;
  /** Runs on libuv's thread pool; the inputs are read in place until it settles. */
  run(values: Record<string, Value>): Promise<Record<string, Result>>;
}

/** Compiles source text (the Python subset unless `options.format` says otherwise). */
export function compile(source: string | Buffer, options?: Options): Function;
/** Loads a file as kiln's CLI does and compiles it. */
export function load(path: string, options?: Options): Function;
export interface AotOptions extends Omit<Options, 'tier'> {
  /** `obj`, `asm`, `llvm-ir`, `bc`, `wasm` or `header`. */
  emit: 'obj' | 'asm' | 'llvm-ir' | 'bc' | 'wasm' | 'header';
  /** `native` (default), `x86_64`, `aarch64`, `riscv64`, `wasm32` or an LLVM triple. */
  target?: string;
  /** `llvm` (default) or `cranelift`. */
  tier?: 'llvm' | 'cranelift';
  optLevel?: 0 | 1 | 2 | 3;
  cpu?: string;
  features?: string;
  /** The exported symbol. */
  name?: string;
}

/** Compiles source text ahead of time: text outputs as a string, the rest as a Buffer. */
export function aot(source: string | Buffer, options: AotOptions): string | Buffer;
/** `aot` of a file, read as `load` reads it. */
export function aotLoad(path: string, options: AotOptions): string | Buffer;

/** A kiln wasm module instantiated on this engine's WebAssembly (no add-on needed). */
export interface WasmFunction {
  readonly inputs: Port[];
  readonly outputs: Port[];
  readonly tier: 'wasm';
  runSync(values: Record<string, Value>): Record<string, Result>;
  run(values: Record<string, Value>): Promise<Record<string, Result>>;
}

/** `require('kiln/wasm')`, also as `kiln.wasm`. */
export const wasm: {
  instantiate(bytes: BufferSource): Promise<WasmFunction>;
  instantiateSync(bytes: BufferSource): WasmFunction;
  /** a*b + c rounded once to float64. */
  fma(a: number, b: number, c: number): number;
  /** a*b + c rounded once to float32. */
  fmaf(a: number, b: number, c: number): number;
};

/** The tiers `options.tier` names besides `auto`. */
export function tiers(): string[];
/** How many threads kiln's kernels use. */
export function setNumThreads(n: number): void;

export class KilnError extends Error {}
export class ParseError extends KilnError {}
export class CompileError extends KilnError {}
export class IoError extends KilnError {}
export class ExecError extends KilnError {}
export class DivisionByZeroError extends ExecError {}
export class IndexOutOfRangeError extends ExecError {}
