//! `kiln.Population`: a GP population compiled in batches and evaluated on
//! every core, over the columns of a 2-D array, a dict or a DataFrame.

use crate::function::tier_named;
use kiln::population::Element;
use kiln::Tier;
use kiln::{CompileOptions, MemberError, Population as Inner, PopulationOptions, Precision};
use numpy::{PyArray1, PyArray2, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use std::sync::OnceLock;

/// A population of Python-subset expressions over columns named by
/// `variables` (float64, or float32 with `dtype`), compiled on first use:
/// `fit_constants` compiles programs of its own (values and Jacobians), so
/// a population that is only fitted never compiles its values.
#[pyclass(module = "kiln", name = "Population", frozen)]
pub struct Population {
    exprs: Vec<String>,
    /// The variables as given, or as the expressions read them (found on
    /// first use).
    variables: OnceLock<Vec<String>>,
    precision: Precision,
    tier: Tier,
    /// Vector loops as asked (`None`: the default, off for populations).
    vectorize: Option<bool>,
    /// Threads as asked (0: every core).
    threads: usize,
    /// The compiled population.
    inner: OnceLock<Inner>,
}

fn engine_compile(
    exprs: &[String],
    variables: Option<&[String]>,
    tier: Tier,
    threads: usize,
    vectorize: Option<bool>,
    precision: Precision,
) -> Inner {
    let options = PopulationOptions {
        threads,
        compile: CompileOptions {
            vectorize,
            ..CompileOptions::default()
        },
        precision,
    };
    let engine = tier.engine().expect("the Python module has every tier");
    match variables {
        Some(variables) => Inner::compile(exprs, variables, &*engine, &options),
        // The expressions' own names, parsing each once.
        None => Inner::compile_inferring(exprs, &*engine, &options),
    }
}

fn describe(e: &MemberError, expr: &str) -> String {
    match e {
        MemberError::Parse(p) => p.render("<expr>", expr),
        e => e.to_string(),
    }
}

/// The precision `dtype` names (anything `numpy.dtype` takes: `"float32"`,
/// `numpy.float32`, …); float64 for `None`.
fn precision_of(py: Python<'_>, dtype: Option<&Bound<'_, PyAny>>) -> PyResult<Precision> {
    let Some(dtype) = dtype.filter(|d| !d.is_none()) else {
        return Ok(Precision::F64);
    };
    let np = crate::values::numpy(py)?;
    let name: String = np
        .call_method1("dtype", (dtype,))
        .map_err(|_| {
            PyTypeError::new_err(format!("dtype must be float64 or float32, not {dtype}"))
        })?
        .getattr("name")?
        .extract()?;
    // numpy's names, `float64` and `float32`, are among kiln's.
    name.parse()
        .map_err(|_| PyValueError::new_err(format!("dtype must be float64 or float32, not {name}")))
}

impl Population {
    /// The compiled population: compiled on the first call, with the GIL
    /// released (a second thread's call waits for the first's compile).
    fn inner(&self, py: Python<'_>) -> &Inner {
        py.detach(|| {
            self.inner.get_or_init(|| {
                engine_compile(
                    &self.exprs,
                    self.variables.get().map(Vec::as_slice),
                    self.tier,
                    self.threads,
                    self.vectorize,
                    self.precision,
                )
            })
        })
    }

    /// The variables, as given or as the expressions read them.
    fn variable_names(&self, py: Python<'_>) -> &[String] {
        if let Some(v) = self.variables.get() {
            return v;
        }
        // Compiling finds them with one parse; a population that is only
        // fitted parses for them alone.
        let names = match self.inner.get() {
            Some(inner) => inner.variables().to_vec(),
            None => py.detach(|| kiln::population::variables_of(&self.exprs)),
        };
        self.variables.get_or_init(|| names)
    }

    /// Reads the columns `x` holds for each variable, as contiguous arrays
    /// of `T` (copies where needed, rounding where `T` is narrower), all of
    /// one length.
    fn columns<'py, T: Element + numpy::Element>(
        &self,
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
    ) -> PyResult<(Vec<Bound<'py, PyArray1<T>>>, usize)> {
        let np = crate::values::numpy(py)?;
        let vars = self.variable_names(py);
        let mut cols: Vec<Bound<'py, PyArray1<T>>> = Vec::with_capacity(vars.len());
        let as_column = |obj: Bound<'py, PyAny>, what: &str| -> PyResult<Bound<'py, PyArray1<T>>> {
            // `to_numpy` first, for pandas Series (nullable dtypes included).
            let obj = match obj.getattr("to_numpy") {
                Ok(f) => f.call0()?,
                Err(_) => obj,
            };
            let arr = np.call_method1("asarray", (obj,))?;
            let ok: bool = np
                .call_method1("can_cast", (arr.getattr("dtype")?, "float64", "same_kind"))?
                .extract()?;
            if !ok {
                return Err(PyTypeError::new_err(format!(
                    "{what} must be numbers (castable to float64), got {}",
                    arr.getattr("dtype")?
                )));
            }
            np.call_method1("require", (arr, numpy_precision(T::PRECISION), ("C", "A")))?
                .cast_into::<PyArray1<T>>()
                .map_err(|_| PyValueError::new_err(format!("{what} must be one-dimensional")))
        };
        let two_d = x
            .cast::<numpy::PyUntypedArray>()
            .is_ok_and(|a| a.ndim() == 2);
        if two_d {
            let arr = x.cast::<numpy::PyUntypedArray>()?;
            if arr.shape()[1] != vars.len() {
                return Err(PyValueError::new_err(format!(
                    "X has {} columns, the population has {} variables ({})",
                    arr.shape()[1],
                    vars.len(),
                    vars.join(", ")
                )));
            }
            for (j, v) in vars.iter().enumerate() {
                let column = x.get_item((pyo3::types::PySlice::full(py), j))?;
                cols.push(as_column(column, &format!("column {j} ({v})"))?);
            }
        } else if x.hasattr("keys")? {
            for v in vars {
                let column = x
                    .get_item(v)
                    .map_err(|_| PyValueError::new_err(format!("X has no column `{v}`")))?;
                cols.push(as_column(column, &format!("column `{v}`"))?);
            }
        } else {
            return Err(PyTypeError::new_err(
                "X must be a 2-D array (rows × variables), a dict of columns or a DataFrame",
            ));
        }
        let n = match cols.first() {
            Some(c) => c.len(),
            None if two_d => x.cast::<numpy::PyUntypedArray>()?.shape()[0],
            None => 0,
        };
        if let Some((v, c)) = vars.iter().zip(&cols).find(|(_, c)| c.len() != n) {
            return Err(PyValueError::new_err(format!(
                "column `{v}` has {} rows, others {n}",
                c.len()
            )));
        }
        Ok((cols, n))
    }

    fn errors_dict<'py>(
        &self,
        py: Python<'py>,
        errors: &[Option<MemberError>],
        exprs_text: &[String],
    ) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (i, e) in errors.iter().enumerate() {
            if let Some(e) = e {
                d.set_item(i, describe(e, &exprs_text[i]))?;
            }
        }
        Ok(d)
    }
}

