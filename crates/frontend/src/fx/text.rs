//! The text `print(gm.graph)` writes, one node a line:
//!
//! ```text
//! graph():
//!     %x : [num_users=1] = placeholder[target=x]
//!     %add : [num_users=5] = call_function[target=operator.add](args = (%x, 2.0), kwargs = {})
//!     return (add, sub)
//! ```
//!
//! A node is `%name : [TYPE] [num_users=N] = KIND[target=TARGET](args = (…), kwargs = {…})`
//! with KIND one of `placeholder`, `get_attr`, `call_function`, `call_method`,
//! `call_module`, `output` (printed as the `return` line). Arguments are Python
//! literals (ints, floats including `inf` and `nan`, `True`, `False`, `None`,
//! strings, tuples, lists, dicts) and node references `%name`. Parsing is line by
//! line; only literal nesting recurses, and it is bounded by [`MAX_DEPTH`].

use kiln_ir::{ParseError, ParseResult};

/// How deeply literals may nest (tuples of lists of …).
pub const MAX_DEPTH: usize = 64;

/// A Python literal or node reference in `args`/`kwargs`.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    /// `%name`.
    Node(String),
    /// An integer literal.
    Int(i64),
    /// A float literal (`inf`, `nan` included).
    Float(f64),
    /// `True` / `False`.
    Bool(bool),
    /// `None`.
    None,
    /// A quoted string.
    Str(String),
    /// A bare dotted name, such as `torch.float32`.
    Name(String),
    /// `(a, b)` or `[a, b]`.
    Seq(Vec<Arg>),
    /// `slice(start, stop, step)` in an index, each `None` or an int.
    Slice([Option<i64>; 3]),
}

/// One node of the graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The node's name (without `%`).
    pub name: String,
    /// `placeholder`, `get_attr`, `call_function`, `call_method`, `call_module`.
    pub kind: String,
    /// The target as printed (`operator.add`, `torch.ops.aten.relu.default`, `sin`).
    pub target: String,
    /// Positional arguments.
    pub args: Vec<Arg>,
    /// Keyword arguments, in order.
    pub kwargs: Vec<(String, Arg)>,
    /// Byte offset of the line in the source, for errors.
    pub offset: usize,
}

/// A parsed graph: its nodes in order and what `return` returns.
#[derive(Clone, Debug, PartialEq)]
pub struct FxGraph {
    /// The nodes, in order.
    pub nodes: Vec<Node>,
    /// The returned values.
    pub output: Vec<Arg>,
    /// Byte offset of the `return` line.
    pub output_offset: usize,
}

