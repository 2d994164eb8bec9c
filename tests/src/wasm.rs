//! A pseudo-engine that runs the LLVM tier's linked wasm32 modules under the
//! `wasmi` interpreter, so every suite that takes an [`Engine`] also tests
//! `aot --emit wasm` end to end: link with wasm-ld, instantiate with the `env`
//! math imports bound to the `libm` crate (so results are bit-exact), place
//! the buffers at `__heap_base`, call, read the outputs back.

use kiln::kernel::abi::{self, Arg, Bind, NativeArg, NativePlace};
use kiln::kernel::{Kernel, Param};
use kiln::{
    Backend, Buffer, CompileError, CompileOptions, CompileResult, DType, Data, Emit, EmitOptions,
    Engine, ExecError, ExecResult, Program, Scalar, Verified,
};
use wasmi::{Linker, Memory, Module, Store, Val};

/// Compiles with the LLVM backend's `Emit::Wasm` (as `aot` does) and runs
/// under `wasmi`.
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
    let kernel = kiln::kernel::lower(&graph, &kiln::Llvm.emit_lower_options())
        .map_err(|e| CompileError::Unsupported(e.to_string()))?;
    let request = EmitOptions {
        emit: Emit::Wasm,
        target: "wasm32".into(),
        opt_level: Default::default(),
        cpu: None,
        features: None,
    };
    let bytes = kiln::Llvm.emit(&kernel, "kernel", &request)?;
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
    (($l:ident) unary: [$($u:ident $u64:ident $u32:ident),*] binary: [$($b:ident $b64:ident $b32:ident),*]) => {
        $(
            $l.func_wrap("env", stringify!($u64), |x: f64| -> f64 { kiln::ir::math::$u64(x) }).expect("defines");
            $l.func_wrap("env", stringify!($u32), |x: f32| -> f32 { kiln::ir::math::$u32(x) }).expect("defines");
        )*
        $(
            $l.func_wrap("env", stringify!($b64), |x: f64, y: f64| -> f64 { kiln::ir::math::$b64(x, y) }).expect("defines");
            $l.func_wrap("env", stringify!($b32), |x: f32, y: f32| -> f32 { kiln::ir::math::$b32(x, y) }).expect("defines");
        )*
    };
}

/// A linker with every math function a module may import (module `env`,
/// C names), and the fused multiply-add (`fma`/`fmaf`: wasm32 has no such
/// instruction), bound to the `libm` crate, as the in-process tiers bind
/// them.
fn linker(engine: &wasmi::Engine) -> Linker<()> {
    let mut l = Linker::new(engine);
    kiln::ir::for_each_math_fn!(math_imports, l);
    l.func_wrap("env", "fma", |x: f64, y: f64, z: f64| libm::fma(x, y, z))
        .expect("defines");
    l.func_wrap("env", "fmaf", |x: f32, y: f32, z: f32| libm::fmaf(x, y, z))
        .expect("defines");
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
#[derive(Copy, Clone)]
enum Out {
    Returned(DType),
    Column(DType, i32, usize),
    Selection(i32, i32),
}

/// A call's memory in the module: every buffer placed on the heap, the
/// addresses `abi::pack` asks for as offsets.
struct WasmBind<'h, 'a, 'd> {
    kernel: &'h Kernel,
    heap: &'h mut Heap<'a>,
    inputs: &'h [&'d Data],
    outs: Vec<Option<Out>>,
}

