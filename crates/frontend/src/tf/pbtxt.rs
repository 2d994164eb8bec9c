//! The protobuf text format (`tf.io.write_graph(…, as_text=True)`) into the
//! same `GraphDef` structs the binary decoder fills.
//!
//! Two steps: a tokenizer and an iterative parser build a tree of fields
//! (`name: scalar`, `name { … }`, `name: [a, b]`), with an explicit stack and a
//! nesting limit so deep input cannot overflow anything; then each message is
//! read from its fields, and a field of the wrong kind is a located error.

use super::proto::{
    attr_value, AttrValue, Dim, GraphDef, ListValue, NodeDef, TensorProto, TensorShapeProto,
    DATA_TYPE_NAMES,
};
use kiln_ir::{ParseError, ParseResult};

/// How deeply messages may nest.
pub const MAX_DEPTH: usize = 100;

#[derive(Clone, Debug)]
enum Scalar {
    Ident(String),
    Str(Vec<u8>),
    Num(String),
}

#[derive(Clone, Debug)]
enum Val {
    Scalar(Scalar),
    Msg(Vec<Field>),
}

#[derive(Clone, Debug)]
struct Field {
    name: String,
    offset: usize,
    value: Val,
}

struct Lexer<'a> {
    src: &'a str,
    pos: usize,
}

impl Lexer<'_> {
    fn err<T>(&self, at: usize, m: impl Into<String>) -> ParseResult<T> {
        Err(ParseError::at(self.src, at, m))
    }

    fn skip(&mut self) {
        loop {
            let rest = &self.src[self.pos..];
            let trimmed = rest.trim_start();
            self.pos += rest.len() - trimmed.len();
            if trimmed.starts_with('#') {
                self.pos += trimmed.find('\n').unwrap_or(trimmed.len());
            } else {
                return;
            }
        }
    }

    fn peek(&mut self) -> Option<char> {
        self.skip();
        self.src[self.pos..].chars().next()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.pos += c.len_utf8();
            true
        } else {
            false
        }
    }

    fn ident(&mut self) -> ParseResult<String> {
        self.skip();
        let rest = &self.src[self.pos..];
        let len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '/'))
            .unwrap_or(rest.len());
        if len == 0 {
            let found: String = rest.chars().take(10).collect();
            return self.err(self.pos, format!("expected a field name, found `{found}`"));
        }
        self.pos += len;
        Ok(rest[..len].to_string())
    }

    fn scalar(&mut self) -> ParseResult<Scalar> {
        let c = self.peek();
        match c {
            Some('"') | Some('\'') => {
                let mut bytes = self.string()?;
                // Adjacent strings concatenate.
                while matches!(self.peek(), Some('"') | Some('\'')) {
                    bytes.extend(self.string()?);
                }
                Ok(Scalar::Str(bytes))
            }
            Some(c) if c.is_ascii_digit() || c == '-' || c == '+' || c == '.' => {
                let rest = &self.src[self.pos..];
                let len = rest
                    .char_indices()
                    .find(|&(i, c)| {
                        !(c.is_ascii_alphanumeric()
                            || c == '.'
                            || ((c == '-' || c == '+')
                                && (i == 0 || rest[..i].ends_with(['e', 'E']))))
                    })
                    .map_or(rest.len(), |(i, _)| i);
                self.pos += len;
                Ok(Scalar::Num(rest[..len].to_string()))
            }
            Some(c) if c.is_ascii_alphabetic() || c == '_' => Ok(Scalar::Ident(self.ident()?)),
            _ => self.err(self.pos, "expected a value"),
        }
    }

    /// A quoted string with C escapes (`\n`, `\"`, octal `\303`, hex `\x41`).
    fn string(&mut self) -> ParseResult<Vec<u8>> {
        let start = self.pos;
        let bytes = self.src.as_bytes();
        let quote = bytes[self.pos];
        let mut i = self.pos + 1;
        let mut out = Vec::new();
        while i < bytes.len() {
            let c = bytes[i];
            if c == quote {
                self.pos = i + 1;
                return Ok(out);
            }
            if c == b'\n' {
                break;
            }
            if c != b'\\' {
                out.push(c);
                i += 1;
                continue;
            }
            i += 1;
            let Some(&e) = bytes.get(i) else { break };
            match e {
                b'0'..=b'7' => {
                    let mut v: u32 = 0;
                    let mut n = 0;
                    while n < 3 && i < bytes.len() && (b'0'..=b'7').contains(&bytes[i]) {
                        v = v * 8 + u32::from(bytes[i] - b'0');
                        i += 1;
                        n += 1;
                    }
                    out.push(v as u8);
                    continue;
                }
                b'x' | b'X' => {
                    let hex: String = self.src[i + 1..]
                        .chars()
                        .take_while(char::is_ascii_hexdigit)
                        .take(2)
                        .collect();
                    let Ok(v) = u8::from_str_radix(&hex, 16) else {
                        return self.err(i, "bad `\\x` escape");
                    };
                    out.push(v);
                    i += 1 + hex.len();
                    continue;
                }
                b'n' => out.push(b'\n'),
                b't' => out.push(b'\t'),
                b'r' => out.push(b'\r'),
                b'a' => out.push(7),
                b'b' => out.push(8),
                b'f' => out.push(12),
                b'v' => out.push(11),
                other => out.push(other),
            }
            i += 1;
        }
        self.err(start, "unterminated string")
    }
}

