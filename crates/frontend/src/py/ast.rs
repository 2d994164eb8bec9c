//! The syntax tree of the Python subset, in an arena.
//!
//! Every expression is pushed after its operands, so an expression's id is
//! greater than its operands' ids. Lowering walks the arena forward in one loop
//! and dropping the tree is flat: no recursion over user input anywhere.

/// Index of an expression in [`Ast::exprs`].
pub type ExprId = usize;

/// A byte range of the source.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Span {
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
}

/// Unary operators.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum UnOp {
    /// `-x`
    Neg,
    /// `+x`
    Pos,
    /// `~x`
    Invert,
    /// `not x`
    Not,
}

/// Binary operators, and the boolean `and`/`or`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum BinOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `//`
    FloorDiv,
    /// `%`
    Mod,
    /// `**`
    Pow,
    /// `<<`
    Shl,
    /// `>>`
    Shr,
    /// `&`
    BitAnd,
    /// `|`
    BitOr,
    /// `^`
    BitXor,
    /// `and`
    And,
    /// `or`
    Or,
    /// `@`: NumPy's matrix product.
    MatMul,
}

impl BinOp {
    /// The operator of an augmented assignment such as `+=`.
    pub fn from_augmented(op: &str) -> Option<BinOp> {
        BinOp::from_symbol(op.strip_suffix('=')?)
    }

    /// The operator written `op`.
    pub fn from_symbol(op: &str) -> Option<BinOp> {
        Some(match op {
            "+" => BinOp::Add,
            "-" => BinOp::Sub,
            "*" => BinOp::Mul,
            "/" => BinOp::Div,
            "//" => BinOp::FloorDiv,
            "%" => BinOp::Mod,
            "**" => BinOp::Pow,
            "<<" => BinOp::Shl,
            ">>" => BinOp::Shr,
            "&" => BinOp::BitAnd,
            "|" => BinOp::BitOr,
            "^" => BinOp::BitXor,
            "@" => BinOp::MatMul,
            _ => return None,
        })
    }
}

/// An expression.
#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    /// A variable, parameter, or dotted name such as `math.pi`.
    Name(String),
    /// An integer literal; a `-` directly before it is part of it.
    Int(i128),
    /// A float literal.
    Float(f64),
    /// `True` or `False`.
    Bool(bool),
    /// A unary operation.
    Unary(UnOp, ExprId),
    /// A binary operation (or `and`/`or`).
    Binary(BinOp, ExprId, ExprId),
    /// A comparison, possibly chained: `a < b <= c`.
    Compare(ExprId, Vec<(kiln_ir::CmpOp, ExprId)>),
    /// `x in container` (`x not in container` when the flag is set).
    In(ExprId, ExprId, bool),
    /// `a if cond else b`: (cond, a, b).
    IfElse(ExprId, ExprId, ExprId),
    /// A call of a (dotted) name: `np.sum(x, axis=0)`, or a method of a
    /// variable (`x.reshape(2, 3)`, resolved when lowered): positional and
    /// keyword arguments.
    Call(String, Vec<ExprId>, Vec<(String, ExprId)>),
    /// A tuple `(a, b)`.
    Tuple(Vec<ExprId>),
    /// A list `[a, b]`.
    List(Vec<ExprId>),
    /// `None`.
    None,
    /// `e.name` of an expression that is not a (dotted) name: `(a @ b).T`.
    Attr(ExprId, String),
    /// `e.name(args, kw=…)` of an expression that is not a (dotted) name.
    Method(ExprId, String, Vec<ExprId>, Vec<(String, ExprId)>),
    /// `e[index, …]`: basic indexing.
    Subscript(ExprId, Vec<Index>),
}

/// One item of a subscript.
#[derive(Clone, Debug, PartialEq)]
pub enum Index {
    /// An expression: an int, or `None` / `np.newaxis` for a new axis.
    At(ExprId),
    /// `start:stop:step`, each optional.
    Slice(Option<ExprId>, Option<ExprId>, Option<ExprId>),
    /// `...`.
    Ellipsis,
}

/// An expression and its source span.
#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    /// What it is.
    pub kind: ExprKind,
    /// Where it is.
    pub span: Span,
}

/// A statement of a function body (or of a top-level script).
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// `a = e` or `a, b = e1, e2`.
    Assign(Vec<(String, Span)>, ExprId),
    /// `a += e`.
    AugAssign(String, Span, BinOp, ExprId),
    /// `return e`.
    Return(ExprId),
    /// An expression on its own: the result of a script's last line.
    Expr(ExprId),
}

/// A function parameter.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    /// Its name.
    pub name: String,
    /// Its annotation's type name (`float`, `int`, `bool`, `f32`, `i32`, …), if any.
    pub annotation: Option<String>,
    /// The shape a subscripted annotation gives (`float[n]` is a column).
    pub shape: Option<kiln_ir::Shape>,
    /// Where it is.
    pub span: Span,
}

/// A parsed program: a function, or top-level statements whose free names are
/// inputs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ast {
    /// Every expression, operands before their users.
    pub exprs: Vec<Expr>,
    /// The function's name, if the program is a `def`.
    pub name: Option<String>,
    /// The function's parameters (empty for a script).
    pub params: Vec<Param>,
    /// The statements in order. A statement owns the expressions created after
    /// the previous statement's root, up to its own root.
    pub body: Vec<(Stmt, Span)>,
}
