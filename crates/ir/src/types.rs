//! Types of graph values: a dtype and a shape, or a selection vector.
//!
//! This module only describes types; which op accepts which type is decided in
//! [`crate::typing`], once, for the builder and the verifier alike.

use std::fmt;

/// The element type of a value.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// `bool`: false or true.
    Bool,
    /// `i32`: 32-bit two's complement integer.
    I32,
    /// `i64`: 64-bit two's complement integer.
    I64,
    /// `f32`: IEEE 754 binary32.
    F32,
    /// `f64`: IEEE 754 binary64.
    F64,
}

impl DType {
    /// Every dtype, in promotion order.
    pub const ALL: [DType; 5] = [DType::Bool, DType::I32, DType::I64, DType::F32, DType::F64];

    /// The name the text format and messages use (`f64`).
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    /// Parses a dtype name as [`DType::name`] writes it.
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    /// `i32` or `i64`.
    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::I64)
    }

    /// `f32` or `f64`.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64)
    }

    /// An integer or a float (not `bool`).
    pub fn is_numeric(self) -> bool {
        self.is_int() || self.is_float()
    }

    /// Size of one element in bytes, as buffers store it (`bool` is one byte).
    pub fn size_bytes(self) -> usize {
        match self {
            DType::Bool => 1,
            DType::I32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    /// The integer a float's bits are (`f32` to `i32`, `f64` to `i64`, as
    /// `Bitcast` takes them); any other dtype itself.
    pub fn bits_int(self) -> DType {
        match self {
            DType::F32 => DType::I32,
            DType::F64 => DType::I64,
            other => other,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One dimension of a shape: a fixed extent or a symbol bound at run time.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    /// A fixed extent, such as `4`.
    Fixed(u64),
    /// A symbolic extent, such as `n`, bound by the inputs when the graph
    /// runs.
    Sym(Sym),
}

/// The name of a symbolic dimension, interned: each distinct name is kept
/// once per process, so that a clone is a copy and equality compares
/// addresses. Every node of a column graph has `[n]`, and graphs are cloned
/// and rewritten pass by pass: a `String` here was a fifth of a GP
/// population's compile, an `Arc<str>`'s counts a tenth. Names are never
/// freed: a process holds each name it ever used once (a program has a
/// handful: `n`, a batch size, torch's `s0`…).
#[derive(Clone, Copy)]
pub struct Sym(&'static str);

impl Sym {
    /// The symbol named `name`.
    pub fn new(name: &str) -> Sym {
        use std::cell::Cell;
        use std::collections::HashSet;
        use std::sync::{Mutex, OnceLock};
        static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
        thread_local! {
            /// The name this thread interned last (mostly `n`).
            static LAST: Cell<Option<&'static str>> = const { Cell::new(None) };
        }
        if let Some(last) = LAST.get().filter(|last| *last == name) {
            return Sym(last);
        }
        let mut names = NAMES
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let interned = match names.get(name) {
            Some(&interned) => interned,
            None => {
                let leaked: &'static str = Box::leak(name.into());
                names.insert(leaked);
                leaked
            }
        };
        LAST.set(Some(interned));
        Sym(interned)
    }

    /// The name.
    pub fn as_str(self) -> &'static str {
        self.0
    }
}

impl std::ops::Deref for Sym {
    type Target = str;
    fn deref(&self) -> &str {
        self.0
    }
}

impl PartialEq for Sym {
    fn eq(&self, other: &Sym) -> bool {
        // Interned: one address per name.
        std::ptr::eq(self.0, other.0)
    }
}

impl Eq for Sym {}

impl std::hash::Hash for Sym {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // By name, not address: the same in every run.
        self.0.hash(state);
    }
}

impl PartialOrd for Sym {
    fn partial_cmp(&self, other: &Sym) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Sym {
    fn cmp(&self, other: &Sym) -> std::cmp::Ordering {
        self.0.cmp(other.0)
    }
}

impl fmt::Debug for Sym {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.0, f)
    }
}

impl fmt::Display for Sym {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl From<&str> for Sym {
    fn from(name: &str) -> Sym {
        Sym::new(name)
    }
}

impl From<String> for Sym {
    fn from(name: String) -> Sym {
        Sym::new(&name)
    }
}

impl From<&String> for Sym {
    fn from(name: &String) -> Sym {
        Sym::new(name)
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Fixed(n) => write!(f, "{n}"),
            Dim::Sym(s) => f.write_str(s),
        }
    }
}

/// A shape: a list of dimensions; `[]` is a scalar, `[n]` a column.
pub type Shape = Vec<Dim>;

/// The type of a dense value: element type and shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    /// The element type.
    pub dtype: DType,
    /// The dimensions; empty for a scalar.
    pub shape: Shape,
}

