//! A kernel's code apart from its names: what makes two kernels the same
//! code, so that the stages of one program that are (a network's repeated
//! blocks) compile once.
//!
//! [`Compactor`] keeps only the parameters, registers and variables a body
//! uses, renumbered in the order the body first mentions them: two stages
//! that do the same work on different buffers (a ResNet's identical
//! convolutions) become equal kernels but for their names
//! (`crate::stages::split` builds every stage so). [`write_code`] writes
//! what a backend's code depends on: the parameters' kinds and dtypes
//! (never their names, nor their declared shapes, nor a constant tensor's
//! values: the code indexes a buffer at the offsets its body computes and
//! reads no parameter's shape, and the caller passes the values at run
//! time), the registers, variables, body and checks; two kernels with the
//! same text compile to the same code.
//! `crate::backend::compile` compiles one kernel per text, and each stage
//! calls it with the slots its map picks (`CompiledKernel::remapped`).

use crate::{Expr, Extent, Kernel, MathCall, Param, ParamIdx, Reg, Stmt, Var};
use cranelift_entity::EntityRef;
use std::fmt::{self, Write};

/// Renumbering of one kind of entity: old index to new, in first-use order.
/// Its table is as long as the source's entities and is reused for every
/// body compacted from the same source: [`Renumber::take`] resets only the
/// entries one body touched, so cutting a kernel into stages costs the
/// stages' sizes, not the kernel's size for every stage.
struct Renumber {
    new: Vec<u32>,
    old: Vec<u32>,
}

impl Renumber {
    fn new(len: usize) -> Renumber {
        Renumber {
            new: vec![u32::MAX; len],
            old: Vec::new(),
        }
    }

    fn map(&mut self, old: usize) -> u32 {
        let slot = &mut self.new[old];
        if *slot == u32::MAX {
            *slot = self.old.len() as u32;
            self.old.push(old as u32);
        }
        *slot
    }

    /// The old indices in new order; the table is ready for the next body.
    fn take(&mut self) -> Vec<u32> {
        for &old in &self.old {
            self.new[old as usize] = u32::MAX;
        }
        std::mem::take(&mut self.old)
    }
}

struct Maps {
    regs: Renumber,
    vars: Renumber,
    params: Renumber,
}

impl Maps {
    fn reg(&mut self, r: &mut Reg) {
        *r = Reg::new(self.regs.map(r.index()) as usize);
    }

    fn var(&mut self, v: &mut Var) {
        *v = Var::new(self.vars.map(v.index()) as usize);
    }

    fn param(&mut self, p: &mut ParamIdx) {
        *p = ParamIdx::new(self.params.map(p.index()) as usize);
    }

    fn extent(&mut self, e: &mut Extent) {
        match e {
            Extent::Fixed(_) => {}
            Extent::Param(p) => self.param(p),
            Extent::Reg(r) => self.reg(r),
        }
    }

    fn expr(&mut self, e: &mut Expr) {
        match e {
            Expr::Input(p) => self.param(p),
            Expr::Load(p, r) | Expr::LoadBit(p, r) => {
                self.param(p);
                self.reg(r);
            }
            Expr::Const(_) => {}
            Expr::ExtentValue(x) => self.extent(x),
            Expr::Var(v) => self.var(v),
            Expr::Unary(_, r) | Expr::Cast(_, r) | Expr::Bitcast(_, r) | Expr::Table(_, r) => {
                self.reg(r)
            }
            Expr::Binary(_, a, b) | Expr::Compare(_, a, b) => {
                self.reg(a);
                self.reg(b);
            }
            Expr::Select(c, a, b) | Expr::MulAdd(c, a, b) => {
                self.reg(c);
                self.reg(a);
                self.reg(b);
            }
            Expr::Fallback { call, rare, value } => {
                match call {
                    MathCall::Unary(_, a) => self.reg(a),
                    MathCall::Binary(_, a, b) => {
                        self.reg(a);
                        self.reg(b);
                    }
                }
                self.reg(rare);
                self.reg(value);
            }
        }
    }

    fn stmt(&mut self, s: &mut Stmt) {
        match s {
            Stmt::Let(r, e) => {
                self.reg(r);
                self.expr(e);
            }
            Stmt::CheckNonZero(r, _) => self.reg(r),
            Stmt::Loop {
                extent, row, body, ..
            } => {
                self.extent(extent);
                self.reg(row);
                for s in body {
                    self.stmt(s);
                }
            }
            Stmt::Set(v, r) => {
                self.var(v);
                self.reg(r);
            }
            Stmt::Store(p, row, r) => {
                self.param(p);
                if let Some(row) = row {
                    self.reg(row);
                }
                self.reg(r);
            }
            Stmt::KeepRow {
                sel,
                count,
                row,
                mask,
            } => {
                self.param(sel);
                self.var(count);
                self.reg(row);
                self.reg(mask);
            }
            Stmt::StoreCount(p, v) => {
                self.param(p);
                self.var(v);
            }
            Stmt::Prefetch(p, row) => {
                self.param(p);
                self.reg(row);
            }
        }
    }
}

