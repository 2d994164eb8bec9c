//! The kernel verifier: checks what every backend assumes of a [`Kernel`], so
//! a lowering bug is reported where it is made rather than as wrong machine
//! code. Lowering runs it on every kernel in debug builds (every test), as
//! Cranelift runs `verify_if` after each pass.
//!
//! It checks that registers are defined once, before every use and in scope
//! (a register defined in a loop body is not visible after the loop); that
//! operands have the types their expression needs; that each parameter is used
//! as its [`Param`] declares; and that no expression lowering expands (float or
//! integer `floordiv`/`mod`, logical `not`, ordering compares of bools,
//! conversions to `bool`) reaches a backend.
//!
//! The walk keeps its own stack: deep loop nests cannot overflow the Rust one.

use crate::{Expr, Extent, Iterations, Kernel, Param, ParamIdx, Reg, Stmt, Var};
use cranelift_entity::EntityRef;
use kiln_ir::op::{BinaryOp, CmpOp, UnaryOp};
use kiln_ir::types::DType;

/// Why a kernel is invalid: a bug in lowering.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid kernel `{kernel}`: {message}")]
pub struct KernelError {
    /// The kernel's name.
    pub kernel: String,
    /// What is wrong, naming the register, variable or parameter.
    pub message: String,
}

/// Checks `kernel` (see the module documentation).
pub fn verify(kernel: &Kernel) -> Result<(), KernelError> {
    let mut v = Verifier {
        kernel,
        defined: vec![false; kernel.regs.len()],
        scope: Vec::new(),
    };
    v.run().map_err(|message| KernelError {
        kernel: kernel.name.clone(),
        message,
    })
}

struct Verifier<'a> {
    kernel: &'a Kernel,
    /// Registers visible at the current statement.
    defined: Vec<bool>,
    /// Registers in definition order, popped when their loop ends.
    scope: Vec<Reg>,
}

type Check = Result<(), String>;

fn ensure(ok: bool, message: impl FnOnce() -> String) -> Check {
    if ok {
        Ok(())
    } else {
        Err(message())
    }
}