impl TensorType {
    /// A scalar of `dtype`.
    pub fn scalar(dtype: DType) -> Self {
        TensorType {
            dtype,
            shape: Vec::new(),
        }
    }

    /// A column of `dtype` with symbolic length `dim`.
    pub fn column(dtype: DType, dim: &str) -> Self {
        TensorType {
            dtype,
            shape: vec![Dim::Sym(dim.into())],
        }
    }

    /// True for shape `[]`.
    pub fn is_scalar(&self) -> bool {
        self.shape.is_empty()
    }
}

/// The type of a graph value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    /// A scalar, column or tensor of one dtype.
    Tensor(TensorType),
    /// A selection vector: ascending `u32` row indices into a column of extent `of`
    /// (what `filter` produces). Its length is only known at run time.
    Selection(Dim),
}

impl Type {
    /// A scalar of `dtype`.
    pub fn scalar(dtype: DType) -> Self {
        Type::Tensor(TensorType::scalar(dtype))
    }

    /// A column of `dtype` with symbolic length `dim`.
    pub fn column(dtype: DType, dim: &str) -> Self {
        Type::Tensor(TensorType::column(dtype, dim))
    }

    /// The tensor type, if this is not a selection.
    pub fn as_tensor(&self) -> Option<&TensorType> {
        match self {
            Type::Tensor(t) => Some(t),
            Type::Selection(_) => None,
        }
    }

    /// The dtype, if this is not a selection.
    pub fn dtype(&self) -> Option<DType> {
        self.as_tensor().map(|t| t.dtype)
    }

    /// The symbols this type mentions, in order.
    pub fn symbols(&self) -> impl Iterator<Item = &str> {
        let dims: &[Dim] = match self {
            Type::Tensor(t) => &t.shape,
            Type::Selection(d) => std::slice::from_ref(d),
        };
        dims.iter().filter_map(|d| match d {
            Dim::Sym(s) => Some(&**s),
            Dim::Fixed(_) => None,
        })
    }
}

/// Writes a shape as the text format does: `[n, 4]`; nothing for a scalar.
fn write_shape(f: &mut fmt::Formatter<'_>, shape: &[Dim]) -> fmt::Result {
    if shape.is_empty() {
        return Ok(());
    }
    f.write_str("[")?;
    for (dim_idx, dim) in shape.iter().enumerate() {
        if dim_idx > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{dim}")?;
    }
    f.write_str("]")
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.dtype)?;
        write_shape(f, &self.shape)
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Tensor(t) => write!(f, "{t}"),
            Type::Selection(of) => write!(f, "sel[{of}]"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_print_as_the_text_format_writes_them() {
        assert_eq!(Type::scalar(DType::F64).to_string(), "f64");
        assert_eq!(Type::column(DType::I32, "n").to_string(), "i32[n]");
        let t = TensorType {
            dtype: DType::F32,
            shape: vec![Dim::Fixed(4), Dim::Sym("n".into())],
        };
        assert_eq!(Type::Tensor(t).to_string(), "f32[4, n]");
        assert_eq!(Type::Selection(Dim::Sym("n".into())).to_string(), "sel[n]");
    }
}
