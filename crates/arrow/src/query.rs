//! pandas' query syntax (`(x > 2.0) & (x < 6.0)`) to an [`Expr`].
//!
//! The text is parsed by kiln's Python-subset parser; names are columns.
//! `&`, `|`, `^`, `~` are logical on `bool` (Kleene, like `and`, `or`, `not`)
//! and bitwise on ints; `/` divides in floating point, `//` and `%` floor as
//! Python does; comparisons chain (`2 < x <= 6`). Functions: the math functions
//! of the Python subset (`abs`, `sqrt`, `exp`, `log`, `sin`, …, `min`, `max`),
//! `isnull`/`isna`, `notnull`/`notna` (also as methods: `x.isnull()`),
//! `coalesce(a, b, …)`, `where(c, a, b)`, `a if c else b`, and the casts
//! `float(x)`, `int(x)`, `bool(x)`, `f32(x)`, `i32(x)`.

use crate::expr::{Expr, Func, Literal, MAX_DEPTH};
use crate::Error;
use kiln::frontend::py::ast::{BinOp, ExprKind, Stmt, UnOp};
use kiln::frontend::py::{funcs, Syntax};
use kiln::ir::{BinaryOp, UnaryOp};
use kiln::{DType, ParseError, Scalar};

/// Parses a query.
pub fn parse(src: &str) -> Result<Expr, Error> {
    let ast = kiln::frontend::py::parse_ast(src, Syntax::Pandas)?;
    let root = match (ast.name.as_ref(), ast.body.as_slice()) {
        (None, [(Stmt::Expr(root), _)]) => *root,
        _ => {
            return Err(Error::Parse(ParseError::at(
                src,
                0,
                "a query is one expression, such as `(x > 2.0) & (x < 6.0)`",
            )))
        }
    };
    let err = |span: kiln::frontend::py::ast::Span, message: String| {
        Error::Parse(ParseError::at(src, span.start, message))
    };
    // The arena lists operands before their users: one forward pass builds
    // every subtree, each moved (never copied) into its single user.
    let mut built: Vec<Option<Expr>> = Vec::with_capacity(ast.exprs.len());
    // Lists and tuples, which only `in`, `== [...]` and `.isin([...])` take.
    let mut lists: std::collections::HashMap<usize, (kiln::frontend::py::ast::Span, Vec<Expr>)> =
        std::collections::HashMap::new();
    let mut depth: Vec<usize> = Vec::with_capacity(ast.exprs.len());
    for node in &ast.exprs {
        let children: Vec<usize> = match &node.kind {
            ExprKind::Unary(_, a) => vec![*a],
            ExprKind::Binary(_, a, b) => vec![*a, *b],
            ExprKind::Compare(a, rest) => std::iter::once(*a)
                .chain(rest.iter().map(|r| r.1))
                .collect(),
            ExprKind::IfElse(c, a, b) => vec![*c, *a, *b],
            ExprKind::In(x, c, _) => vec![*x, *c],
            ExprKind::Call(_, args, _) | ExprKind::Tuple(args) | ExprKind::List(args) => {
                args.clone()
            }
            _ => Vec::new(),
        };
        // A list is an operand only where `in`, `==`/`!=` or `.isin` looks in it.
        // pandas takes the list on either side (`[1, 2] == k`, `[1, 2] in k`).
        let either = |a: usize, b: usize| {
            if lists.contains_key(&a) {
                Some(a)
            } else {
                Some(b)
            }
        };
        let looks_in = match &node.kind {
            ExprKind::In(x, c, _) => either(*x, *c),
            ExprKind::Compare(first, rest)
                if rest.len() == 1
                    && matches!(rest[0].0, kiln::ir::CmpOp::Eq | kiln::ir::CmpOp::Ne) =>
            {
                either(*first, rest[0].1)
            }
            ExprKind::Call(name, args, _) if name.ends_with(".isin") && args.len() == 1 => {
                Some(args[0])
            }
            _ => None,
        };
        if let Some(&c) = children
            .iter()
            .find(|&&c| lists.contains_key(&c) && Some(c) != looks_in)
        {
            return Err(err(
                lists[&c].0,
                "a list or tuple is only what `in`, `== [...]` and `.isin([...])` look in".into(),
            ));
        }
        let d = 1 + children.iter().map(|&c| depth[c]).max().unwrap_or(0);
        depth.push(d);
        if d > MAX_DEPTH {
            return Err(err(
                node.span,
                format!("the query nests more than {MAX_DEPTH} levels"),
            ));
        }
        let idx = built.len();
        let mut take = |id: usize| built[id].take().expect("each operand has one user");
        let call = |f: Func, args: Vec<Expr>| Expr::Call(f, args);
        let e = match &node.kind {
            // `inf`, `nan`, `pi`, `np.pi`, `math.e`: the Python subset's constants.
            ExprKind::Name(name) => match funcs::constant(name) {
                Some(c) => Expr::Literal(Literal::Float(c)),
                None => Expr::Field(name.clone()),
            },
            ExprKind::Int(v) => match i64::try_from(*v) {
                Ok(v) => Expr::Literal(Literal::Int(v)),
                Err(_) => return Err(err(node.span, format!("{v} does not fit in i64"))),
            },
            ExprKind::Float(v) => Expr::Literal(Literal::Float(*v)),
            ExprKind::Bool(b) => Expr::Literal(Literal::Value(Scalar::Bool(*b))),
            ExprKind::Unary(op, a) => {
                let a = take(*a);
                match op {
                    UnOp::Pos => a,
                    UnOp::Neg => match a {
                        Expr::Literal(Literal::Float(v)) => Expr::Literal(Literal::Float(-v)),
                        a => call(Func::Unary(UnaryOp::Neg), vec![a]),
                    },
                    UnOp::Invert | UnOp::Not => call(Func::Not, vec![a]),
                }
            }
            ExprKind::Binary(op, a, b) => {
                let (a, b) = (take(*a), take(*b));
                let func = match op {
                    BinOp::Add => Func::Binary(BinaryOp::Add),
                    BinOp::Sub => Func::Binary(BinaryOp::Sub),
                    BinOp::Mul => Func::Binary(BinaryOp::Mul),
                    BinOp::Div => Func::TrueDiv,
                    BinOp::FloorDiv => Func::Binary(BinaryOp::FloorDiv),
                    BinOp::Mod => Func::Binary(BinaryOp::Mod),
                    // NumPy's `**` and shifts (the exponents it special-cases;
                    // counts outside [0, width) shift every bit out).
                    BinOp::Pow => Func::Numpy("power"),
                    BinOp::Shl => Func::Numpy("left_shift"),
                    BinOp::Shr => Func::Numpy("right_shift"),
                    BinOp::BitAnd | BinOp::And => Func::And,
                    BinOp::BitOr | BinOp::Or => Func::Or,
                    BinOp::BitXor => Func::Xor,
                    BinOp::MatMul => {
                        return Err(err(node.span, "`@` is not a query operator".to_string()));
                    }
                };
                call(func, vec![a, b])
            }
            // pandas: `x == [1, 2]` (or `[1, 2] == x`) is `x in [1, 2]`, `!=`
            // is `not in`.
            ExprKind::Compare(first, rest)
                if rest.len() == 1
                    && matches!(rest[0].0, kiln::ir::CmpOp::Eq | kiln::ir::CmpOp::Ne)
                    && (lists.contains_key(&rest[0].1) || lists.contains_key(first)) =>
            {
                let (list, x) = if lists.contains_key(first) {
                    (*first, rest[0].1)
                } else {
                    (rest[0].1, *first)
                };
                let (_, items) = lists.remove(&list).expect("a list");
                let x = take(x);
                let found = call(Func::In, std::iter::once(x).chain(items).collect());
                if rest[0].0 == kiln::ir::CmpOp::Ne {
                    call(Func::Not, vec![found])
                } else {
                    found
                }
            }
            ExprKind::In(x, container, negated) => {
                // `[1, 2] in x` is pandas' `x.isin([1, 2])` too.
                let (list, x) = if lists.contains_key(x) {
                    (*x, *container)
                } else {
                    (*container, *x)
                };
                let Some((_, items)) = lists.remove(&list) else {
                    return Err(err(
                        node.span,
                        "`in` takes a list of numbers, as `x in [1, 2, 3]`".into(),
                    ));
                };
                let x = take(x);
                let found = call(Func::In, std::iter::once(x).chain(items).collect());
                if *negated {
                    call(Func::Not, vec![found])
                } else {
                    found
                }
            }
            ExprKind::Call(name, args, _)
                if name.ends_with(".isin") && args.len() == 1 && lists.contains_key(&args[0]) =>
            {
                let (_, items) = lists.remove(&args[0]).expect("a list");
                let col = name.trim_end_matches(".isin").to_string();
                call(
                    Func::In,
                    std::iter::once(Expr::Field(col)).chain(items).collect(),
                )
            }
            ExprKind::List(items) | ExprKind::Tuple(items) => {
                let items: Vec<Expr> = items.iter().map(|&i| take(i)).collect();
                lists.insert(idx, (node.span, items));
                built.push(None);
                continue;
            }
            ExprKind::Compare(first, rest) => {
                // a < b <= c is (a < b) & (b <= c), b written once.
                let mut left = take(*first);
                let mut terms = Vec::new();
                for (op, right) in rest {
                    let right = take(*right);
                    terms.push(call(Func::Compare(*op), vec![left, right.clone()]));
                    left = right;
                }
                if terms.len() == 1 {
                    terms.pop().expect("one term")
                } else {
                    call(Func::And, terms)
                }
            }
            ExprKind::IfElse(c, a, b) => {
                let (c, a, b) = (take(*c), take(*a), take(*b));
                call(Func::If, vec![c, a, b])
            }
            ExprKind::Call(name, args, _) => {
                let mut args: Vec<Expr> = args.iter().map(|&a| take(a)).collect();
                // `x.isnull()` and friends: a method of a column.
                let (name, receiver) = match name.rsplit_once('.') {
                    Some((col, method)) if args.is_empty() => (method, Some(col)),
                    _ => (name.as_str(), None),
                };
                if let Some(col) = receiver {
                    args.push(Expr::Field(col.to_string()));
                }
                let func = resolve(name, args.len()).map_err(|m| err(node.span, m))?;
                if let Some(n) = func.arity() {
                    if args.len() != n {
                        return Err(err(
                            node.span,
                            format!("`{name}` takes {n} argument(s), not {}", args.len()),
                        ));
                    }
                } else if args.is_empty() {
                    return Err(err(node.span, format!("`{name}` needs an argument")));
                }
                call(func, args)
            }
            ExprKind::None
            | ExprKind::Attr(..)
            | ExprKind::Method(..)
            | ExprKind::Subscript(..) => {
                return Err(err(
                    node.span,
                    "`None`, attributes, methods of expressions and indexing are not query syntax"
                        .into(),
                ))
            }
        };
        built.push(Some(e));
    }
    if let Some((span, _)) = lists.values().min_by_key(|(span, _)| span.start) {
        return Err(err(
            *span,
            "a list or tuple is only what `in`, `== [...]` and `.isin([...])` look in".into(),
        ));
    }
    Ok(built[root]
        .take()
        .expect("the root is built last and unused"))
}

