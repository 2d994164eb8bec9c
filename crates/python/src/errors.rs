//! kiln's errors as Python exceptions. The classes are defined in Python
//! (`kiln/_errors.py`), so they can inherit from two built-in exceptions at
//! once (`kiln.ParseError` is a `SyntaxError`, `kiln.DivisionByZeroError` a
//! `ZeroDivisionError`); the native module imports them when it raises one.

use kiln::ir::diag::Loc;
use kiln::ExecError;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::PyErr;

pyo3::import_exception!(kiln._errors, ParseError);
pyo3::import_exception!(kiln._errors, CompileError);
mod exec {
    pyo3::import_exception!(kiln._errors, ExecError);
}
pyo3::import_exception!(kiln._errors, DivisionByZeroError);
pyo3::import_exception!(kiln._errors, IndexOutOfRangeError);

/// A `kiln.ParseError` (a `SyntaxError`) with kiln's located `message` and
/// the location as `SyntaxError` attributes (`filename`, `lineno`,
/// `offset`, `text`).
pub fn parse_error(message: &str, file: &str, source: &str, loc: Loc) -> PyErr {
    let line = source
        .lines()
        .nth(loc.line.saturating_sub(1) as usize)
        .unwrap_or("");
    // Long lines (a 10 MB one-liner) are not copied into the exception.
    let line: String = line.chars().take(400).collect();
    ParseError::new_err((
        message.to_string(),
        (file.to_string(), loc.line, loc.col, line),
    ))
}

/// A `kiln.CompileError` (a `ValueError`): the graph does not verify or a
/// tier cannot compile it.
pub fn compile_error(message: impl Into<String>) -> PyErr {
    CompileError::new_err(message.into())
}

/// A run-time error: integer division by zero is a
/// `kiln.DivisionByZeroError` (a `kiln.ExecError` and a `ZeroDivisionError`),
/// an index outside its axis a `kiln.IndexOutOfRangeError` (an `IndexError`);
/// arguments of the wrong count or type are `TypeError`s, of the wrong shape
/// `ValueError`s, as for any Python function.
pub fn exec_error(e: ExecError) -> PyErr {
    let message = e.to_string();
    match e {
        ExecError::DivisionByZero { .. } => DivisionByZeroError::new_err(message),
        ExecError::IndexOutOfRange { .. } => IndexOutOfRangeError::new_err(message),
        ExecError::InputCount { .. } | ExecError::InputType { .. } => PyTypeError::new_err(message),
        ExecError::Length { .. } | ExecError::OutputCount { .. } | ExecError::Output { .. } => {
            PyValueError::new_err(message)
        }
        ExecError::Unsupported(_) => exec::ExecError::new_err(message),
    }
}

/// A `kiln.DivisionByZeroError` with `message`.
pub fn division_by_zero(message: String) -> PyErr {
    DivisionByZeroError::new_err(message)
}
