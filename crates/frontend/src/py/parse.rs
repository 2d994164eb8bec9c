//! A hand-written recursive-descent parser for the Python subset.
//!
//! Recursion only follows nesting in the source (parentheses, unary operators,
//! `**`, conditional expressions), and every such step counts against
//! [`MAX_DEPTH`], so deeply nested input gets an error, not a stack overflow.
//! Long flat chains (`a + b + c + …`) are parsed by loops.

use super::ast::{Ast, BinOp, Expr, ExprId, ExprKind, Index, Param, Span, Stmt, UnOp};
use super::lex::{lex, Tok, Token};
use kiln_ir::{CmpOp, ParseError, ParseResult};

/// How deeply expressions may nest before the parser gives up.
pub const MAX_DEPTH: usize = 200;

struct Parser<'a> {
    src: &'a str,
    toks: Vec<Token<'a>>,
    pos: usize,
    depth: usize,
    ast: Ast,
    syntax: Syntax,
}

/// Which language's precedence the operators follow.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Syntax {
    /// Python's: `&` and `|` bind tighter than comparisons.
    Python,
    /// pandas' `eval`/`query`: `&` and `|` have the precedence of `and` and
    /// `or` (pandas rewrites them so), so `a < 0 & b > 0` is
    /// `(a < 0) & (b > 0)`.
    Pandas,
}

/// Parses a program of the Python subset.
pub fn parse(src: &str) -> ParseResult<Ast> {
    parse_with(src, Syntax::Python)
}

/// Parses a program with the operator precedence of `syntax`.
pub fn parse_with(src: &str, syntax: Syntax) -> ParseResult<Ast> {
    let toks = lex(src)?;
    // Fewer expressions than tokens (a GP expression: about one for every
    // two), so the arena grows once at most.
    let ast = Ast {
        exprs: Vec::with_capacity(toks.len() / 2 + 1),
        ..Ast::default()
    };
    let mut p = Parser {
        src,
        toks,
        pos: 0,
        depth: 0,
        ast,
        syntax,
    };
    p.program()?;
    Ok(p.ast)
}