#[pymethods]
impl Population {
    #[new]
    #[pyo3(signature = (exprs, variables=None, *, tier=None, threads=None, vectorize=None, dtype=None))]
    fn new(
        py: Python<'_>,
        exprs: Vec<String>,
        variables: Option<Vec<String>>,
        tier: Option<&str>,
        threads: Option<usize>,
        vectorize: Option<bool>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let precision = precision_of(py, dtype)?;
        // Unnamed: the population's rule (`kiln::DEFAULT_TIER`).
        let tier = match tier {
            Some(name) => kiln::population::tier_for(tier_named(name)?),
            None => kiln::DEFAULT_TIER,
        };
        if threads == Some(0) {
            return Err(PyValueError::new_err("threads must be at least 1"));
        }
        let mut seen = std::collections::HashSet::new();
        if let Some(v) = variables
            .iter()
            .flatten()
            .find(|v| !seen.insert(v.as_str()))
        {
            return Err(PyValueError::new_err(format!(
                "variable `{v}` is named twice"
            )));
        }
        let threads = threads.unwrap_or(0);
        Ok(Population {
            exprs,
            variables: variables.map(OnceLock::from).unwrap_or_default(),
            precision,
            tier,
            vectorize,
            threads,
            inner: OnceLock::new(),
        })
    }

