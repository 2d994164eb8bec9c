//! The native half of kiln's npm package (`crates/node`): loading and
//! compiling sources, and calling compiled programs on typed arrays, on the
//! calling thread (`runSync`) or on libuv's thread pool (`run`, a
//! `Promise`). The JavaScript half (`index.js`) gives the API its shape:
//! inputs by name, tensors as `{ data, shape, dtype }`, kiln's error
//! classes. docs/node.md is the user's guide.
//!
//! Every error this module raises carries its kind in front of the
//! message, `KILN:<Kind>:` (`ParseError`, `CompileError`, `ExecError`,
//! `DivisionByZeroError`, `IndexOutOfRangeError`, `TypeError`,
//! `RangeError`, `IoError`); `index.js` turns it into that class and
//! strips it, the same for a sync throw and a rejected promise.

use kiln::ir::exec::{bind_shapes, DimBindings, InputShape};
use kiln::{
    ArrayMut, ArrayRef, CompileOptions, DType, Dim, Engine, ExecError, Format, LoadOptions,
    Program, Scalar, Tier, Type, Verified,
};
use napi::bindgen_prelude::{
    AsyncTask, BigInt, BigInt64Array, Buffer, Either, Either6, Float32Array, Float64Array,
    FromNapiValue, Int32Array, TypedArray, TypedArrayType, Uint32Array, Uint8Array,
};
use napi::{Env, JsValue, Status, Task, Unknown, ValueType};
use napi_derive::napi;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// What kind of error, as `index.js` maps it to a class.
#[derive(Copy, Clone, Debug)]
enum Kind {
    Parse,
    Compile,
    Exec,
    DivisionByZero,
    IndexOutOfRange,
    Type,
    Range,
    Io,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Parse => "ParseError",
            Kind::Compile => "CompileError",
            Kind::Exec => "ExecError",
            Kind::DivisionByZero => "DivisionByZeroError",
            Kind::IndexOutOfRange => "IndexOutOfRangeError",
            Kind::Type => "TypeError",
            Kind::Range => "RangeError",
            Kind::Io => "IoError",
        }
    }
}

/// An error of `kind` with kiln's message, tagged for `index.js`.
fn error(kind: Kind, message: impl AsRef<str>) -> napi::Error {
    napi::Error::new(
        Status::GenericFailure,
        format!("KILN:{}:{}", kind.name(), message.as_ref()),
    )
}

/// A run-time error as its class: integer division by zero and an index
/// out of range have their own; inputs of the wrong count or dtype are
/// `TypeError`s, of the wrong length `RangeError`s.
fn exec_error(e: ExecError) -> napi::Error {
    let kind = match e {
        ExecError::DivisionByZero { .. } => Kind::DivisionByZero,
        ExecError::IndexOutOfRange { .. } => Kind::IndexOutOfRange,
        ExecError::InputCount { .. } | ExecError::InputType { .. } => Kind::Type,
        ExecError::Length { .. } | ExecError::OutputCount { .. } | ExecError::Output { .. } => {
            Kind::Range
        }
        ExecError::Unsupported(_) => Kind::Exec,
    };
    error(kind, e.to_string())
}

/// How to compile: what `kiln.compile` and `kiln.load` take besides the
/// source.
#[napi(object)]
pub struct Options {
    /// `auto` (the default), `cranelift`, `llvm`, `vm` or `interp`.
    pub tier: Option<String>,
    /// Input types by name, in the CLI's `--input` syntax (`f32[n, 3]`).
    pub inputs: Option<HashMap<String, String>>,
    /// `py`, `kiln`, `fx` or `tf`: the source's format where its name does
    /// not say (`compile` defaults to `py`).
    pub format: Option<String>,
    /// TensorFlow: the outputs (`node` or `node:k`).
    pub outputs: Option<Vec<String>>,
    /// torch.fx: the `state_dict` as safetensors bytes (`load` reads the
    /// `weights.safetensors` beside the graph without it).
    pub weights: Option<Buffer>,
    /// torch.fx: the text `print(gm)` writes (`load` reads the `module.txt`
    /// beside the graph without it).
    pub modules: Option<String>,
    /// Run kiln's graph optimizations first (default `true`).
    pub optimize: Option<bool>,
}

