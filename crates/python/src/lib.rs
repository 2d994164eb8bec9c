//! The native half of kiln's Python package (`kiln._kiln`): loading and
//! compiling sources, calling compiled programs on Python scalars and NumPy
//! arrays, and ahead-of-time compilation. The Python half (`kiln/`) adds file
//! handling, the exception classes and pickling; docs/python.md is the user's
//! guide.

mod arrow;
mod dlpack;
mod errors;
mod function;
mod fx;
mod glibc;
mod population;
mod values;

use errors::{compile_error, parse_error};
use function::Function;
use kiln::aot::{AotError, AotOptions};
use kiln::{Format, LoadOptions, Verified};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use std::collections::HashMap;

/// What a source is and how to read it, as `kiln.compile` and `kiln.aot` pass
/// it down.
#[derive(FromPyObject)]
pub(crate) struct SourceSpec {
    /// The source: UTF-8 text, or a binary GraphDef.
    #[pyo3(item)]
    data: Vec<u8>,
    /// `py`, `kiln`, `fx`, `tf`, `lightgbm`, `xgboost` or `kiln-trees`.
    #[pyo3(item)]
    format: String,
    /// The name messages give the source (a file name, or `<source>`).
    #[pyo3(item)]
    name: String,
    /// Input types by name, in `kiln::parse_type`'s syntax (`f64[n]`).
    #[pyo3(item)]
    inputs: HashMap<String, String>,
    /// torch.fx: a `.safetensors` state_dict.
    #[pyo3(item)]
    weights: Option<Vec<u8>>,
    /// torch.fx: the text `print(gm)` writes.
    #[pyo3(item)]
    modules: Option<String>,
    /// TensorFlow: the outputs (`node` or `node:k`).
    #[pyo3(item)]
    outputs: Vec<String>,
    /// Tree models: the raw scores instead of the link.
    #[pyo3(item)]
    raw_score: bool,
    /// Tree models: one column input per feature instead of one matrix.
    #[pyo3(item)]
    columns: bool,
    /// Reverse mode: the inputs to take the gradient with respect to.
    #[pyo3(item)]
    grad: Vec<String>,
    /// The output `grad` differentiates (the only one when `None`).
    #[pyo3(item)]
    grad_of: Option<String>,
    /// Forward mode: the scalar inputs of the Jacobian.
    #[pyo3(item)]
    jacobian: Vec<String>,
}

/// Reads and verifies a source; errors are located Python exceptions.
fn load(spec: &SourceSpec) -> PyResult<Verified> {
    let format = Format::named(&spec.format).map_err(PyValueError::new_err)?;
    let mut options = LoadOptions::default();
    for (name, text) in &spec.inputs {
        options.give_input(name, kiln::parse_type(text).map_err(PyValueError::new_err)?);
    }
    if let Some(bytes) = &spec.weights {
        options.fx.weights = kiln::frontend::fx::read_weights(bytes)
            .map_err(|e| PyValueError::new_err(format!("weights: {}", e.message)))?;
    }
    if let Some(text) = &spec.modules {
        options.fx.modules = kiln::frontend::fx::modules::parse(text)
            .map_err(|e| parse_error(&e.render("<modules>", text), "<modules>", text, e.loc))?;
    }
    options.tf.outputs = spec.outputs.clone();
    options.trees.raw_score = spec.raw_score;
    options.trees.columns = spec.columns;
    let text = String::from_utf8_lossy(&spec.data);
    let loaded = kiln::load_bytes(&spec.data, format, &options)
        .map_err(|e| parse_error(&e.render(&spec.name, &text), &spec.name, &text, e.loc))?;
    let verified = verify_located(loaded.graph, &loaded.source_map, &spec.name, &text)?;
    let derivatives = kiln::Derivatives {
        grad: spec.grad.clone(),
        grad_of: spec.grad_of.clone(),
        jacobian: spec.jacobian.clone(),
    };
    derivatives
        .apply(verified)
        .map_err(|e| compile_error(format!("{}: {e}", spec.name)))
}

