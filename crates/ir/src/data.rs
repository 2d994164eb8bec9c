//! Run-time data that engines take and return: scalars, typed column buffers and
//! selection vectors. Shared by every engine so tests and the CLI treat them alike.

use crate::scalar::{parse_scalar, LiteralError, Scalar};
use crate::types::{DType, Dim, TensorType, Type};
use std::fmt;

/// Why text did not parse as [`Data`] of a given type.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DataParseError {
    /// An element is not a literal of the dtype.
    #[error(transparent)]
    Literal(#[from] LiteralError),
    /// The brackets and commas do not make a list, or nested lists no
    /// deeper than the type's rank.
    #[error("`{text}` is not {expected}")]
    Form {
        /// The text that was read.
        text: String,
        /// What was expected there.
        expected: String,
    },
    /// Nested lists that are ragged, or whose extents are not the type's.
    #[error("nested lists of shape [{found}] do not fit {ty}{ragged}", ragged = if *ragged { " (the lists are ragged)" } else { "" })]
    Shape {
        /// The extents read, outermost first (of the first list at each
        /// depth).
        found: String,
        /// The type the data was read as.
        ty: Type,
        /// Two lists at one depth have different lengths.
        ragged: bool,
    },
}

/// A typed, contiguous buffer of elements.
#[derive(Clone, Debug, PartialEq)]
pub enum Buffer {
    /// `bool` elements.
    Bool(Vec<bool>),
    /// `i32` elements.
    I32(Vec<i32>),
    /// `i64` elements.
    I64(Vec<i64>),
    /// `f32` elements.
    F32(Vec<f32>),
    /// `f64` elements.
    F64(Vec<f64>),
}

macro_rules! each_buffer {
    ($buf:expr, $v:ident => $body:expr) => {
        match $buf {
            Buffer::Bool($v) => $body,
            Buffer::I32($v) => $body,
            Buffer::I64($v) => $body,
            Buffer::F32($v) => $body,
            Buffer::F64($v) => $body,
        }
    };
}

impl Buffer {
    /// An empty buffer of `dtype` with room for `capacity` elements.
    pub fn with_capacity(dtype: DType, capacity: usize) -> Buffer {
        match dtype {
            DType::Bool => Buffer::Bool(Vec::with_capacity(capacity)),
            DType::I32 => Buffer::I32(Vec::with_capacity(capacity)),
            DType::I64 => Buffer::I64(Vec::with_capacity(capacity)),
            DType::F32 => Buffer::F32(Vec::with_capacity(capacity)),
            DType::F64 => Buffer::F64(Vec::with_capacity(capacity)),
        }
    }

    /// `len` zeros (`false`) of `dtype`: room for a kernel's output.
    pub fn zeroed(dtype: DType, len: usize) -> Buffer {
        match dtype {
            DType::Bool => Buffer::Bool(vec![false; len]),
            DType::I32 => Buffer::I32(vec![0; len]),
            DType::I64 => Buffer::I64(vec![0; len]),
            DType::F32 => Buffer::F32(vec![0.0; len]),
            DType::F64 => Buffer::F64(vec![0.0; len]),
        }
    }

    /// The elements of `values`, which must all be of `dtype` (others are
    /// skipped).
    pub fn from_scalars(dtype: DType, values: &[Scalar]) -> Buffer {
        let mut b = Buffer::with_capacity(dtype, values.len());
        for &v in values {
            b.push(v);
        }
        b
    }

    /// The address of the first element (as a kernel argument).
    pub fn as_ptr(&self) -> *const u8 {
        each_buffer!(self, v => v.as_ptr().cast())
    }

