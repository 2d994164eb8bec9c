//! A pseudo-engine that runs the LLVM tier's linked wasm32 modules under the
//! `wasmi` interpreter, so every suite that takes an [`Engine`] also tests
//! `aot --emit wasm` end to end: link with wasm-ld, instantiate with the `env`
//! math imports bound to the `libm` crate (so results are bit-exact), place
//! the buffers at `__heap_base`, call, read the outputs back.

use kiln::ir::kernel::abi::{self, Arg};
use kiln::ir::kernel::{Kernel, LowerOptions};
use kiln::llvm::Options;
use kiln::{
    Buffer, CompileError, CompileOptions, CompileResult, DType, Data, Engine, ExecError,
    ExecResult, Program, Scalar, Verified,
};
use wasmi::{Linker, Memory, Module, Store, Val};

/// Compiles with `kiln::llvm::wasm` and runs under `wasmi`.
#[derive(Copy, Clone, Debug, Default)]
pub struct Wasm;

impl Engine for Wasm {
    type Program = WasmProgram;

    fn name(&self) -> &'static str {
        "llvm-wasm32"
    }

    fn compile_batch(
        &self,
        graphs: &[Verified],
        options: &CompileOptions,
    ) -> CompileResult<Vec<WasmProgram>> {
        graphs.iter().map(|g| module(g, options)).collect()
    }
}

/// One graph as a linked module (wasm-ld links one object at a time).
fn module(graph: &Verified, options: &CompileOptions) -> CompileResult<WasmProgram> {
    let graph = options.prepare(graph)?;
    let kernel = kiln::ir::kernel::lower(&graph, &LowerOptions::default())
        .map_err(|e| CompileError::Unsupported(e.to_string()))?;
    let symbol = "kernel";
    let bytes = kiln::llvm::wasm(&kernel, "wasm32", symbol, &Options::default())
        .map_err(|e| CompileError::Codegen(e.to_string()))?;
    let engine = wasmi::Engine::default();
    let module = Module::new(&engine, &bytes[..])
        .map_err(|e| CompileError::Codegen(format!("wasmi rejects the module: {e}")))?;
    Ok(WasmProgram {
        graph,
        kernel,
        engine,
        module,
    })
}

/// A graph's wasm module, instantiated afresh for each run.
pub struct WasmProgram {
    graph: Verified,
    kernel: Kernel,
    engine: wasmi::Engine,
    module: Module,
}

macro_rules! math_imports {
    ($linker:ident, $t:ty: $($name:ident = $f:path),* ; binary $($bname:ident = $bf:path),*) => {
        $($linker.func_wrap("env", stringify!($name), |x: $t| -> $t { $f(x) }).expect("defines");)*
        $($linker.func_wrap("env", stringify!($bname), |x: $t, y: $t| -> $t { $bf(x, y) }).expect("defines");)*
    };
}

fn linker(engine: &wasmi::Engine) -> Linker<()> {
    let mut l = Linker::new(engine);
    math_imports!(l, f64: sin = libm::sin, cos = libm::cos, tan = libm::tan, asin = libm::asin,
        acos = libm::acos, atan = libm::atan, sinh = libm::sinh, cosh = libm::cosh,
        tanh = libm::tanh, exp = libm::exp, exp2 = libm::exp2, expm1 = libm::expm1,
        log = libm::log, log2 = libm::log2, log10 = libm::log10, log1p = libm::log1p,
        cbrt = libm::cbrt, erf = libm::erf, erfc = libm::erfc, asinh = libm::asinh,
        acosh = libm::acosh, atanh = libm::atanh;
        binary pow = libm::pow, atan2 = libm::atan2, hypot = libm::hypot, fmod = libm::fmod,
        nextafter = libm::nextafter);
    math_imports!(l, f32: sinf = libm::sinf, cosf = libm::cosf, tanf = libm::tanf,
        asinf = libm::asinf, acosf = libm::acosf, atanf = libm::atanf, sinhf = libm::sinhf,
        coshf = libm::coshf, tanhf = libm::tanhf, expf = libm::expf, exp2f = libm::exp2f,
        expm1f = libm::expm1f, logf = libm::logf, log2f = libm::log2f, log10f = libm::log10f,
        log1pf = libm::log1pf, cbrtf = libm::cbrtf, erff = libm::erff, erfcf = libm::erfcf,
        asinhf = libm::asinhf, acoshf = libm::acoshf, atanhf = libm::atanhf;
        binary powf = libm::powf, atan2f = libm::atan2f, hypotf = libm::hypotf, fmodf = libm::fmodf,
        nextafterf = libm::nextafterf);
    l
}