/// Compacts bodies cut from one source kernel (and numbered as it is, with
/// any parameters, registers and variables a body adds numbered after the
/// source's): [`Self::kernel`] makes each a kernel of only what it uses.
pub struct Compactor {
    maps: Maps,
}

/// Where a compacted kernel's parameters, registers and variables come
/// from, by their index in the source's numbering.
pub struct Source<'a> {
    /// The kernel's name.
    pub name: String,
    /// Parameter `i`.
    pub param: &'a dyn Fn(usize) -> Param,
    /// Register `i`'s dtype and name.
    pub reg: &'a dyn Fn(usize) -> (kiln_ir::types::DType, Option<String>),
    /// Variable `i`'s dtype and initial value.
    pub var: &'a dyn Fn(usize) -> kiln_ir::scalar::Scalar,
    /// The source's checks (a status indexes them).
    pub checks: &'a [kiln_ir::entities::Value],
}

impl Compactor {
    /// A compactor for bodies of up to `params` parameters, `regs`
    /// registers and `vars` variables.
    pub fn new(params: usize, regs: usize, vars: usize) -> Compactor {
        Compactor {
            maps: Maps {
                regs: Renumber::new(regs),
                vars: Renumber::new(vars),
                params: Renumber::new(params),
            },
        }
    }

    /// `body` as a kernel of only the parameters, registers and variables
    /// it uses, each renumbered in the order the body first mentions it;
    /// and, for each parameter of the kernel, its index in the source's.
    pub fn kernel(&mut self, mut body: Vec<Stmt>, source: &Source) -> (Kernel, Vec<u32>) {
        for s in &mut body {
            self.maps.stmt(s);
        }
        let params = self.maps.params.take();
        let regs = self.maps.regs.take();
        let vars = self.maps.vars.take();
        let (regs, reg_names) = regs.iter().map(|&i| (source.reg)(i as usize)).unzip();
        let kernel = Kernel {
            name: source.name.clone(),
            params: params.iter().map(|&i| (source.param)(i as usize)).collect(),
            regs,
            vars: vars.iter().map(|&i| (source.var)(i as usize)).collect(),
            body,
            checks: source.checks.to_vec(),
            direct: false,
            reg_names,
        };
        (kernel, params)
    }
}