/// One input or output: its name, dtype and shape (numbers, and symbols
/// as strings).
#[napi(object)]
pub struct Port {
    /// The name.
    pub name: String,
    /// `f32`, `f64`, `i32`, `i64`, `bool`; `selection` for a filter's rows.
    pub dtype: String,
    /// The dimensions: a number, or a symbol's name (`"n"`).
    pub shape: Vec<Either<f64, String>>,
}

/// One output of a call: its elements (an output's own typed array,
/// row-major) and its shape.
#[napi(object)]
pub struct Output {
    /// The elements: `Float32Array`, `Float64Array`, `Int32Array`,
    /// `BigInt64Array`, `Uint8Array` (bool, 0 or 1), or a selection's
    /// row indices as a `Uint32Array`.
    pub data:
        Either6<Float32Array, Float64Array, Int32Array, BigInt64Array, Uint8Array, Uint32Array>,
    /// The dimensions (empty for a scalar).
    pub shape: Vec<f64>,
}

/// The compiled program a [`Function`] and its calls share.
struct Compiled {
    program: Box<dyn Program + Send + Sync>,
    tier: Tier,
    inputs: Vec<(String, Type)>,
    outputs: Vec<(String, Type)>,
}

/// An input as a call holds it: a scalar, or a typed array (a reference
/// that keeps it alive while the pool runs the call; no copy) with the
/// shape the caller gave, if any.
enum Input {
    Scalar(Scalar),
    F32(Float32Array, Option<Vec<u64>>),
    F64(Float64Array, Option<Vec<u64>>),
    I32(Int32Array, Option<Vec<u64>>),
    I64(BigInt64Array, Option<Vec<u64>>),
    /// A `Uint8Array` of 0s and 1s, read as `bool`s in place; any other
    /// byte makes a copy (nonzero is `true`).
    Bool(Uint8Array, Option<Vec<u64>>, Option<Vec<bool>>),
}

impl Input {
    fn shape(&self) -> Option<&[u64]> {
        match self {
            Input::Scalar(_) => None,
            Input::F32(_, s)
            | Input::F64(_, s)
            | Input::I32(_, s)
            | Input::I64(_, s)
            | Input::Bool(_, s, _) => s.as_deref(),
        }
    }

    fn as_ref(&self) -> ArrayRef<'_> {
        match self {
            Input::Scalar(s) => ArrayRef::Scalar(*s),
            Input::F32(a, _) => ArrayRef::F32(a),
            Input::F64(a, _) => ArrayRef::F64(a),
            Input::I32(a, _) => ArrayRef::I32(a),
            Input::I64(a, _) => ArrayRef::I64(a),
            Input::Bool(_, _, Some(copy)) => ArrayRef::Bool(copy),
            Input::Bool(a, _, None) => {
                let bytes: &[u8] = a;
                // SAFETY: every byte was checked to be 0 or 1 (`bool`'s two
                // valid bit patterns) when the input was taken, and `bool`
                // has `u8`'s size and alignment.
                ArrayRef::Bool(unsafe {
                    std::slice::from_raw_parts(bytes.as_ptr().cast::<bool>(), bytes.len())
                })
            }
        }
    }
}

/// An output's room, allocated for the call; its `Vec` becomes the typed
/// array's memory.
enum Room {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
    Selection(Vec<u32>),
}

/// `len` zeros, or a `RangeError` where the room cannot be had (an output
/// of more elements than memory holds must not abort the process).
fn zeroed<T: Clone>(len: u64, zero: T, what: &str) -> napi::Result<Vec<T>> {
    let too_big = || {
        error(
            Kind::Range,
            format!("output `{what}`: no room for {len} elements"),
        )
    };
    let len = usize::try_from(len).map_err(|_| too_big())?;
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| too_big())?;
    v.resize(len, zero);
    Ok(v)
}

impl Room {
    fn new(name: &str, ty: &Type, bindings: &DimBindings) -> napi::Result<(Room, Vec<u64>)> {
        let extent = |d: &Dim| {
            bindings
                .extent(d)
                .ok_or_else(|| error(Kind::Range, format!("dimension `{d}` is bound by no input")))
        };
        Ok(match ty {
            Type::Tensor(t) => {
                let shape = t
                    .shape
                    .iter()
                    .map(extent)
                    .collect::<napi::Result<Vec<_>>>()?;
                let len = shape
                    .iter()
                    .try_fold(1u64, |acc, &d| acc.checked_mul(d))
                    .unwrap_or(u64::MAX);
                let room = match t.dtype {
                    DType::F32 => Room::F32(zeroed(len, 0.0, name)?),
                    DType::F64 => Room::F64(zeroed(len, 0.0, name)?),
                    DType::I32 => Room::I32(zeroed(len, 0, name)?),
                    DType::I64 => Room::I64(zeroed(len, 0, name)?),
                    DType::Bool => Room::Bool(zeroed(len, false, name)?),
                };
                (room, shape)
            }
            Type::Selection(dim) => {
                let rows = extent(dim)?;
                (Room::Selection(zeroed(rows, 0, name)?), vec![rows])
            }
        })
    }