/// A bump allocator over the module's linear memory, from `__heap_base`.
struct Heap<'a> {
    store: &'a mut Store<()>,
    memory: Memory,
    next: u64,
}

impl Heap<'_> {
    fn alloc(&mut self, bytes: &[u8]) -> i32 {
        let addr = self.next.next_multiple_of(8);
        self.next = addr + bytes.len() as u64 + 8;
        let have = self.memory.data(&*self.store).len() as u64;
        if self.next > have {
            let pages = (self.next - have).div_ceil(65536);
            self.memory
                .grow(&mut *self.store, pages)
                .expect("wasm memory grows");
        }
        let start = addr as usize;
        self.memory.data_mut(&mut *self.store)[start..start + bytes.len()].copy_from_slice(bytes);
        i32::try_from(addr).expect("wasm32 addresses fit in i32")
    }

    fn read(&self, addr: i32, len: usize) -> Vec<u8> {
        let start = addr as usize;
        self.memory.data(&*self.store)[start..start + len].to_vec()
    }
}

/// An element read back from linear memory.
fn scalar_from_bytes(dtype: DType, b: &[u8]) -> Scalar {
    Scalar::from_le_bytes(dtype, &b[..dtype.size_bytes()]).expect("one element's bytes")
}

fn scalar_val(s: Scalar) -> Val {
    match s {
        Scalar::Bool(b) => Val::I32(i32::from(b)),
        Scalar::I32(v) => Val::I32(v),
        Scalar::I64(v) => Val::I64(v),
        Scalar::F32(v) => Val::F32(v.into()),
        Scalar::F64(v) => Val::F64(v.into()),
    }
}

fn val_scalar(dtype: DType, v: &Val) -> Scalar {
    match (dtype, v) {
        (DType::Bool, Val::I32(x)) => Scalar::Bool(*x & 0xff != 0),
        (DType::I32, Val::I32(x)) => Scalar::I32(*x),
        (DType::I64, Val::I64(x)) => Scalar::I64(*x),
        (DType::F32, Val::F32(x)) => Scalar::F32(x.to_float()),
        (DType::F64, Val::F64(x)) => Scalar::F64(x.to_float()),
        _ => panic!("wasm result {v:?} is not a {dtype}"),
    }
}

fn buffer_bytes(b: &Buffer) -> Vec<u8> {
    b.iter().flat_map(Scalar::to_le_bytes).collect()
}

/// Where an output lives in linear memory.
enum Out {
    Returned(DType),
    Column(DType, i32, usize),
    Selection(i32, i32),
}

impl Program for WasmProgram {
    fn verified(&self) -> &Verified {
        &self.graph
    }