    fn __len__(&self) -> usize {
        self.exprs.len()
    }

    /// The variables, in the order the columns of a 2-D `X` give them.
    #[getter]
    fn variables(&self, py: Python<'_>) -> Vec<String> {
        self.variable_names(py).to_vec()
    }

    /// The tier it runs on.
    #[getter]
    fn tier(&self) -> &'static str {
        self.tier.name()
    }

    /// The dtype of its columns and values: a `numpy.dtype`, float64 or
    /// float32.
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        crate::values::numpy(py)?.call_method1("dtype", (numpy_precision(self.precision),))
    }

    /// Whether its row loops were asked to run in vectors: `None` (the
    /// default: off, since a population's many small kernels pay more to
    /// compile vector loops than they save below some 15,000–20,000 rows),
    /// `True` or `False`.
    #[getter]
    fn vectorize(&self) -> Option<bool> {
        self.vectorize
    }

    /// The expressions that did not compile, `{index: reason}` (compiling
    /// the population if it was not yet); the errors of the last
    /// `evaluate`/`mse` are in their results' `errors`.
    #[getter]
    fn errors<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (i, e) in self.inner(py).compile_errors() {
            d.set_item(i, describe(e, &self.exprs[i]))?;
        }
        Ok(d)
    }

    /// Every expression over `X` (a 2-D array of rows × variables, a dict of
    /// columns or a DataFrame, rounded to the population's dtype where
    /// narrower): an `(expressions, rows)` array of the population's dtype.
    /// A row of NaN marks an expression that failed; `errors=True` also
    /// returns `{index: reason}` for them. `out`, a writable C-contiguous
    /// array of that shape and dtype, receives the values instead (and is
    /// returned): a GP loop that evaluates each generation into the same
    /// array allocates and faults in no values array.
    #[pyo3(signature = (x, *, errors=false, out=None))]
    fn evaluate<'py>(
        &self,
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        errors: bool,
        out: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (out, failures) = match self.precision {
            Precision::F64 => self.evaluate_as::<f64>(py, x, out)?,
            Precision::F32 => self.evaluate_as::<f32>(py, x, out)?,
        };
        if errors {
            let d = self.errors_dict(py, &failures, &self.exprs)?;
            Ok(PyTuple::new(py, [out.into_any(), d.into_any()])?.into_any())
        } else {
            Ok(out.into_any())
        }
    }

    /// Each expression's mean squared error against `y` over `X` (both in
    /// the population's dtype; the squares summed in float64): a float64
    /// array, NaN where an expression failed (`errors=True` also returns
    /// `{index: reason}`).
    #[pyo3(signature = (x, y, *, errors=false))]
    fn mse<'py>(
        &self,
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        y: &Bound<'py, PyAny>,
        errors: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (mse, failures) = match self.precision {
            Precision::F64 => self.mse_as::<f64>(py, x, y)?,
            Precision::F32 => self.mse_as::<f32>(py, x, y)?,
        };
        let out = PyArray1::from_vec(py, mse).into_any();
        if errors {
            let d = self.errors_dict(py, &failures, &self.exprs)?;
            Ok(PyTuple::new(py, [out, d.into_any()])?.into_any())
        } else {
            Ok(out)
        }
    }

    /// Fits each expression's constants (its float literals, in the order
    /// they are read) to `y` over `X` by least squares: Levenberg–Marquardt
    /// (`method="lm"`) on the Jacobian kiln compiles for them, at most
    /// `max_iter` steps each, in float64 whatever the population's dtype. A `kiln.Fit`: `constants` (a float64 array per
    /// expression), `mse`, `iterations`, `exprs` (the expressions with the
    /// fitted constants written in) and `errors` (`{index: reason}` for
    /// those that failed or kept their constants); it unpacks as
    /// `constants, mse, iterations`.
    #[pyo3(signature = (x, y, *, method="lm", max_iter=100))]
    fn fit_constants<'py>(
        &self,
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        y: &Bound<'py, PyAny>,
        method: &str,
        max_iter: i64,
    ) -> PyResult<Fit> {
        let Ok(max_iter) = usize::try_from(max_iter) else {
            return Err(PyValueError::new_err(format!(
                "max_iter must be at least 0, not {max_iter}"
            )));
        };
        if method != "lm" {
            return Err(PyValueError::new_err(format!(
                "method must be 'lm' (Levenberg-Marquardt), not {method:?}"
            )));
        }
        let (cols, n) = self.columns::<f64>(py, x)?;
        let y = target::<f64>(py, y, n)?;
        let exprs = &self.exprs;
        let variables = self.variable_names(py);
        let fits = with_slices(&cols, |slices| {
            let y = y.readonly();
            let target = y.as_slice().expect("required C-contiguous");
            let options = kiln::FitOptions {
                max_iter,
                threads: self.threads,
                compile: CompileOptions {
                    vectorize: self.vectorize,
                    ..CompileOptions::default()
                },
            };
            let engine = self
                .tier
                .engine()
                .expect("the Python module has every tier");
            py.detach(|| kiln::fit_constants(exprs, variables, slices, target, &*engine, &options))
        });
        let constants = pyo3::types::PyList::empty(py);
        let mut mse = Vec::with_capacity(fits.len());
        let mut iterations = Vec::with_capacity(fits.len());
        let mut fitted = Vec::with_capacity(fits.len());
        let errors = PyDict::new(py);
        for (i, fit) in fits.into_iter().enumerate() {
            match fit {
                Ok(f) => {
                    constants.append(PyArray1::from_vec(py, f.constants))?;
                    mse.push(f.mse);
                    iterations.push(f.iterations as i64);
                    fitted.push(f.expr);
                    if let Some(why) = f.failure {
                        errors.set_item(i, why)?;
                    }
                }
                Err(e) => {
                    constants.append(PyArray1::<f64>::zeros(py, [0], false))?;
                    mse.push(f64::NAN);
                    iterations.push(0);
                    fitted.push(exprs[i].clone());
                    errors.set_item(i, describe(&e, &exprs[i]))?;
                }
            }
        }
        Ok(Fit {
            constants: constants.unbind(),
            mse: PyArray1::from_vec(py, mse).into_any().unbind(),
            iterations: PyArray1::from_vec(py, iterations).into_any().unbind(),
            exprs: fitted,
            errors: errors.unbind(),
        })
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let compiled = match self.inner.get() {
            Some(inner) => format!("{} failed to compile", inner.compile_errors().len()),
            None => "not compiled yet".to_string(),
        };
        format!(
            "<kiln.Population of {} expressions over ({}) on {}, {compiled}>",
            self.exprs.len(),
            self.variable_names(py).join(", "),
            self.tier.name(),
        )
    }

    /// Pickles as the expressions and options; loading compiles again (on
    /// first use).
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let recipe = PyTuple::new(
            py,
            [
                self.exprs.clone().into_pyobject(py)?.into_any(),
                self.variable_names(py)
                    .to_vec()
                    .into_pyobject(py)?
                    .into_any(),
                self.tier.name().into_pyobject(py)?.into_any(),
                self.threads.into_pyobject(py)?.into_any(),
                self.vectorize.into_pyobject(py)?.into_any(),
                numpy_precision(self.precision)
                    .into_pyobject(py)?
                    .into_any(),
            ],
        )?;
        let rebuild = py.import("kiln")?.getattr("_population")?;
        PyTuple::new(py, [rebuild, recipe.into_any()])
    }
}