    fn as_mut(&mut self) -> ArrayMut<'_> {
        match self {
            Room::F32(v) => ArrayMut::F32(v),
            Room::F64(v) => ArrayMut::F64(v),
            Room::I32(v) => ArrayMut::I32(v),
            Room::I64(v) => ArrayMut::I64(v),
            Room::Bool(v) => ArrayMut::Bool(v),
            Room::Selection(v) => ArrayMut::Selection(v),
        }
    }

    /// The typed array, its memory the room's own (no copy).
    fn into_output(self, shape: Vec<u64>, written: usize) -> Output {
        let mut shape: Vec<f64> = shape.into_iter().map(|d| d as f64).collect();
        let data = match self {
            Room::F32(v) => Either6::A(Float32Array::new(v)),
            Room::F64(v) => Either6::B(Float64Array::new(v)),
            Room::I32(v) => Either6::C(Int32Array::new(v)),
            Room::I64(v) => Either6::D(BigInt64Array::new(v)),
            Room::Bool(v) => {
                let mut v = std::mem::ManuallyDrop::new(v);
                // SAFETY: `bool` has `u8`'s size and alignment and its bytes
                // are 0 or 1, so the allocation is a valid `Vec<u8>` of the
                // same length and capacity, owned by it alone from here (no
                // copy, as for every other dtype).
                let bytes = unsafe {
                    Vec::from_raw_parts(v.as_mut_ptr().cast::<u8>(), v.len(), v.capacity())
                };
                Either6::E(Uint8Array::new(bytes))
            }
            Room::Selection(mut v) => {
                v.truncate(written);
                shape = vec![written as f64];
                Either6::F(Uint32Array::new(v))
            }
        };
        Output { data, shape }
    }
}

/// Checks a given shape against the declared one (rank, fixed extents,
/// the symbols' extents so far) and the data's length, binding symbols.
fn check_shape(
    name: &str,
    declared: &[Dim],
    given: &[u64],
    len: usize,
    symbols: &mut HashMap<String, u64>,
) -> napi::Result<()> {
    let show = |dims: &[u64]| {
        let d: Vec<String> = dims.iter().map(u64::to_string).collect();
        format!("[{}]", d.join(", "))
    };
    let declared_text = || {
        let d: Vec<String> = declared.iter().map(Dim::to_string).collect();
        format!("[{}]", d.join(", "))
    };
    if given.len() != declared.len() {
        return Err(error(
            Kind::Range,
            format!(
                "input `{name}`: shape {} has rank {}, the input is {} (rank {})",
                show(given),
                given.len(),
                declared_text(),
                declared.len()
            ),
        ));
    }
    for (d, &g) in declared.iter().zip(given) {
        let want = match d {
            Dim::Fixed(n) => Some(*n),
            Dim::Sym(s) => symbols.get(&**s).copied(),
        };
        match (want, d) {
            (Some(n), _) if n != g => {
                return Err(error(
                    Kind::Range,
                    format!(
                        "input `{name}`: shape {} does not match {} (dimension `{d}` is {n})",
                        show(given),
                        declared_text()
                    ),
                ))
            }
            (None, Dim::Sym(s)) => {
                symbols.insert(s.to_string(), g);
            }
            _ => {}
        }
    }
    let elements = given.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
    if elements != Some(len as u64) {
        return Err(error(
            Kind::Range,
            format!(
                "input `{name}`: shape {} holds {} elements, the array has {len}",
                show(given),
                elements.map_or_else(|| "too many".to_string(), |e| e.to_string())
            ),
        ));
    }
    Ok(())
}