    fn run_refs(&self, inputs: &[&Data]) -> ExecResult<Vec<Data>> {
        let bindings = kiln::ir::exec::bind_inputs(&self.graph, inputs)?;
        let extents: Vec<u64> = bindings.extents().collect();
        let mut store = Store::new(&self.engine, ());
        let instance = linker(&self.engine)
            .instantiate_and_start(&mut store, &self.module)
            .map_err(|e| ExecError::Unsupported(format!("instantiate: {e}")))?;
        let memory = instance
            .get_memory(&store, "memory")
            .expect("wasm-ld exports memory");
        let heap_base = match instance
            .get_global(&store, "__heap_base")
            .expect("aot exports __heap_base")
            .get(&store)
        {
            Val::I32(v) => v as u32 as u64,
            other => panic!("__heap_base is {other:?}"),
        };
        let func = instance
            .get_func(&store, "kernel")
            .expect("the kernel is exported");
        let n_results = func.ty(&store).results().len();
        let mut heap = Heap {
            store: &mut store,
            memory,
            next: heap_base,
        };
        let mut args = Vec::new();
        let mut outs = Vec::new();
        for arg in abi::args(&self.kernel, &extents) {
            match arg {
                Arg::Input { input, by_value } => match inputs[input] {
                    Data::Scalar(s) if by_value => args.push(scalar_val(*s)),
                    Data::Scalar(s) => args.push(Val::I32(heap.alloc(&s.to_le_bytes()))),
                    Data::Column(b) => args.push(Val::I32(heap.alloc(&buffer_bytes(b)))),
                    Data::Selection(_) => unreachable!("bind_inputs rejects selections"),
                },
                Arg::Bitmap { input } => match inputs[input] {
                    Data::Column(Buffer::Bool(rows)) => {
                        args.push(Val::I32(heap.alloc(&abi::pack_bits(rows))))
                    }
                    _ => unreachable!("bind_inputs checked: a packed input is a bool column"),
                },
                Arg::Extent(n) => args.push(Val::I64(n as i64)),
                Arg::Returned { dtype, .. } => outs.push(Out::Returned(dtype)),
                Arg::Output { dtype, len, .. } => {
                    let addr = heap.alloc(&vec![0; len * dtype.size_bytes()]);
                    args.push(Val::I32(addr));
                    outs.push(Out::Column(dtype, addr, len));
                }
                Arg::Selection { len, .. } => {
                    let addr = heap.alloc(&vec![0; len * 4]);
                    args.push(Val::I32(addr));
                    outs.push(Out::Selection(addr, 0));
                }
                Arg::Const(tensor) => {
                    let bytes: Vec<u8> =
                        tensor.values.iter().flat_map(|v| v.to_le_bytes()).collect();
                    args.push(Val::I32(heap.alloc(&bytes)));
                }
                Arg::Scratch { dtype, len } => {
                    args.push(Val::I32(heap.alloc(&vec![0; len * dtype.size_bytes()])));
                }
                Arg::Count { .. } => {
                    let addr = heap.alloc(&[0; 8]);
                    args.push(Val::I32(addr));
                    if let Some(Out::Selection(_, count)) = outs.last_mut() {
                        *count = addr;
                    }
                }
            }
        }
        let mut results = vec![Val::I32(0); n_results];
        func.call(&mut *heap.store, &args, &mut results)
            .map_err(|e| ExecError::Unsupported(format!("wasm trap: {e}")))?;
        let status = match (self.kernel.direct, results.first()) {
            (false, Some(Val::I32(s))) => *s,
            _ => abi::STATUS_OK,
        };
        if status != abi::STATUS_OK {
            return Err(ExecError::from_status(
                self.graph.graph(),
                &self.kernel,
                status,
            ));
        }
        let graph = self.graph.graph();
        Ok(outs
            .into_iter()
            .zip(graph.outputs())
            .map(|(o, output)| match o {
                Out::Returned(dtype) => Data::Scalar(val_scalar(dtype, &results[0])),
                Out::Column(dtype, addr, 1)
                    if graph
                        .ty(output.value)
                        .as_tensor()
                        .is_some_and(|t| t.is_scalar()) =>
                {
                    Data::Scalar(scalar_from_bytes(
                        dtype,
                        &heap.read(addr, dtype.size_bytes()),
                    ))
                }
                Out::Column(dtype, addr, n) => {
                    let size = dtype.size_bytes();
                    let bytes = heap.read(addr, n * size);
                    let scalars: Vec<Scalar> = bytes
                        .chunks(size)
                        .map(|c| scalar_from_bytes(dtype, c))
                        .collect();
                    let mut buffer = Buffer::with_capacity(dtype, n);
                    for s in scalars {
                        buffer.push(s);
                    }
                    Data::Column(buffer)
                }
                Out::Selection(addr, count_addr) => {
                    let count =
                        i64::from_le_bytes(heap.read(count_addr, 8).try_into().expect("8 bytes"))
                            as usize;
                    let rows = heap
                        .read(addr, count * 4)
                        .chunks(4)
                        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
                        .collect();
                    Data::Selection(rows)
                }
            })
            .collect())
    }
}