/// Verifies a graph; its errors are one `kiln.CompileError`, each located in
/// `text` (named `name`) where the source map knows the value.
fn verify_located(
    graph: kiln::ir::Graph,
    source_map: &kiln::ir::SourceMap,
    name: &str,
    text: &str,
) -> PyResult<Verified> {
    kiln::verify_located(graph, source_map, name, text).map_err(compile_error)
}

#[pyfunction]
#[pyo3(signature = (spec, tier, optimize, recipe))]
fn compile(
    py: Python<'_>,
    spec: SourceSpec,
    tier: &str,
    optimize: bool,
    recipe: Py<PyAny>,
) -> PyResult<Function> {
    compile_spec(py, spec, tier, optimize, recipe)
}

/// [`compile`]: an expression of the Python subset (no `def`) also takes
/// arrays for the free names `spec` gives no type, as a ufunc does.
pub(crate) fn compile_spec(
    py: Python<'_>,
    spec: SourceSpec,
    tier: &str,
    optimize: bool,
    recipe: Py<PyAny>,
) -> PyResult<Function> {
    let tier = function::tier_named(tier)?;
    let graph = load(&spec)?;
    let options = kiln::CompileOptions {
        optimize,
        ..Default::default()
    };
    let function = py
        .detach(|| Function::compile(tier, &graph, &options))
        .map_err(|e| compile_error(format!("{}: {e}", spec.name)))?
        .with_recipe(recipe)?;
    let expression = spec.format == "py"
        && !String::from_utf8_lossy(&spec.data)
            .lines()
            .any(|l| l.trim_start().starts_with("def "));
    Ok(if expression {
        function.with_ufunc_inputs(&spec.inputs)
    } else {
        function
    })
}

/// Compiles a source ahead of time: `bytes` for objects, bitcode and wasm,
/// `str` for assembly, LLVM IR and headers.
#[pyfunction]
#[pyo3(signature = (spec, target, emit, tier, opt_level, cpu, features, name, optimize))]
#[allow(clippy::too_many_arguments)]
fn aot(
    py: Python<'_>,
    spec: SourceSpec,
    target: String,
    emit: &str,
    tier: Option<&str>,
    opt_level: u8,
    cpu: Option<String>,
    features: Option<String>,
    name: Option<String>,
    optimize: bool,
) -> PyResult<Py<PyAny>> {
    let named = AotOptions::named(&target, emit, tier, u32::from(opt_level))
        .map_err(PyValueError::new_err)?;
    let graph = load(&spec)?;
    let options = AotOptions {
        cpu,
        features,
        symbol: name,
        optimize,
        ..named
    };
    let bytes = py
        .detach(|| kiln::aot::compile(&graph, &options))
        .map_err(|e| match e {
            AotError::Compile(e) => compile_error(format!("{}: {e}", spec.name)),
            AotError::Request(m) => PyValueError::new_err(m),
        })?;
    Ok(if options.emit.is_text() {
        let text = String::from_utf8(bytes)
            .map_err(|_| PyTypeError::new_err("the backend wrote text that is not UTF-8"))?;
        PyString::new(py, &text).into_any().unbind()
    } else {
        PyBytes::new(py, &bytes).into_any().unbind()
    })
}

/// Checks that `text` parses as the Python subset (no types yet: `@kiln.jit`
/// calls this at decoration, and compiles on the first call); a
/// `kiln.ParseError` if not.
#[pyfunction]
fn check_syntax(text: &str, name: &str) -> PyResult<()> {
    kiln::frontend::py::parse_ast(text, kiln::frontend::py::Syntax::Python)
        .map(|_| ())
        .map_err(|e| parse_error(&e.render(name, text), name, text, e.loc))
}

