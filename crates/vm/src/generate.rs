//! Writes `routines.rs`: kiln's inline math (`kiln_kernel::math_kernel`,
//! the one expansion every tier computes) as Rust functions of lanes, which
//! rustc compiles into the VM's vector math loops. Each statement of the
//! expansion becomes a call of the lane function the VM runs for that
//! operation (`lanes.rs`), so the routines compute what the kernel says with
//! the VM's own definitions, and the file is only a translation: the test
//! below fails when it is not what the expansion gives today, and
//! `KILN_BLESS=1 cargo test -p kiln-vm routines_are_current` rewrites it.

use crate::lanes;
use kiln_ir::{BinaryOp, DType, EntityRef, UnaryOp};
use kiln_kernel::{math_kernel, Expr, Kernel, MathCall, MathFn, Param, Reg, Stmt, Table};
use std::fmt::Write;

/// The functions with a routine, in the order `routines.rs` lists them.
fn functions() -> Vec<(MathFn, DType, Kernel)> {
    let fns = UnaryOp::ALL
        .iter()
        .map(|&op| MathFn::Unary(op))
        .chain(BinaryOp::ALL.iter().map(|&op| MathFn::Binary(op)));
    let mut out = Vec::new();
    for f in fns {
        for dtype in [DType::F64, DType::F32] {
            if let Some(kernel) = math_kernel(f, dtype) {
                out.push((f, dtype, kernel));
            }
        }
    }
    out
}

fn reg(r: Reg) -> String {
    format!("r{}", r.index())
}

/// The lane conversions of a float dtype: read, write.
fn float(dtype: DType) -> (&'static str, &'static str) {
    match dtype {
        DType::F64 => ("f64_", "of_f64"),
        DType::F32 => ("f32_", "of_f32"),
        other => panic!("a math function of {other}"),
    }
}

/// Whether `kernel` calls its `libm` function for rare rows.
fn has_fallbacks(kernel: &Kernel) -> bool {
    kernel
        .body
        .iter()
        .any(|s| matches!(s, Stmt::Let(_, Expr::Fallback { .. })))
}

/// The Rust type of a register of `dtype` in a routine: `u64` (a lane),
/// or in a [`narrow`] routine `u32` for a 4-byte value or a `bool` (0 or 1).
fn lane_type(dtype: DType, narrow: bool) -> &'static str {
    if narrow && (dtype == DType::Bool || dtype.size_bytes() == 4) {
        "u32"
    } else {
        "u64"
    }
}

/// Whether the routines of `dtype` are *narrow*: an `f32` routine holds its
/// 4-byte values and its `bool`s in `u32`s (its 8-byte ones, an `f64`
/// argument reduction's, in `u64`s), so that rustc vectorizes its loop in
/// 32-bit lanes, twice as many to a vector as the VM's 8-byte lanes
/// (`lanes::routine_loop_32` narrows the arguments and widens the results
/// around it). Each statement still calls the VM's lane function, on its
/// operands zero-extended and its result truncated (a 4-byte lane is its
/// bits zero-extended), so it computes what it did.
fn narrow(dtype: DType) -> bool {
    dtype == DType::F32
}

/// One routine: `fn name(x[, y]) -> (result, rare)`, where `rare` is nonzero
/// for a lane whose result must be the `libm` function's instead.
fn routine(
    name: &str,
    (kernel, dtype): (&Kernel, DType),
    tables: &mut Vec<&'static Table>,
    out: &mut String,
) {
    let args: Vec<&str> = ["x", "y"]
        .into_iter()
        .take(
            kernel
                .params
                .iter()
                .filter(|p| matches!(p, Param::ScalarIn { .. }))
                .count(),
        )
        .collect();
    let fallbacks = has_fallbacks(kernel);
    let narrow = narrow(dtype);
    let ty = lane_type(dtype, narrow);
    let params: Vec<String> = args.iter().map(|a| format!("{a}: {ty}")).collect();
    writeln!(out, "#[inline(always)]").unwrap();
    writeln!(
        out,
        "pub(crate) fn {name}({}) -> ({ty}, {ty}) {{",
        params.join(", ")
    )
    .unwrap();
    if fallbacks {
        writeln!(out, "    let mut rare = 0;").unwrap();
    }
    let body = (&kernel.body[..], narrow);
    let result = statements(name, kernel, body, &args, &reg, tables, out);
    let result = result.unwrap_or_else(|| panic!("{name}: no result"));
    let rare = if fallbacks { "rare" } else { "0" };
    writeln!(out, "    ({}, {rare})\n}}\n", reg(result)).unwrap();
}

