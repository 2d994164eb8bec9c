//! Printing a kernel for humans (`kiln ir --emit kernel`), with source names as
//! comments.

use crate::{Expr, Extent, Kernel, MathCall, Param, Reg, Stmt};
use cranelift_entity::EntityRef;
use std::fmt::Write;

/// The kernel as text.
pub fn print(kernel: &Kernel) -> String {
    let mut out = String::new();
    let sig = if kernel.direct {
        " (direct signature)"
    } else {
        " -> i32 status"
    };
    writeln!(out, "kernel {:?}{sig}", kernel.name).expect("writing to a String");
    for (idx, param) in kernel.params.iter().enumerate() {
        // The pointed-to array's type, for the parameters that have one.
        let array = param
            .array_type()
            .map(|t| t.to_string())
            .unwrap_or_default();
        let desc = match param {
            Param::ScalarIn { name, dtype } => format!("{dtype} input {name:?}"),
            Param::ArrayIn { name, .. } => format!("*const {array} input {name:?}"),
            Param::BitmapIn { name } => format!("*const bits input {name:?}"),
            Param::ConstIn { name, .. } => format!("*const {array} constant {name:?}"),
            Param::Scratch { .. } => format!("*mut {array} scratch"),
            Param::Extent { dim } => format!("i64 extent {dim}"),
            Param::ScalarOut { name, dtype } => format!("*mut {dtype} output {name:?}"),
            Param::ArrayOut { name, .. } => format!("*mut {array} output {name:?}"),
            Param::SelectionOut { name, .. } => format!("*mut u32 selection {name:?}"),
            Param::SelectionCount { name } => format!("*mut i64 count of {name:?}"),
        };
        writeln!(out, "  p{idx}: {desc}").expect("writing to a String");
    }
    for (idx, init) in kernel.vars.iter().enumerate() {
        writeln!(out, "  var{idx}: {} = {init}", init.dtype()).expect("writing to a String");
    }
    block(&mut out, kernel, &kernel.body, 1);
    out
}

fn reg(r: Reg) -> String {
    format!("r{}", r.0)
}

fn extent(e: Extent) -> String {
    match e {
        Extent::Fixed(n) => n.to_string(),
        Extent::Param(p) => format!("{p}"),
        Extent::Reg(r) => format!("r{}", r.0),
    }
}

fn expr(e: &Expr) -> String {
    let r = reg;
    match e {
        Expr::Input(p) => format!("input {p}"),
        Expr::Load(p, row) => format!("load {p}[{}]", r(*row)),
        Expr::LoadBit(p, row) => format!("load_bit {p}[{}]", r(*row)),
        Expr::Const(c) => format!("const {c}"),
        Expr::ExtentValue(x) => format!("extent {}", extent(*x)),
        Expr::Var(v) => format!("var{}", v.0),
        Expr::Unary(op, a) => format!("{op} {}", r(*a)),
        Expr::Binary(op, a, b) => format!("{op} {}, {}", r(*a), r(*b)),
        Expr::Compare(op, a, b) => format!("{op} {}, {}", r(*a), r(*b)),
        Expr::Select(c, a, b) => format!("select {}, {}, {}", r(*c), r(*a), r(*b)),
        Expr::MulAdd(a, b, c) => format!("muladd {}, {}, {}", r(*a), r(*b), r(*c)),
        Expr::Cast(to, a) => format!("cast.{to} {}", r(*a)),
        Expr::Bitcast(to, a) => format!("bitcast.{to} {}", r(*a)),
        Expr::Table(table, index) => format!("table {}[{}]", table.name, r(*index)),
        Expr::Fallback { call, rare, value } => {
            let call = match *call {
                MathCall::Unary(op, a) => format!("{op} {}", r(a)),
                MathCall::Binary(op, a, b) => format!("{op} {}, {}", r(a), r(b)),
            };
            format!("fallback {call} if {}, else {}", r(*rare), r(*value))
        }
    }
}

fn block(out: &mut String, kernel: &Kernel, stmts: &[Stmt], depth: usize) {
    let pad = "  ".repeat(depth);
    for stmt in stmts {
        let line = match stmt {
            Stmt::Let(r, e) => {
                let mut line = format!("r{}: {} = {}", r.0, kernel.reg_type(*r), expr(e));
                if let Some(name) = &kernel.reg_names[r.index()] {
                    write!(line, "  # {name}").expect("writing to a String");
                }
                line
            }
            Stmt::CheckNonZero(r, check) => format!(
                "check_nonzero r{} (check {check}: {})",
                r.0, kernel.checks[*check as usize]
            ),
            Stmt::Loop {
                extent: e,
                row,
                body,
                iterations,
            } => {
                writeln!(
                    out,
                    "{pad}loop r{} in 0..{} {} {{",
                    row.0,
                    extent(*e),
                    iterations.name()
                )
                .expect("writing to a String");
                block(out, kernel, body, depth + 1);
                "}".to_string()
            }
            Stmt::Set(v, r) => format!("var{} = r{}", v.0, r.0),
            Stmt::Store(p, Some(row), r) => format!("store {p}[r{}] = r{}", row.0, r.0),
            Stmt::Store(p, None, r) => format!("store {p} = r{}", r.0),
            Stmt::KeepRow {
                sel,
                count,
                row,
                mask,
            } => format!(
                "select_push {sel}, var{}, r{} if r{}",
                count.0, row.0, mask.0
            ),
            Stmt::StoreCount(p, v) => format!("store {p} = var{}", v.0),
            Stmt::Prefetch(p, row) => format!("prefetch {p}[r{}]", row.0),
        };
        writeln!(out, "{pad}{line}").expect("writing to a String");
    }
}
