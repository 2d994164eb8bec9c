//! Tensor data in the forms users have: the fixtures' JSON (`{name: {"dtype",
//! "shape", "data"}}`, NaN and infinities as the strings `"nan"`, `"inf"`,
//! `"-inf"`), and NumPy's `.npy` and `.npz` files; and outputs written back as
//! the fixtures' JSON list (`[{"name", "dtype", "shape", "data"}]`).
//!
//! A tensor types an input with its exact shape ([`Tensor::exact_type`], what
//! `kiln run --inputs` uses), or with a 1-d tensor as a column `[n]`
//! ([`Tensor::input_type`]); kiln data holds the elements in row-major order.

use crate::{Buffer, DType, Data, Dim, Scalar, TensorType, Type, Verified};
use serde_json::{json, Value as Json};

/// A tensor read from a file.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its elements, row-major.
    pub data: Buffer,
}

impl Tensor {
    /// The tensor as kiln data: a scalar for shape `[]`, else its elements in
    /// row-major order (the shape is the input's type's).
    pub fn to_data(&self) -> Result<Data, String> {
        match self.shape.len() {
            0 => Ok(Data::Scalar(
                self.data.get(0).ok_or("a 0-d tensor without data")?,
            )),
            _ => Ok(Data::Column(self.data.clone())),
        }
    }

    /// The kiln type an input holding this tensor has: `dtype` for shape `[]`,
    /// a column `dtype[n]` for one dimension (any length binds `n`), else its
    /// exact shape (`f32[4, 3]`).
    pub fn input_type(&self) -> Result<Type, String> {
        let shape = match self.shape.len() {
            0 => vec![],
            1 => vec![Dim::Sym("n".into())],
            _ => self.shape.iter().map(|&d| Dim::Fixed(d as u64)).collect(),
        };
        Ok(Type::Tensor(TensorType {
            dtype: self.data.dtype(),
            shape,
        }))
    }

    /// Checks that this tensor can be an input of type `ty`: the same rank,
    /// and every fixed dimension equal (symbolic ones bind to anything).
    pub fn check_shape(&self, ty: &Type) -> Result<(), String> {
        let Some(t) = ty.as_tensor() else {
            return Err(format!("an input cannot be {ty}"));
        };
        let fits = t.shape.len() == self.shape.len()
            && t.shape.iter().zip(&self.shape).all(|(d, &n)| match d {
                Dim::Fixed(f) => *f == n as u64,
                Dim::Sym(_) => true,
            });
        if fits {
            Ok(())
        } else {
            Err(format!(
                "the input is {ty}, but the data has shape {:?}",
                self.shape
            ))
        }
    }

    /// The kiln type of exactly this tensor's shape (`f32[4]`, not `f32[n]`):
    /// what an input needs when a matmul or a broadcast fixes its length.
    pub fn exact_type(&self) -> Type {
        Type::Tensor(TensorType {
            dtype: self.data.dtype(),
            shape: self.shape.iter().map(|&d| Dim::Fixed(d as u64)).collect(),
        })
    }
}

fn dtype_named(name: &str) -> Result<DType, String> {
    Ok(match name {
        "float32" | "f32" => DType::F32,
        "float64" | "f64" => DType::F64,
        "int32" | "i32" => DType::I32,
        "int64" | "i64" => DType::I64,
        "bool" => DType::Bool,
        other => {
            return Err(format!(
                "unsupported dtype `{other}` (float32, float64, int32, int64, bool)"
            ))
        }
    })
}

fn json_scalar(dtype: DType, v: &Json) -> Result<Scalar, String> {
    let float = |v: &Json| -> Result<f64, String> {
        match v {
            Json::Number(n) => n.as_f64().ok_or_else(|| format!("{n} is not a number")),
            Json::String(s) => match s.as_str() {
                "nan" | "NaN" => Ok(f64::NAN),
                "inf" | "Infinity" => Ok(f64::INFINITY),
                "-inf" | "-Infinity" => Ok(f64::NEG_INFINITY),
                _ => Err(format!(
                    "\"{s}\" is not a number (only \"nan\", \"inf\", \"-inf\" are)"
                )),
            },
            Json::Bool(b) => Ok(f64::from(u8::from(*b))),
            other => Err(format!("{other} is not a number")),
        }
    };
    let int = |v: &Json| -> Result<i64, String> {
        match v {
            Json::Number(n) => n.as_i64().ok_or_else(|| format!("{n} is not an integer")),
            Json::Bool(b) => Ok(i64::from(*b)),
            other => Err(format!("{other} is not an integer")),
        }
    };
    Ok(match dtype {
        DType::Bool => match v {
            Json::Bool(b) => Scalar::Bool(*b),
            other => Scalar::Bool(int(other)? != 0),
        },
        DType::I32 => {
            let i = int(v)?;
            Scalar::I32(i32::try_from(i).map_err(|_| format!("{i} does not fit int32"))?)
        }
        DType::I64 => Scalar::I64(int(v)?),
        DType::F32 => Scalar::F32(float(v)? as f32),
        DType::F64 => Scalar::F64(float(v)?),
    })
}