impl Compiled {
    /// Runs the program on `inputs` (the caller's memory, read in place)
    /// into fresh rooms: each output with its shape.
    fn call(&self, inputs: &[Input]) -> napi::Result<Vec<(Room, Vec<u64>, usize)>> {
        if inputs.len() != self.inputs.len() {
            return Err(exec_error(ExecError::InputCount {
                expected: self.inputs.len(),
                got: inputs.len(),
            }));
        }
        let mut symbols = HashMap::new();
        for (input, (name, ty)) in inputs.iter().zip(&self.inputs) {
            if let (Some(shape), Some(t)) = (input.shape(), ty.as_tensor()) {
                let len = match input.as_ref().shape() {
                    InputShape::Array(_, n) => n as usize,
                    _ => 1,
                };
                check_shape(name, &t.shape, shape, len, &mut symbols)?;
            }
        }
        let refs: Vec<ArrayRef<'_>> = inputs.iter().map(Input::as_ref).collect();
        let shapes: Vec<InputShape> = refs.iter().map(ArrayRef::shape).collect();
        let verified = self.program.verified();
        let bindings =
            bind_shapes(verified, &shapes, |i| refs[i].describe()).map_err(exec_error)?;
        let mut rooms = self
            .outputs
            .iter()
            .map(|(name, ty)| Room::new(name, ty, &bindings))
            .collect::<napi::Result<Vec<_>>>()?;
        let mut muts: Vec<ArrayMut<'_>> = rooms.iter_mut().map(|(r, _)| r.as_mut()).collect();
        let written = self
            .program
            .run_arrays(&refs, &mut muts)
            .map_err(exec_error)?;
        drop(muts);
        Ok(rooms
            .into_iter()
            .zip(written)
            .map(|((room, shape), n)| (room, shape, n))
            .collect())
    }

    /// Takes the call's arguments, in signature order, off the JavaScript
    /// values: a number, `BigInt` or boolean for a scalar input; a typed
    /// array of the input's dtype for a tensor, with the shape given beside
    /// it or none (the declared shape, one symbol inferred from the length).
    fn take_inputs(
        &self,
        env: &Env,
        args: Vec<Unknown<'_>>,
        shapes: Vec<Option<Vec<f64>>>,
    ) -> napi::Result<Vec<Input>> {
        if args.len() != self.inputs.len() {
            return Err(exec_error(ExecError::InputCount {
                expected: self.inputs.len(),
                got: args.len(),
            }));
        }
        let mut shapes = shapes.into_iter();
        let mut taken = Vec::with_capacity(args.len());
        for (arg, (name, ty)) in args.into_iter().zip(&self.inputs) {
            let shape = match shapes.next().flatten() {
                Some(dims) => Some(
                    dims.iter()
                        .map(|&d| {
                            (d >= 0.0 && d.fract() == 0.0 && d <= 9.007_199_254_740_991e15)
                                .then_some(d as u64)
                                .ok_or_else(|| {
                                    error(
                                        Kind::Type,
                                        format!(
                                            "input `{name}`: a shape holds non-negative \
                                             integers, not {d}"
                                        ),
                                    )
                                })
                        })
                        .collect::<napi::Result<Vec<u64>>>()?,
                ),
                None => None,
            };
            let tensor = ty.as_tensor().expect("verified inputs are tensors");
            taken.push(take_input(
                env,
                arg,
                name,
                tensor.dtype,
                tensor.is_scalar(),
                shape,
            )?);
        }
        Ok(taken)
    }
}

fn dtype_of_array(t: TypedArrayType) -> Option<(DType, &'static str)> {
    Some(match t {
        TypedArrayType::Float32 => (DType::F32, "Float32Array"),
        TypedArrayType::Float64 => (DType::F64, "Float64Array"),
        TypedArrayType::Int32 => (DType::I32, "Int32Array"),
        TypedArrayType::BigInt64 => (DType::I64, "BigInt64Array"),
        TypedArrayType::Uint8 => (DType::Bool, "Uint8Array"),
        _ => return None,
    })
}

fn array_for(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "Float32Array",
        DType::F64 => "Float64Array",
        DType::I32 => "Int32Array",
        DType::I64 => "BigInt64Array",
        DType::Bool => "Uint8Array",
    }
}