/// `sincos_{dtype}`: `sin` and `cos` of one argument, `(sin, cos, rare)`.
/// Their expansions are one argument reduction and two polynomials, told
/// apart only by the last selections: the statements both kernels begin
/// with are written once, then each kernel's rest (the cosine's registers
/// renamed `c…`), so each result is its routine's, bit for bit.
fn sincos(dtype: DType, tables: &mut Vec<&'static Table>, out: &mut String) {
    let name = format!("sincos_{dtype}");
    let kernel = |op| math_kernel(MathFn::Unary(op), dtype).expect("sin and cos expand");
    let (sin, cos) = (kernel(UnaryOp::Sin), kernel(UnaryOp::Cos));
    let common = sin
        .body
        .iter()
        .zip(&cos.body)
        .take_while(|(a, b)| a == b)
        .count();
    assert!(common > 0, "{name}: sin and cos share their reduction");
    let shared = |r: Reg| {
        sin.body[..common]
            .iter()
            .any(|s| matches!(s, Stmt::Let(d, _) if *d == r))
    };
    let cos_name = |r: Reg| {
        if shared(r) {
            reg(r)
        } else {
            format!("c{}", r.index())
        }
    };
    let narrow = narrow(dtype);
    let ty = lane_type(dtype, narrow);
    writeln!(out, "#[inline(always)]").unwrap();
    writeln!(
        out,
        "pub(crate) fn {name}(x: {ty}) -> ({ty}, {ty}, {ty}) {{"
    )
    .unwrap();
    let fallbacks = has_fallbacks(&sin) || has_fallbacks(&cos);
    if fallbacks {
        writeln!(out, "    let mut rare = 0;").unwrap();
    }
    let args = ["x"];
    let (shared, rest) = sin.body.split_at(common);
    statements(&name, &sin, (shared, narrow), &args, &reg, tables, out);
    let s = statements(&name, &sin, (rest, narrow), &args, &reg, tables, out);
    let c = statements(
        &name,
        &cos,
        (&cos.body[common..], narrow),
        &args,
        &cos_name,
        tables,
        out,
    );
    let (s, c) = (s.expect("a sine"), c.expect("a cosine"));
    let rare = if fallbacks { "rare" } else { "0" };
    writeln!(out, "    ({}, {}, {rare})\n}}\n", reg(s), cos_name(c)).unwrap();
}