/// One TENSOR object: `{"dtype": "float32", "shape": [3], "data": [...]}`.
pub fn tensor_from_json(v: &Json) -> Result<Tensor, String> {
    let dtype = dtype_named(v["dtype"].as_str().ok_or("missing \"dtype\"")?)?;
    let shape: Vec<usize> = v["shape"]
        .as_array()
        .ok_or("missing \"shape\"")?
        .iter()
        .map(|d| {
            d.as_u64()
                .map(|d| d as usize)
                .ok_or("a shape holds non-negative integers")
        })
        .collect::<Result<_, _>>()?;
    let data = v["data"].as_array().ok_or("missing \"data\"")?;
    let count = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or("the shape's size overflows")?;
    if data.len() != count {
        return Err(format!(
            "shape {shape:?} holds {count} elements, but \"data\" has {}",
            data.len()
        ));
    }
    let mut buffer = Buffer::with_capacity(dtype, count);
    for x in data {
        buffer.push(json_scalar(dtype, x)?);
    }
    Ok(Tensor {
        shape,
        data: buffer,
    })
}

/// Inputs in the fixtures' form: `{name: TENSOR, …}`, in file order.
pub fn read_json_inputs(text: &str) -> Result<Vec<(String, Tensor)>, String> {
    let v: Json = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let obj = v
        .as_object()
        .ok_or("expected an object {name: {\"dtype\", \"shape\", \"data\"}}")?;
    obj.iter()
        .map(|(k, t)| {
            tensor_from_json(t)
                .map(|t| (k.clone(), t))
                .map_err(|e| format!("input `{k}`: {e}"))
        })
        .collect()
}

fn scalar_json(s: Scalar) -> Json {
    let float = |f: f64| {
        if f.is_nan() {
            json!("nan")
        } else if f.is_infinite() {
            json!(if f > 0.0 { "inf" } else { "-inf" })
        } else {
            json!(f)
        }
    };
    match s {
        Scalar::Bool(b) => json!(b),
        Scalar::I32(i) => json!(i),
        Scalar::I64(i) => json!(i),
        Scalar::F32(f) => float(f64::from(f)),
        Scalar::F64(f) => float(f),
    }
}

/// The dtype's name in the fixtures' JSON.
pub fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::Bool => "bool",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::F32 => "float32",
        DType::F64 => "float64",
    }
}

/// The extents of each output of `graph` run on `inputs`: its type's
/// dimensions, the symbolic ones bound from the inputs; a selection's is
/// its length. An output whose extents cannot be bound that way (the inputs
/// do not fit the graph) gets its length, one axis.
pub fn output_shapes(verified: &Verified, inputs: &[Data], outputs: &[Data]) -> Vec<Vec<u64>> {
    let bindings = kiln_ir::exec::bind_inputs(verified, inputs).ok();
    let graph = verified.graph();
    graph
        .outputs()
        .iter()
        .zip(outputs)
        .map(|(output, data)| {
            let flat = match data {
                Data::Scalar(_) => Vec::new(),
                Data::Column(b) => vec![b.len() as u64],
                Data::Selection(rows) => vec![rows.len() as u64],
            };
            let (Some(b), Type::Tensor(t)) = (&bindings, graph.ty(output.value)) else {
                return flat;
            };
            let shape: Option<Vec<u64>> = t.shape.iter().map(|d| b.extent(d)).collect();
            match shape {
                Some(s) if s.iter().product::<u64>() == flat.iter().product::<u64>() => s,
                _ => flat,
            }
        })
        .collect()
}