    /// The address of the first element, for a kernel to write.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        each_buffer!(self, v => v.as_mut_ptr().cast())
    }

    /// The element dtype.
    pub fn dtype(&self) -> DType {
        match self {
            Buffer::Bool(_) => DType::Bool,
            Buffer::I32(_) => DType::I32,
            Buffer::I64(_) => DType::I64,
            Buffer::F32(_) => DType::F32,
            Buffer::F64(_) => DType::F64,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        each_buffer!(self, v => v.len())
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `idx`, or `None` past the end.
    pub fn get(&self, idx: usize) -> Option<Scalar> {
        Some(match self {
            Buffer::Bool(v) => Scalar::Bool(*v.get(idx)?),
            Buffer::I32(v) => Scalar::I32(*v.get(idx)?),
            Buffer::I64(v) => Scalar::I64(*v.get(idx)?),
            Buffer::F32(v) => Scalar::F32(*v.get(idx)?),
            Buffer::F64(v) => Scalar::F64(*v.get(idx)?),
        })
    }

    /// Appends `value`; returns false (and appends nothing) if its dtype differs.
    pub fn push(&mut self, value: Scalar) -> bool {
        match (self, value) {
            (Buffer::Bool(v), Scalar::Bool(x)) => v.push(x),
            (Buffer::I32(v), Scalar::I32(x)) => v.push(x),
            (Buffer::I64(v), Scalar::I64(x)) => v.push(x),
            (Buffer::F32(v), Scalar::F32(x)) => v.push(x),
            (Buffer::F64(v), Scalar::F64(x)) => v.push(x),
            _ => return false,
        }
        true
    }

    /// The elements as scalars.
    pub fn iter(&self) -> impl Iterator<Item = Scalar> + '_ {
        (0..self.len()).map(|idx| self.get(idx).expect("index below len"))
    }
}

/// A value an engine takes or returns.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    /// A scalar (shape `[]`).
    Scalar(Scalar),
    /// A column (shape `[n]`); later, tensors of higher rank.
    Column(Buffer),
    /// A selection vector: ascending row indices.
    Selection(Vec<u32>),
}

impl Data {
    /// The extents of a nested list as [`Data::parse`] reads it
    /// (`[[1, 2, 3], [4, 5, 6]]` is `[2, 3]`, `[1.5]` is `[1]`, `[]` is
    /// `[0]`), read off the first list at each depth (ragged lists are
    /// `Data::parse`'s to report); `None` for text that is not a list. One
    /// pass over the characters, no recursion.
    pub fn list_shape(text: &str) -> Option<Vec<u64>> {
        let text = text.trim();
        if !text.starts_with('[') {
            return None;
        }
        // Per depth: items seen in the first list there, and whether that
        // list has closed.
        let mut items: Vec<u64> = Vec::new();
        let mut closed: Vec<bool> = Vec::new();
        let mut depth = 0usize;
        for c in text.chars() {
            match c {
                '[' => {
                    if depth > 0 && !closed[depth - 1] && items[depth - 1] == 0 {
                        items[depth - 1] = 1;
                    }
                    depth += 1;
                    if items.len() < depth {
                        items.push(0);
                        closed.push(false);
                    }
                }
                ']' => {
                    depth = depth.checked_sub(1)?;
                    closed[depth] = true;
                }
                ',' if depth > 0 && !closed[depth - 1] => items[depth - 1] += 1,
                c if c.is_whitespace() || depth == 0 => {}
                _ => {
                    if !closed[depth - 1] && items[depth - 1] == 0 {
                        items[depth - 1] = 1;
                    }
                }
            }
        }
        (depth == 0).then_some(items)
    }

    /// True when both are the same kind, dtype and length and every element is
    /// [`Scalar::same_value`]: bitwise equality with every NaN equal.
    pub fn same_data(&self, other: &Data) -> bool {
        match (self, other) {
            (Data::Scalar(a), Data::Scalar(b)) => a.same_value(*b),
            (Data::Column(a), Data::Column(b)) => {
                a.dtype() == b.dtype()
                    && a.len() == b.len()
                    && a.iter().zip(b.iter()).all(|(x, y)| x.same_value(y))
            }
            (Data::Selection(a), Data::Selection(b)) => a == b,
            _ => false,
        }
    }

    /// A short description of the kind, dtype and length, for messages
    /// ("an f64 column of 3 rows").
    pub fn describe(&self) -> String {
        // Every dtype name but `bool` starts with a vowel sound (i32, f64).
        let article = |d: DType| if d == DType::Bool { "a" } else { "an" };
        match self {
            Data::Scalar(s) => format!("{} {} scalar", article(s.dtype()), s.dtype()),
            Data::Column(b) => format!(
                "{} {} column of {} rows",
                article(b.dtype()),
                b.dtype(),
                b.len()
            ),
            Data::Selection(s) => format!("a selection of {} rows", s.len()),
        }
    }