/// The tiers this build runs on: the reference interpreter, then the
/// compiling tiers from the cheapest compile (`kiln::Tier::all`).
#[pyfunction]
#[pyo3(signature = (timeout = 600.0))]
fn wait_for_tier_up(py: Python<'_>, timeout: f64) -> PyResult<bool> {
    let timeout = std::time::Duration::try_from_secs_f64(timeout)
        .map_err(|_| PyValueError::new_err("timeout must be a non-negative number of seconds"))?;
    Ok(py.detach(|| kiln::tierup::wait_idle(timeout)))
}

/// Called at interpreter exit (`atexit`, registered by `kiln/__init__.py`;
/// Python runs those callbacks before any C exit handler): no new LLVM
/// compile starts, and a background tier-up that is compiling finishes
/// before LLVM's globals are destroyed (`kiln::before_exit`).
#[pyfunction]
fn _before_exit(py: Python<'_>) {
    py.detach(kiln::before_exit);
}

/// The code cache's directory (`None` when `KILN_CACHE=0` or no directory
/// can be named) and this process's hits, misses and writes.
#[pyfunction]
fn cache_info(py: Python<'_>) -> PyResult<Bound<'_, pyo3::types::PyDict>> {
    let d = pyo3::types::PyDict::new(py);
    let cache = kiln::llvm::Cache::from_env();
    d.set_item("dir", cache.as_ref().map(|c| c.dir().to_path_buf()))?;
    let c = kiln::llvm::cache::counters();
    d.set_item("hits", c.hits)?;
    d.set_item("misses", c.misses)?;
    d.set_item("writes", c.writes)?;
    Ok(d)
}

#[pyfunction]
fn tiers() -> Vec<&'static str> {
    kiln::Tier::all().map(kiln::Tier::name).collect()
}

/// Sets how many threads kiln's kernels may use, for the whole process
/// (`kiln::threads::set_num_threads`).
#[pyfunction]
fn set_num_threads(n: i64) -> PyResult<()> {
    match usize::try_from(n) {
        Ok(n) if n > 0 => {
            kiln::threads::set_num_threads(n);
            Ok(())
        }
        _ => Err(PyValueError::new_err(format!(
            "set_num_threads: the number of threads must be a positive integer, not {n}"
        ))),
    }
}

/// How many threads kiln's kernels called from this thread may use.
#[pyfunction]
fn get_num_threads() -> usize {
    kiln::threads::num_threads()
}

/// Sets this thread's own count (`0`: none, the process's) and returns the
/// one it replaces: the torch backend's way to follow
/// `torch.get_num_threads()` call by call.
#[pyfunction]
fn _swap_thread_override(n: usize) -> usize {
    kiln::threads::swap_override(n)
}

/// The OpenMP runtime `_share_openmp` found, and the process it found it
/// in (its threads do not survive a `fork()`).
static OPENMP: std::sync::Mutex<Option<(u32, kiln::threads::GompParallel)>> =
    std::sync::Mutex::new(None);

/// Finds the `GOMP_parallel` of the OpenMP runtime loaded from `path` (one
/// the process has loaded already: PyTorch's libgomp) for `swap_team`.
/// The torch backend calls it once.
#[pyfunction]
fn _share_openmp(path: std::path::PathBuf) -> PyResult<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes())
            .map_err(|_| PyValueError::new_err("the path has a NUL byte"))?;
        // SAFETY: RTLD_NOLOAD loads nothing: it finds a library the process
        // has loaded already, and takes a reference that keeps it loaded.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        if handle.is_null() {
            return Err(PyValueError::new_err(format!(
                "{} is not loaded in this process",
                path.display()
            )));
        }
        // SAFETY: a handle dlopen returned and a NUL-terminated name.
        let symbol = unsafe { libc::dlsym(handle, c"GOMP_parallel".as_ptr()) };
        if symbol.is_null() {
            // SAFETY: the reference this call's dlopen took, given back.
            unsafe { libc::dlclose(handle) };
            return Err(PyValueError::new_err(format!(
                "{} has no GOMP_parallel: not an OpenMP runtime",
                path.display()
            )));
        }
        // SAFETY: libgomp's `GOMP_parallel` (and libomp's and libiomp5's,
        // for code GCC compiled) has this signature.
        let parallel: kiln::threads::GompParallel = unsafe { std::mem::transmute(symbol) };
        *OPENMP.lock().unwrap_or_else(|e| e.into_inner()) = Some((std::process::id(), parallel));
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    Err(PyValueError::new_err(format!(
        "sharing an OpenMP runtime ({}) needs Linux",
        path.display()
    )))
}