impl Verifier<'_> {
    fn run(&mut self) -> Check {
        let k = self.kernel;
        ensure(k.reg_names.len() == k.regs.len(), || {
            format!(
                "{} register names for {} registers",
                k.reg_names.len(),
                k.regs.len()
            )
        })?;
        if k.direct {
            ensure(k.checks.is_empty(), || "a direct kernel cannot fail".into())?;
            for (idx, p) in k.params.iter().enumerate() {
                ensure(
                    matches!(p, Param::ScalarIn { .. } | Param::ScalarOut { .. }),
                    || format!("p{idx} of a direct kernel is not a scalar"),
                )?;
            }
        }
        // Each frame: the statements left, and the scope depth to return to.
        let mut stack: Vec<(std::slice::Iter<Stmt>, usize)> = vec![(k.body.iter(), 0)];
        while let Some((stmts, _)) = stack.last_mut() {
            let Some(stmt) = stmts.next() else {
                let (_, depth) = stack.pop().expect("the loop saw a frame");
                for reg in self.scope.drain(depth..) {
                    self.defined[reg.index()] = false;
                }
                continue;
            };
            if let Stmt::Loop {
                extent,
                row,
                body,
                iterations,
            } = stmt
            {
                self.extent(*extent)?;
                if body.iter().any(|s| matches!(s, Stmt::Loop { .. })) {
                    nest_claim(*row, body, *iterations, &self.kernel.params)?;
                } else {
                    iterations_claim(*row, body, *iterations)?;
                }
                let depth = self.scope.len();
                self.define(*row, DType::I64)?;
                stack.push((body.iter(), depth));
                continue;
            }
            self.stmt(stmt)?;
        }
        Ok(())
    }

    fn reg(&self, reg: Reg) -> Result<DType, String> {
        let ty = self
            .kernel
            .regs
            .get(reg.index())
            .ok_or_else(|| format!("r{} is not a register", reg.0))?;
        ensure(self.defined[reg.index()], || {
            format!("r{} is used where it is not defined", reg.0)
        })?;
        Ok(*ty)
    }

    fn typed(&self, reg: Reg, want: DType, what: &str) -> Check {
        let got = self.reg(reg)?;
        ensure(got == want, || {
            format!("{what} r{} is {got}, not {want}", reg.0)
        })
    }

    fn define(&mut self, reg: Reg, want: DType) -> Check {
        let got = *self
            .kernel
            .regs
            .get(reg.index())
            .ok_or_else(|| format!("r{} is not a register", reg.0))?;
        ensure(got == want, || {
            format!("r{} is declared {got} but holds {want}", reg.0)
        })?;
        ensure(!self.defined[reg.index()], || {
            format!("r{} is defined twice", reg.0)
        })?;
        self.defined[reg.index()] = true;
        self.scope.push(reg);
        Ok(())
    }

    fn param(&self, p: ParamIdx) -> Result<&Param, String> {
        self.kernel
            .params
            .get(p.index())
            .ok_or_else(|| format!("p{p} is not a parameter"))
    }

    fn var(&self, var: Var) -> Result<DType, String> {
        self.kernel
            .vars
            .get(var.index())
            .map(|init| init.dtype())
            .ok_or_else(|| format!("var{} is not a variable", var.0))
    }

    fn extent(&self, extent: Extent) -> Check {
        match extent {
            Extent::Fixed(_) => Ok(()),
            Extent::Param(p) => ensure(matches!(self.param(p)?, Param::Extent { .. }), || {
                format!("p{p} is used as an extent but is not one")
            }),
            Extent::Reg(r) => self.typed(r, DType::I64, "the extent"),
        }
    }

    /// The element dtype of an array parameter that `load` may read.
    fn readable(&self, p: ParamIdx) -> Result<DType, String> {
        let param = self.param(p)?;
        match param {
            Param::ArrayIn { .. }
            | Param::ConstIn { .. }
            | Param::Scratch { .. }
            | Param::ArrayOut { .. } => Ok(param.array_type().expect("an array").dtype),
            // A scalar passed by pointer is a one-element array.
            Param::ScalarIn { dtype, .. } | Param::ScalarOut { dtype, .. }
                if !self.kernel.direct =>
            {
                Ok(*dtype)
            }
            _ => Err(format!("p{p} is loaded from but is not an array")),
        }
    }

    fn stmt(&mut self, stmt: &Stmt) -> Check {
        match stmt {
            Stmt::Let(reg, expr) => {
                let ty = self.kernel.regs.get(reg.index()).copied();
                let ty = ty.ok_or_else(|| format!("r{} is not a register", reg.0))?;
                self.expr(expr, ty)
                    .map_err(|m| format!("r{} = {expr:?}: {m}", reg.0))?;
                self.define(*reg, ty)
            }
            Stmt::CheckNonZero(reg, check) => {
                let ty = self.reg(*reg)?;
                ensure(ty.is_int(), || format!("check of {ty} r{}", reg.0))?;
                ensure((*check as usize) < self.kernel.checks.len(), || {
                    format!("check {check} has no node")
                })
            }
            Stmt::Loop { .. } => unreachable!("loops are walked by `run`"),
            Stmt::Set(var, reg) => {
                let ty = self.var(*var)?;
                self.typed(*reg, ty, &format!("the value set to var{}", var.0))
            }
            Stmt::Store(p, row, reg) => {
                let ty = self.reg(*reg)?;
                let param = self.param(*p)?;
                let want = match (param, row) {
                    (Param::ScalarOut { dtype, .. }, None) => *dtype,
                    (Param::ArrayOut { .. } | Param::Scratch { .. }, Some(row)) => {
                        self.typed(*row, DType::I64, "the row")?;
                        param.array_type().expect("an array").dtype
                    }
                    // A scalar output of a non-direct kernel is a pointer to
                    // a one-element array.
                    (Param::ScalarOut { dtype, .. }, Some(row)) if !self.kernel.direct => {
                        self.typed(*row, DType::I64, "the row")?;
                        *dtype
                    }
                    _ => {
                        return Err(format!(
                            "p{p} is stored to but is not an output of that kind"
                        ))
                    }
                };
                ensure(ty == want, || {
                    format!("{ty} r{} stored to a {want} p{p}", reg.0)
                })
            }
            Stmt::KeepRow {
                sel,
                count,
                row,
                mask,
            } => {
                ensure(
                    matches!(self.param(*sel)?, Param::SelectionOut { .. }),
                    || format!("p{sel} is selected into but is not a selection"),
                )?;
                ensure(self.var(*count)? == DType::I64, || {
                    format!("the count var{} is not i64", count.0)
                })?;
                self.typed(*row, DType::I64, "the row")?;
                self.typed(*mask, DType::Bool, "the mask")
            }
            Stmt::Prefetch(p, row) => {
                self.readable(*p)?;
                self.typed(*row, DType::I64, "the prefetched row")
            }
            Stmt::StoreCount(p, var) => {
                ensure(
                    matches!(self.param(*p)?, Param::SelectionCount { .. }),
                    || format!("p{p} is not a selection count"),
                )?;
                ensure(self.var(*var)? == DType::I64, || {
                    format!("the count var{} is not i64", var.0)
                })
            }
        }
    }

    /// Checks `expr` as the definition of a register of dtype `ty`.
    fn expr(&self, expr: &Expr, ty: DType) -> Check {
        let same = |r: Reg| self.typed(r, ty, "the operand");
        match expr {
            Expr::Input(p) => match self.param(*p)? {
                Param::ScalarIn { dtype, .. } => {
                    ensure(*dtype == ty, || format!("p{p} is {dtype}"))
                }
                _ => Err(format!("p{p} is not a scalar input")),
            },
            Expr::Load(p, row) => {
                let dtype = self.readable(*p)?;
                ensure(dtype == ty, || format!("p{p} holds {dtype}"))?;
                self.typed(*row, DType::I64, "the row")
            }
            Expr::LoadBit(p, row) => {
                ensure(matches!(self.param(*p)?, Param::BitmapIn { .. }), || {
                    format!("p{p} is not a bitmap")
                })?;
                ensure(ty == DType::Bool, || "a bit is a bool".into())?;
                self.typed(*row, DType::I64, "the row")
            }
            Expr::Const(c) => ensure(c.dtype() == ty, || format!("the constant is {}", c.dtype())),
            Expr::ExtentValue(e) => {
                ensure(ty == DType::I64, || "an extent is i64".into())?;
                self.extent(*e)
            }
            Expr::Var(v) => {
                let dtype = self.var(*v)?;
                ensure(dtype == ty, || format!("var{} is {dtype}", v.0))
            }
            Expr::Unary(op, a) => {
                ensure(*op != UnaryOp::Not, || {
                    "logical `not` is lowered to `xor`".into()
                })?;
                same(*a)
            }
            Expr::Binary(op, a, b) => {
                ensure(!matches!(op, BinaryOp::FloorDiv | BinaryOp::Mod), || {
                    format!("`{op}` is lowered to primitives")
                })?;
                same(*a)?;
                same(*b)
            }
            Expr::Compare(op, a, b) => {
                ensure(ty == DType::Bool, || "a comparison is a bool".into())?;
                let operand = self.reg(*a)?;
                self.typed(*b, operand, "the second operand")?;
                ensure(
                    operand != DType::Bool || matches!(op, CmpOp::Eq | CmpOp::Ne),
                    || format!("`{op}` of bools is lowered to an i32 comparison"),
                )
            }
            Expr::Select(c, a, b) => {
                self.typed(*c, DType::Bool, "the condition")?;
                same(*a)?;
                same(*b)
            }
            Expr::MulAdd(a, b, c) => {
                ensure(ty.is_float(), || format!("a fused multiply-add of {ty}"))?;
                same(*a)?;
                same(*b)?;
                same(*c)
            }
            Expr::Bitcast(to, a) => {
                ensure(*to == ty, || format!("a bitcast to {to}"))?;
                let from = self.reg(*a)?;
                ensure(
                    from != DType::Bool
                        && *to != DType::Bool
                        && from.size_bytes() == to.size_bytes(),
                    || format!("a bitcast of {from} to {to}: numbers of one width only"),
                )
            }
            Expr::Table(table, index) => {
                ensure(table.dtype == ty && ty.is_float(), || {
                    format!("table `{}` of {} read as {ty}", table.name, table.dtype)
                })?;
                self.typed(*index, DType::I64, "a table index")
            }
            Expr::Fallback { call, rare, value } => {
                ensure(ty.is_float() && call.name(ty).is_some(), || {
                    format!("no math function {call:?} on {ty} to fall back to")
                })?;
                for arg in call.args() {
                    same(arg)?;
                }
                self.typed(*rare, DType::Bool, "the condition")?;
                same(*value)
            }
            Expr::Cast(to, a) => {
                ensure(*to == ty, || format!("a cast to {to}"))?;
                let from = self.reg(*a)?;
                ensure(*to != DType::Bool || from == DType::Bool, || {
                    format!("a conversion of {from} to bool is lowered to a comparison")
                })
            }
        }
    }
}