impl<'a> Parser<'a> {
    fn tok(&self) -> &Tok<'a> {
        &self.toks[self.pos].tok
    }

    fn start(&self) -> usize {
        self.toks[self.pos].start
    }

    fn prev_end(&self) -> usize {
        self.pos.checked_sub(1).map_or(0, |p| self.toks[p].end)
    }

    /// Moves past the current token; returns its span.
    fn bump(&mut self) -> Span {
        let t = &self.toks[self.pos];
        let span = Span {
            start: t.start,
            end: t.end,
        };
        if self.pos + 1 < self.toks.len() {
            self.pos += 1;
        }
        span
    }

    fn err<T>(&self, message: impl Into<String>) -> ParseResult<T> {
        Err(ParseError::at(self.src, self.start(), message))
    }

    fn describe(&self) -> String {
        match self.tok() {
            Tok::Name(n) => format!("`{n}`"),
            Tok::Int(_) | Tok::Float(_) => "a number".to_string(),
            Tok::Str => "a string".to_string(),
            Tok::Op(o) => format!("`{o}`"),
            Tok::Newline
                if self.toks[self.pos + 1..]
                    .iter()
                    .all(|t| matches!(t.tok, Tok::Dedent | Tok::Eof)) =>
            {
                "end of input".to_string()
            }
            Tok::Newline => "end of line".to_string(),
            Tok::Indent => "an indented block".to_string(),
            Tok::Dedent => "the end of a block".to_string(),
            Tok::Eof => "end of input".to_string(),
        }
    }

    fn is_op(&self, op: &str) -> bool {
        matches!(self.tok(), Tok::Op(o) if *o == op)
    }

    fn is_kw(&self, kw: &str) -> bool {
        matches!(self.tok(), Tok::Name(n) if *n == kw)
    }

    fn eat_op(&mut self, op: &str) -> bool {
        let yes = self.is_op(op);
        if yes {
            self.bump();
        }
        yes
    }

    fn expect_op(&mut self, op: &str) -> ParseResult<()> {
        if self.eat_op(op) {
            Ok(())
        } else {
            self.err(format!("expected `{op}`, found {}", self.describe()))
        }
    }

    fn expect_kw(&mut self, kw: &str) -> ParseResult<()> {
        if self.is_kw(kw) {
            self.bump();
            Ok(())
        } else {
            self.err(format!("expected `{kw}`, found {}", self.describe()))
        }
    }

    fn name(&mut self, what: &str) -> ParseResult<(String, Span)> {
        match self.tok() {
            Tok::Name(n) if !is_keyword(n) => {
                let n = n.to_string();
                Ok((n, self.bump()))
            }
            _ => self.err(format!("expected {what}, found {}", self.describe())),
        }
    }

    fn push(&mut self, kind: ExprKind, start: usize) -> ExprId {
        let span = Span {
            start,
            end: self.prev_end().max(start),
        };
        self.ast.exprs.push(Expr { kind, span });
        self.ast.exprs.len() - 1
    }

    fn enter(&mut self) -> ParseResult<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return self.err(format!(
                "expression nested too deeply (more than {MAX_DEPTH} levels)"
            ));
        }
        Ok(())
    }

    fn end_of_statement(&mut self) -> ParseResult<()> {
        if self.eat_op(";") && !matches!(self.tok(), Tok::Newline | Tok::Eof) {
            return Ok(());
        }
        match self.tok() {
            Tok::Newline => {
                self.bump();
                Ok(())
            }
            Tok::Eof | Tok::Dedent => Ok(()),
            _ => self.err(format!("expected end of line, found {}", self.describe())),
        }
    }

    /// `program := (import | def | statement)*`; a `def` must be the only one.
    fn program(&mut self) -> ParseResult<()> {
        while !matches!(self.tok(), Tok::Eof) {
            match self.tok() {
                Tok::Newline => {
                    self.bump();
                }
                Tok::Indent => return self.err("unexpected indentation"),
                Tok::Name(n) if *n == "import" || *n == "from" => self.import()?,
                Tok::Name(n) if *n == "def" => {
                    if self.ast.name.is_some() || !self.ast.body.is_empty() {
                        return self.err(
                            "expected one function, or statements without a function, not both",
                        );
                    }
                    self.def()?;
                }
                _ if self.ast.name.is_some() => {
                    return self.err("expected nothing after the function")
                }
                _ => self.statement()?,
            }
        }
        Ok(())
    }

    /// `import a.b [as c], …` or `from a import b, …`: accepted, checked by lowering.
    fn import(&mut self) -> ParseResult<()> {
        while !matches!(self.tok(), Tok::Newline | Tok::Eof) {
            self.bump();
        }
        self.end_of_statement()
    }

    fn def(&mut self) -> ParseResult<()> {
        self.expect_kw("def")?;
        let (name, _) = self.name("a function name")?;
        self.ast.name = Some(name);
        self.expect_op("(")?;
        while !self.is_op(")") {
            let (pname, span) = self.name("a parameter name")?;
            let (annotation, shape) = if self.eat_op(":") {
                let (name, shape) = self.annotation()?;
                (Some(name), shape)
            } else {
                (None, None)
            };
            if self.eat_op("=") {
                return self.err("default parameter values are not supported");
            }
            self.ast.params.push(Param {
                name: pname,
                annotation,
                shape,
                span,
            });
            if !self.eat_op(",") {
                break;
            }
        }
        self.expect_op(")")?;
        if self.eat_op("->") {
            self.annotation()?;
        }
        self.expect_op(":")?;
        if !matches!(self.tok(), Tok::Newline) {
            self.statement()?;
            return Ok(());
        }
        self.bump();
        if !matches!(self.tok(), Tok::Indent) {
            return self.err("expected an indented block");
        }
        self.bump();
        while !matches!(self.tok(), Tok::Dedent | Tok::Eof) {
            if matches!(self.tok(), Tok::Str) {
                // A docstring.
                self.bump();
                self.end_of_statement()?;
                continue;
            }
            self.statement()?;
        }
        if matches!(self.tok(), Tok::Dedent) {
            self.bump();
        }
        Ok(())
    }

    /// A type annotation: a dotted name (`np.float32`), optionally subscripted
    /// with dimensions (`float[n]`, `f32[n, 4]`).
    fn annotation(&mut self) -> ParseResult<(String, Option<kiln_ir::Shape>)> {
        let (mut name, _) = self.name("a type annotation")?;
        while self.eat_op(".") {
            name.push('.');
            name.push_str(&self.name("a name")?.0);
        }
        if !self.eat_op("[") {
            return Ok((name, None));
        }
        let mut shape = Vec::new();
        loop {
            match self.tok().clone() {
                Tok::Int(v) => {
                    shape.push(kiln_ir::Dim::Fixed(u64::try_from(v).map_err(|_| {
                        ParseError::at(self.src, self.start(), "dimension too large")
                    })?))
                }
                Tok::Name(n) if !is_keyword(n) => shape.push(kiln_ir::Dim::Sym(n.into())),
                _ => {
                    return self.err(format!(
                        "expected a dimension (a name or an integer), found {}",
                        self.describe()
                    ))
                }
            }
            self.bump();
            if !self.eat_op(",") {
                break;
            }
        }
        self.expect_op("]")?;
        Ok((name, Some(shape)))
    }

    fn statement(&mut self) -> ParseResult<()> {
        let start = self.start();
        let stmt = if self.is_kw("return") {
            self.bump();
            Stmt::Return(self.expr_or_tuple()?)
        } else if let (Tok::Name(_), Some(Tok::Op(op))) =
            (self.tok(), self.toks.get(self.pos + 1).map(|t| &t.tok))
        {
            match BinOp::from_augmented(op) {
                Some(bin) => {
                    let (target, span) = self.name("a variable")?;
                    self.bump();
                    Stmt::AugAssign(target, span, bin, self.expr_or_tuple()?)
                }
                _ => self.assign_or_expr()?,
            }
        } else {
            self.assign_or_expr()?
        };
        let end = self.prev_end();
        self.ast.body.push((stmt, Span { start, end }));
        self.end_of_statement()
    }

    /// `a = e`, `a, b = e1, e2`, or an expression.
    fn assign_or_expr(&mut self) -> ParseResult<Stmt> {
        let first_tok = self.pos;
        let first_expr = self.ast.exprs.len();
        let value = self.expr_or_tuple()?;
        if !self.eat_op("=") {
            return Ok(Stmt::Expr(value));
        }
        // Re-read the left side as a list of names.
        let targets = match &self.ast.exprs[value].kind {
            ExprKind::Name(_) => vec![value],
            ExprKind::Tuple(items) => items.clone(),
            _ => {
                return Err(ParseError::at(
                    self.src,
                    self.toks[first_tok].start,
                    "can only assign to a name or a tuple of names",
                ))
            }
        };
        let mut names = Vec::new();
        for t in targets {
            match &self.ast.exprs[t].kind {
                ExprKind::Name(n) if !n.contains('.') => {
                    names.push((n.clone(), self.ast.exprs[t].span))
                }
                _ => {
                    return Err(ParseError::at(
                        self.src,
                        self.ast.exprs[t].span.start,
                        "can only assign to a name",
                    ))
                }
            }
        }
        // The targets were parsed as expressions; they are names, not reads.
        self.ast.exprs.truncate(first_expr);
        let rhs = self.expr_or_tuple()?;
        if self.is_op("=") {
            return self.err("chained assignment is not supported");
        }
        Ok(Stmt::Assign(names, rhs))
    }

    /// An expression, or several separated by commas (a tuple without parentheses).
    fn expr_or_tuple(&mut self) -> ParseResult<ExprId> {
        let start = self.start();
        let first = self.expr()?;
        if !self.is_op(",") {
            return Ok(first);
        }
        let mut items = vec![first];
        while self.eat_op(",") {
            if matches!(self.tok(), Tok::Newline | Tok::Eof | Tok::Dedent)
                || self.is_op("=")
                || self.is_op(";")
            {
                break;
            }
            items.push(self.expr()?);
        }
        Ok(self.push(ExprKind::Tuple(items), start))
    }

    /// `expr := or_expr ['if' or_expr 'else' expr]`
    fn expr(&mut self) -> ParseResult<ExprId> {
        self.enter()?;
        let start = self.start();
        let value = self.bool_op("or", BinOp::Or)?;
        let result = if self.is_kw("if") {
            self.bump();
            let cond = self.bool_op("or", BinOp::Or)?;
            self.expect_kw("else")?;
            let other = self.expr()?;
            self.push(ExprKind::IfElse(cond, value, other), start)
        } else {
            value
        };
        self.depth -= 1;
        Ok(result)
    }

    /// Left-associative `or` (of `and`s) and `and` (of `not`s); in pandas'
    /// syntax `|` and `&` at the same levels.
    fn bool_op(&mut self, kw: &str, op: BinOp) -> ParseResult<ExprId> {
        let start = self.start();
        let operand = |p: &mut Self| {
            if kw == "or" {
                p.bool_op("and", BinOp::And)
            } else {
                p.not_expr()
            }
        };
        let (symbol, bit_op) = if kw == "or" {
            ("|", BinOp::BitOr)
        } else {
            ("&", BinOp::BitAnd)
        };
        let mut lhs = operand(self)?;
        loop {
            let this = if self.is_kw(kw) {
                op
            } else if self.syntax == Syntax::Pandas && self.is_op(symbol) {
                bit_op
            } else {
                break;
            };
            self.bump();
            let rhs = operand(self)?;
            lhs = self.push(ExprKind::Binary(this, lhs, rhs), start);
        }
        Ok(lhs)
    }

    fn not_expr(&mut self) -> ParseResult<ExprId> {
        if !self.is_kw("not") {
            return self.comparison();
        }
        let start = self.start();
        self.bump();
        self.enter()?;
        let operand = self.not_expr()?;
        self.depth -= 1;
        Ok(self.push(ExprKind::Unary(UnOp::Not, operand), start))
    }

    fn comparison(&mut self) -> ParseResult<ExprId> {
        let start = self.start();
        let first = self.binary(0)?;
        let mut rest = Vec::new();
        loop {
            let negated_in = self.is_kw("not")
                && matches!(self.toks.get(self.pos + 1).map(|t| &t.tok), Some(Tok::Name(n)) if *n == "in");
            if self.is_kw("in") || negated_in {
                if !rest.is_empty() {
                    return self.err("`in` cannot be chained with comparisons");
                }
                self.bump();
                if negated_in {
                    self.bump();
                }
                let container = self.binary(0)?;
                if matches!(self.tok(), Tok::Op("<" | "<=" | ">" | ">=" | "==" | "!="))
                    || self.is_kw("in")
                    || self.is_kw("not")
                {
                    return self.err("`in` cannot be chained with comparisons");
                }
                return Ok(self.push(ExprKind::In(first, container, negated_in), start));
            }
            let op = match self.tok() {
                Tok::Op("<") => CmpOp::Lt,
                Tok::Op("<=") => CmpOp::Le,
                Tok::Op(">") => CmpOp::Gt,
                Tok::Op(">=") => CmpOp::Ge,
                Tok::Op("==") => CmpOp::Eq,
                Tok::Op("!=") => CmpOp::Ne,
                Tok::Name(n) if *n == "is" => return self.err("`is` is not supported"),
                _ => break,
            };
            self.bump();
            rest.push((op, self.binary(0)?));
        }
        Ok(if rest.is_empty() {
            first
        } else {
            self.push(ExprKind::Compare(first, rest), start)
        })
    }

    /// Precedence climbing over `| ^ & << >> + - * / // %`.
    fn binary(&mut self, min_prec: u8) -> ParseResult<ExprId> {
        let start = self.start();
        let mut lhs = self.unary()?;
        while let Some((op, prec)) = self.binary_op() {
            if prec < min_prec {
                break;
            }
            self.bump();
            let rhs = self.binary(prec + 1)?;
            lhs = self.push(ExprKind::Binary(op, lhs, rhs), start);
        }
        Ok(lhs)
    }

    fn binary_op(&self) -> Option<(BinOp, u8)> {
        let Tok::Op(sym) = self.tok() else {
            return None;
        };
        let op = BinOp::from_symbol(sym)?;
        if self.syntax == Syntax::Pandas
            && matches!(op, BinOp::BitAnd | BinOp::BitOr | BinOp::MatMul)
        {
            return None;
        }
        let prec = match op {
            BinOp::BitOr => 0,
            BinOp::BitXor => 1,
            BinOp::BitAnd => 2,
            BinOp::Shl | BinOp::Shr => 3,
            BinOp::Add | BinOp::Sub => 4,
            BinOp::Mul | BinOp::Div | BinOp::FloorDiv | BinOp::Mod | BinOp::MatMul => 5,
            BinOp::Pow | BinOp::And | BinOp::Or => return None,
        };
        Some((op, prec))
    }

    fn unary(&mut self) -> ParseResult<ExprId> {
        let start = self.start();
        let op = match self.tok() {
            Tok::Op("-") => UnOp::Neg,
            Tok::Op("+") => UnOp::Pos,
            Tok::Op("~") => UnOp::Invert,
            _ => return self.power(),
        };
        self.bump();
        // `-9223372036854775808` is one literal, but `-2 ** 2` is `-(2 ** 2)`.
        let next_is_pow = matches!(
            self.toks.get(self.pos + 1).map(|t| &t.tok),
            Some(Tok::Op("**"))
        );
        if let (UnOp::Neg, &Tok::Int(v), false) = (op, self.tok(), next_is_pow) {
            self.bump();
            return Ok(self.push(
                ExprKind::Int(-i128::try_from(v).unwrap_or(i128::MAX)),
                start,
            ));
        }
        self.enter()?;
        let operand = self.unary()?;
        self.depth -= 1;
        Ok(self.push(ExprKind::Unary(op, operand), start))
    }

    /// `power := primary ['**' unary]` (right-associative, binds tighter than a
    /// unary minus on its left: `-2**2 == -4`).
    fn power(&mut self) -> ParseResult<ExprId> {
        let start = self.start();
        let base = self.postfix()?;
        if !self.eat_op("**") {
            return Ok(base);
        }
        self.enter()?;
        let exponent = self.unary()?;
        self.depth -= 1;
        Ok(self.push(ExprKind::Binary(BinOp::Pow, base, exponent), start))
    }

    /// A primary followed by attributes, method calls and subscripts:
    /// `(a @ b).T`, `x.reshape(2, 3).sum(axis=0)`, `x[:, 1:3]`.
    fn postfix(&mut self) -> ParseResult<ExprId> {
        let start = self.start();
        let mut e = self.primary()?;
        let mut depth = 0;
        loop {
            if self.is_op(".") {
                self.bump();
                let (name, _) = self.name("an attribute name")?;
                e = if self.eat_op("(") {
                    let (args, kwargs) = self.call_args()?;
                    self.push(ExprKind::Method(e, name, args, kwargs), start)
                } else {
                    self.push(ExprKind::Attr(e, name), start)
                };
            } else if self.is_op("[") && self.syntax == Syntax::Python {
                self.bump();
                let items = self.subscript()?;
                e = self.push(ExprKind::Subscript(e, items), start);
            } else if self.is_op("(") && !matches!(self.ast.exprs[e].kind, ExprKind::Call(..)) {
                return self.err("only named functions and methods can be called");
            } else {
                break;
            }
            depth += 1;
            if depth > MAX_DEPTH {
                return self.err(format!("expressions nest more than {MAX_DEPTH} levels"));
            }
        }
        Ok(e)
    }

    /// The items of `[…]` after the `[`, through the `]`.
    fn subscript(&mut self) -> ParseResult<Vec<Index>> {
        let mut items = Vec::new();
        while !self.is_op("]") {
            if self.is_op(".") && self.next_is_op(".") {
                for _ in 0..3 {
                    self.expect_op(".")?;
                }
                items.push(Index::Ellipsis);
            } else {
                let bound = |p: &mut Self| -> ParseResult<Option<ExprId>> {
                    if p.is_op(":") || p.is_op(",") || p.is_op("]") {
                        Ok(None)
                    } else {
                        p.expr().map(Some)
                    }
                };
                let first = bound(self)?;
                if self.eat_op(":") {
                    let stop = bound(self)?;
                    let step = if self.eat_op(":") { bound(self)? } else { None };
                    items.push(Index::Slice(first, stop, step));
                } else {
                    match first {
                        Some(e) => items.push(Index::At(e)),
                        None => return self.err("expected an index"),
                    }
                }
            }
            if !self.eat_op(",") {
                break;
            }
        }
        self.expect_op("]")?;
        if items.is_empty() {
            return self.err("an empty index");
        }
        Ok(items)
    }

    fn next_is_op(&self, op: &str) -> bool {
        matches!(self.toks.get(self.pos + 1).map(|t| &t.tok), Some(Tok::Op(o)) if *o == op)
    }

    /// Call arguments after the `(`, through the `)`: positional, then
    /// `name=value`.
    #[allow(clippy::type_complexity)]
    fn call_args(&mut self) -> ParseResult<(Vec<ExprId>, Vec<(String, ExprId)>)> {
        let mut args = Vec::new();
        let mut kwargs: Vec<(String, ExprId)> = Vec::new();
        while !self.is_op(")") {
            if let (Tok::Name(_), Some(Tok::Op("="))) =
                (self.tok(), self.toks.get(self.pos + 1).map(|t| &t.tok))
            {
                if self.syntax == Syntax::Pandas {
                    return self.err("keyword arguments are not supported");
                }
                let (key, _) = self.name("a keyword")?;
                if kwargs.iter().any(|(k, _)| *k == key) {
                    return self.err(format!("keyword argument `{key}` repeated"));
                }
                self.expect_op("=")?;
                kwargs.push((key, self.expr()?));
            } else if !kwargs.is_empty() {
                return self.err("a positional argument follows a keyword argument");
            } else {
                args.push(self.expr()?);
            }
            if !self.eat_op(",") {
                break;
            }
        }
        self.expect_op(")")?;
        Ok((args, kwargs))
    }

    fn primary(&mut self) -> ParseResult<ExprId> {
        let start = self.start();
        let kind = match self.tok() {
            &Tok::Int(v) => ExprKind::Int(i128::try_from(v).unwrap_or(i128::MAX)),
            &Tok::Float(v) => ExprKind::Float(v),
            Tok::Name(n) if *n == "True" || *n == "False" => ExprKind::Bool(*n == "True"),
            Tok::Name(n) if *n == "None" && self.syntax == Syntax::Python => ExprKind::None,
            Tok::Name(n) if !is_keyword(n) => return self.name_or_call(),
            Tok::Op("(") => return self.parenthesized(),
            Tok::Op("[") => return self.list(),
            _ => return self.err(format!("expected an expression, found {}", self.describe())),
        };
        self.bump();
        Ok(self.push(kind, start))
    }

    /// `[a, b, …]`.
    fn list(&mut self) -> ParseResult<ExprId> {
        let start = self.start();
        self.expect_op("[")?;
        self.enter()?;
        let mut items = Vec::new();
        while !self.is_op("]") {
            items.push(self.expr()?);
            if !self.eat_op(",") {
                break;
            }
        }
        self.expect_op("]")?;
        self.depth -= 1;
        Ok(self.push(ExprKind::List(items), start))
    }

    fn name_or_call(&mut self) -> ParseResult<ExprId> {
        let start = self.start();
        let (mut name, _) = self.name("a name")?;
        while self.is_op(".")
            && matches!(
                self.toks.get(self.pos + 1).map(|t| &t.tok),
                Some(Tok::Name(_))
            )
        {
            self.bump();
            name.push('.');
            name.push_str(&self.name("an attribute name")?.0);
        }
        if !self.eat_op("(") {
            return Ok(self.push(ExprKind::Name(name), start));
        }
        self.enter()?;
        let (args, kwargs) = self.call_args()?;
        self.depth -= 1;
        Ok(self.push(ExprKind::Call(name, args, kwargs), start))
    }

    fn parenthesized(&mut self) -> ParseResult<ExprId> {
        let start = self.start();
        self.expect_op("(")?;
        let mut items = Vec::new();
        let mut trailing_comma = false;
        while !self.is_op(")") {
            items.push(self.expr()?);
            trailing_comma = self.eat_op(",");
            if !trailing_comma {
                break;
            }
        }
        self.expect_op(")")?;
        if items.len() == 1 && !trailing_comma {
            return Ok(items[0]);
        }
        Ok(self.push(ExprKind::Tuple(items), start))
    }
}

fn is_keyword(name: &str) -> bool {
    matches!(
        name,
        "and"
            | "or"
            | "not"
            | "if"
            | "else"
            | "def"
            | "return"
            | "import"
            | "from"
            | "as"
            | "in"
            | "is"
            | "lambda"
            | "for"
            | "while"
            | "None"
            | "True"
            | "False"
            | "pass"
            | "class"
            | "elif"
            | "with"
            | "yield"
    )
}