fn take_input(
    env: &Env,
    arg: Unknown<'_>,
    name: &str,
    dtype: DType,
    scalar: bool,
    shape: Option<Vec<u64>>,
) -> napi::Result<Input> {
    let (raw_env, raw) = (env.raw(), arg.raw());
    let kind = arg.get_type()?;
    let wrong = |got: &str| {
        let want = if scalar {
            match dtype {
                DType::I64 => "a BigInt or an integer number".to_string(),
                DType::Bool => "a boolean".to_string(),
                _ => "a number".to_string(),
            }
        } else {
            format!("a {}", array_for(dtype))
        };
        error(
            Kind::Type,
            format!("input `{name}` ({dtype}) takes {want}, not {got}"),
        )
    };
    if scalar {
        if shape.as_ref().is_some_and(|s| !s.is_empty()) {
            return Err(error(
                Kind::Range,
                format!("input `{name}` is a scalar: its shape is []"),
            ));
        }
        // SAFETY (each `from_napi_value` below): `raw` is a live value of
        // this call's environment, of the type just checked.
        let value = match (kind, dtype) {
            (ValueType::Number, DType::F64) => {
                Scalar::F64(unsafe { f64::from_napi_value(raw_env, raw)? })
            }
            (ValueType::Number, DType::F32) => {
                Scalar::F32(unsafe { f64::from_napi_value(raw_env, raw)? } as f32)
            }
            (ValueType::Number | ValueType::BigInt, DType::I32 | DType::I64) => {
                let v = if kind == ValueType::BigInt {
                    let (v, lossless) = unsafe { BigInt::from_napi_value(raw_env, raw)? }.get_i64();
                    lossless.then_some(v)
                } else {
                    let f = unsafe { f64::from_napi_value(raw_env, raw)? };
                    (f.fract() == 0.0 && f.abs() <= 9.007_199_254_740_991e15).then_some(f as i64)
                };
                let v = v.ok_or_else(|| wrong("a number that is no 64-bit integer"))?;
                if dtype == DType::I32 {
                    Scalar::I32(i32::try_from(v).map_err(|_| {
                        error(
                            Kind::Range,
                            format!("input `{name}` (i32): {v} is out of range"),
                        )
                    })?)
                } else {
                    Scalar::I64(v)
                }
            }
            (ValueType::Boolean, DType::Bool) => {
                Scalar::Bool(unsafe { bool::from_napi_value(raw_env, raw)? })
            }
            (other, _) => return Err(wrong(&format!("{other}").to_lowercase())),
        };
        return Ok(Input::Scalar(value));
    }
    if kind != ValueType::Object {
        return Err(wrong(&format!("{kind}").to_lowercase()));
    }
    // SAFETY: `raw` is a live value of this call's environment.
    let view = unsafe { TypedArray::from_napi_value(raw_env, raw) }
        .map_err(|_| wrong("an object that is no typed array"))?;
    match dtype_of_array(view.typed_array_type) {
        Some((d, _)) if d == dtype => {}
        Some((_, got)) => return Err(wrong(&format!("a {got}"))),
        None => return Err(wrong(&format!("a {:?} typed array", view.typed_array_type))),
    }
    // SAFETY (each): `raw` is a typed array of exactly this type; the
    // owned handle holds a reference to it for as long as the call runs.
    Ok(match dtype {
        DType::F32 => Input::F32(
            unsafe { Float32Array::from_napi_value(raw_env, raw)? },
            shape,
        ),
        DType::F64 => Input::F64(
            unsafe { Float64Array::from_napi_value(raw_env, raw)? },
            shape,
        ),
        DType::I32 => Input::I32(unsafe { Int32Array::from_napi_value(raw_env, raw)? }, shape),
        DType::I64 => Input::I64(
            unsafe { BigInt64Array::from_napi_value(raw_env, raw)? },
            shape,
        ),
        DType::Bool => {
            let bytes = unsafe { Uint8Array::from_napi_value(raw_env, raw)? };
            let copy = bytes
                .iter()
                .any(|&b| b > 1)
                .then(|| bytes.iter().map(|&b| b != 0).collect());
            Input::Bool(bytes, shape, copy)
        }
    })
}

fn port(name: &str, ty: &Type) -> Port {
    let (dtype, dims): (String, &[Dim]) = match ty {
        Type::Tensor(t) => (t.dtype.to_string(), &t.shape),
        Type::Selection(d) => ("selection".to_string(), std::slice::from_ref(d)),
    };
    let shape = dims
        .iter()
        .map(|d| match d {
            Dim::Fixed(n) => Either::A(*n as f64),
            Dim::Sym(s) => Either::B(s.to_string()),
        })
        .collect();
    Port {
        name: name.to_string(),
        dtype,
        shape,
    }
}

/// A compiled graph: `runSync` on the calling thread, `run` on libuv's pool.
#[napi]
pub struct Function {
    compiled: Arc<Compiled>,
}