/// `f` of the columns' elements, read-borrowed for the call.
fn with_slices<T: numpy::Element, R>(
    cols: &[Bound<'_, PyArray1<T>>],
    f: impl FnOnce(&[&[T]]) -> R,
) -> R {
    let readonly: Vec<_> = cols.iter().map(|c| c.readonly()).collect();
    let slices: Vec<&[T]> = readonly
        .iter()
        .map(|c| c.as_slice().expect("required C-contiguous"))
        .collect();
    f(&slices)
}

/// `y` as a contiguous array of `n` rows of `T`.
fn target<'py, T: Element + numpy::Element>(
    py: Python<'py>,
    y: &Bound<'py, PyAny>,
    n: usize,
) -> PyResult<Bound<'py, PyArray1<T>>> {
    let np = crate::values::numpy(py)?;
    let y = match y.getattr("to_numpy") {
        Ok(f) => f.call0()?,
        Err(_) => y.clone(),
    };
    let y = np
        .call_method1(
            "require",
            (
                np.call_method1("asarray", (y,))?,
                numpy_precision(T::PRECISION),
                ("C", "A"),
            ),
        )?
        .cast_into::<PyArray1<T>>()
        .map_err(|_| PyValueError::new_err("y must be one-dimensional"))?;
    if y.len() != n {
        return Err(PyValueError::new_err(format!(
            "y has {} rows, X has {n}",
            y.len()
        )));
    }
    Ok(y)
}

