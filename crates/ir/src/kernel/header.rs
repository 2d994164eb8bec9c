//! The C header of a kernel's native signature (`docs/abi.md`), shared by every
//! tier that writes objects.

use super::{Kernel, Param};
use crate::types::{DType, Dim};

/// The C type of a dtype (`bool` is a `uint8_t` holding 0 or 1).
pub fn c_type(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool => "uint8_t",
        DType::I32 => "int32_t",
        DType::I64 => "int64_t",
        DType::F32 => "float",
        DType::F64 => "double",
    }
}

/// A C identifier made from a name: non-alphanumerics become `_`.
fn c_ident(name: &str) -> String {
    let mut id: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if id.is_empty() || id.starts_with(|c: char| c.is_ascii_digit()) {
        id.insert(0, '_');
    }
    id
}

/// One C parameter: its type, its name, and the shape of the elements it
/// points to (none for a scalar or an extent).
struct CParam {
    ty: String,
    name: String,
    shape: Option<String>,
}

/// The C parameters of `kernel`, and the return type (the first output's
/// dtype in a direct signature, else the `int32_t` status).
fn c_params(kernel: &Kernel) -> (String, Vec<CParam>) {
    let mut params = Vec::new();
    let mut ret = "int32_t".to_string();
    let mut returned = false;
    let shaped = |dtype: DType, shape: &[Dim]| {
        let dims: Vec<String> = shape.iter().map(Dim::to_string).collect();
        Some(format!("{dtype}[{}]", dims.join(", ")))
    };
    for (idx, param) in kernel.params.iter().enumerate() {
        let (ty, name, shape) = match param {
            Param::ScalarIn { name, dtype } if kernel.direct => {
                (c_type(*dtype).to_string(), name.clone(), None)
            }
            Param::ScalarIn { name, dtype } => {
                (format!("const {}*", c_type(*dtype)), name.clone(), None)
            }
            Param::ColumnIn { name, dtype, shape } => (
                format!("const {}*", c_type(*dtype)),
                name.clone(),
                shaped(*dtype, shape),
            ),
            Param::BitmapIn { name } => ("const uint8_t*".to_string(), name.clone(), None),
            Param::ConstIn { name, tensor } => {
                let dims: Vec<Dim> = tensor.dims.iter().map(|&d| Dim::Fixed(d)).collect();
                (
                    format!("const {}*", c_type(tensor.dtype)),
                    format!("{name}_{}", shape_words(&dims)),
                    shaped(tensor.dtype, &dims),
                )
            }
            Param::Scratch { dtype, shape } => (
                format!("{}*", c_type(*dtype)),
                format!("scratch_{}", shape_words(shape)),
                shaped(*dtype, shape),
            ),
            Param::Extent { dim } => ("int64_t".to_string(), dim.clone(), None),
            Param::ScalarOut { dtype, .. } if kernel.direct && !returned => {
                returned = true;
                ret = c_type(*dtype).to_string();
                continue;
            }
            Param::ScalarOut { name, dtype } => {
                (format!("{}*", c_type(*dtype)), format!("out_{name}"), None)
            }
            Param::ColumnOut { name, dtype, shape } => (
                format!("{}*", c_type(*dtype)),
                format!("out_{name}"),
                shaped(*dtype, shape),
            ),
            Param::SelectionOut { name } => ("uint32_t*".to_string(), format!("out_{name}"), None),
            Param::SelectionCount { name } => {
                ("int64_t*".to_string(), format!("out_{name}_count"), None)
            }
        };
        // The index keeps names unique whatever the graph called its values.
        let name = format!("{}_{idx}", c_ident(&name));
        params.push(CParam { ty, name, shape });
    }
    (ret, params)
}

/// The C prototype of `kernel` exported as `symbol`, without the `;`.
pub fn prototype(kernel: &Kernel, symbol: &str) -> String {
    let (ret, params) = c_params(kernel);
    let params = if params.is_empty() {
        "void".to_string()
    } else {
        let decls: Vec<String> = params
            .iter()
            .map(|p| format!("{} {}", p.ty, p.name))
            .collect();
        decls.join(", ")
    };
    format!("{ret} {}({params})", c_ident(symbol))
}

/// A complete C header declaring `kernel` as `symbol`, with the shape of
/// every array parameter in a comment.
pub fn header(kernel: &Kernel, symbol: &str) -> String {
    let guard = format!("KILN_{}_H", c_ident(symbol).to_ascii_uppercase());
    let status = if kernel.direct {
        "/* Direct signature: the first output is returned, later ones are written through pointers. */\n".to_string()
    } else {
        "/* Returns 0, or a nonzero status: (status & 0xff) == 1 means integer division by zero\n   (status >> 8 indexes the dividing node). An array holds the product of its dims\n   elements, row-major and contiguous (a column: one per row); a selection output needs\n   room for one index per row and gets its length in *_count. */\n".to_string()
    };
    let (_, params) = c_params(kernel);
    let shapes: Vec<String> = params
        .iter()
        .filter_map(|p| Some(format!("   {}: {}", p.name, p.shape.as_ref()?)))
        .collect();
    let shapes = if shapes.is_empty() {
        String::new()
    } else {
        format!("/* Arrays:\n{} */\n", shapes.join("\n"))
    };
    format!(
        "/* Generated by kiln from graph {:?}. */\n#ifndef {guard}\n#define {guard}\n#include <stdint.h>\n#ifdef __cplusplus\nextern \"C\" {{\n#endif\n{status}{shapes}{};\n#ifdef __cplusplus\n}}\n#endif\n#endif\n",
        kernel.name,
        prototype(kernel, symbol)
    )
}

/// A shape as an identifier part: `[n, 4]` → `n_x_4`.
fn shape_words(shape: &[Dim]) -> String {
    shape
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("_x_")
}
