//! A small JSON reader for model files: values keep where they start in
//! the source (for located errors) and numbers keep their text, so a
//! `float` is read straight from its digits (a correctly rounded `f32`,
//! never a `f64` rounded again). Nesting deeper than [`MAX_DEPTH`] is an
//! error, not a deep recursion.

use kiln_ir::{ParseError, ParseResult};

/// How deeply arrays and objects may nest.
pub const MAX_DEPTH: usize = 64;

/// A JSON value and the byte offset where it starts.
#[derive(Clone, Debug)]
pub struct Json<'a> {
    pub at: usize,
    pub value: Value<'a>,
}

#[derive(Clone, Debug)]
pub enum Value<'a> {
    Null,
    Bool(bool),
    /// A number's text, as written.
    Number(&'a str),
    String(String),
    Array(Vec<Json<'a>>),
    Object(Vec<(String, Json<'a>)>),
}

/// Reads one JSON document (and nothing after it but whitespace).
pub fn parse(src: &str) -> ParseResult<Json<'_>> {
    let mut p = Parser { src, pos: 0 };
    let value = p.value(0)?;
    p.skip_ws();
    if p.pos != src.len() {
        return Err(p.err("text after the JSON document"));
    }
    Ok(value)
}

struct Parser<'a> {
    src: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn err(&self, msg: impl Into<String>) -> ParseError {
        let msg = msg.into();
        if self.pos >= self.src.len() && !msg.starts_with("the JSON ends") {
            return ParseError::at(self.src, self.pos, format!("the JSON ends early: {msg}"));
        }
        ParseError::at(self.src, self.pos, msg)
    }

    fn skip_ws(&mut self) {
        let rest = &self.src[self.pos..];
        self.pos += rest.len() - rest.trim_start_matches([' ', '\t', '\n', '\r']).len();
    }

    fn peek(&self) -> Option<u8> {
        self.src.as_bytes().get(self.pos).copied()
    }

    fn eat(&mut self, byte: u8) -> bool {
        self.skip_ws();
        if self.peek() == Some(byte) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> ParseResult<Json<'a>> {
        self.skip_ws();
        let at = self.pos;
        let value = match self.peek() {
            None => return Err(self.err("the JSON ends where a value should be")),
            Some(b'{' | b'[') if depth >= MAX_DEPTH => {
                return Err(self.err(format!("JSON nested deeper than {MAX_DEPTH} levels")))
            }
            Some(b'{') => {
                self.pos += 1;
                let mut fields = Vec::new();
                if !self.eat(b'}') {
                    loop {
                        self.skip_ws();
                        if self.peek() != Some(b'"') {
                            return Err(self.err("expected a field name"));
                        }
                        let key = self.string()?;
                        if !self.eat(b':') {
                            return Err(self.err("expected `:` after a field name"));
                        }
                        fields.push((key, self.value(depth + 1)?));
                        if self.eat(b'}') {
                            break;
                        }
                        if !self.eat(b',') {
                            return Err(self.err("expected `,` or `}` in an object"));
                        }
                    }
                }
                Value::Object(fields)
            }
            Some(b'[') => {
                self.pos += 1;
                let mut items = Vec::new();
                if !self.eat(b']') {
                    loop {
                        items.push(self.value(depth + 1)?);
                        if self.eat(b']') {
                            break;
                        }
                        if !self.eat(b',') {
                            return Err(self.err("expected `,` or `]` in an array"));
                        }
                    }
                }
                Value::Array(items)
            }
            Some(b'"') => Value::String(self.string()?),
            Some(b't') if self.src[at..].starts_with("true") => {
                self.pos += 4;
                Value::Bool(true)
            }
            Some(b'f') if self.src[at..].starts_with("false") => {
                self.pos += 5;
                Value::Bool(false)
            }
            Some(b'n') if self.src[at..].starts_with("null") => {
                self.pos += 4;
                Value::Null
            }
            Some(b'-' | b'0'..=b'9') => {
                let rest = &self.src[at..];
                let len = rest
                    .find(|c: char| !matches!(c, '0'..='9' | '-' | '+' | '.' | 'e' | 'E'))
                    .unwrap_or(rest.len());
                self.pos += len;
                Value::Number(&rest[..len])
            }
            Some(_) => return Err(self.err("expected a JSON value")),
        };
        Ok(Json { at, value })
    }

    /// A string from its opening quote.
    fn string(&mut self) -> ParseResult<String> {
        self.pos += 1;
        let mut out = String::new();
        loop {
            let rest = &self.src[self.pos..];
            let Some(c) = rest.chars().next() else {
                return Err(self.err("the JSON ends inside a string"));
            };
            self.pos += c.len_utf8();
            match c {
                '"' => return Ok(out),
                '\\' => {
                    let esc = self
                        .peek()
                        .ok_or_else(|| self.err("the JSON ends inside a string"))?;
                    self.pos += 1;
                    out.push(match esc {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hex = self.src.get(self.pos..self.pos + 4);
                            let code = hex.and_then(|h| u32::from_str_radix(h, 16).ok());
                            let code = code.ok_or_else(|| self.err("a bad `\\u` escape"))?;
                            self.pos += 4;
                            // A surrogate half on its own reads as U+FFFD.
                            char::from_u32(code).unwrap_or('\u{fffd}')
                        }
                        _ => return Err(self.err("a bad escape in a string")),
                    });
                }
                c => out.push(c),
            }
        }
    }
}