#[napi]
impl Function {
    /// The inputs, in signature order.
    #[napi(getter)]
    pub fn inputs(&self) -> Vec<Port> {
        let c = &self.compiled;
        c.inputs.iter().map(|(n, t)| port(n, t)).collect()
    }

    /// The outputs, in order.
    #[napi(getter)]
    pub fn outputs(&self) -> Vec<Port> {
        let c = &self.compiled;
        c.outputs.iter().map(|(n, t)| port(n, t)).collect()
    }

    /// The tier that compiled it.
    #[napi(getter)]
    pub fn tier(&self) -> String {
        self.compiled.tier.name().to_string()
    }

    /// Runs on this thread: `args` in signature order, `shapes[i]` the
    /// shape of tensor input `i` or `null`.
    #[napi]
    pub fn run_sync(
        &self,
        env: Env,
        args: Vec<Unknown<'_>>,
        shapes: Vec<Option<Vec<f64>>>,
    ) -> napi::Result<Vec<Output>> {
        let inputs = self.compiled.take_inputs(&env, args, shapes)?;
        let results = self.compiled.call(&inputs)?;
        Ok(results
            .into_iter()
            .map(|(room, shape, n)| room.into_output(shape, n))
            .collect())
    }

    /// Runs on libuv's thread pool: a `Promise` of the outputs. The typed
    /// arrays are read in place while it runs: do not write to them until
    /// it settles.
    #[napi(ts_return_type = "Promise<Array<Output>>")]
    pub fn run(
        &self,
        env: Env,
        args: Vec<Unknown<'_>>,
        shapes: Vec<Option<Vec<f64>>>,
    ) -> napi::Result<AsyncTask<RunTask>> {
        let inputs = self.compiled.take_inputs(&env, args, shapes)?;
        Ok(AsyncTask::new(RunTask {
            compiled: self.compiled.clone(),
            inputs,
        }))
    }
}

/// A call on the pool: the program and the inputs it reads.
pub struct RunTask {
    compiled: Arc<Compiled>,
    inputs: Vec<Input>,
}

/// A call's outputs, computed on the pool, each with its shape and how
/// many elements it got.
pub struct Finished(Vec<(Room, Vec<u64>, usize)>);

impl Task for RunTask {
    type Output = Finished;
    type JsValue = Vec<Output>;

    fn compute(&mut self) -> napi::Result<Self::Output> {
        self.compiled.call(&self.inputs).map(Finished)
    }

    fn resolve(&mut self, _: Env, output: Self::Output) -> napi::Result<Self::JsValue> {
        Ok(output
            .0
            .into_iter()
            .map(|(room, shape, n)| room.into_output(shape, n))
            .collect())
    }

    fn finally(self, _: Env) -> napi::Result<()> {
        // The references to the inputs go here, on the JavaScript thread.
        drop(self.inputs);
        Ok(())
    }
}

fn format_named(name: &str) -> napi::Result<Format> {
    Format::named(name).map_err(|m| error(Kind::Type, m))
}

/// Loads `bytes` (named `name` in messages), verifies and compiles it.
fn compile_bytes(
    bytes: &[u8],
    name: &str,
    format: Format,
    options: &Options,
    beside: Option<&Path>,
) -> napi::Result<Function> {
    let tier_name = options.tier.as_deref().unwrap_or("auto");
    let tier: Tier = tier_name.parse().map_err(|_| {
        error(
            Kind::Type,
            format!("tier must be one of {}, not {tier_name:?}", Tier::names()),
        )
    })?;
    let verified = load_verified(bytes, name, format, options, beside)?;
    let compile = CompileOptions {
        optimize: options.optimize.unwrap_or(true),
        ..Default::default()
    };
    let failed = |e: kiln::CompileError| error(Kind::Compile, format!("{name}: {e}"));
    let program: Box<dyn Program + Send + Sync> = match tier {
        Tier::Interp => Box::new(
            kiln::Interpreter
                .compile(&verified, &compile)
                .map_err(failed)?,
        ),
        Tier::Auto => Box::new(kiln::Auto.compile(&verified, &compile).map_err(failed)?),
        t => Box::new(
            t.backend()
                .map_err(|e| error(Kind::Compile, format!("{name}: {e}")))?
                .compile(&verified, &compile)
                .map_err(failed)?,
        ),
    };
    let g = program.verified().graph();
    let named = |n: &str, v| (n.to_string(), g.ty(v).clone());
    let inputs = g.inputs().iter().map(|i| named(&i.name, i.value)).collect();
    let outputs = g
        .outputs()
        .iter()
        .map(|o| named(&o.name, o.value))
        .collect();
    Ok(Function {
        compiled: Arc::new(Compiled {
            program,
            tier,
            inputs,
            outputs,
        }),
    })
}