/// Writes `stmts` of `kernel` (a routine's body, [`narrow`] or not) as Rust
/// lets, registers named by `reg`; the register the kernel stores, if
/// `stmts` has its store.
fn statements(
    name: &str,
    kernel: &Kernel,
    (stmts, narrow): (&[Stmt], bool),
    args: &[&str],
    reg_name: &dyn Fn(Reg) -> String,
    tables: &mut Vec<&'static Table>,
    out: &mut String,
) -> Option<Reg> {
    let (mut result, mut fallback) = (None, None);
    // A register as a lane function's operand: a `u32` zero-extended.
    let reg = |r: Reg| {
        if lane_type(kernel.reg_type(r), narrow) == "u32" {
            format!("u64::from({})", reg_name(r))
        } else {
            reg_name(r)
        }
    };
    for stmt in stmts {
        let (r, expr) = match stmt {
            Stmt::Let(r, expr) => (*r, expr),
            Stmt::Store(_, None, value) => {
                result = Some(*value);
                continue;
            }
            other => panic!("{name}: a math kernel has only lets and a store, not {other:?}"),
        };
        let dtype = kernel.reg_type(r);
        let ty = |r: &Reg| kernel.reg_type(*r);
        let lane = |what: &str, name: Option<&'static str>| {
            name.unwrap_or_else(|| panic!("{name:?}: no lane function for {what}"))
        };
        // Whether `value` is already of the let's type (an argument, a
        // constant, a register of the same width), not a lane (`u64`).
        let mut own_type = false;
        let value = match expr {
            Expr::Input(p) => {
                own_type = true;
                args[kernel
                    .params
                    .iter()
                    .take(p.index())
                    .filter(|p| matches!(p, Param::ScalarIn { .. }))
                    .count()]
                .to_string()
            }
            Expr::Const(c) => {
                own_type = true;
                format!("{:#x}", c.bits())
            }
            Expr::Unary(op, a) => format!(
                "{}({})",
                lane(&format!("{op} {dtype}"), lanes::unary_name(*op, dtype)),
                reg(*a)
            ),
            Expr::Binary(op, a, b) => format!(
                "{}({}, {})",
                lane(&format!("{op} {dtype}"), lanes::binary_name(*op, dtype)),
                reg(*a),
                reg(*b)
            ),
            Expr::Compare(op, a, b) => format!(
                "{}({}, {})",
                lane(&format!("{op}"), lanes::compare_name(*op, ty(a))),
                reg(*a),
                reg(*b)
            ),
            Expr::Select(c, a, b) => {
                format!("select_lane({}, {}, {})", reg(*c), reg(*a), reg(*b))
            }
            Expr::MulAdd(a, b, c) => {
                format!("mul_add_{dtype}({}, {}, {})", reg(*a), reg(*b), reg(*c))
            }
            Expr::Cast(to, a) => format!(
                "{}({})",
                lane(&format!("cast to {to}"), lanes::cast_name(ty(a), *to)),
                reg(*a)
            ),
            // A lane is only bits (of the same width).
            Expr::Bitcast(_, a) => {
                own_type = true;
                reg_name(*a)
            }
            Expr::Table(table, index) => {
                if !tables.iter().any(|t| t.name == table.name) {
                    tables.push(table);
                }
                format!(
                    "{}[({} as usize) % {}]",
                    table.name.to_uppercase(),
                    reg(*index),
                    table.bits.len()
                )
            }
            Expr::Fallback { call, rare, value } => {
                // The loop (`lanes::routine_loop`) gives a rare lane the
                // `libm` function of the routine's arguments in place of
                // the routine's result: so must the kernel.
                let is_input = |a: &Reg| {
                    kernel
                        .body
                        .iter()
                        .any(|s| matches!(s, Stmt::Let(d, Expr::Input(_)) if d == a))
                };
                assert!(
                    call.args().iter().all(is_input),
                    "{name}: a fallback of other values than the arguments"
                );
                fallback = Some(r);
                writeln!(out, "    rare |= {};", reg_name(*rare)).unwrap();
                own_type = true;
                reg_name(*value)
            }
            other => panic!("{name}: a math kernel does not compute {other:?}"),
        };
        let ty = lane_type(dtype, narrow);
        let value = if ty == "u32" && !own_type {
            format!("({value}) as u32")
        } else {
            value
        };
        writeln!(out, "    let {}: {ty} = {value};", reg_name(r)).unwrap();
    }
    assert!(
        fallback.is_none() || fallback == result,
        "{name}: a fallback that is not the result"
    );
    result
}