/// Outputs as the fixtures' list: `[{"name", "dtype", "shape", "data"}]`,
/// each with its extents (from [`output_shapes`]) and its elements
/// row-major (a selection is `uint32` row indices).
pub fn outputs_json(outputs: &[(&str, &Data, &[u64])]) -> String {
    let items: Vec<Json> = outputs
        .iter()
        .map(|&(name, d, shape)| match d {
            Data::Scalar(s) => json!({"name": name, "dtype": dtype_name(s.dtype()), "shape": [], "data": [scalar_json(*s)]}),
            Data::Column(b) => json!({"name": name, "dtype": dtype_name(b.dtype()), "shape": shape,
                "data": b.iter().map(scalar_json).collect::<Vec<_>>()}),
            Data::Selection(rows) => json!({"name": name, "dtype": "uint32", "shape": [rows.len()], "data": rows}),
        })
        .collect();
    serde_json::to_string(&items).expect("JSON values serialize")
}

/// A NumPy `.npy` file (format 1.0–3.0, little-endian `b1 i4 i8 f4 f8`, C order).
pub fn read_npy(bytes: &[u8]) -> Result<Tensor, String> {
    let magic = b"\x93NUMPY";
    if bytes.len() < 10 || &bytes[..6] != magic {
        return Err("not a .npy file (bad magic)".into());
    }
    let (header_len, start): (usize, usize) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(format!("unsupported .npy version {v}")),
    };
    let end = start
        .checked_add(header_len)
        .filter(|&e| e <= bytes.len())
        .ok_or("truncated .npy header")?;
    let header =
        std::str::from_utf8(&bytes[start..end]).map_err(|_| "the .npy header is not text")?;
    let field = |key: &str| -> Result<&str, String> {
        let at = header
            .find(&format!("'{key}'"))
            .ok_or(format!("the .npy header has no '{key}'"))?;
        let rest = header[at + key.len() + 2..]
            .trim_start()
            .trim_start_matches(':')
            .trim_start();
        Ok(rest)
    };
    let descr = field("descr")?;
    let descr = descr
        .trim_start_matches('\'')
        .split('\'')
        .next()
        .unwrap_or("");
    let (dtype, size) = match descr {
        "|b1" | "b1" | "?" | "|?" => (DType::Bool, 1),
        "<i4" => (DType::I32, 4),
        "<i8" => (DType::I64, 8),
        "<f4" => (DType::F32, 4),
        "<f8" => (DType::F64, 8),
        other => {
            return Err(format!(
                "unsupported .npy dtype `{other}` (b1, <i4, <i8, <f4, <f8)"
            ))
        }
    };
    if field("fortran_order")?.starts_with("True") {
        return Err("Fortran-order .npy arrays are not supported".into());
    }
    let shape_text = field("shape")?;
    let shape_text = shape_text.trim_start_matches('(');
    let shape_text = &shape_text[..shape_text.find(')').ok_or("bad .npy shape")?];
    let shape: Vec<usize> = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| format!("bad .npy dimension `{s}`")))
        .collect::<Result<_, _>>()?;
    let count = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or("the .npy shape overflows")?;
    let body = &bytes[end..];
    if body.len() / size < count {
        return Err(format!(
            ".npy data holds {} bytes, the shape needs {}",
            body.len(),
            count.saturating_mul(size)
        ));
    }
    let mut data = Buffer::with_capacity(dtype, count);
    for c in body.chunks_exact(size).take(count) {
        data.push(Scalar::from_le_bytes(dtype, c).expect("chunks of the dtype's size"));
    }
    Ok(Tensor { shape, data })
}

/// A NumPy `.npz` archive (`np.savez` or `np.savez_compressed`): one input per
/// member, named as the member without `.npy`.
pub fn read_npz(bytes: &[u8]) -> Result<Vec<(String, Tensor)>, String> {
    use std::io::Read;
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .map_err(|e| format!("not a .npz archive: {e}"))?;
    let mut out = Vec::new();
    for i in 0..zip.len() {
        let mut member = zip
            .by_index(i)
            .map_err(|e| format!(".npz member {i}: {e}"))?;
        let name = member
            .name()
            .map_err(|e| format!(".npz member {i}: {e}"))?
            .trim_end_matches(".npy")
            .to_string();
        let mut buf = Vec::new();
        // Bounded by the archive's declared size, itself bounded by the file.
        member
            .by_ref()
            .take(1 << 32)
            .read_to_end(&mut buf)
            .map_err(|e| format!(".npz member `{name}`: {e}"))?;
        out.push((
            name.clone(),
            read_npy(&buf).map_err(|e| format!(".npz member `{name}`: {e}"))?,
        ));
    }
    Ok(out)
}