    /// Parses data of type `ty` as [`Data`]'s `Display` writes it: a scalar
    /// literal, or `[a, b, …]` for a column or selection. A tensor of rank
    /// `r` also takes `r` nested lists, as [`Data::display_shaped`] writes
    /// it (`[[1, 2, 3], [4, 5, 6]]` for `f32[2, 3]`); their extents must be
    /// the type's fixed dimensions, and the same at every depth.
    pub fn parse(text: &str, ty: &Type) -> Result<Data, DataParseError> {
        let t = text.trim();
        match ty {
            Type::Tensor(tt) if tt.is_scalar() => Ok(Data::Scalar(parse_scalar(t, tt.dtype)?)),
            Type::Tensor(tt) => parse_nested(t, tt, ty).map(Data::Column),
            Type::Selection(_) => {
                let err = || LiteralError {
                    text: t.to_string(),
                    dtype: DType::I64,
                };
                let items = list_items(t).ok_or_else(err)?;
                let rows = items
                    .into_iter()
                    .map(|i| i.trim().parse::<u32>().map_err(|_| err()))
                    .collect::<Result<_, _>>()?;
                Ok(Data::Selection(rows))
            }
        }
    }

    /// The data as a person reads it, as nested lists of the given extents
    /// (row-major, outermost first), which [`Data::parse`] reads back:
    /// `[[1.0, 2.0], [3.0, 4.0]]` for a column of four elements and `shape`
    /// `[2, 2]`. Every NaN prints as `nan` ([`Scalar::readable`]). Scalars,
    /// empty data, rank 0 and 1, and data whose length is not the product of
    /// `shape` print flat.
    pub fn display_shaped(&self, shape: &[u64]) -> String {
        let flat = |b: &Buffer| {
            let items: Vec<String> = b.iter().map(|v| v.readable().to_string()).collect();
            format!("[{}]", items.join(", "))
        };
        let b = match self {
            Data::Scalar(s) => return s.readable().to_string(),
            Data::Selection(_) => return self.to_string(),
            Data::Column(b) => b,
        };
        let n_elems = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
        if shape.len() < 2 || b.is_empty() || n_elems != Some(b.len() as u64) {
            return flat(b);
        }
        let mut out = String::new();
        for (idx, v) in b.iter().enumerate() {
            // How many lists close before this element and open after it:
            // as many axes as this index is a multiple of their extents'
            // products (innermost first).
            let mut boundary = 0;
            let mut span = 1u64;
            for &d in shape.iter().rev() {
                span *= d;
                if !(idx as u64).is_multiple_of(span) {
                    break;
                }
                boundary += 1;
            }
            if idx > 0 {
                out.push_str(&"]".repeat(boundary));
                out.push_str(", ");
            }
            out.push_str(&"[".repeat(if idx == 0 { shape.len() } else { boundary }));
            out.push_str(&v.readable().to_string());
        }
        out.push_str(&"]".repeat(shape.len()));
        out
    }
}

/// The elements of `[a, b, …]` (flat, row-major, any rank) or of nested
/// lists as deep as `tt`'s rank, checked against its fixed dimensions. A
/// loop over the characters with one counter per depth: no recursion, and
/// no deeper than the rank.
fn parse_nested(t: &str, tt: &TensorType, ty: &Type) -> Result<Buffer, DataParseError> {
    let rank = tt.shape.len();
    let form = |expected: &str| DataParseError::Form {
        text: t.to_string(),
        expected: expected.to_string(),
    };
    let mut buf = Buffer::with_capacity(tt.dtype, 0);
    // Per depth: the length of the first list closed there, and the items
    // of the list open there now.
    let mut lens: Vec<Option<u64>> = Vec::new();
    let mut open: Vec<u64> = Vec::new();
    // The depth scalars are at (all at one), and whether the last item of
    // the open list is complete (so a `,` or `]` may follow).
    let mut leaf_depth: Option<usize> = None;
    let mut after_item = false;
    let mut ragged = false;
    let mut closed = false;
    let mut rest = t;
    while let Some(c) = rest.chars().next() {
        if c.is_whitespace() {
            rest = &rest[c.len_utf8()..];
            continue;
        }
        if closed {
            return Err(form("one list (text after its closing `]`)"));
        }
        match c {
            '[' => {
                if after_item || leaf_depth.is_some_and(|d| open.len() >= d) {
                    return Err(form("a list (misplaced `[`)"));
                }
                if open.len() == rank.max(1) {
                    return Err(form(&format!("a list nested at most {rank} deep")));
                }
                open.push(0);
                if lens.len() < open.len() {
                    lens.push(None);
                }
                rest = &rest[1..];
            }
            ']' | ',' => {
                let Some(count) = open.last_mut() else {
                    return Err(form("a list (no opening `[`)"));
                };
                if !after_item && (c == ',' || *count > 0) {
                    return Err(form("a list (an empty item)"));
                }
                if after_item {
                    *count += 1;
                }
                after_item = c == ']';
                if c == ']' {
                    let depth = open.len() - 1;
                    let count = open.pop().expect("a list is open");
                    ragged |= lens[depth].is_some_and(|n| n != count);
                    lens[depth].get_or_insert(count);
                    closed = open.is_empty();
                    // The closed list is an item of its parent.
                    after_item = !closed;
                }
                rest = &rest[1..];
            }
            _ => {
                if after_item || open.is_empty() || leaf_depth.is_some_and(|d| d != open.len()) {
                    return Err(form("a list (misplaced element)"));
                }
                leaf_depth = Some(open.len());
                let end = rest.find([',', ']', '[']).unwrap_or(rest.len());
                buf.push(parse_scalar(rest[..end].trim(), tt.dtype)?);
                after_item = true;
                rest = &rest[end..];
            }
        }
    }
    if !closed {
        return Err(form("a list (unclosed `[`)"));
    }
    if lens.len() == 1 {
        // Flat: row-major elements, whatever the rank.
        return Ok(buf);
    }
    let found: Vec<u64> = lens.iter().map(|n| n.unwrap_or(0)).collect();
    let fits = found.len() == rank
        && found
            .iter()
            .zip(&tt.shape)
            .all(|(&n, d)| !matches!(d, Dim::Fixed(f) if *f != n));
    if ragged || !fits {
        return Err(DataParseError::Shape {
            found: found
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            ty: ty.clone(),
            ragged,
        });
    }
    Ok(buf)
}