impl Bind for WasmBind<'_, '_, '_> {
    type Error = std::convert::Infallible;

    fn scalar(&mut self, input: usize) -> Result<u64, Self::Error> {
        match self.inputs[input] {
            Data::Scalar(s) => Ok(s.bits()),
            _ => unreachable!("bind_inputs checked: a direct kernel's input is a scalar"),
        }
    }

    fn input(&mut self, input: usize) -> Result<u64, Self::Error> {
        Ok(match self.inputs[input] {
            Data::Scalar(s) => self.heap.alloc(&s.to_le_bytes()),
            Data::Column(b) => self.heap.alloc(&buffer_bytes(b)),
            Data::Selection(_) => unreachable!("bind_inputs rejects selections"),
        } as u64)
    }

    fn bitmap(&mut self, input: usize) -> Result<u64, Self::Error> {
        match self.inputs[input] {
            Data::Column(Buffer::Bool(rows)) => Ok(self.heap.alloc(&abi::pack_bits(rows)) as u64),
            _ => unreachable!("bind_inputs checked: a packed input is a bool column"),
        }
    }

    fn constant(&mut self, param: usize) -> Result<u64, Self::Error> {
        let Param::ConstIn { tensor, .. } = &self.kernel.params[param] else {
            unreachable!("a constant argument is a constant parameter")
        };
        let bytes: Vec<u8> = tensor.values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Ok(self.heap.alloc(&bytes) as u64)
    }

    fn scratch(&mut self, _: usize, dtype: DType, len: usize) -> Result<u64, Self::Error> {
        Ok(self.heap.alloc(&vec![0; len * dtype.size_bytes()]) as u64)
    }

    fn output(&mut self, output: usize, dtype: DType, len: usize) -> Result<u64, Self::Error> {
        // A direct kernel's returned output is written to 8 bytes
        // (`CompiledKernel::call`); anything else to its elements.
        let addr = self.heap.alloc(&vec![0; (len * dtype.size_bytes()).max(8)]);
        self.outs[output] = Some(Out::Column(dtype, addr, len));
        Ok(addr as u64)
    }

    fn selection(&mut self, output: usize, len: usize) -> Result<u64, Self::Error> {
        let addr = self.heap.alloc(&vec![0; len * 4]);
        self.outs[output] = Some(Out::Selection(addr, 0));
        Ok(addr as u64)
    }

    fn count(&mut self, output: usize) -> Result<u64, Self::Error> {
        let addr = self.heap.alloc(&[0; 8]);
        if let Some(Out::Selection(_, count)) = &mut self.outs[output] {
            *count = addr;
        }
        Ok(addr as u64)
    }
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
        let args = abi::args(&self.kernel, &extents);
        let mut slots = vec![0u64; args.len()];
        let mut bind = WasmBind {
            kernel: &self.kernel,
            heap: &mut heap,
            inputs,
            outs: vec![None; self.graph.graph().outputs().len()],
        };
        let Ok(()) = abi::pack(&args, &mut bind, &mut slots);
        let mut outs = bind.outs;
        // The native signature: the slots as wasm values, a direct kernel's
        // first output as the function's result.
        let signature = abi::signature(&self.kernel);
        let mut vals = vec![Val::I32(0); signature.params.len()];
        for ((arg, slot), place) in args.iter().zip(&slots).zip(&signature.places) {
            match (*place, *arg) {
                (NativePlace::Return, Arg::Returned { output, dtype }) => {
                    outs[output] = Some(Out::Returned(dtype))
                }
                (NativePlace::Return, _) => unreachable!("only a returned output is returned"),
                (NativePlace::Arg(k), _) => {
                    vals[k] = match signature.params[k] {
                        NativeArg::Pointer => Val::I32(*slot as i32),
                        NativeArg::I64 => Val::I64(*slot as i64),
                        NativeArg::Value(dtype) => scalar_val(Scalar::from_bits(dtype, *slot)),
                    }
                }
            }
        }
        let args = vals;
        let mut results = vec![Val::I32(0); n_results];
        func.call(&mut *heap.store, &args, &mut results)
            .map_err(|e| ExecError::Unsupported(format!("wasm trap: {e}")))?;
        let status = match (self.kernel.direct, results.first()) {
            (false, Some(Val::I32(s))) => *s,
            _ => abi::STATUS_OK,
        };
        if status != abi::STATUS_OK {
            return Err(self.kernel.status_error(self.graph.graph(), status));
        }
        let graph = self.graph.graph();
        Ok(outs
            .into_iter()
            .map(|o| o.expect("pack binds every output"))
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
