//! The C header of a kernel's native signature (`docs/abi.md`), shared by every
//! tier that writes objects.

use crate::{Kernel, Param};
use kiln_ir::types::{DType, Dim, TensorType};

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

/// One C parameter: its type and name, and the array it points to (none
/// for a scalar, bitmap, extent or selection).
struct CParam {
    ty: String,
    name: String,
    array: Option<TensorType>,
}

/// The C parameters of `kernel`, and the return type (the first output's
/// dtype in a direct signature, else the `int32_t` status).
fn c_params(kernel: &Kernel) -> (String, Vec<CParam>) {
    let mut params = Vec::new();
    let mut ret = "int32_t".to_string();
    let mut returned = false;
    for (idx, param) in kernel.params.iter().enumerate() {
        let (ty, name) = match param {
            Param::ScalarIn { name, dtype } if kernel.direct => {
                (c_type(*dtype).to_string(), name.clone())
            }
            Param::ScalarIn { name, dtype } | Param::ArrayIn { name, dtype, .. } => {
                (format!("const {}*", c_type(*dtype)), name.clone())
            }
            Param::BitmapIn { name } => ("const uint8_t*".to_string(), name.clone()),
            Param::ConstIn { name, tensor } => {
                let dims: Vec<Dim> = tensor.dims.iter().map(|&d| Dim::Fixed(d)).collect();
                (
                    format!("const {}*", c_type(tensor.dtype)),
                    format!("{name}_{}", shape_words(&dims)),
                )
            }
            Param::Scratch { dtype, shape } => (
                format!("{}*", c_type(*dtype)),
                format!("scratch_{}", shape_words(shape)),
            ),
            Param::Extent { dim } => ("int64_t".to_string(), dim.clone()),
            Param::ScalarOut { dtype, .. } if kernel.direct && !returned => {
                returned = true;
                ret = c_type(*dtype).to_string();
                continue;
            }
            Param::ScalarOut { name, dtype } | Param::ArrayOut { name, dtype, .. } => {
                (format!("{}*", c_type(*dtype)), format!("out_{name}"))
            }
            Param::SelectionOut { name, .. } => ("uint32_t*".to_string(), format!("out_{name}")),
            Param::SelectionCount { name } => ("int64_t*".to_string(), format!("out_{name}_count")),
        };
        // The index keeps names unique whatever the graph called its values.
        let name = format!("{}_{idx}", c_ident(&name));
        params.push(CParam {
            ty,
            name,
            array: param.array_type(),
        });
    }
    (ret, params)
}

/// The prototype of C parameters `params` returning `ret`, without the `;`.
fn declare(ret: &str, params: &[CParam], symbol: &str) -> String {
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

/// The C prototype of `kernel` exported as `symbol`, without the `;`.
pub fn prototype(kernel: &Kernel, symbol: &str) -> String {
    let (ret, params) = c_params(kernel);
    declare(&ret, &params, symbol)
}

/// A complete C header declaring `kernel` as `symbol`, with the dtype and
/// shape of every array parameter in a comment.
pub fn header(kernel: &Kernel, symbol: &str) -> String {
    let guard = format!("KILN_{}_H", c_ident(symbol).to_ascii_uppercase());
    let status = if kernel.direct {
        "/* Direct signature: the first output is returned, later ones are written through pointers. */\n".to_string()
    } else {
        "/* Returns 0, or a nonzero status: (status & 0xff) == 1 means a failed run-time\n   check, an integer division by zero or an index outside its axis (status >> 8 indexes\n   the checks, in the order of the nodes they guard). An array holds the product of its dims\n   elements, row-major and contiguous (a column: one per row); a selection output needs\n   room for one index per row and gets its length in *_count. */\n".to_string()
    };
    let (ret, params) = c_params(kernel);
    let arrays: Vec<String> = params
        .iter()
        .filter_map(|p| Some(format!("   {}: {}", p.name, p.array.as_ref()?)))
        .collect();
    let arrays = if arrays.is_empty() {
        String::new()
    } else {
        format!("/* Arrays:\n{} */\n", arrays.join("\n"))
    };
    format!(
        "/* Generated by kiln from graph {:?}. */\n#ifndef {guard}\n#define {guard}\n#include <stdint.h>\n#ifdef __cplusplus\nextern \"C\" {{\n#endif\n{status}{arrays}{};\n#ifdef __cplusplus\n}}\n#endif\n#endif\n",
        kernel.name,
        declare(&ret, &params, symbol)
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