/// What `Population.fit_constants` returns.
#[pyclass(module = "kiln", name = "Fit", frozen)]
pub struct Fit {
    constants: Py<pyo3::types::PyList>,
    mse: Py<PyAny>,
    iterations: Py<PyAny>,
    exprs: Vec<String>,
    errors: Py<PyDict>,
}

#[pymethods]
impl Fit {
    /// Each expression's fitted constants (float64 arrays, in the order its
    /// float literals are read; empty for one that did not compile).
    #[getter]
    fn constants(&self, py: Python<'_>) -> Py<pyo3::types::PyList> {
        self.constants.clone_ref(py)
    }

    /// Each expression's mean squared error at its fitted constants (NaN
    /// for one that did not compile or run).
    #[getter]
    fn mse(&self, py: Python<'_>) -> Py<PyAny> {
        self.mse.clone_ref(py)
    }

    /// Levenberg–Marquardt steps each expression took (int64).
    #[getter]
    fn iterations(&self, py: Python<'_>) -> Py<PyAny> {
        self.iterations.clone_ref(py)
    }

    /// The expressions with their fitted constants written in.
    #[getter]
    fn exprs(&self) -> Vec<String> {
        self.exprs.clone()
    }

    /// `{index: reason}` for the expressions that did not compile or run,
    /// or kept their constants (NaN at them, a Jacobian of zeros).
    #[getter]
    fn errors(&self, py: Python<'_>) -> Py<PyDict> {
        self.errors.clone_ref(py)
    }

    /// `constants, mse, iterations = pop.fit_constants(X, y)`.
    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let items = PyTuple::new(
            py,
            [
                self.constants.clone_ref(py).into_any(),
                self.mse.clone_ref(py),
                self.iterations.clone_ref(py),
            ],
        )?;
        items.into_any().try_iter().map(|i| i.into_any())
    }

    fn __repr__(&self) -> String {
        format!(
            "<kiln.Fit of {} expressions, {} with errors>",
            self.exprs.len(),
            Python::attach(|py| self.errors.bind(py).len())
        )
    }
}

/// The NumPy name of `precision`.
fn numpy_precision(precision: Precision) -> &'static str {
    match precision {
        Precision::F64 => "float64",
        Precision::F32 => "float32",
    }
}

/// What `evaluate` and `mse` return before the errors are described.
type Evaluated<'py> = (Bound<'py, PyAny>, Vec<Option<MemberError>>);

