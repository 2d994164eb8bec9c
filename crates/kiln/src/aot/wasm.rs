//! What a linked wasm32 module carries besides its code, so that a host
//! with nothing but a WebAssembly engine can call it (the Node package's
//! `wasm.js`): two custom sections, which engines ignore.
//!
//! - `kiln.abi`: JSON describing the call (version 1): the graph's inputs
//!   and outputs (names, dtypes, shapes with symbols), the exported symbol,
//!   whether the kernel is direct, one entry per kernel parameter in order
//!   (what it is, its dtype and shape, where the native signature puts it:
//!   argument `arg` of wasm type `wasm`, or the returned value), and one
//!   entry per run-time check (the error a failed check's status stands
//!   for, as the in-process tiers report it).
//! - `kiln.constants`: the constant tensors' elements (weights),
//!   little-endian, each at the `offset` its parameter's entry gives, 8-byte
//!   aligned. The host copies them into linear memory and passes their
//!   addresses, as for any array.
//!
//! docs/abi.md, "wasm32 modules", is the host's side of it.

use kiln_ir::{DType, Dim, Graph, Type};
use kiln_kernel::abi::{self, NativeArg, NativePlace};
use kiln_kernel::{Kernel, Param};
use std::fmt::Write;

/// A JSON string literal.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn shape(dims: &[Dim]) -> String {
    let items: Vec<String> = dims
        .iter()
        .map(|d| match d {
            Dim::Fixed(n) => n.to_string(),
            Dim::Sym(s) => quote(s),
        })
        .collect();
    format!("[{}]", items.join(","))
}

fn port(name: &str, ty: &Type) -> String {
    let (dtype, dims) = match ty {
        Type::Tensor(t) => (t.dtype.to_string(), shape(&t.shape)),
        Type::Selection(d) => ("selection".to_string(), shape(std::slice::from_ref(d))),
    };
    format!(
        "{{\"name\":{},\"dtype\":{},\"shape\":{dims}}}",
        quote(name),
        quote(&dtype)
    )
}

fn wasm_type(arg: NativeArg) -> &'static str {
    match arg {
        NativeArg::Pointer => "i32",
        NativeArg::I64 => "i64",
        NativeArg::Value(DType::F64) => "f64",
        NativeArg::Value(DType::F32) => "f32",
        NativeArg::Value(DType::I64) => "i64",
        NativeArg::Value(DType::I32 | DType::Bool) => "i32",
    }
}