/// A position in one line of the source: nothing reads past `end`, so a
/// malformed line cannot swallow the next.
pub(crate) struct Cursor<'a> {
    pub(crate) src: &'a str,
    pub(crate) pos: usize,
    pub(crate) end: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn rest(&self) -> &'a str {
        &self.src[self.pos..self.end]
    }

    pub(crate) fn err<T>(&self, message: impl Into<String>) -> ParseResult<T> {
        Err(ParseError::at(self.src, self.pos, message))
    }

    pub(crate) fn skip_ws(&mut self) {
        let trimmed = self.rest().trim_start_matches([' ', '\t']);
        self.pos = self.end - trimmed.len();
    }

    pub(crate) fn eat(&mut self, s: &str) -> bool {
        self.skip_ws();
        if self.rest().starts_with(s) {
            self.pos += s.len();
            true
        } else {
            false
        }
    }

    pub(crate) fn expect(&mut self, s: &str) -> ParseResult<()> {
        if self.eat(s) {
            Ok(())
        } else {
            let found: String = self.rest().chars().take(12).collect();
            self.err(format!("expected `{s}`, found `{found}`"))
        }
    }

    /// An identifier, possibly dotted (`torch.ops.aten.add.Tensor`).
    pub(crate) fn ident(&mut self) -> ParseResult<String> {
        self.skip_ws();
        let len = self
            .rest()
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
            .unwrap_or(self.rest().len());
        if len == 0 {
            return self.err("expected a name");
        }
        let s = self.rest()[..len].to_string();
        self.pos += len;
        Ok(s)
    }

    /// Text up to the `]` closing `[target=…`; `<built-in function add>` and the
    /// like may contain spaces and dots.
    fn target(&mut self) -> ParseResult<String> {
        let Some(end) = self.rest().find(']') else {
            return self.err("unterminated `[target=…]`");
        };
        let s = self.rest()[..end].trim().to_string();
        self.pos += end;
        Ok(s)
    }

    pub(crate) fn arg(&mut self, depth: usize) -> ParseResult<Arg> {
        if depth > MAX_DEPTH {
            return self.err(format!("arguments nest deeper than {MAX_DEPTH}"));
        }
        self.skip_ws();
        let c = self.rest().chars().next();
        match c {
            Some('%') => {
                self.pos += 1;
                Ok(Arg::Node(self.ident()?))
            }
            Some('(') | Some('[') => {
                let close = if c == Some('(') { ")" } else { "]" };
                self.pos += 1;
                Ok(Arg::Seq(self.seq(close, depth)?))
            }
            Some('\'') | Some('"') => self.string(),
            Some(c) if c.is_ascii_digit() || c == '-' || c == '+' => self.number(),
            Some(c) if c.is_alphabetic() || c == '_' => {
                let name = self.ident()?;
                Ok(match name.as_str() {
                    "True" => Arg::Bool(true),
                    "False" => Arg::Bool(false),
                    "None" => Arg::None,
                    "inf" => Arg::Float(f64::INFINITY),
                    "nan" => Arg::Float(f64::NAN),
                    "slice" if self.eat("(") => {
                        let at = self.pos;
                        let mut bounds = [None; 3];
                        let items = self.seq(")", depth)?;
                        if items.is_empty() || items.len() > 3 {
                            self.pos = at;
                            return self.err("`slice(...)` takes 1 to 3 bounds");
                        }
                        // slice(stop) or slice(start, stop[, step]).
                        let first = usize::from(items.len() == 1);
                        for (i, item) in items.iter().enumerate() {
                            bounds[i + first] = match item {
                                Arg::Int(k) => Some(*k),
                                Arg::None => None,
                                _ => {
                                    self.pos = at;
                                    return self.err("`slice(...)` bounds are ints or None");
                                }
                            };
                        }
                        Arg::Slice(bounds)
                    }
                    // A call in an argument (`device(type='cpu')`, as
                    // generated code writes it): kept as an opaque name.
                    _ if self.rest().starts_with('(') => {
                        let open = self.pos;
                        self.pos += 1;
                        self.seq_or_kwargs(depth)?;
                        Arg::Name(format!("{name}{}", &self.src[open..self.pos]))
                    }
                    _ => Arg::Name(name),
                })
            }
            _ => self.err("expected an argument"),
        }
    }

    /// Skips `a, key=value)`: the arguments of a call inside an argument.
    fn seq_or_kwargs(&mut self, depth: usize) -> ParseResult<()> {
        loop {
            if self.eat(")") {
                return Ok(());
            }
            let at = self.pos;
            if !(self.ident().is_ok() && self.eat("=")) {
                self.pos = at;
            }
            self.arg(depth + 1)?;
            if !self.eat(",") {
                return self.expect(")");
            }
        }
    }

    pub(crate) fn seq(&mut self, close: &str, depth: usize) -> ParseResult<Vec<Arg>> {
        let mut items = Vec::new();
        loop {
            if self.eat(close) {
                return Ok(items);
            }
            items.push(self.arg(depth + 1)?);
            if !self.eat(",") {
                self.expect(close)?;
                return Ok(items);
            }
        }
    }

    fn string(&mut self) -> ParseResult<Arg> {
        let quote = self.rest().chars().next().expect("caller saw a quote");
        self.pos += 1;
        let mut out = String::new();
        let mut chars = self.rest().char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, e)) => out.push(match e {
                        'n' => '\n',
                        't' => '\t',
                        other => other,
                    }),
                    None => break,
                },
                c if c == quote => {
                    self.pos += i + 1;
                    return Ok(Arg::Str(out));
                }
                '\n' => break,
                c => out.push(c),
            }
        }
        self.err("unterminated string")
    }

    fn number(&mut self) -> ParseResult<Arg> {
        let len = self
            .rest()
            .char_indices()
            .find(|&(i, c)| {
                !(c.is_ascii_alphanumeric()
                    || c == '.'
                    || ((c == '-' || c == '+')
                        && (i == 0 || self.rest()[..i].ends_with(['e', 'E']))))
            })
            .map_or(self.rest().len(), |(i, _)| i);
        let text = &self.rest()[..len];
        let value = match text {
            "-inf" => Arg::Float(f64::NEG_INFINITY),
            "+inf" => Arg::Float(f64::INFINITY),
            _ if !text.contains(['.', 'e', 'E']) => match text.parse::<i64>() {
                Ok(i) => Arg::Int(i),
                Err(_) => return self.err(format!("`{text}` is not a number kiln can hold")),
            },
            _ => match text.parse::<f64>() {
                Ok(f) => Arg::Float(f),
                Err(_) => return self.err(format!("`{text}` is not a number")),
            },
        };
        self.pos += len;
        Ok(value)
    }
}

