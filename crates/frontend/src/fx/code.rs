//! The code `print(gm)` writes below the module tree (`gm.code`), read into
//! the same [`FxGraph`] `print(gm.graph)` gives, one statement a line:
//!
//! ```text
//! def forward(self, input):
//!     input_1 = input
//!     _0 = getattr(self, "0")(input_1);  input_1 = None
//!     weight = self.weight
//!     matmul = input_1 @ weight;  input_1 = weight = None
//!     clamp = x.clamp(min = 0.0)
//!     getitem = native_batch_norm[0]
//!     return (add_2, sub)
//! ```
//!
//! Each statement is `NAME = RHS` (what follows a `;` only frees names). The
//! right-hand side is one node: `self.PATH` (get_attr), `getattr(self,
//! "0")(…)` (call_module), `torch.f(…)`/`operator.f(…)` (call_function),
//! `x.m(…)` on a value (call_method), `x[i]` (getitem), `a OP b` and `OP a`
//! (the `operator` functions), or a forward argument (its placeholder).
//! Parsing is line by line with the graph text's cursor: only literal nesting
//! recurses, bounded as there.

use super::text::{parse_call_args, text_lines, Arg, CallArgs, Cursor, FxGraph, Node};
use kiln_ir::{ParseError, ParseResult};
use std::collections::HashSet;

/// Binary operators as generated code writes them, longest first, with the
/// `operator` function each stands for.
const BINARY: &[(&str, &str)] = &[
    ("**", "pow"),
    ("//", "floordiv"),
    ("<<", "lshift"),
    (">>", "rshift"),
    (">=", "ge"),
    ("<=", "le"),
    ("==", "eq"),
    ("!=", "ne"),
    ("+", "add"),
    ("-", "sub"),
    ("*", "mul"),
    ("/", "truediv"),
    ("%", "mod"),
    ("@", "matmul"),
    (">", "gt"),
    ("<", "lt"),
    ("&", "and_"),
    ("|", "or_"),
    ("^", "xor"),
];

/// Reads the `forward` of `src` (a `print(gm)` text, or `gm.code` alone).
pub fn parse(src: &str) -> ParseResult<FxGraph> {
    let Some(def_at) = src.find("def forward(self") else {
        return Err(ParseError::at(src, 0, "expected `def forward(self, …):`"));
    };
    let header = src[def_at..].split_inclusive('\n').next().unwrap_or("");
    let params = forward_params(src, def_at, header)?;
    let mut defined: HashSet<String> = params.iter().cloned().collect();
    // A forward argument may be renamed by its first line (`input_1 =
    // input`): the placeholder node takes that name.
    let mut placeholder_names: Vec<String> = params.clone();
    let mut nodes = Vec::new();
    let mut output = None;
    for (start, text) in text_lines(src, def_at + header.len()) {
        let end = start + statement_len(text);
        let mut cur = Cursor {
            src,
            pos: start,
            end,
        };
        if output.is_some() {
            return cur.err("nothing may follow the `return` line");
        }
        if cur.eat("return") {
            let items = match nodes_in(cur.arg(0)?, &defined) {
                Arg::Seq(items) => items,
                other => vec![other],
            };
            cur.skip_ws();
            if cur.pos < end {
                return cur.err("unexpected text after the returned values");
            }
            output = Some((items, start));
            continue;
        }
        let name = cur.ident()?;
        if name.contains('.') || !cur.eat("=") {
            return cur.err("expected `NAME = …`, a line of generated code");
        }
        cur.skip_ws();
        let rest = cur.rest().trim_end();
        if let Some(idx) = params.iter().position(|p| p == rest) {
            placeholder_names[idx] = name.clone();
            defined.insert(name);
            continue;
        }
        let mut node = statement(&mut cur, &defined)?;
        node.name = name.clone();
        node.offset = start;
        nodes.push(node);
        defined.insert(name);
    }
    let Some((output, output_offset)) = output else {
        return Err(ParseError::at(
            src,
            src.len(),
            "`forward` has no `return` line",
        ));
    };
    let mut all: Vec<Node> = params
        .iter()
        .zip(placeholder_names)
        .map(|(target, name)| Node {
            name,
            kind: "placeholder".into(),
            target: target.clone(),
            args: Vec::new(),
            kwargs: Vec::new(),
            offset: def_at,
        })
        .collect();
    all.extend(nodes);
    Ok(FxGraph {
        nodes: all,
        output,
        output_offset,
    })
}

/// The forward arguments after `self` (annotations and defaults dropped).
fn forward_params(src: &str, at: usize, header: &str) -> ParseResult<Vec<String>> {
    let inner = header
        .split_once('(')
        .and_then(|(_, rest)| rest.rsplit_once(')'))
        .map(|(inner, _)| inner)
        .ok_or_else(|| ParseError::at(src, at, "expected `def forward(self, …):`"))?;
    Ok(inner
        .split(',')
        .map(|p| p.split([':', '=']).next().unwrap_or("").trim().to_string())
        .filter(|p| !p.is_empty() && p != "self")
        .collect())
}