impl Population {
    /// `evaluate` over columns of `T`, the population's precision.
    fn evaluate_as<'py, T: Element + numpy::Element>(
        &self,
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        out: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Evaluated<'py>> {
        // Compiled first: compiling finds the variables the columns need.
        let inner = self.inner(py);
        let (cols, n) = self.columns::<T>(py, x)?;
        if let Some(out) = out {
            let array = self.out_array::<T>(out, n)?;
            let failures = with_slices(&cols, |slices| {
                // Borrowed after the columns: `out` overlapping one of
                // them conflicts, and is refused rather than written while
                // it is read.
                let mut room = array.try_readwrite().map_err(|e| match e {
                    numpy::BorrowError::NotWriteable => PyValueError::new_err("out is read-only"),
                    _ => PyValueError::new_err("out overlaps a column of X"),
                })?;
                let room = room.as_slice_mut().expect("checked C-contiguous");
                PyResult::Ok(py.detach(|| inner.evaluate(slices, n, room)))
            })?;
            return Ok((array.into_any(), failures));
        }
        // The values in memory of the module's allocator, handed to NumPy:
        // a population's output is large (80 MB for 1,000 expressions over
        // 10,000 rows in float64), and NumPy's fresh mapping for it is
        // faulted in page by page on every call, where the allocator reuses
        // the memory of the last call's array once that is dropped (written
        // once, by the population's threads as they evaluate).
        crate::values::fits_in_memory::<T>(inner.len().checked_mul(n), "the population's values")?;
        let (values, failures) = with_slices(&cols, |slices| {
            py.detach(|| inner.evaluate_to_vec(slices, n))
        });
        let values = numpy::ndarray::Array2::from_shape_vec((inner.len(), n), values)
            .expect("a row per expression");
        Ok((PyArray2::from_owned_array(py, values).into_any(), failures))
    }

    /// `out` as the `(expressions, n)` array of `T` that `evaluate` writes,
    /// or why it cannot be.
    fn out_array<'py, T: Element + numpy::Element>(
        &self,
        out: &Bound<'py, PyAny>,
        n: usize,
    ) -> PyResult<Bound<'py, PyArray2<T>>> {
        let dtype = numpy_precision(T::PRECISION);
        let Ok(untyped) = out.cast::<numpy::PyUntypedArray>() else {
            return Err(PyTypeError::new_err(format!(
                "out must be a NumPy array of {dtype}, got {}",
                out.get_type().name()?
            )));
        };
        let shape = (self.exprs.len(), n);
        if untyped.shape() != [shape.0, shape.1] {
            let dims: Vec<String> = untyped.shape().iter().map(usize::to_string).collect();
            let comma = if dims.len() == 1 { "," } else { "" };
            return Err(PyValueError::new_err(format!(
                "out has shape ({}{comma}), the population's values are ({}, {})",
                dims.join(", "),
                shape.0,
                shape.1
            )));
        }
        let Ok(array) = out.cast::<PyArray2<T>>() else {
            return Err(PyTypeError::new_err(format!(
                "out must be {dtype} (the population's dtype), got {}",
                untyped.dtype()
            )));
        };
        if !array.is_c_contiguous() {
            return Err(PyValueError::new_err("out must be C-contiguous"));
        }
        Ok(array.clone())
    }

    /// `mse` over columns and a target of `T`, the population's precision.
    fn mse_as<T: Element + numpy::Element>(
        &self,
        py: Python<'_>,
        x: &Bound<'_, PyAny>,
        y: &Bound<'_, PyAny>,
    ) -> PyResult<(Vec<f64>, Vec<Option<MemberError>>)> {
        let inner = self.inner(py);
        let (cols, n) = self.columns::<T>(py, x)?;
        let y = target::<T>(py, y, n)?;
        Ok(with_slices(&cols, |slices| {
            let y = y.readonly();
            let target = y.as_slice().expect("required C-contiguous");
            py.detach(|| inner.mse(slices, target))
        }))
    }
}