/// The whole of `routines.rs`.
pub(crate) fn source() -> String {
    let mut out = String::new();
    out.push_str(
        "// @generated by `KILN_BLESS=1 cargo test -p kiln-vm routines_are_current`\n\
         // (crates/vm/src/generate.rs) from kiln_kernel::math_kernel: do not edit.\n\
         \n\
         //! kiln's inline math as Rust functions of lanes, one per function and\n\
         //! dtype, and the loops running them (`generate.rs` says how they are made).\n\
         //! A routine returns its result and whether a row needs the `libm`\n\
         //! function instead (a rare path the expansion does not port): the\n\
         //! loops call it for those rows.\n\
         \n\
         #![allow(unused_variables, clippy::all)]\n\
         \n\
         use crate::lanes::*;\n\
         use kiln_ir::{BinaryOp, DType, UnaryOp};\n\n",
    );
    let functions = functions();
    let mut tables = Vec::new();
    let mut unary = String::new();
    let mut binary = String::new();
    for (f, dtype, kernel) in &functions {
        let name = format!("{f}_{dtype}");
        routine(&name, (kernel, *dtype), &mut tables, &mut out);
        let (read, write) = float(*dtype);
        // A narrow routine's loop narrows its arguments and widens its
        // results around it.
        let looped = if narrow(*dtype) { "_32" } else { "" };
        match f {
            MathFn::Unary(op) => {
                let c = MathCall::Unary(*op, Reg::new(0)).name(*dtype).unwrap();
                writeln!(
                    unary,
                    "        (UnaryOp::{op:?}, DType::{dtype:?}) => routine1{looped}!({name}, |a| {write}(kiln_ir::math::{c}({read}(a)))),"
                )
                .unwrap();
            }
            MathFn::Binary(op) => {
                let c = MathCall::Binary(*op, Reg::new(0), Reg::new(0))
                    .name(*dtype)
                    .unwrap();
                writeln!(
                    binary,
                    "        (BinaryOp::{op:?}, DType::{dtype:?}) => routine2{looped}!({name}, |a, b| {write}(kiln_ir::math::{c}({read}(a), {read}(b)))),"
                )
                .unwrap();
            }
        }
    }
    for dtype in [DType::F64, DType::F32] {
        sincos(dtype, &mut tables, &mut out);
    }
    // The tables are kiln-kernel's own constants, named after their symbols.
    for table in tables {
        writeln!(
            out,
            "static {}: [u64; {}] = kiln_kernel::{};\n",
            table.name.to_uppercase(),
            table.bits.len(),
            table.name.trim_start_matches("__kiln_").to_uppercase()
        )
        .unwrap();
    }
    write!(
        out,
        "/// The loop of the routine computing `op` on `dtype`.\n\
         pub(crate) fn unary(op: UnaryOp, dtype: DType) -> Option<Un> {{\n    \
         Some(match (op, dtype) {{\n{unary}        _ => return None,\n    }})\n}}\n\n\
         /// The loops of the routine computing `op` on `dtype`.\n\
         pub(crate) fn binary(op: BinaryOp, dtype: DType) -> Option<Bins> {{\n    \
         Some(match (op, dtype) {{\n{binary}        _ => return None,\n    }})\n}}\n\n\
         /// The loop of the routine computing `sin` and `cos` on `dtype`.\n\
         pub(crate) fn sincos(dtype: DType) -> Option<Un2> {{\n    \
         Some(match dtype {{\n        \
         DType::F64 => routine_sincos!(sincos_f64, |a| {{ let (s, c) = kiln_ir::math::sincos(f64_(a)); (of_f64(s), of_f64(c)) }}),\n        \
         DType::F32 => routine_sincos_32!(sincos_f32, |a| {{ let (s, c) = kiln_ir::math::sincosf(f32_(a)); (of_f32(s), of_f32(c)) }}),\n        \
         _ => return None,\n    }})\n}}\n"
    )
    .unwrap();
    out
}

#[test]
fn routines_are_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/routines.rs");
    let want = source();
    if std::env::var_os("KILN_BLESS").is_some() {
        std::fs::write(path, &want).unwrap();
        return;
    }
    let have = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        have == want,
        "crates/vm/src/routines.rs is not what kiln's inline math gives today: \
         run `KILN_BLESS=1 cargo test -p kiln-vm routines_are_current`"
    );
}