/// Runs the stages of kernels called from this thread on the OpenMP
/// runtime `_share_openmp` found (`on`, in the process that found it) or
/// on kiln's own pool; returns whether they ran on it before. The torch
/// backend's kernels share eager torch's threads this way, call by call
/// (`with_torch_threads`).
fn swap_team(on: bool) -> bool {
    let team = match *OPENMP.lock().unwrap_or_else(|e| e.into_inner()) {
        Some((pid, parallel)) if on && pid == std::process::id() => Some(parallel),
        _ => None,
    };
    // SAFETY: `GOMP_parallel` of a runtime that the reference
    // `_share_openmp`'s dlopen took keeps loaded.
    unsafe { kiln::threads::swap_team(team) }.is_some()
}

/// Runs `f` with this thread's kernels on `threads` threads
/// (`_swap_thread_override`) and on the OpenMP team `_share_openmp` found
/// (`swap_team`), both given back after `f`, also when it unwinds: the
/// torch backend's call, `Function._call_torch`.
pub(crate) fn with_torch_threads<R>(threads: usize, f: impl FnOnce() -> R) -> R {
    struct Restore {
        threads: usize,
        team: bool,
    }
    impl Drop for Restore {
        fn drop(&mut self) {
            swap_team(self.team);
            kiln::threads::swap_override(self.threads);
        }
    }
    let _restore = Restore {
        threads: kiln::threads::swap_override(threads),
        team: swap_team(true),
    };
    f()
}

/// How many stage runs this process cut into chunks on several threads
/// (`kiln::threads::chunked_runs`), and how many workers kiln's own pool
/// has (`kiln::threads::pool_workers`): for tests.
#[pyfunction]
fn _thread_counts() -> (u64, usize) {
    (kiln::threads::chunked_runs(), kiln::threads::pool_workers())
}

/// The module's allocator: kiln's front half allocates per node, and
/// mimalloc compiles a GP population in about two thirds of glibc
/// malloc's time (docs/performance.md), as polars ships jemalloc for its
/// allocations.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[pymodule]
fn _kiln(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("_TREE_SELECTS", kiln::kernel::TREE_SELECTS)?;
    m.add_class::<Function>()?;
    m.add_class::<population::Population>()?;
    m.add_class::<population::Fit>()?;
    m.add_class::<arrow::ArrowFilter>()?;
    m.add_class::<arrow::ArrowProjector>()?;
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add_function(wrap_pyfunction!(aot, m)?)?;
    m.add_function(wrap_pyfunction!(tiers, m)?)?;
    m.add_function(wrap_pyfunction!(wait_for_tier_up, m)?)?;
    m.add_function(wrap_pyfunction!(_before_exit, m)?)?;
    m.add_function(wrap_pyfunction!(cache_info, m)?)?;
    m.add_function(wrap_pyfunction!(set_num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(get_num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(_swap_thread_override, m)?)?;
    m.add_function(wrap_pyfunction!(_share_openmp, m)?)?;
    m.add_function(wrap_pyfunction!(_thread_counts, m)?)?;
    m.add_function(wrap_pyfunction!(check_syntax, m)?)?;
    m.add_function(wrap_pyfunction!(fx::compile_fx, m)?)?;
    m.add_function(wrap_pyfunction!(fx::fx_supports, m)?)?;
    Ok(())
}