/// Parses the text into a tree of fields, iteratively.
fn parse_tree(src: &str) -> ParseResult<Vec<Field>> {
    let mut lx = Lexer { src, pos: 0 };
    // Each open message: its fields, its name and offset, and its closer.
    // The root has no closer.
    let mut stack: Vec<(Vec<Field>, String, usize, Option<char>)> =
        vec![(Vec::new(), String::new(), 0, None)];
    loop {
        let c = lx.peek();
        let top_close = stack.last().expect("the root is never popped").3;
        match c {
            None if stack.len() == 1 => return Ok(stack.pop().expect("root").0),
            None => {
                return lx.err(
                    src.len(),
                    format!(
                        "unexpected end of input: `{}` is not closed",
                        stack.last().expect("open").1
                    ),
                )
            }
            Some(c) if top_close == Some(c) => {
                lx.pos += 1;
                let (fields, name, offset, _) = stack.pop().expect("open message");
                let parent = &mut stack.last_mut().expect("a parent").0;
                parent.push(Field {
                    name,
                    offset,
                    value: Val::Msg(fields),
                });
                lx.eat(',');
                lx.eat(';');
                continue;
            }
            Some('}') | Some('>') => return lx.err(lx.pos, "unbalanced closing brace"),
            _ => {}
        }
        let offset = lx.pos;
        let name = lx.ident()?;
        let colon = lx.eat(':');
        match lx.peek() {
            Some(open @ ('{' | '<')) => {
                if stack.len() > MAX_DEPTH {
                    return lx.err(lx.pos, format!("messages nest deeper than {MAX_DEPTH}"));
                }
                lx.pos += 1;
                stack.push((
                    Vec::new(),
                    name,
                    offset,
                    Some(if open == '{' { '}' } else { '>' }),
                ));
                continue;
            }
            Some('[') if colon => {
                lx.pos += 1;
                let fields = &mut stack.last_mut().expect("open").0;
                if !lx.eat(']') {
                    loop {
                        let at = lx.pos;
                        let v = lx.scalar()?;
                        fields.push(Field {
                            name: name.clone(),
                            offset: at,
                            value: Val::Scalar(v),
                        });
                        if lx.eat(']') {
                            break;
                        }
                        if !lx.eat(',') {
                            return lx.err(lx.pos, "expected `,` or `]`");
                        }
                    }
                }
            }
            _ if colon => {
                let v = lx.scalar()?;
                stack.last_mut().expect("open").0.push(Field {
                    name,
                    offset,
                    value: Val::Scalar(v),
                });
            }
            _ => return lx.err(lx.pos, format!("expected `:` or `{{` after `{name}`")),
        }
        lx.eat(',');
        lx.eat(';');
    }
}

struct Reader<'a> {
    src: &'a str,
}