impl<'a> Json<'a> {
    /// The field `key` of an object.
    pub fn get(&self, key: &str) -> Option<&Json<'a>> {
        match &self.value {
            Value::Object(fields) => fields.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The field `key`, which must be there.
    pub fn field(&self, src: &str, key: &str) -> ParseResult<&Json<'a>> {
        self.get(key)
            .ok_or_else(|| ParseError::at(src, self.at, format!("the field `{key}` is missing")))
    }

    /// The items of an array.
    pub fn array(&self, src: &str, what: &str) -> ParseResult<&[Json<'a>]> {
        match &self.value {
            Value::Array(items) => Ok(items),
            _ => Err(ParseError::at(
                src,
                self.at,
                format!("`{what}` is not an array"),
            )),
        }
    }

    /// A string, or (as XGBoost writes its parameters) a number's text;
    /// `true` and `false` read as `1` and `0`.
    pub fn text(&self, src: &str, what: &str) -> ParseResult<&str> {
        match &self.value {
            Value::String(s) => Ok(s),
            Value::Number(n) => Ok(n),
            Value::Bool(b) => Ok(if *b { "1" } else { "0" }),
            _ => Err(ParseError::at(
                src,
                self.at,
                format!("`{what}` is not a string"),
            )),
        }
    }

    /// A number (or a string holding one), parsed as `T`.
    pub fn number<T: std::str::FromStr>(&self, src: &str, what: &str) -> ParseResult<T> {
        let text = self.text(src, what)?;
        text.trim().parse().map_err(|_| {
            ParseError::at(src, self.at, format!("`{what}` is not a number: {text:?}"))
        })
    }

    /// An array of numbers, each parsed as `T`.
    pub fn numbers<T: std::str::FromStr>(&self, src: &str, what: &str) -> ParseResult<Vec<T>> {
        self.array(src, what)?
            .iter()
            .map(|item| item.number(src, what))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_values_and_keeps_number_text() {
        let src = r#" {"a": [1, -2.5e-3, true, null], "b": "x\"\u0041", "c": {}} "#;
        let j = parse(src).unwrap();
        let a = j.get("a").unwrap().array(src, "a").unwrap();
        assert!(matches!(a[1].value, Value::Number("-2.5e-3")));
        assert_eq!(a[0].number::<u32>(src, "a").unwrap(), 1);
        assert!(matches!(a[2].value, Value::Bool(true)));
        assert!(matches!(a[3].value, Value::Null));
        assert_eq!(j.get("b").unwrap().text(src, "b").unwrap(), "x\"A");
        assert_eq!(a[1].at, src.find("-2.5").unwrap());
    }

    #[test]
    fn bad_json_is_a_located_error() {
        for (src, says) in [
            ("{\"a\" 1}", "expected `:`"),
            ("[1, 2", "ends early: expected `,` or `]`"),
            ("[1, ", "ends where a value"),
            ("[1 2]", "expected `,` or `]`"),
            ("\"abc", "ends inside a string"),
            ("{} x", "text after"),
            ("@", "expected a JSON value"),
            ("\"\\q\"", "bad escape"),
        ] {
            let e = parse(src).unwrap_err().to_string();
            assert!(e.contains(says), "{src}: {e}");
        }
        let deep = "[".repeat(100_000);
        assert!(parse(&deep)
            .unwrap_err()
            .to_string()
            .contains("nested deeper"));
    }
}