/// The items of `[a, b, c]`; `None` if the brackets are missing.
fn list_items(text: &str) -> Option<Vec<&str>> {
    let inner = text.strip_prefix('[')?.strip_suffix(']')?.trim();
    if inner.is_empty() {
        return Some(Vec::new());
    }
    Some(inner.split(',').map(str::trim).collect())
}

impl fmt::Display for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (idx, v) in self.iter().enumerate() {
            if idx > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{v}")?;
        }
        f.write_str("]")
    }
}

impl fmt::Display for Data {
    /// Scalars in their literal form, columns and selections as `[a, b, …]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Data::Scalar(s) => write!(f, "{s}"),
            Data::Column(b) => write!(f, "{b}"),
            Data::Selection(s) => {
                let items: Vec<String> = s.iter().map(u32::to_string).collect();
                write!(f, "[{}]", items.join(", "))
            }
        }
    }
}

impl From<Vec<f64>> for Data {
    fn from(v: Vec<f64>) -> Self {
        Data::Column(Buffer::F64(v))
    }
}

impl From<Scalar> for Data {
    fn from(s: Scalar) -> Self {
        Data::Scalar(s)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn list_shapes() {
        use super::Data;
        assert_eq!(Data::list_shape("[1, 2, 3]"), Some(vec![3]));
        assert_eq!(
            Data::list_shape(" [[1, 2, 3], [4, 5, 6]] "),
            Some(vec![2, 3])
        );
        assert_eq!(Data::list_shape("[[[1], [2]]]"), Some(vec![1, 2, 1]));
        assert_eq!(Data::list_shape("[]"), Some(vec![0]));
        assert_eq!(Data::list_shape("[1.5]"), Some(vec![1]));
        assert_eq!(Data::list_shape("2.5"), None);
        assert_eq!(Data::list_shape("[1, 2"), None);
        assert_eq!(Data::list_shape("[1]]"), None);
    }

    use super::*;

    #[test]
    fn data_prints_and_parses_back() {
        let ty = Type::column(DType::F64, "n");
        let col = Data::from(vec![1.0, -0.0, f64::NAN, f64::NEG_INFINITY]);
        assert_eq!(col.to_string(), "[1.0, -0.0, nan, -inf]");
        assert!(Data::parse(&col.to_string(), &ty).unwrap().same_data(&col));
        assert_eq!(
            Data::parse("[]", &ty).unwrap(),
            Data::Column(Buffer::F64(vec![]))
        );
        assert!(Data::parse("[1.0, x]", &ty).is_err());
        assert!(Data::parse("1.0", &ty).is_err());
        let sel = Type::Selection(Dim::Sym("n".into()));
        assert_eq!(
            Data::parse("[3, 4, 5]", &sel).unwrap(),
            Data::Selection(vec![3, 4, 5])
        );
    }

    fn tensor(dims: &[Dim]) -> Type {
        Type::Tensor(TensorType {
            dtype: DType::I32,
            shape: dims.to_vec(),
        })
    }

    #[test]
    fn tensors_print_and_parse_as_nested_lists() {
        let (two, three) = (Dim::Fixed(2), Dim::Fixed(3));
        let n = Dim::Sym("n".into());
        let data = Data::Column(Buffer::I32(vec![1, 2, 3, 4, 5, 6]));
        let cases: [(&[u64], &str); 4] = [
            (&[2, 3], "[[1, 2, 3], [4, 5, 6]]"),
            (&[3, 2], "[[1, 2], [3, 4], [5, 6]]"),
            (&[1, 2, 3], "[[[1, 2, 3], [4, 5, 6]]]"),
            (&[2, 1, 3], "[[[1, 2, 3]], [[4, 5, 6]]]"),
        ];
        for (shape, text) in cases {
            assert_eq!(data.display_shaped(shape), text);
            let dims: Vec<Dim> = shape.iter().map(|&d| Dim::Fixed(d)).collect();
            assert_eq!(Data::parse(text, &tensor(&dims)).unwrap(), data, "{text}");
        }
        // Rank 0 and 1, empty data and a shape that does not fit print flat.
        assert_eq!(data.display_shaped(&[6]), "[1, 2, 3, 4, 5, 6]");
        assert_eq!(data.display_shaped(&[4, 2]), "[1, 2, 3, 4, 5, 6]");
        let empty = Data::Column(Buffer::I32(vec![]));
        assert_eq!(empty.display_shaped(&[0, 3]), "[]");
        // The flat form still reads any rank; a symbolic dim takes any extent.
        let t23 = tensor(&[two.clone(), three.clone()]);
        assert_eq!(Data::parse("[1, 2, 3, 4, 5, 6]", &t23).unwrap(), data);
        let tn3 = tensor(&[n.clone(), three.clone()]);
        assert_eq!(Data::parse(" [ [1,2,3] ,[4, 5,6] ] ", &tn3).unwrap(), data);
        assert_eq!(
            Data::parse("[[], []]", &tensor(&[two.clone(), Dim::Fixed(0)])).unwrap(),
            empty
        );
    }

    #[test]
    fn malformed_nested_lists_are_errors() {
        let t23 = tensor(&[Dim::Fixed(2), Dim::Fixed(3)]);
        let shape_err = |text: &str, ty: &Type| match Data::parse(text, ty) {
            Err(e @ DataParseError::Shape { .. }) => e.to_string(),
            other => panic!("{text}: {other:?}"),
        };
        assert_eq!(
            shape_err("[[1, 2], [3, 4], [5, 6]]", &t23),
            "nested lists of shape [3, 2] do not fit i32[2, 3]"
        );
        assert_eq!(
            shape_err("[[1, 2, 3], [4, 5]]", &t23),
            "nested lists of shape [2, 3] do not fit i32[2, 3] (the lists are ragged)"
        );
        let t2x = tensor(&[Dim::Fixed(2), Dim::Fixed(1), Dim::Fixed(3)]);
        assert!(shape_err("[[1, 2, 3], [4, 5, 6]]", &t2x).contains("shape [2, 3]"));
        for bad in [
            "[[1, 2, 3], [4, 5, 6]",
            "[[1, 2, 3], [4, 5, 6]]]",
            "[[1, 2, 3] [4, 5, 6]]",
            "[[1, 2, 3], 4]",
            "[1, [2, 3]]",
            "[[1, 2, 3],, [4, 5, 6]]",
            "[[1, 2, 3], [4, 5, 6],]",
            "[[[1, 2, 3]], [[4, 5, 6]]]",
            "[[1, 2, 3], [4, 5, 6]] x",
            "1, 2",
            "]",
            "",
        ] {
            assert!(
                matches!(Data::parse(bad, &t23), Err(DataParseError::Form { .. })),
                "{bad}: {:?}",
                Data::parse(bad, &t23)
            );
        }
        assert!(matches!(
            Data::parse("[[1, x, 3], [4, 5, 6]]", &t23),
            Err(DataParseError::Literal(_))
        ));
        // A column is one list deep.
        let col = Type::column(DType::I32, "n");
        assert!(Data::parse("[[1], [2]]", &col).is_err());
        // Deep nesting is refused at the rank, without recursion.
        let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(Data::parse(&deep, &t23).is_err());
    }
}