/// The lines of `src` from byte `from` that hold something, each as the byte
/// offset of its first non-blank character and its text, trimmed; blank and
/// comment lines are skipped.
pub(crate) fn text_lines(src: &str, from: usize) -> impl Iterator<Item = (usize, &str)> {
    let mut offset = from;
    src[from..].split_inclusive('\n').filter_map(move |line| {
        let start = offset;
        offset += line.len();
        let body = line.trim_end();
        let text = body.trim_start();
        (!text.is_empty() && !text.starts_with('#'))
            .then(|| (start + body.len() - text.len(), text))
    })
}

/// Parses the text of `print(gm.graph)`.
pub fn parse(src: &str) -> ParseResult<FxGraph> {
    let mut nodes = Vec::new();
    let mut output = None;
    let mut seen_header = false;
    for (at, trimmed) in text_lines(src, 0) {
        let mut cur = Cursor {
            src,
            pos: at,
            end: at + trimmed.len(),
        };
        if !seen_header {
            if !trimmed.starts_with("graph(") {
                return cur.err("expected `graph():`, the first line `print(gm.graph)` writes");
            }
            seen_header = true;
            continue;
        }
        if output.is_some() {
            return cur.err("nothing may follow the `return` line");
        }
        if trimmed.starts_with("return") {
            cur.pos += "return".len();
            let arg = cur.arg(0)?;
            // `return add` names a node without `%`.
            let items = match arg {
                Arg::Seq(items) => items,
                other => vec![other],
            };
            output = Some((items, at));
            cur.skip_ws();
            if cur.pos < at + trimmed.len() {
                return cur.err("unexpected text after the returned values");
            }
            continue;
        }
        nodes.push(parse_node(&mut cur, at + trimmed.len())?);
    }
    if !seen_header {
        return Err(ParseError::at(src, 0, "empty graph: expected `graph():`"));
    }
    let Some((output, output_offset)) = output else {
        return Err(ParseError::at(
            src,
            src.len(),
            "the graph has no `return` line",
        ));
    };
    Ok(FxGraph {
        nodes,
        output,
        output_offset,
    })
}