/// The null-aware functions and casts only queries have.
const QUERY_NAMES: &[&str] = &[
    "isnull",
    "isna",
    "notnull",
    "notna",
    "isnotnull",
    "coalesce",
    "where",
    "if",
    "f64",
    "f32",
    "i64",
    "i32",
];

/// The function a query calls `name` with `n_args` arguments: first the
/// null-aware ones (`isnull`, `coalesce`, `where`: SQL's rules), then casts,
/// then the Python subset's table (every elementwise function `kiln eval`
/// knows, with NumPy's meaning), then Gandiva's names (`less_than`).
fn resolve(name: &str, n_args: usize) -> Result<Func, String> {
    let base = funcs::base_name(name).unwrap_or(name);
    Ok(match base {
        "isnull" | "isna" | "notnull" | "notna" | "isnotnull" | "coalesce" | "where" | "if" => {
            Func::from_name(base).expect("a null-aware function")
        }
        "float" | "f64" | "float64" => Func::Cast(DType::F64),
        "f32" | "float32" => Func::Cast(DType::F32),
        "int" | "i64" | "int64" => Func::Cast(DType::I64),
        "i32" | "int32" => Func::Cast(DType::I32),
        "bool" => Func::Cast(DType::Bool),
        _ => match (Func::numpy(name, n_args), funcs::canonical(name)) {
            (Some(f), _) => f,
            (None, Some(_)) => {
                return Err(format!(
                    "`{name}` is not elementwise: a query computes one value per row"
                ))
            }
            (None, None) => Func::from_name(name)
                .filter(|f| !matches!(f, Func::Compare(_)))
                .ok_or_else(|| funcs::unknown_message(name, QUERY_NAMES))?,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_query() {
        let e = parse("(x > 2.0) & (x < 6.0)").unwrap();
        assert_eq!(e.to_string(), "((x > 2.0) & (x < 6.0))");
        assert_eq!(
            parse("2 < x <= 6").unwrap().to_string(),
            "((2 < x) & (x <= 6))"
        );
        assert_eq!(
            parse("x.isnull() | ~(y == 1) and not z")
                .unwrap()
                .to_string(),
            // pandas' precedence: `|` is `or`'s level, below `and`.
            "(isnull(x) | (~(y == 1) & ~z))"
        );
        assert_eq!(parse("-2.5 * x").unwrap().to_string(), "(-2.5 * x)");
    }

    #[test]
    fn pandas_precedence_and_the_python_subsets_names() {
        for (src, parsed) in [
            ("a < 0 & b > 0", "((a < 0) & (b > 0))"),
            ("a < 0 | b > 0 & c == 1", "((a < 0) | ((b > 0) & (c == 1)))"),
            ("~a & b", "(~a & b)"),
            ("x > -inf", "(x > -inf)"),
            ("isinf(x) | isnan(x)", "(isinf(x) | isnan(x))"),
            ("np.arcsinh(x) > 0", "(arcsinh(x) > 0)"),
            ("clip(x, 0, 1) < pi", "(clip(x, 0, 1) < 3.141592653589793)"),
            ("x ** 0.5", "(x ** 0.5)"),
        ] {
            assert_eq!(parse(src).unwrap().to_string(), parsed, "{src}");
        }
    }

    #[test]
    fn bad_queries_are_errors_with_a_place() {
        for (src, msg) in [
            ("x >", "expected"),
            ("frob(x)", "unknown function `frob`"),
            ("isnul(x)", "did you mean `isnull`?"),
            ("arcsinhh(x)", "did you mean `arcsinh`?"),
            ("sum(x) > 1", "not elementwise"),
            ("clip(x, 1)", "takes 3"),
            ("sqrt(x, y)", "takes 1"),
            ("(x, y)", "tuple"),
            ("a = 1\na", "one expression"),
            ("99999999999999999999 > x", "does not fit"),
        ] {
            let e = parse(src).unwrap_err().to_string();
            assert!(e.contains(msg), "{src}: {e}");
        }
        let deep = format!("{}x{}", "(".repeat(150), ")".repeat(150));
        assert!(parse(&deep).is_ok());
        let long = vec!["x"; 5000].join(" + ");
        assert!(parse(&long)
            .unwrap_err()
            .to_string()
            .contains("nests more than"));
    }
}