/// The length of a line's statement: up to a `;` outside brackets and
/// strings (what follows only frees names: `;  x = y = None`).
fn statement_len(text: &str) -> usize {
    let (mut depth, mut quote) = (0i32, None);
    for (i, c) in text.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '(' | '[' | '{') => depth += 1,
            (None, ')' | ']' | '}') => depth -= 1,
            (None, ';') if depth == 0 => return text[..i].trim_end().len(),
            _ => {}
        }
    }
    text.len()
}

/// Bare names of defined values become node references, inside tuples too.
fn nodes_in(arg: Arg, defined: &HashSet<String>) -> Arg {
    match arg {
        Arg::Name(n) if defined.contains(&n) => Arg::Node(n),
        Arg::Seq(items) => Arg::Seq(items.into_iter().map(|a| nodes_in(a, defined)).collect()),
        other => other,
    }
}

fn node(kind: &str, target: String, args: Vec<Arg>, kwargs: Vec<(String, Arg)>) -> Node {
    Node {
        name: String::new(),
        kind: kind.into(),
        target,
        args,
        kwargs,
        offset: 0,
    }
}

/// The node one right-hand side makes.
fn statement(cur: &mut Cursor<'_>, defined: &HashSet<String>) -> ParseResult<Node> {
    let end = cur.end;
    let convert = |(args, kwargs): CallArgs| {
        let args = args.into_iter().map(|a| nodes_in(a, defined)).collect();
        let kwargs = kwargs
            .into_iter()
            .map(|(k, a)| (k, nodes_in(a, defined)))
            .collect();
        (args, kwargs)
    };
    if cur.rest().starts_with("getattr(") {
        // `getattr(getattr(self, "4"), "0")(x)`, `getattr(self, "4").conv1(x)`,
        // `getattr(getattr(self, "6").down, "0")(x)`: the submodule's path,
        // read left to right: `getattr(`s open, `self`, then `, "name")`
        // (closing one) and `.name` in any order.
        let mut path = Vec::new();
        let mut rest = cur.rest();
        let mut open = 0;
        while let Some(inner) = rest.strip_prefix("getattr(") {
            rest = inner;
            open += 1;
        }
        let Some(after_self) = rest.strip_prefix("self") else {
            return cur.err("expected `getattr(self, …)`");
        };
        rest = after_self;
        loop {
            if let Some(item) = rest.strip_prefix(", ").filter(|_| open > 0) {
                let quote = item.chars().next().filter(|c| matches!(c, '"' | '\''));
                let Some(q) = quote else {
                    return cur.err("expected a quoted submodule name");
                };
                let Some((name, after)) = item[1..].split_once(q) else {
                    return cur.err("unterminated submodule name");
                };
                let Some(after) = after.strip_prefix(')') else {
                    return cur.err("expected `)` after the submodule name");
                };
                path.push(name.to_string());
                rest = after;
                open -= 1;
            } else if let Some(attr) = rest.strip_prefix('.') {
                let len = attr
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(attr.len());
                if len == 0 {
                    return cur.err("expected a submodule name after `.`");
                }
                path.push(attr[..len].to_string());
                rest = &attr[len..];
            } else {
                break;
            }
        }
        if open > 0 {
            return cur.err("unclosed `getattr(`");
        }
        let Some(args) = rest.strip_prefix('(') else {
            return cur.err("expected the submodule's call `(…)`");
        };
        let start = end - args.len();
        let (args, kwargs) = convert(parse_call_args(cur.src, start, end)?);
        return Ok(node("call_module", path.join("."), args, kwargs));
    }
    if let Some(path) = cur.rest().strip_prefix("self.") {
        // `self.conv1(x)`, `self.layer1.conv(x)`: a submodule's call;
        // `self.weight`: an attribute.
        let len = path
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
            .unwrap_or(path.len());
        if let Some(args) = path[len..].strip_prefix('(') {
            let start = end - args.len();
            let (args, kwargs) = convert(parse_call_args(cur.src, start, end)?);
            return Ok(node("call_module", path[..len].to_string(), args, kwargs));
        }
        return Ok(node(
            "get_attr",
            path.trim().to_string(),
            Vec::new(),
            Vec::new(),
        ));
    }
    for (symbol, op) in [("-", "neg"), ("~", "invert"), ("not ", "not_")] {
        let rest = cur.rest();
        let operand = rest.strip_prefix(symbol);
        if operand.is_some_and(|o| o.starts_with(|c: char| c.is_alphabetic() || c == '_')) {
            cur.pos += symbol.len();
            let a = nodes_in(cur.arg(0)?, defined);
            return finish(
                cur,
                node("call_function", format!("operator.{op}"), vec![a], vec![]),
            );
        }
    }
    let at = cur.pos;
    if let Ok(callee) = cur.ident() {
        if cur.rest().starts_with('(') {
            let start = cur.pos + 1;
            let (args, kwargs) = convert(parse_call_args(cur.src, start, end)?);
            let (first, method) = callee.split_once('.').unwrap_or((&callee, ""));
            return Ok(if defined.contains(first) && !method.is_empty() {
                let mut all = vec![Arg::Node(first.to_string())];
                all.extend(args);
                node("call_method", method.to_string(), all, kwargs)
            } else {
                node("call_function", callee, args, kwargs)
            });
        }
        if cur.rest().starts_with('[') && defined.contains(&callee) {
            cur.pos += 1;
            let index = nodes_in(cur.arg(0)?, defined);
            cur.expect("]")?;
            let args = vec![Arg::Node(callee), index];
            return finish(
                cur,
                node("call_function", "operator.getitem".into(), args, vec![]),
            );
        }
        cur.pos = at;
    }
    let a = nodes_in(cur.arg(0)?, defined);
    cur.skip_ws();
    let Some(&(symbol, op)) = BINARY.iter().find(|(s, _)| cur.rest().starts_with(s)) else {
        return cur.err("expected an operator, a call or an attribute of generated code");
    };
    cur.pos += symbol.len();
    let b = nodes_in(cur.arg(0)?, defined);
    finish(
        cur,
        node(
            "call_function",
            format!("operator.{op}"),
            vec![a, b],
            vec![],
        ),
    )
}