fn parse_node(cur: &mut Cursor<'_>, end: usize) -> ParseResult<Node> {
    let offset = cur.pos;
    cur.expect("%")?;
    let name = cur.ident()?;
    cur.expect(":")?;
    // An optional type (`torch.Tensor`, `f32[4, 3]`), then `[num_users=N]`.
    cur.skip_ws();
    if !cur.rest().starts_with("[num_users=") {
        let Some(at) = cur.rest().find("[num_users=") else {
            return cur.err("expected `[num_users=N]`");
        };
        cur.pos += at;
    }
    cur.expect("[num_users=")?;
    let Some(close) = cur.rest().find(']') else {
        return cur.err("unterminated `[num_users=…]`");
    };
    cur.pos += close + 1;
    cur.expect("=")?;
    let kind = cur.ident()?;
    if !matches!(
        kind.as_str(),
        "placeholder" | "get_attr" | "call_function" | "call_method" | "call_module"
    ) {
        return cur.err(format!(
            "unknown node kind `{kind}` (expected placeholder, get_attr, call_function, call_method or call_module)"
        ));
    }
    cur.expect("[target=")?;
    let target = cur.target()?;
    cur.expect("]")?;
    let (mut args, mut kwargs) = (Vec::new(), Vec::new());
    if cur.eat("(") {
        // `(args = (…), kwargs = {…})`, or a placeholder's `(default=…)`.
        loop {
            if cur.eat(")") {
                break;
            }
            let key = cur.ident()?;
            cur.expect("=")?;
            match key.as_str() {
                "args" => {
                    cur.expect("(")?;
                    args = cur.seq(")", 0)?;
                }
                "kwargs" => {
                    cur.expect("{")?;
                    kwargs = parse_kwargs(cur)?;
                }
                _ => {
                    cur.arg(0)?;
                }
            }
            if !cur.eat(",") {
                cur.expect(")")?;
                break;
            }
        }
    }
    cur.skip_ws();
    if cur.pos < end {
        return cur.err("unexpected text after the node");
    }
    Ok(Node {
        name,
        kind,
        target,
        args,
        kwargs,
        offset,
    })
}

fn parse_kwargs(cur: &mut Cursor<'_>) -> ParseResult<Vec<(String, Arg)>> {
    let mut out = Vec::new();
    loop {
        if cur.eat("}") {
            return Ok(out);
        }
        cur.skip_ws();
        let key = match cur.rest().chars().next() {
            Some('\'') | Some('"') => match cur.string()? {
                Arg::Str(s) => s,
                _ => unreachable!("string() returns strings"),
            },
            _ => cur.ident()?,
        };
        cur.expect(":")?;
        out.push((key, cur.arg(1)?));
        if !cur.eat(",") {
            cur.expect("}")?;
            return Ok(out);
        }
    }
}

/// A call's positional and keyword arguments.
pub(crate) type CallArgs = (Vec<Arg>, Vec<(String, Arg)>);

/// The arguments of a Python call written `a, b, key=value)` in
/// `src[start..end]`, up to and including the closing `)`: positional ones,
/// then keyword ones in order (a module's repr, a line of generated code).
pub(crate) fn parse_call_args(src: &str, start: usize, end: usize) -> ParseResult<CallArgs> {
    let mut cur = Cursor {
        src,
        pos: start,
        end,
    };
    let (mut args, mut kwargs) = (Vec::new(), Vec::new());
    loop {
        if cur.eat(")") {
            break;
        }
        let at = cur.pos;
        let keyword = match cur.ident() {
            Ok(key) if cur.eat("=") && !cur.rest().starts_with('=') => Some(key),
            _ => None,
        };
        match keyword {
            Some(key) => kwargs.push((key, cur.arg(1)?)),
            None => {
                cur.pos = at;
                if !kwargs.is_empty() {
                    return cur.err("a positional argument after keyword arguments");
                }
                args.push(cur.arg(1)?);
            }
        }
        if !cur.eat(",") {
            cur.expect(")")?;
            break;
        }
    }
    cur.skip_ws();
    if cur.pos < end {
        return cur.err("unexpected text after the arguments");
    }
    Ok((args, kwargs))
}