/// Checks what a loop's `iterations` claim against what no independent
/// loop can hold (`crate::iterations` decides the claim; this is the
/// verifier's own, structural check of it): a loop inside, a variable set
/// (a value carried to the next row), a count stored, a scalar stored (every
/// row would write it), a store at an index that does not depend on the row
/// (every row would write one element), and for [`Iterations::Independent`]
/// a selection.
fn iterations_claim(row: Reg, body: &[Stmt], iterations: Iterations) -> Check {
    if iterations == Iterations::Sequential {
        return Ok(());
    }
    let claim = iterations.name();
    // The registers computed from the row (in order: SSA, defined once).
    let mut rowwise = vec![row];
    for stmt in body {
        if let Stmt::Let(r, expr) = stmt {
            if crate::iterations::computed_from(expr, |o| rowwise.contains(&o)) {
                rowwise.push(*r);
            }
        }
    }
    for stmt in body {
        match stmt {
            Stmt::Loop { .. } => {
                return Err(format!("an {claim} loop over r{} holds a loop", row.0))
            }
            Stmt::Set(v, _) => {
                return Err(format!("an {claim} loop over r{} sets var{}", row.0, v.0))
            }
            Stmt::StoreCount(..) | Stmt::Store(_, None, _) => {
                return Err(format!(
                    "an {claim} loop over r{} stores one element in every row",
                    row.0
                ))
            }
            Stmt::Store(p, Some(at), _) if !rowwise.contains(at) => {
                return Err(format!(
                    "an {claim} loop over r{} stores {p} at r{}, which does not depend on the row",
                    row.0, at.0
                ))
            }
            Stmt::KeepRow { .. } if iterations == Iterations::Independent => {
                return Err(format!(
                    "an independent loop over r{} keeps rows (it is selecting)",
                    row.0
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Checks an independent claim of a loop with loops inside (a tensor nest,
/// `crate::iterations::nest`): no variable read before the iteration sets
/// it, no selection, count or scalar stored, and every store at an index
/// computed from the row or to scratch (a temporary each chunk of rows gets
/// its own room for).
fn nest_claim(row: Reg, body: &[Stmt], iterations: Iterations, params: &[Param]) -> Check {
    if iterations == Iterations::Sequential {
        return Ok(());
    }
    ensure(iterations == Iterations::Independent, || {
        format!("a loop over r{} with loops inside is selecting", row.0)
    })?;
    let mut rowwise = vec![row];
    crate::iterations::walk_nest(body, |stmt, set| match stmt {
        Stmt::Let(r, expr) => {
            if let Expr::Var(v) = expr {
                ensure(set.contains(v), || {
                    format!(
                        "an independent loop over r{} reads var{} before its iteration sets it",
                        row.0, v.0
                    )
                })?;
            }
            if crate::iterations::computed_from(expr, |o| rowwise.contains(&o)) {
                rowwise.push(*r);
            }
            Ok(())
        }
        Stmt::Store(p, Some(at), _) => ensure(
            rowwise.contains(at) || matches!(params.get(p.index()), Some(Param::Scratch { .. })),
            || {
                format!(
                        "an independent loop over r{} stores {p} at r{}, which does not depend on the row",
                        row.0, at.0
                    )
            },
        ),
        Stmt::Store(_, None, _) | Stmt::StoreCount(..) | Stmt::KeepRow { .. } => Err(format!(
            "an independent loop over r{} stores a scalar, a count or a selection",
            row.0
        )),
        Stmt::Set(..) | Stmt::Loop { .. } | Stmt::CheckNonZero(..) | Stmt::Prefetch(..) => Ok(()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_ir::scalar::Scalar;

    /// `f(x: f64[n]) -> f64[n]`: `out[row] = x[row] + 1`, with `edit` applied.
    fn kernel(edit: impl FnOnce(&mut Kernel)) -> Result<(), KernelError> {
        let (row, x, one, sum) = (Reg(0), Reg(1), Reg(2), Reg(3));
        let mut k = Kernel {
            name: "f".into(),
            params: vec![
                Param::ArrayIn {
                    name: "x".into(),
                    dtype: DType::F64,
                    shape: vec![kiln_ir::types::Dim::Sym("n".into())],
                },
                Param::Extent { dim: "n".into() },
                Param::ArrayOut {
                    name: "y".into(),
                    dtype: DType::F64,
                    shape: vec![kiln_ir::types::Dim::Sym("n".into())],
                },
            ],
            regs: vec![DType::I64, DType::F64, DType::F64, DType::F64],
            vars: Vec::new(),
            body: vec![Stmt::Loop {
                extent: Extent::Param(ParamIdx(1)),
                row,
                body: vec![
                    Stmt::Let(x, Expr::Load(ParamIdx(0), row)),
                    Stmt::Let(one, Expr::Const(Scalar::F64(1.0))),
                    Stmt::Let(sum, Expr::Binary(BinaryOp::Add, x, one)),
                    Stmt::Store(ParamIdx(2), Some(row), sum),
                ],
                iterations: Iterations::Sequential,
            }],
            checks: Vec::new(),
            direct: false,
            reg_names: vec![None; 4],
        };
        edit(&mut k);
        verify(&k)
    }

    fn body(k: &mut Kernel) -> &mut Vec<Stmt> {
        match &mut k.body[0] {
            Stmt::Loop { body, .. } => body,
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_valid_kernel_passes() {
        kernel(|_| {}).unwrap();
    }

    fn claim(k: &mut Kernel, claimed: Iterations) {
        match &mut k.body[0] {
            Stmt::Loop { iterations, .. } => *iterations = claimed,
            _ => unreachable!(),
        }
    }

    #[test]
    fn independence_claims_are_checked() {
        kernel(|k| claim(k, Iterations::Independent)).unwrap();
        kernel(|k| claim(k, Iterations::Selecting)).unwrap();
        type Edit = Box<dyn FnOnce(&mut Kernel)>;
        let cases: Vec<(Edit, &str)> = vec![
            (
                Box::new(|k| {
                    claim(k, Iterations::Independent);
                    k.vars.push(Scalar::F64(0.0));
                    body(k).push(Stmt::Set(Var(0), Reg(3)));
                }),
                "an independent loop over r0 sets var0",
            ),
            (
                Box::new(|k| {
                    claim(k, Iterations::Selecting);
                    body(k)[3] = Stmt::Store(ParamIdx(2), None, Reg(3));
                }),
                "stores one element in every row",
            ),
            (
                Box::new(|k| {
                    claim(k, Iterations::Independent);
                    // The constant's register: the same element every row.
                    body(k)[3] = Stmt::Store(ParamIdx(2), Some(Reg(2)), Reg(3));
                }),
                "stores p2 at r2, which does not depend on the row",
            ),
        ];
        for (edit, want) in cases {
            let err = kernel(edit).expect_err(want).to_string();
            assert!(err.contains(want), "{err:?} should say {want:?}");
        }
    }

    #[test]
    fn malformed_kernels_are_rejected_with_the_reason() {
        type Edit = Box<dyn FnOnce(&mut Kernel)>;
        let cases: Vec<(Edit, &str)> = vec![
            (
                Box::new(|k| body(k).swap(0, 2)),
                "r1 is used where it is not defined",
            ),
            (
                Box::new(|k| {
                    let store = body(k).pop().unwrap();
                    k.body.push(store);
                }),
                // Defined in the loop's body, used after it.
                "r3 is used where it is not defined",
            ),
            (
                Box::new(|k| body(k).push(Stmt::Let(Reg(1), Expr::Load(ParamIdx(0), Reg(0))))),
                "r1 is defined twice",
            ),
            (Box::new(|k| k.regs[2] = DType::F32), "the constant is f64"),
            (
                Box::new(|k| body(k)[0] = Stmt::Let(Reg(1), Expr::Input(ParamIdx(0)))),
                "p0 is not a scalar input",
            ),
            (
                Box::new(|k| body(k)[3] = Stmt::Store(ParamIdx(0), Some(Reg(0)), Reg(3))),
                "p0 is stored to but is not an output",
            ),
            (
                Box::new(|k| {
                    body(k)[2] = Stmt::Let(Reg(3), Expr::Binary(BinaryOp::Mod, Reg(1), Reg(2)))
                }),
                "`mod` is lowered to primitives",
            ),
            (
                Box::new(|k| {
                    k.body[0] = Stmt::Loop {
                        extent: Extent::Param(ParamIdx(0)),
                        row: Reg(0),
                        body: Vec::new(),
                        iterations: Iterations::Sequential,
                    }
                }),
                "p0 is used as an extent",
            ),
        ];
        for (edit, want) in cases {
            let err = kernel(edit).expect_err(want).to_string();
            assert!(err.contains(want), "{err:?} should say {want:?}");
        }
    }
}