/// Checks that nothing follows a statement.
fn finish(cur: &mut Cursor<'_>, node: Node) -> ParseResult<Node> {
    cur.skip_ws();
    if cur.pos < cur.end {
        return cur.err("unexpected text after the expression");
    }
    Ok(node)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_code_reads_as_the_graph_text_does() {
        let code = "def forward(self, input, y):\n    input_1 = input\n    _0 = getattr(getattr(self, \"4\"), \"0\")(input_1);  input_1 = None\n    weight = self.lin.weight\n    matmul = _0 @ weight;  _0 = weight = None\n    clamp = matmul.clamp(min = 0.0)\n    neg = -clamp\n    g = torch.ops.aten.native_batch_norm.default(neg, None, 1e-05)\n    item = g[0]\n    e = torch.ops.aten.empty.memory_format([0], dtype = torch.uint8, device = device(type='cpu'));  e = None\n    add = 2.0 + y\n    c1 = getattr(self, \"4\").conv1(add)\n    fc = self.head.fc(c1)\n    d = getattr(getattr(self, \"6\").down, \"0\")(fc)\n    return (item, d)\n";
        let g = parse(code).unwrap();
        let show: Vec<String> = g
            .nodes
            .iter()
            .map(|n| {
                format!(
                    "{} {} {} {:?} {:?}",
                    n.name, n.kind, n.target, n.args, n.kwargs
                )
            })
            .collect();
        assert_eq!(show[0], "input_1 placeholder input [] []");
        assert_eq!(show[1], "y placeholder y [] []");
        assert_eq!(show[2], "_0 call_module 4.0 [Node(\"input_1\")] []");
        assert_eq!(show[3], "weight get_attr lin.weight [] []");
        assert_eq!(
            show[4],
            "matmul call_function operator.matmul [Node(\"_0\"), Node(\"weight\")] []"
        );
        assert_eq!(
            show[5],
            "clamp call_method clamp [Node(\"matmul\")] [(\"min\", Float(0.0))]"
        );
        assert_eq!(
            show[6],
            "neg call_function operator.neg [Node(\"clamp\")] []"
        );
        assert!(show[7].starts_with("g call_function torch.ops.aten.native_batch_norm.default"));
        assert_eq!(
            show[8],
            "item call_function operator.getitem [Node(\"g\"), Int(0)] []"
        );
        assert!(
            show[9].starts_with("e call_function torch.ops.aten.empty.memory_format"),
            "{}",
            show[9]
        );
        assert_eq!(
            show[10],
            "add call_function operator.add [Float(2.0), Node(\"y\")] []"
        );
        // A submodule's attribute after getattr, and dotted names after self.
        assert_eq!(show[11], "c1 call_module 4.conv1 [Node(\"add\")] []");
        assert_eq!(show[12], "fc call_module head.fc [Node(\"c1\")] []");
        assert_eq!(show[13], "d call_module 6.down.0 [Node(\"fc\")] []");
        assert_eq!(g.output, [Arg::Node("item".into()), Arg::Node("d".into())]);
    }

    #[test]
    fn malformed_code_is_located() {
        for (code, line) in [
            ("def forward(self, x):\n    y = x $ 2\n    return y\n", 2),
            ("def forward(self, x):\n    y = x + 1\n", 3),
            ("def forward(self, x):\n    return x\n    z = x\n", 3),
            (
                "def forward(self, x):\n    y = getattr(self, 0)(x)\n    return y\n",
                2,
            ),
        ] {
            let e = parse(code).unwrap_err();
            assert_eq!(e.loc.line, line, "{code}: {e}");
        }
        assert!(parse("x = 1").is_err());
    }
}
