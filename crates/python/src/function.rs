//! `kiln.Function`: a compiled program called like a Python function.

use crate::errors::exec_error;
use crate::values::{self, Held, Room};
use kiln::{
    ArrayRef, CompileOptions, CompileResult, Dim, Engine, InterpProgram, JitProgram, Program,
    Scalar, Tier, TierUpState, TieredProgram, Type, Verified,
};
use pyo3::exceptions::{PyRuntimeWarning, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

/// The tier called `name`, as `tier=` takes it.
pub fn tier_named(name: &str) -> PyResult<Tier> {
    name.parse::<Tier>().map_err(|_| {
        PyValueError::new_err(format!(
            "tier must be one of {}, not {name:?}",
            Tier::names()
        ))
    })
}

enum Compiled {
    Interp(InterpProgram),
    Jit(JitProgram),
    /// The `auto` tier: Cranelift, then LLVM (`kiln::tierup`).
    Auto(TieredProgram),
}

impl Compiled {
    fn program(&self) -> &dyn Program {
        match self {
            Compiled::Interp(p) => p,
            Compiled::Jit(p) => p,
            Compiled::Auto(p) => p,
        }
    }
}

/// The most inputs and outputs a scalar call converts on the stack.
const MAX_DIRECT: usize = 16;

/// A compiled graph, called like a Python function: `f(x, y)` with scalars
/// or arrays, `f(x, out=buffer)` to write into the caller's array. Scalars
/// in, scalars out; arrays in, NumPy arrays out; several outputs are a tuple.
#[pyclass(module = "kiln", name = "Function", frozen)]
pub struct Function {
    compiled: Compiled,
    tier: Tier,
    /// Input names and types, in signature order.
    inputs: Vec<(String, Type)>,
    /// Output names and types, in order.
    outputs: Vec<(String, Type)>,
    /// Whether calls take the scalar fast path, which neither allocates
    /// arrays nor releases the GIL (a direct kernel of at most
    /// [`MAX_DIRECT`] inputs and outputs).
    direct: bool,
    /// What `kiln._rebuild` needs to compile this function again (pickling).
    recipe: Option<Py<PyAny>>,
    /// Whether a failed tier-up has been reported (a `RuntimeWarning`, once).
    reported: AtomicBool,
    /// The inputs that take scalars or arrays as a ufunc's do: an
    /// expression's free names no type was given for (`kiln.compile("x *
    /// 2.0")`). Compiled as `f64` scalars; arrays compile a variant.
    ufunc: Vec<usize>,
    /// The variants compiled for arrays, by their inputs' types.
    variants: Mutex<HashMap<String, Py<Function>>>,
    /// How long the compile took (on `auto`, its first tier's).
    compile_seconds: f64,
}

impl Function {
    /// Compiles `graph` on `tier` (with the GIL released by the caller).
    pub fn compile(tier: Tier, graph: &Verified, options: &CompileOptions) -> CompileResult<Self> {
        let start = std::time::Instant::now();
        let compiled = match tier {
            Tier::Interp => Compiled::Interp(kiln::Interpreter.compile(graph, options)?),
            Tier::Auto => Compiled::Auto(kiln::Auto.compile(graph, options)?),
            t => Compiled::Jit(t.backend()?.compile(graph, options)?),
        };
        let compile_seconds = start.elapsed().as_secs_f64();
        let g = compiled.program().verified().graph();
        let named = |name: &str, v| (name.to_string(), g.ty(v).clone());
        let inputs: Vec<_> = g.inputs().iter().map(|i| named(&i.name, i.value)).collect();
        let outputs: Vec<_> = g
            .outputs()
            .iter()
            .map(|o| named(&o.name, o.value))
            .collect();
        let direct = match &compiled {
            Compiled::Jit(p) => p.kernel().direct,
            Compiled::Auto(p) => p.current().kernel().direct,
            Compiled::Interp(_) => false,
        } && inputs.len() <= MAX_DIRECT
            && outputs.len() <= MAX_DIRECT;
        Ok(Function {
            compiled,
            tier,
            inputs,
            outputs,
            direct,
            recipe: None,
            reported: AtomicBool::new(false),
            ufunc: Vec::new(),
            variants: Mutex::default(),
            compile_seconds,
        })
    }

    /// Attaches what pickling needs.
    pub fn with_recipe(mut self, recipe: Py<PyAny>) -> PyResult<Self> {
        self.recipe = Some(recipe);
        Ok(self)
    }

    /// Makes the inputs not named in `typed` take arrays as a ufunc's do
    /// (each new combination of array dtypes and ranks compiles a variant,
    /// kept on the function). Needs the recipe, which says how to compile.
    pub fn with_ufunc_inputs(mut self, typed: &HashMap<String, String>) -> Self {
        self.ufunc = (self.inputs.iter().enumerate())
            .filter(|(_, (name, _))| !typed.contains_key(name))
            .map(|(i, _)| i)
            .collect();
        self
    }

    /// The variant for these arguments when an untyped input got an array
    /// (compiled on first use: its inputs typed as the arrays are), with the
    /// arguments as arrays; `None` when every untyped input got a scalar.
    fn ufunc_variant<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
    ) -> PyResult<Option<(Bound<'py, PyAny>, Bound<'py, PyTuple>)>> {
        // Python numbers first, without NumPy: the scalar calls this path
        // serves must stay nanoseconds.
        let builtin = |arg: &Bound<'py, PyAny>| {
            arg.is_instance_of::<pyo3::types::PyFloat>()
                || arg.is_instance_of::<pyo3::types::PyInt>()
        };
        let mut all_builtin = true;
        for &i in &self.ufunc {
            all_builtin &= builtin(&args.get_item(i)?);
        }
        if all_builtin {
            return Ok(None);
        }
        let numpy = py.import("numpy")?;
        let generic = numpy.getattr("generic")?;
        let mut arrays: Vec<(usize, Bound<'py, PyAny>)> = Vec::new();
        for &i in &self.ufunc {
            let arg = args.get_item(i)?;
            let scalar = builtin(&arg)
                || arg.is_instance(&generic)?
                || arg
                    .getattr("ndim")
                    .is_ok_and(|n| n.extract::<usize>().ok() == Some(0));
            if !scalar {
                arrays.push((i, numpy.call_method1("asarray", (arg,))?));
            }
        }
        if arrays.is_empty() {
            return Ok(None);
        }
        let shapes: Vec<Vec<usize>> = arrays
            .iter()
            .map(|(_, a)| a.getattr("shape")?.extract())
            .collect::<PyResult<_>>()?;
        // One shape for all: its leading extent is a symbol (as
        // `@kiln.jit(dynamic=True)` makes it), so other lengths reuse the
        // variant; shapes that differ broadcast as written.
        let shared = shapes.windows(2).all(|w| w[0] == w[1]);
        let mut types = Vec::with_capacity(arrays.len());
        for ((i, array), shape) in arrays.iter().zip(&shapes) {
            let name = &self.inputs[*i].0;
            let dtype: String = array.getattr("dtype")?.getattr("name")?.extract()?;
            let dtype = match dtype.as_str() {
                "float64" => "f64",
                "float32" => "f32",
                "int64" => "i64",
                "int32" => "i32",
                "bool" => "bool",
                other => {
                    return Err(PyTypeError::new_err(format!(
                        "input `{name}` is an array of {other}; kiln computes with float64, \
                         float32, int64, int32 and bool"
                    )))
                }
            };
            let dims: Vec<String> = (shape.iter().enumerate())
                .map(|(k, n)| {
                    if shared && k == 0 {
                        "n".to_string()
                    } else {
                        n.to_string()
                    }
                })
                .collect();
            types.push((name.clone(), format!("{dtype}[{}]", dims.join(", "))));
        }
        let key = (types.iter())
            .map(|(n, t)| format!("{n}: {t}"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut call_args: Vec<Bound<'py, PyAny>> = args.iter().collect();
        for (i, array) in arrays {
            call_args[i] = array;
        }
        let call_args = PyTuple::new(py, call_args)?;
        let cached = (self.variants.lock().unwrap_or_else(PoisonError::into_inner))
            .get(&key)
            .map(|v| v.clone_ref(py));
        if let Some(variant) = cached {
            return Ok(Some((variant.into_bound(py).into_any(), call_args)));
        }
        let recipe = self
            .recipe
            .as_ref()
            .expect("ufunc inputs come with a recipe")
            .bind(py);
        let spec = recipe.get_item(1)?.call_method0("copy")?;
        let inputs = spec.get_item("inputs")?.call_method0("copy")?;
        for (name, ty) in &types {
            inputs.set_item(name, ty)?;
        }
        spec.set_item("inputs", inputs)?;
        let (tier, optimize): (String, bool) = (
            recipe.get_item(2)?.extract()?,
            recipe.get_item(3)?.extract()?,
        );
        let variant_recipe = PyTuple::new(
            py,
            [
                "compile".into_pyobject(py)?.into_any(),
                spec.clone(),
                tier.clone().into_pyobject(py)?.into_any(),
                pyo3::types::PyBool::new(py, optimize).to_owned().into_any(),
            ],
        )?;
        let variant = crate::compile_spec(
            py,
            spec.extract()?,
            &tier,
            optimize,
            variant_recipe.into_any().unbind(),
        )?;
        let variant = Py::new(py, variant)?;
        (self.variants.lock().unwrap_or_else(PoisonError::into_inner))
            .insert(key, variant.clone_ref(py));
        Ok(Some((variant.into_bound(py).into_any(), call_args)))
    }

    fn program(&self) -> &dyn Program {
        self.compiled.program()
    }

    /// The scalar fast path: arguments converted on the stack, one call
    /// through the kernel's uniform entry (`JitProgram::call_scalars`).
    fn call_direct<'py>(
        &self,
        py: Python<'py>,
        program: &JitProgram,
        args: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut scalars = [Scalar::F64(0.0); MAX_DIRECT];
        let mut cells = [0u64; MAX_DIRECT];
        for (i, (name, ty)) in self.inputs.iter().enumerate() {
            let dtype = ty.dtype().expect("scalar inputs");
            scalars[i] = values::scalar(&args.get_item(i)?, dtype, name)?;
        }
        let outputs = &mut cells[..self.outputs.len()];
        program
            .call_scalars(&scalars[..self.inputs.len()], outputs)
            .map_err(exec_error)?;
        let value = |o: usize| {
            let dtype = self.outputs[o].1.dtype().expect("scalar outputs");
            values::scalar_to_py(py, Scalar::from_bits(dtype, cells[o]))
        };
        match self.outputs.len() {
            1 => value(0),
            n => {
                let items = (0..n).map(value).collect::<PyResult<Vec<_>>>()?;
                Ok(PyTuple::new(py, items)?.into_any())
            }
        }
    }

    /// The general path: arrays borrowed (or converted), outputs allocated or
    /// taken from `out`, the call made with the GIL released.
    fn call_arrays<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        out: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut dims: HashMap<String, u64> = HashMap::new();
        let mut held: Vec<Option<Held<'py>>> = Vec::with_capacity(self.inputs.len());
        let mut scalars: Vec<Option<Scalar>> = Vec::with_capacity(self.inputs.len());
        for (i, (name, ty)) in self.inputs.iter().enumerate() {
            let arg = args.get_item(i)?;
            let tensor = ty.as_tensor().expect("inputs are tensors");
            if tensor.is_scalar() {
                scalars.push(Some(values::scalar(&arg, tensor.dtype, name)?));
                held.push(None);
            } else {
                held.push(Some(values::array(
                    &arg,
                    tensor.dtype,
                    &tensor.shape,
                    name,
                    &mut dims,
                )?));
                scalars.push(None);
            }
        }
        let outs = self.out_arguments(out)?;
        let extent = |d: &Dim| -> PyResult<usize> {
            match d {
                Dim::Fixed(n) => Ok(*n as usize),
                Dim::Sym(s) => dims.get(&**s).map(|&n| n as usize).ok_or_else(|| {
                    PyValueError::new_err(format!("dimension `{s}` is bound by no input"))
                }),
            }
        };
        let mut rooms: Vec<Room<'py>> = Vec::with_capacity(self.outputs.len());
        for ((name, ty), out) in self.outputs.iter().zip(outs) {
            rooms.push(match ty {
                Type::Tensor(t) if t.is_scalar() => {
                    if out.is_some() {
                        return Err(PyTypeError::new_err(format!(
                            "output `{name}` is a scalar: give None for it in out"
                        )));
                    }
                    Room::Scalar(kiln::Buffer::zeroed(t.dtype, 1))
                }
                Type::Tensor(t) => {
                    let shape = t.shape.iter().map(extent).collect::<PyResult<Vec<_>>>()?;
                    Room::array(out.as_ref(), t.dtype, &shape, name)?
                }
                Type::Selection(dim) => {
                    if out.is_some() {
                        return Err(PyTypeError::new_err(format!(
                            "output `{name}` is a selection: give None for it in out"
                        )));
                    }
                    Room::selection(py, extent(dim)?, name)?
                }
            });
        }
        // A capsule's tensor that shares bytes with an `out=` array would
        // be read while the call writes it.
        for (h, (name, _)) in held.iter().zip(&self.inputs) {
            let Some(input) = h.as_ref().and_then(Held::capsule_bytes) else {
                continue;
            };
            for (room, (out_name, _)) in rooms.iter().zip(&self.outputs) {
                if let Some(out) = room.caller_bytes() {
                    if input.start < out.end && out.start < input.end {
                        return Err(PyValueError::new_err(format!(
                            "out for `{out_name}` overlaps input `{name}`'s tensor"
                        )));
                    }
                }
            }
        }
        let refs: Vec<ArrayRef<'_>> = held
            .iter()
            .zip(&scalars)
            .map(|(h, s)| match (h, s) {
                (Some(h), _) => h.as_ref(),
                (None, Some(s)) => Ok(ArrayRef::Scalar(*s)),
                (None, None) => unreachable!("each input is a scalar or an array"),
            })
            .collect::<PyResult<_>>()?;
        let mut muts: Vec<kiln::ArrayMut<'_>> = rooms
            .iter_mut()
            .map(Room::as_mut)
            .collect::<PyResult<_>>()?;
        let program = self.program();
        let written = py
            .detach(|| program.run_arrays(&refs, &mut muts))
            .map_err(exec_error)?;
        drop((muts, refs));
        drop(held);
        let mut results = Vec::with_capacity(rooms.len());
        for (room, count) in rooms.into_iter().zip(written) {
            results.push(room.into_py(py, count)?);
        }
        match results.len() {
            1 => Ok(results.pop().expect("one result")),
            _ => Ok(PyTuple::new(py, results)?.into_any()),
        }
    }

    /// `out=`: one array for a one-output function, else a tuple with an
    /// array or `None` per output.
    fn out_arguments<'py>(
        &self,
        out: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Vec<Option<Bound<'py, PyAny>>>> {
        let n = self.outputs.len();
        match out {
            None => Ok(vec![None; n]),
            Some(o) if o.is_none() => Ok(vec![None; n]),
            Some(o) if n == 1 && !o.is_instance_of::<PyTuple>() => Ok(vec![Some(o.clone())]),
            Some(o) => {
                let tuple = o.cast::<PyTuple>().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "out must be a tuple of {n} arrays (or None), one per output"
                    ))
                })?;
                if tuple.len() != n {
                    return Err(PyValueError::new_err(format!(
                        "out has {} entries, the function has {n} outputs",
                        tuple.len()
                    )));
                }
                Ok(tuple
                    .iter()
                    .map(|item| (!item.is_none()).then_some(item))
                    .collect())
            }
        }
    }

    /// The arguments in signature order, from positional ones and keywords
    /// named after inputs.
    fn by_name<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        kwargs: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let mut all: Vec<Option<Bound<'py, PyAny>>> = vec![None; self.inputs.len()];
        if args.len() > all.len() {
            return Err(PyTypeError::new_err(format!(
                "{}() takes {} argument(s), got {} positional",
                self.name(),
                all.len(),
                args.len()
            )));
        }
        for (i, a) in args.iter().enumerate() {
            all[i] = Some(a);
        }
        for (key, value) in kwargs.iter() {
            let key: String = key.extract()?;
            let i = self
                .inputs
                .iter()
                .position(|(n, _)| *n == key)
                .ok_or_else(|| {
                    PyTypeError::new_err(format!(
                        "{}() has no input `{key}` (its inputs: {})",
                        self.name(),
                        self.describe(&self.inputs)
                    ))
                })?;
            if all[i].replace(value).is_some() {
                return Err(PyTypeError::new_err(format!(
                    "{}() got input `{key}` twice",
                    self.name()
                )));
            }
        }
        let missing: Vec<&str> = self
            .inputs
            .iter()
            .zip(&all)
            .filter(|(_, a)| a.is_none())
            .map(|((n, _), _)| n.as_str())
            .collect();
        if !missing.is_empty() {
            return Err(PyTypeError::new_err(format!(
                "{}() is missing input(s) {}",
                self.name(),
                missing.join(", ")
            )));
        }
        PyTuple::new(py, all.into_iter().flatten().collect::<Vec<_>>())
    }

    fn describe(&self, items: &[(String, Type)]) -> String {
        items
            .iter()
            .map(|(n, t)| format!("{n}: {t}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[pymethods]
impl Function {
    /// Calls the function: arguments in signature order or by input name,
    /// and `out=` (an array, or a tuple with an array or None per output) to
    /// write into the caller's arrays.
    #[pyo3(signature = (*args, out=None, **kwargs))]
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        out: Option<&Bound<'py, PyAny>>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let named;
        let args = match kwargs {
            Some(k) if !k.is_empty() => {
                named = self.by_name(py, args, k)?;
                &named
            }
            _ => args,
        };
        if args.len() != self.inputs.len() {
            return Err(PyTypeError::new_err(format!(
                "{}() takes {} argument(s) ({}), got {}",
                self.name(),
                self.inputs.len(),
                self.describe(&self.inputs),
                args.len()
            )));
        }
        if !self.ufunc.is_empty() {
            if let Some((variant, args)) = self.ufunc_variant(py, args)? {
                let kwargs = PyDict::new(py);
                if let Some(out) = out {
                    kwargs.set_item("out", out)?;
                }
                return variant.call(args, Some(&kwargs));
            }
        }
        let result = match (&self.compiled, self.direct, out) {
            (Compiled::Jit(p), true, None) => self.call_direct(py, p, args),
            (Compiled::Auto(p), true, None) => p.with(|p| self.call_direct(py, p, args)),
            _ => self.call_arrays(py, args, out),
        };
        if let Compiled::Auto(p) = &self.compiled {
            if let Some(error) = p.failure() {
                if !self.reported.swap(true, Ordering::Relaxed) {
                    let message =
                        format!("{}: {error}; it stays on {}", self.name(), p.tier().name());
                    PyErr::warn(
                        py,
                        &py.get_type::<PyRuntimeWarning>(),
                        &std::ffi::CString::new(message).unwrap_or_default(),
                        1,
                    )?;
                }
            }
        }
        result
    }

    /// The torch backend's call (`kiln.torch`): `args` in signature order,
    /// the kernels on `threads` threads of eager torch's OpenMP team where
    /// the backend found it (`with_torch_threads`), and the results as a
    /// tuple, one output's too.
    fn _call_torch<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
        threads: usize,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let result = crate::with_torch_threads(threads, || self.__call__(py, args, None, None))?;
        if self.outputs.len() == 1 {
            PyTuple::new(py, [result])
        } else {
            Ok(result.cast_into::<PyTuple>()?)
        }
    }

    /// How the `auto` tier has served this function: a dict with `tier`
    /// (running now), `first_tier`, `compile_seconds` (all told) and
    /// `first_tier_compile_seconds` (the first tier's own), `cache_hit` (it
    /// started on LLVM code from the code cache), `calls` and
    /// `call_seconds` (timed on the first tier), `threshold_seconds` (calls'
    /// time after which LLVM compiles; `None`: never), `llvm_estimate_seconds`
    /// (what the LLVM compile is expected to take, from the kernel's
    /// `kernel_statements` and `math_calls`), `state`
    /// (`counting`, `queued`, `compiling`, `done`, `failed`, `settled`),
    /// `error`, `llvm_compile_seconds` and `switched_after_seconds`. On a
    /// named tier: `tier`, `state` (`settled`) and `compile_seconds`.
    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let Compiled::Auto(p) = &self.compiled else {
            d.set_item("tier", self.tier.name())?;
            d.set_item("state", "settled")?;
            d.set_item("compile_seconds", self.compile_seconds)?;
            return Ok(d);
        };
        let s = p.stats();
        d.set_item("tier", s.tier.name())?;
        d.set_item("first_tier", s.first_tier.name())?;
        d.set_item("compile_seconds", s.compile_seconds)?;
        d.set_item("first_tier_compile_seconds", s.first_tier_compile_seconds)?;
        d.set_item("cache_hit", s.cache_hit)?;
        d.set_item("calls", s.calls)?;
        d.set_item("call_seconds", s.call_seconds)?;
        d.set_item("threshold_seconds", s.threshold_seconds)?;
        d.set_item("llvm_estimate_seconds", s.llvm_estimate_seconds)?;
        d.set_item("kernel_statements", s.size.statements)?;
        d.set_item("math_calls", s.size.math_calls)?;
        let (state, error) = match s.state {
            TierUpState::Counting => ("counting", None),
            TierUpState::Queued => ("queued", None),
            TierUpState::Compiling => ("compiling", None),
            TierUpState::Done => ("done", None),
            TierUpState::Failed(e) => ("failed", Some(e)),
            TierUpState::Settled => ("settled", None),
        };
        d.set_item("state", state)?;
        d.set_item("error", error)?;
        d.set_item("llvm_compile_seconds", s.llvm_compile_seconds)?;
        d.set_item("switched_after_seconds", s.switched_after_seconds)?;
        Ok(d)
    }

    /// Waits (the GIL released) until an `auto` function's LLVM compile
    /// has ended, at most `timeout` seconds; returns whether it has (true at
    /// once on a named tier). For tests and benchmarks: calls never wait.
    #[pyo3(signature = (timeout = 600.0))]
    fn wait_for_tier_up(&self, py: Python<'_>, timeout: f64) -> PyResult<bool> {
        let Compiled::Auto(p) = &self.compiled else {
            return Ok(true);
        };
        let timeout = std::time::Duration::try_from_secs_f64(timeout).map_err(|_| {
            PyValueError::new_err("timeout must be a non-negative number of seconds")
        })?;
        Ok(py.detach(|| p.wait(timeout)))
    }

    /// The graph's name.
    #[getter]
    fn name(&self) -> String {
        self.program().verified().graph().name.clone()
    }

    /// The tier its calls run on now: `interp`, `vm`, `cranelift` or
    /// `llvm` (an `auto` function's changes when LLVM's code takes over).
    #[getter]
    fn tier(&self) -> &'static str {
        match &self.compiled {
            Compiled::Auto(p) => p.tier().name(),
            _ => self.tier.name(),
        }
    }

    /// The inputs, as `{name: type}` in signature order (`{"x": "f64[n]"}`).
    #[getter]
    fn inputs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        signature_dict(py, &self.inputs)
    }

    /// The outputs, as `{name: type}` in order.
    #[getter]
    fn outputs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        signature_dict(py, &self.outputs)
    }

    /// The bytes of scratch memory a call takes on a JIT tier (the
    /// intermediate tensors no loop fuses, buffers shared by liveness), when
    /// no dimension is symbolic; `None` on the interpreter or when it
    /// depends on a symbolic dimension's extent.
    #[getter]
    fn scratch_bytes(&self) -> Option<usize> {
        match &self.compiled {
            Compiled::Jit(p) => p.scratch_bytes(&[]),
            Compiled::Auto(p) => p.current().scratch_bytes(&[]),
            Compiled::Interp(_) => None,
        }
    }

    /// The graph it runs, in kiln's text format (optimized, if it was).
    #[getter]
    fn ir(&self) -> String {
        kiln::ir::text::print(self.program().verified().graph())
    }

    fn __repr__(&self) -> String {
        format!(
            "<kiln.Function {}({}) -> ({}) on {}>",
            self.name(),
            self.describe(&self.inputs),
            self.describe(&self.outputs),
            self.tier()
        )
    }

    /// Pickles as the source and options; loading compiles again (with an
    /// in-process cache, `kiln._rebuild`).
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let recipe = self.recipe.as_ref().ok_or_else(|| {
            PyTypeError::new_err("this function was not made by kiln.compile and cannot be pickled")
        })?;
        let rebuild = py.import("kiln")?.getattr("_rebuild")?;
        PyTuple::new(
            py,
            [rebuild, PyTuple::new(py, [recipe.bind(py)])?.into_any()],
        )
    }
}

fn signature_dict<'py>(py: Python<'py>, items: &[(String, Type)]) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (n, t) in items {
        d.set_item(n, t.to_string())?;
    }
    Ok(d)
}