/// Writes what `kernel`'s compiled code depends on, and nothing else: not
/// its name, its registers' names or its parameters' names, nor its
/// parameters' declared shapes (no backend reads them: the body computes
/// every offset; they describe the buffers to `abi::args` and the dumps),
/// nor the values of its constant tensors (the caller's at run time,
/// [`Param::ConstIn`]). Equal texts compile to the same code, so stages
/// of a network whose buffers differ only in size (DenseNet's growing
/// concatenations) share it.
pub fn write_code(kernel: &Kernel, out: &mut dyn Write) -> fmt::Result {
    for param in &kernel.params {
        match param {
            Param::ScalarIn { dtype, .. } => writeln!(out, "scalar in {dtype:?}")?,
            Param::ArrayIn { dtype, .. } => writeln!(out, "array in {dtype:?}")?,
            Param::BitmapIn { .. } => writeln!(out, "bitmap in")?,
            Param::Extent { .. } => writeln!(out, "extent")?,
            Param::ScalarOut { dtype, .. } => writeln!(out, "scalar out {dtype:?}")?,
            Param::ArrayOut { dtype, .. } => writeln!(out, "array out {dtype:?}")?,
            Param::SelectionOut { dim, .. } => writeln!(out, "selection {dim:?}")?,
            Param::SelectionCount { .. } => writeln!(out, "selection count")?,
            Param::ConstIn { tensor, .. } => writeln!(out, "const {:?}", tensor.dtype)?,
            Param::Scratch { dtype, .. } => writeln!(out, "scratch {dtype:?}")?,
        }
    }
    writeln!(
        out,
        "{:?}\n{:?}\n{:?}\n{:?}\n{}",
        kernel.regs, kernel.vars, kernel.body, kernel.checks, kernel.direct
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{lower, LowerOptions};

    fn code(kernel: &Kernel) -> String {
        let mut text = String::new();
        write_code(kernel, &mut text).expect("a String takes any text");
        text
    }

    /// Four 3x3 convolutions of the same shape with their own weights: the
    /// first three are the same code once compacted, each picking its own
    /// weights and buffers; the last, which writes the output, is not.
    #[test]
    fn repeated_layers_are_the_same_code_on_their_own_buffers() {
        let mut src = String::from("graph \"c\"\nv0: f32[1, 8, 10, 10] = input \"x\"\n");
        for k in 1..=4 {
            src += &format!("v1{k}: f32[8, 8, 3, 3] = input \"w{k}\"\n");
        }
        src += "v1: f32[1, 8, 10, 10] = conv2d v0, v11 pad [1, 1, 1, 1]\n";
        for k in 2..=4 {
            src += &format!(
                "v{k}: f32[1, 8, 10, 10] = conv2d v{}, v1{k} pad [1, 1, 1, 1]\n",
                k - 1
            );
        }
        src += "output \"y\" = v4\n";
        let graph = kiln_ir::verify(kiln_ir::text::parse(&src).expect("parses")).expect("verifies");
        let kernel = lower(&graph, &LowerOptions::default()).expect("lowers");
        let stages = crate::stages::split(&kernel).expect("cut");
        let compacted: Vec<(Kernel, Vec<u32>)> = stages
            .kernels
            .iter()
            .cloned()
            .zip(stages.maps.iter().cloned())
            .collect();
        // Every stage's weights: the parameter its map picks among w1..w4.
        let weights: Vec<Vec<String>> = compacted
            .iter()
            .map(|(_, map)| {
                map.iter()
                    .filter_map(|&i| match kernel.params.get(i as usize)? {
                        Param::ArrayIn { name, .. } if name.starts_with('w') => Some(name.clone()),
                        _ => None,
                    })
                    .collect()
            })
            .collect();
        let layer = |w: &str| {
            weights
                .iter()
                .position(|ws| ws.iter().any(|n| n == w))
                .expect("a stage reads each weight")
        };
        let (first, second, third, last) = (layer("w1"), layer("w2"), layer("w3"), layer("w4"));
        let text = |i: usize| code(&compacted[i].0);
        // Each convolution reads a padded copy in scratch (the pads are
        // stages of their own): the first three are one code, the last,
        // which writes the output, another.
        assert_eq!(text(first), text(second));
        assert_eq!(text(second), text(third));
        assert_ne!(text(third), text(last), "the last writes the output");
        let maps = [first, second, third].map(|i| &compacted[i].1);
        assert!(
            maps[0] != maps[1] && maps[1] != maps[2],
            "their own buffers"
        );
        // A stage keeps only what its body uses, and its map names the
        // kernel's parameter (or the range after them) each one is.
        for (stage, map) in &compacted {
            assert_eq!(stage.params.len(), map.len());
            assert!(stage.params.len() < kernel.params.len());
            assert!(stage.regs.len() < kernel.regs.len());
            for (param, &i) in stage.params.iter().zip(map) {
                match kernel.params.get(i as usize) {
                    Some(p) => assert_eq!(param, p),
                    None => assert!(matches!(param, Param::Extent { .. })),
                }
            }
        }
    }

    /// The text leaves names and constant values out, and nothing else.
    #[test]
    fn the_code_text_has_no_names_and_no_constant_values() {
        let graph = |name: &str, scale: f64| {
            let src = format!(
                "graph \"g\"\nv0: f64[n] = input \"{name}\"\nv1: f64 = const {scale}\nv2: f64[n] = mul v0, v1\noutput \"y\" = v2\n"
            );
            let graph =
                kiln_ir::verify(kiln_ir::text::parse(&src).expect("parses")).expect("verifies");
            lower(&graph, &LowerOptions::default()).expect("lowers")
        };
        assert_eq!(code(&graph("x", 2.0)), code(&graph("other", 2.0)));
        assert_ne!(
            code(&graph("x", 2.0)),
            code(&graph("x", 3.0)),
            "an inline constant is code"
        );
        // A buffer's declared shape is not code (the body computes every
        // offset); its kind and dtype are.
        let kernel = graph("x", 2.0);
        let mut resized = kernel.clone();
        let mut retyped = kernel.clone();
        for (param, other) in resized.params.iter_mut().zip(&mut retyped.params) {
            if let (Param::ArrayIn { shape, .. }, Param::ArrayIn { dtype, .. }) = (param, other) {
                *shape = vec![kiln_ir::types::Dim::Fixed(7)];
                *dtype = kiln_ir::types::DType::F32;
            }
        }
        assert_ne!(resized.params, kernel.params);
        assert_eq!(code(&resized), code(&kernel));
        assert_ne!(code(&retyped), code(&kernel));
    }
}