/// The `kiln.abi` JSON and the `kiln.constants` bytes of `kernel`, lowered
/// from `graph` and exported as `symbol`.
fn manifest(graph: &Graph, kernel: &Kernel, symbol: &str) -> (String, Vec<u8>) {
    let signature = abi::signature(kernel);
    let mut constants: Vec<u8> = Vec::new();
    let (mut inputs, mut outputs) = (0usize, 0usize);
    let mut params = Vec::with_capacity(kernel.params.len());
    for (param, place) in kernel.params.iter().zip(&signature.places) {
        let at = match *place {
            NativePlace::Arg(k) => format!(
                "\"arg\":{k},\"wasm\":{}",
                quote(wasm_type(signature.params[k]))
            ),
            NativePlace::Return => format!(
                "\"returned\":true,\"wasm\":{}",
                quote(wasm_type(signature.returns.expect("a returned output")))
            ),
        };
        let what = match param {
            Param::ScalarIn { dtype, .. } => {
                inputs += 1;
                format!(
                    "\"kind\":\"input\",\"input\":{},\"dtype\":{},\"shape\":[]",
                    inputs - 1,
                    quote(&dtype.to_string())
                )
            }
            Param::ArrayIn {
                dtype, shape: s, ..
            } => {
                inputs += 1;
                format!(
                    "\"kind\":\"input\",\"input\":{},\"dtype\":{},\"shape\":{}",
                    inputs - 1,
                    quote(&dtype.to_string()),
                    shape(s)
                )
            }
            Param::BitmapIn { .. } => {
                inputs += 1;
                format!("\"kind\":\"bitmap\",\"input\":{}", inputs - 1)
            }
            Param::ConstIn { tensor, .. } => {
                let offset = constants.len().next_multiple_of(8);
                constants.resize(offset, 0);
                for v in &tensor.values {
                    constants.extend_from_slice(&v.to_le_bytes());
                }
                let dims: Vec<Dim> = tensor.dims.iter().map(|&d| Dim::Fixed(d)).collect();
                format!(
                    "\"kind\":\"const\",\"dtype\":{},\"shape\":{},\"offset\":{offset},\"bytes\":{}",
                    quote(&tensor.dtype.to_string()),
                    shape(&dims),
                    constants.len() - offset
                )
            }
            Param::Scratch { dtype, shape: s } => format!(
                "\"kind\":\"scratch\",\"dtype\":{},\"shape\":{}",
                quote(&dtype.to_string()),
                shape(s)
            ),
            Param::Extent { dim } => format!("\"kind\":\"extent\",\"symbol\":{}", quote(dim)),
            Param::ScalarOut { dtype, .. } => {
                outputs += 1;
                format!(
                    "\"kind\":\"output\",\"output\":{},\"dtype\":{},\"shape\":[]",
                    outputs - 1,
                    quote(&dtype.to_string())
                )
            }
            Param::ArrayOut {
                dtype, shape: s, ..
            } => {
                outputs += 1;
                format!(
                    "\"kind\":\"output\",\"output\":{},\"dtype\":{},\"shape\":{}",
                    outputs - 1,
                    quote(&dtype.to_string()),
                    shape(s)
                )
            }
            Param::SelectionOut { dim, .. } => {
                outputs += 1;
                format!(
                    "\"kind\":\"selection\",\"output\":{},\"shape\":{}",
                    outputs - 1,
                    shape(std::slice::from_ref(dim))
                )
            }
            Param::SelectionCount { .. } => {
                format!("\"kind\":\"count\",\"output\":{}", outputs - 1)
            }
        };
        params.push(format!("{{{what},{at}}}"));
    }
    let checks: Vec<String> = (0..kernel.checks.len())
        .map(|k| {
            let e = kernel.status_error(graph, abi::check_status(k as u32));
            let class = match e {
                kiln_ir::ExecError::IndexOutOfRange { .. } => "IndexOutOfRangeError",
                _ => "DivisionByZeroError",
            };
            format!(
                "{{\"error\":{},\"message\":{}}}",
                quote(class),
                quote(&e.to_string())
            )
        })
        .collect();
    let names = |ports: Vec<String>| format!("[{}]", ports.join(","));
    let graph_inputs = graph
        .inputs()
        .iter()
        .map(|i| port(&i.name, graph.ty(i.value)))
        .collect();
    let graph_outputs = graph
        .outputs()
        .iter()
        .map(|o| port(&o.name, graph.ty(o.value)))
        .collect();
    let json = format!(
        "{{\"version\":1,\"symbol\":{},\"direct\":{},\"inputs\":{},\"outputs\":{},\"params\":[{}],\"checks\":[{}]}}",
        quote(symbol),
        kernel.direct,
        names(graph_inputs),
        names(graph_outputs),
        params.join(","),
        checks.join(",")
    );
    (json, constants)
}

/// LEB128, as wasm writes sizes.
fn leb128(mut n: usize, out: &mut Vec<u8>) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Appends a custom section (id 0) named `name` holding `payload`.
fn custom_section(module: &mut Vec<u8>, name: &str, payload: &[u8]) {
    let mut body = Vec::with_capacity(name.len() + 5 + payload.len());
    leb128(name.len(), &mut body);
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(payload);
    module.push(0);
    leb128(body.len(), module);
    module.extend_from_slice(&body);
}

/// `module` (a linked wasm32 module of `kernel`) with its `kiln.abi` and
/// `kiln.constants` sections appended.
pub(super) fn describe(
    mut module: Vec<u8>,
    graph: &Graph,
    kernel: &Kernel,
    symbol: &str,
) -> Vec<u8> {
    let (json, constants) = manifest(graph, kernel, symbol);
    custom_section(&mut module, "kiln.abi", json.as_bytes());
    custom_section(&mut module, "kiln.constants", &constants);
    module
}