impl Reader<'_> {
    fn err<T>(&self, f: &Field, m: impl Into<String>) -> ParseResult<T> {
        Err(ParseError::at(self.src, f.offset, m))
    }

    fn msg<'f>(&self, f: &'f Field) -> ParseResult<&'f [Field]> {
        match &f.value {
            Val::Msg(m) => Ok(m),
            Val::Scalar(_) => self.err(
                f,
                format!("`{}` must be a message (`{} {{ … }}`)", f.name, f.name),
            ),
        }
    }

    fn string(&self, f: &Field) -> ParseResult<String> {
        match &f.value {
            Val::Scalar(Scalar::Str(b)) => String::from_utf8(b.clone())
                .or_else(|_| self.err(f, format!("`{}` is not UTF-8", f.name))),
            _ => self.err(f, format!("`{}` must be a quoted string", f.name)),
        }
    }

    fn bytes(&self, f: &Field) -> ParseResult<Vec<u8>> {
        match &f.value {
            Val::Scalar(Scalar::Str(b)) => Ok(b.clone()),
            _ => self.err(f, format!("`{}` must be a quoted string", f.name)),
        }
    }

    fn num<T: std::str::FromStr>(&self, f: &Field) -> ParseResult<T> {
        match &f.value {
            Val::Scalar(Scalar::Num(n)) => n.parse().or_else(|_| {
                self.err(
                    f,
                    format!(
                        "`{}`: `{n}` is out of range or not a number of the right kind",
                        f.name
                    ),
                )
            }),
            _ => self.err(f, format!("`{}` must be a number", f.name)),
        }
    }

    fn float(&self, f: &Field) -> ParseResult<f64> {
        match &f.value {
            Val::Scalar(Scalar::Ident(i)) | Val::Scalar(Scalar::Num(i)) => {
                let t = i.trim_end_matches(['f', 'F']);
                match t.to_ascii_lowercase().as_str() {
                    "inf" | "infinity" | "+inf" => Ok(f64::INFINITY),
                    "-inf" | "-infinity" => Ok(f64::NEG_INFINITY),
                    "nan" | "-nan" => Ok(f64::NAN),
                    other => other
                        .parse()
                        .or_else(|_| self.err(f, format!("`{}`: `{i}` is not a number", f.name))),
                }
            }
            _ => self.err(f, format!("`{}` must be a number", f.name)),
        }
    }

    fn boolean(&self, f: &Field) -> ParseResult<bool> {
        match &f.value {
            Val::Scalar(Scalar::Ident(i)) if i == "true" || i == "True" => Ok(true),
            Val::Scalar(Scalar::Ident(i)) if i == "false" || i == "False" => Ok(false),
            Val::Scalar(Scalar::Num(n)) if n == "1" || n == "0" => Ok(n == "1"),
            _ => self.err(f, format!("`{}` must be true or false", f.name)),
        }
    }

    fn data_type(&self, f: &Field) -> ParseResult<i32> {
        match &f.value {
            Val::Scalar(Scalar::Ident(i)) => DATA_TYPE_NAMES
                .iter()
                .find(|(n, _)| n == i)
                .map(|(_, c)| *c)
                .map_or_else(|| self.err(f, format!("unknown DataType `{i}`")), Ok),
            Val::Scalar(Scalar::Num(_)) => self.num(f),
            _ => self.err(
                f,
                format!("`{}` must be a DataType such as DT_FLOAT", f.name),
            ),
        }
    }

    fn graph(&self, fields: &[Field]) -> ParseResult<GraphDef> {
        let mut g = GraphDef::default();
        for f in fields {
            match f.name.as_str() {
                "node" => g.node.push(self.node(self.msg(f)?)?),
                "versions" | "library" | "version" => {}
                other => return self.err(f, format!("unknown GraphDef field `{other}`")),
            }
        }
        Ok(g)
    }

    fn node(&self, fields: &[Field]) -> ParseResult<NodeDef> {
        let mut n = NodeDef::default();
        for f in fields {
            match f.name.as_str() {
                "name" => n.name = self.string(f)?,
                "op" => n.op = self.string(f)?,
                "input" => n.input.push(self.string(f)?),
                "device" => n.device = self.string(f)?,
                "attr" => {
                    let mut key = None;
                    let mut value = None;
                    for e in self.msg(f)? {
                        match e.name.as_str() {
                            "key" => key = Some(self.string(e)?),
                            "value" => value = Some(self.attr(self.msg(e)?)?),
                            other => {
                                return self.err(e, format!("unknown map entry field `{other}`"))
                            }
                        }
                    }
                    let Some(key) = key else {
                        return self.err(f, "`attr` entry without a key");
                    };
                    n.attr.insert(key, value.unwrap_or_default());
                }
                "experimental_debug_info" | "experimental_type" => {}
                other => return self.err(f, format!("unknown NodeDef field `{other}`")),
            }
        }
        Ok(n)
    }

    fn attr(&self, fields: &[Field]) -> ParseResult<AttrValue> {
        use attr_value::Value as V;
        let mut value = None;
        for f in fields {
            value = Some(match f.name.as_str() {
                "list" => V::List(self.list(self.msg(f)?)?),
                "s" => V::S(self.bytes(f)?),
                "i" => V::I(self.num(f)?),
                "f" => V::F(self.float(f)? as f32),
                "b" => V::B(self.boolean(f)?),
                "type" => V::Type(self.data_type(f)?),
                "shape" => V::Shape(self.shape(self.msg(f)?)?),
                "tensor" => V::Tensor(self.tensor(self.msg(f)?)?),
                "placeholder" => V::Placeholder(self.string(f)?),
                "func" => continue,
                other => return self.err(f, format!("unknown AttrValue field `{other}`")),
            });
        }
        Ok(AttrValue { value })
    }

    fn list(&self, fields: &[Field]) -> ParseResult<ListValue> {
        let mut l = ListValue::default();
        for f in fields {
            match f.name.as_str() {
                "s" => l.s.push(self.bytes(f)?),
                "i" => l.i.push(self.num(f)?),
                "f" => l.f.push(self.float(f)? as f32),
                "b" => l.b.push(self.boolean(f)?),
                "type" => l.r#type.push(self.data_type(f)?),
                "shape" | "tensor" | "func" => {}
                other => return self.err(f, format!("unknown ListValue field `{other}`")),
            }
        }
        Ok(l)
    }

    fn shape(&self, fields: &[Field]) -> ParseResult<TensorShapeProto> {
        let mut s = TensorShapeProto::default();
        for f in fields {
            match f.name.as_str() {
                "dim" => {
                    let mut d = Dim::default();
                    for e in self.msg(f)? {
                        match e.name.as_str() {
                            "size" => d.size = self.num(e)?,
                            "name" => d.name = self.string(e)?,
                            other => return self.err(e, format!("unknown Dim field `{other}`")),
                        }
                    }
                    s.dim.push(d);
                }
                "unknown_rank" => s.unknown_rank = self.boolean(f)?,
                other => return self.err(f, format!("unknown TensorShapeProto field `{other}`")),
            }
        }
        Ok(s)
    }

    fn tensor(&self, fields: &[Field]) -> ParseResult<TensorProto> {
        let mut t = TensorProto::default();
        for f in fields {
            match f.name.as_str() {
                "dtype" => t.dtype = self.data_type(f)?,
                "tensor_shape" => t.tensor_shape = Some(self.shape(self.msg(f)?)?),
                "version_number" => {}
                "tensor_content" => t.tensor_content = self.bytes(f)?,
                "float_val" => t.float_val.push(self.float(f)? as f32),
                "double_val" => t.double_val.push(self.float(f)?),
                "int_val" => t.int_val.push(self.num(f)?),
                "int64_val" => t.int64_val.push(self.num(f)?),
                "bool_val" => t.bool_val.push(self.boolean(f)?),
                other => return self.err(f, format!("unsupported TensorProto field `{other}`")),
            }
        }
        Ok(t)
    }
}

/// Parses a text-format `GraphDef`.
pub fn parse(src: &str) -> ParseResult<GraphDef> {
    let tree = parse_tree(src)?;
    Reader { src }.graph(&tree)
}
