//! kiln's graph IR: the one representation every frontend builds and every
//! engine runs.
//!
//! # The IR
//!
//! A [`Graph`] is an arena of nodes in topological order: a node's arguments are
//! earlier nodes (the *ordering invariant*, checked first by the verifier, so
//! everything after it may index without bounds checks). Each node has one
//! result, named by its [`Value`] id (`v7`), and a declared [`Type`]:
//!
//! - a [`TensorType`]: a [`DType`] (`bool i32 i64 f32 f64`) and a shape of fixed
//!   (`4`) or symbolic (`n`) dimensions; `[]` is a scalar, `[n]` a column;
//! - a selection vector `sel[n]`: ascending `u32` row indices of a column of
//!   extent `n`, produced by `filter`. Selections can only be outputs.
//!
//! The ops form the closed enum [`Op`]; each variant documents its typing rule,
//! implemented once in [`typing`]. Elementwise ops broadcast scalars against
//! columns; otherwise operand shapes must be equal. Operands of one op share a
//! dtype: frontends insert `cast`s (their languages' promotion rules are theirs).
//!
//! What the ops compute, for every dtype, is [`semantics`], the contract that
//! `docs/semantics.md` describes and that every engine matches bit for bit.
//!
//! # Invariants
//!
//! - Only [`verify()`] makes a [`Verified`] graph; passes, the interpreter and
//!   lowering take one as proof the graph is valid.
//! - Nothing here knows about Cranelift, LLVM or any frontend language.
//! - Nothing here recurses over user input: deep graphs cannot overflow the stack.

pub mod builder;
pub mod data;
pub mod diag;
pub mod entities;
pub mod exec;
pub mod grad;
pub mod graph;
pub mod hoist;
pub mod math;
pub mod op;
pub mod passes;
pub mod scalar;
pub mod semantics;
pub mod text;
pub mod trees;
pub mod types;
pub mod typing;
pub mod verify;

pub use builder::Builder;
pub use cranelift_entity::{EntityRef, SecondaryMap};
pub use data::{Buffer, Data, DataParseError};
pub use diag::{Loc, ParseError, ParseResult, SourceMap};
pub use entities::Value;
pub use exec::{ExecError, ExecResult};
pub use graph::{Graph, Input, NodeData, Output};
pub use op::{
    window_count, BinaryOp, CmpOp, Conv2d, Op, Pool2d, PoolKind, ReduceOp, SliceRange, TensorConst,
    UnaryOp,
};
pub use passes::optimize;
pub use scalar::Scalar;
pub use types::{DType, Dim, Shape, Sym, TensorType, Type};
pub use typing::{TypeError, TypeResult};
pub use verify::{verify, GraphInfo, Verified, VerifierError, VerifierErrors, VerifyResult};