/// Loads `bytes` (named `name` in messages) as `format` with what
/// `options` gives (input types, outputs, weights and the module tree, or
/// those files beside `beside`) and verifies it.
fn load_verified(
    bytes: &[u8],
    name: &str,
    format: Format,
    options: &Options,
    beside: Option<&Path>,
) -> napi::Result<Verified> {
    let mut load = LoadOptions::default();
    for (input, text) in options.inputs.iter().flatten() {
        let ty = kiln::parse_type(text)
            .map_err(|e| error(Kind::Type, format!("input `{input}`: {e}")))?;
        load.give_input(input, ty);
    }
    load.tf.outputs = options.outputs.clone().unwrap_or_default();
    // torch.fx: the weights and the module tree given, else the files beside
    // the graph (the CLI's rule).
    let read_beside = |file: &str| -> napi::Result<Option<(Vec<u8>, String)>> {
        let Some(graph) = beside.filter(|_| format == Format::Fx) else {
            return Ok(None);
        };
        let path = graph.with_file_name(file);
        if !path.is_file() || path == graph {
            return Ok(None);
        }
        let bytes = std::fs::read(&path)
            .map_err(|e| error(Kind::Io, format!("{}: cannot read: {e}", path.display())))?;
        Ok(Some((bytes, path.display().to_string())))
    };
    let weights = match &options.weights {
        Some(b) => Some((b.to_vec(), "weights".to_string())),
        None => read_beside("weights.safetensors")?,
    };
    if let Some((bytes, from)) = weights {
        load.fx.weights = kiln::frontend::fx::read_weights(&bytes)
            .map_err(|e| error(Kind::Parse, format!("{from}: error: {}", e.message)))?;
    }
    let modules = match &options.modules {
        Some(text) => Some((text.clone().into_bytes(), "<modules>".to_string())),
        None => read_beside("module.txt")?,
    };
    if let Some((bytes, from)) = modules {
        let text = String::from_utf8_lossy(&bytes);
        load.fx.modules = kiln::frontend::fx::modules::parse(&text)
            .map_err(|e| error(Kind::Parse, e.render(&from, &text)))?;
    }
    let text = String::from_utf8_lossy(bytes);
    let loaded = kiln::load_bytes(bytes, format, &load).map_err(|e| {
        error(
            Kind::Parse,
            if std::str::from_utf8(bytes).is_ok() {
                e.render(name, &text)
            } else {
                format!("{name}: error: {}", e.message)
            },
        )
    })?;
    kiln::verify_located(loaded.graph, &loaded.source_map, name, &text)
        .map_err(|m| error(Kind::Compile, m))
}

/// Compiles source text (the Python subset unless `options.format` says
/// otherwise).
#[napi]
pub fn compile(source: Either<String, Buffer>, options: Option<Options>) -> napi::Result<Function> {
    let options = options.unwrap_or_else(no_options);
    let format = format_named(options.format.as_deref().unwrap_or("py"))?;
    let bytes: Vec<u8> = match source {
        Either::A(text) => text.into_bytes(),
        Either::B(buffer) => buffer.to_vec(),
    };
    compile_bytes(&bytes, "<source>", format, &options, None)
}

/// Loads a file as the CLI does (its format from its name: `.kiln`, `.py`,
/// `.fx`/`graph.txt`/`module.txt`, `.pbtxt`/`.pb`; a torch.fx graph's
/// `weights.safetensors` and `module.txt` beside it) and compiles it.
#[napi]
pub fn load(path: String, options: Option<Options>) -> napi::Result<Function> {
    let options = options.unwrap_or_else(no_options);
    let (bytes, format) = read_source(&path, &options)?;
    compile_bytes(&bytes, &path, format, &options, Some(Path::new(&path)))
}

/// What to write ahead of time (`kiln.aot`): the CLI's `aot` options.
#[napi(object)]
pub struct AotRequest {
    /// `obj`, `asm`, `llvm-ir`, `bc`, `wasm` or `header`.
    pub emit: String,
    /// `x86_64`, `aarch64`, `riscv64`, `wasm32`, `native` (the default) or
    /// an LLVM triple; `wasm` means `wasm32`.
    pub target: Option<String>,
    /// `llvm` (the default) or `cranelift`.
    pub tier: Option<String>,
    /// LLVM's `-O` level, 0 to 3 (default 3).
    pub opt_level: Option<u32>,
    /// The CPU to tune for (LLVM).
    pub cpu: Option<String>,
    /// Target features, `+f,-g` (LLVM).
    pub features: Option<String>,
    /// The exported symbol (default: the graph's name).
    pub name: Option<String>,
}

/// Compiles ahead of time: the object, module or text `request.emit`
/// names (a string for text, else bytes). `path` loads a file as `load`
/// does; otherwise `source` is source text as `compile` takes it.
#[napi]
pub fn aot(
    source: Option<Either<String, Buffer>>,
    path: Option<String>,
    options: Option<Options>,
    request: AotRequest,
) -> napi::Result<Either<String, Buffer>> {
    let options = options.unwrap_or_else(no_options);
    let verified = match (source, path) {
        (Some(source), None) => {
            let format = format_named(options.format.as_deref().unwrap_or("py"))?;
            let bytes: Vec<u8> = match source {
                Either::A(text) => text.into_bytes(),
                Either::B(buffer) => buffer.to_vec(),
            };
            load_verified(&bytes, "<source>", format, &options, None)?
        }
        (None, Some(path)) => {
            let (bytes, format) = read_source(&path, &options)?;
            load_verified(&bytes, &path, format, &options, Some(Path::new(&path)))?
        }
        _ => return Err(error(Kind::Type, "aot takes source text or a file path")),
    };
    let target = match request.target.as_deref() {
        None => "native",
        Some("wasm") => "wasm32",
        Some(t) => t,
    };
    let named = kiln::aot::AotOptions::named(
        target,
        &request.emit,
        request.tier.as_deref(),
        request.opt_level.unwrap_or(3),
    )
    .map_err(|m| error(Kind::Type, m))?;
    let emit = named.emit;
    let aot = kiln::aot::AotOptions {
        cpu: request.cpu,
        features: request.features,
        symbol: request.name,
        optimize: options.optimize.unwrap_or(true),
        ..named
    };
    let bytes = kiln::aot::compile(&verified, &aot).map_err(|e| match e {
        kiln::aot::AotError::Compile(e) => error(Kind::Compile, e.to_string()),
        kiln::aot::AotError::Request(m) => error(Kind::Type, m),
    })?;
    Ok(if emit.is_text() {
        Either::A(
            String::from_utf8(bytes)
                .map_err(|_| error(Kind::Exec, "the backend wrote text that is not UTF-8"))?,
        )
    } else {
        Either::B(bytes.into())
    })
}

/// A file's bytes and format (`options.format`, else its name's).
fn read_source(path: &str, options: &Options) -> napi::Result<(Vec<u8>, Format)> {
    let file = Path::new(path);
    let format = match options.format.as_deref() {
        Some(f) => format_named(f)?,
        None => Format::from_path(file).ok_or_else(|| {
            error(
                Kind::Type,
                format!(
                    "{path}: cannot tell the format from the file name; give options.format \
                     ('kiln', 'py', 'fx' or 'tf')"
                ),
            )
        })?,
    };
    let bytes =
        std::fs::read(file).map_err(|e| error(Kind::Io, format!("{path}: cannot read: {e}")))?;
    Ok((bytes, format))
}

fn no_options() -> Options {
    Options {
        tier: None,
        inputs: None,
        format: None,
        outputs: None,
        weights: None,
        modules: None,
        optimize: None,
    }
}

/// Prepares kiln for the process's exit (`kiln::before_exit`: a tier-up
/// compile in flight finishes, none starts); `index.js` calls it on
/// `process`'s `exit` event, as Python's package does from `atexit`.
#[napi]
pub fn before_exit() {
    kiln::before_exit();
}

/// The tiers by name, as `options.tier` takes them (and `auto`).
#[napi]
pub fn tiers() -> Vec<String> {
    Tier::all().map(|t| t.name().to_string()).collect()
}

/// Sets how many threads kiln's kernels run on (default: the machine's
/// cores, or `KILN_NUM_THREADS`).
#[napi]
pub fn set_num_threads(n: u32) -> napi::Result<()> {
    if n == 0 {
        return Err(error(
            Kind::Range,
            "setNumThreads: the number of threads must be a positive integer, not 0",
        ));
    }
    kiln::threads::set_num_threads(n as usize);
    Ok(())
}
