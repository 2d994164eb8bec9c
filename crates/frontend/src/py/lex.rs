//! Tokens of the Python subset, with byte spans, including the `Newline`,
//! `Indent` and `Dedent` tokens of Python's layout rule.

use kiln_ir::{ParseError, ParseResult};

/// A token kind.
#[derive(Clone, Debug, PartialEq)]
pub enum Tok<'a> {
    /// An identifier or keyword (a slice of the source: no allocation per
    /// name).
    Name(&'a str),
    /// An integer literal (Python ints are unbounded; range is checked later).
    Int(u128),
    /// A float literal.
    Float(f64),
    /// A string literal (only docstrings are accepted, and ignored).
    Str,
    /// An operator or delimiter, such as `**=` or `(`.
    Op(&'static str),
    /// End of a logical line.
    Newline,
    /// The indentation grew.
    Indent,
    /// The indentation shrank by one level.
    Dedent,
    /// End of input.
    Eof,
}

/// A token and where it starts and ends (byte offsets).
#[derive(Clone, Debug, PartialEq)]
pub struct Token<'a> {
    /// What it is.
    pub tok: Tok<'a>,
    /// Byte offset of its first character.
    pub start: usize,
    /// Byte offset just past it.
    pub end: usize,
}

/// Operators, longest first so the lexer takes the longest match.
const OPS: &[&str] = &[
    "**=", "//=", "<<=", ">>=", "->", "**", "//", "<<", ">>", "<=", ">=", "==", "!=", "+=", "-=",
    "*=", "/=", "%=", "&=", "|=", "^=", "+", "-", "*", "/", "%", "&", "|", "^", "~", "<", ">", "(",
    ")", "[", "]", ",", ":", "=", ".", ";", "@",
];

/// The operator that byte `b` is on its own, when no longer operator starts
/// with it (most operators in expressions: parentheses, commas).
fn lone_op(b: u8) -> Option<&'static str> {
    Some(match b {
        b'(' => "(",
        b')' => ")",
        b'[' => "[",
        b']' => "]",
        b',' => ",",
        b':' => ":",
        b'.' => ".",
        b';' => ";",
        b'~' => "~",
        b'@' => "@",
        _ => return None,
    })
}

struct Lexer<'a> {
    src: &'a str,
    pos: usize,
    tokens: Vec<Token<'a>>,
    indents: Vec<usize>,
    nesting: usize,
}

/// Splits `src` into tokens.
pub fn lex(src: &str) -> ParseResult<Vec<Token<'_>>> {
    let mut lx = Lexer {
        src,
        pos: 0,
        // Fewer tokens than bytes, and the layout's and the end's (a GP
        // expression: about one token for every 1.3 bytes).
        tokens: Vec::with_capacity(src.len().min(1 << 12) + 2),
        indents: vec![0],
        nesting: 0,
    };
    let mut at_line_start = true;
    while lx.pos < src.len() {
        if at_line_start && lx.nesting == 0 {
            at_line_start = false;
            lx.indentation()?;
            continue;
        }
        let c = lx.peek();
        match c {
            '\n' => {
                lx.pos += 1;
                if lx.nesting == 0 {
                    lx.newline();
                    at_line_start = true;
                }
            }
            ' ' | '\t' | '\r' | '\x0c' => lx.pos += 1,
            '#' => lx.skip_comment(),
            '\\' if lx.src[lx.pos + 1..].starts_with('\n') => lx.pos += 2,
            '"' | '\'' => lx.string()?,
            '0'..='9' => lx.number()?,
            '.' if lx.src[lx.pos + 1..].starts_with(|d: char| d.is_ascii_digit()) => lx.number()?,
            c if c.is_alphabetic() || c == '_' => lx.name(),
            _ => lx.op()?,
        }
    }
    lx.newline();
    while lx.indents.len() > 1 {
        lx.indents.pop();
        lx.push(Tok::Dedent, src.len(), src.len());
    }
    lx.push(Tok::Eof, src.len(), src.len());
    Ok(lx.tokens)
}

impl<'a> Lexer<'a> {
    fn peek(&self) -> char {
        // ASCII (all of a GP expression) without decoding.
        match self.src.as_bytes()[self.pos] {
            b if b.is_ascii() => char::from(b),
            _ => self.src[self.pos..]
                .chars()
                .next()
                .expect("pos is before the end"),
        }
    }

    fn push(&mut self, tok: Tok<'a>, start: usize, end: usize) {
        self.tokens.push(Token { tok, start, end });
    }

    fn err<T>(&self, at: usize, message: impl Into<String>) -> ParseResult<T> {
        Err(ParseError::at(self.src, at, message))
    }

    /// Ends a logical line, unless it was empty.
    fn newline(&mut self) {
        let last = self.tokens.last().map(|t| &t.tok);
        if !matches!(last, None | Some(Tok::Newline | Tok::Indent | Tok::Dedent)) {
            self.push(Tok::Newline, self.pos, self.pos);
        }
    }

    fn skip_comment(&mut self) {
        self.pos = self.src[self.pos..]
            .find('\n')
            .map_or(self.src.len(), |i| self.pos + i);
    }

    /// Measures a line's indentation and emits `Indent`/`Dedent`; blank and
    /// comment-only lines do not count.
    fn indentation(&mut self) -> ParseResult<()> {
        let start = self.pos;
        let mut width = 0;
        for c in self.src[start..].chars() {
            match c {
                ' ' => width += 1,
                '\t' => width = (width / 8 + 1) * 8,
                '\x0c' => {}
                _ => break,
            }
            self.pos += c.len_utf8();
        }
        let rest = &self.src[self.pos..];
        if rest.is_empty() || rest.starts_with(['\n', '#', '\r']) {
            return Ok(());
        }
        // The first line's indentation is the base, as `textwrap.dedent` or
        // `eval(" x + 1")` would have it: `-e '  x + 1'` and code pasted
        // from inside a block parse as written.
        if self.tokens.is_empty() {
            self.indents = vec![width];
        }
        let current = *self.indents.last().expect("the indent stack has its base");
        if width > current {
            self.indents.push(width);
            self.push(Tok::Indent, start, self.pos);
        }
        while self.indents.len() > 1
            && width < *self.indents.last().expect("the indent stack has its base")
        {
            self.indents.pop();
            self.push(Tok::Dedent, self.pos, self.pos);
        }
        if width != *self.indents.last().expect("the indent stack has its base") {
            return self.err(
                self.pos,
                "unindent does not match any outer indentation level",
            );
        }
        Ok(())
    }

    fn name(&mut self) {
        let start = self.pos;
        // ASCII letters, digits and `_` byte by byte; from the first other
        // byte on, by characters (a non-ASCII letter continues a name).
        let ascii = self.src.as_bytes()[start..]
            .iter()
            .position(|&b| !(b.is_ascii_alphanumeric() || b == b'_'))
            .unwrap_or(self.src.len() - start);
        let rest = start + ascii;
        let len = ascii
            + self.src[rest..]
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(self.src.len() - rest);
        self.pos += len;
        self.push(Tok::Name(&self.src[start..self.pos]), start, self.pos);
    }

    fn number(&mut self) -> ParseResult<()> {
        let start = self.pos;
        let bytes = self.src.as_bytes();
        let radix = match (
            bytes[start],
            bytes.get(start + 1).map(u8::to_ascii_lowercase),
        ) {
            (b'0', Some(b'x')) => 16,
            (b'0', Some(b'o')) => 8,
            (b'0', Some(b'b')) => 2,
            _ => 10,
        };
        if radix != 10 {
            self.pos += 2;
            let len = self.src[self.pos..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(self.src.len() - self.pos);
            let digits = self.src[self.pos..self.pos + len].replace('_', "");
            self.pos += len;
            return match u128::from_str_radix(&digits, radix) {
                Ok(v) => {
                    self.push(Tok::Int(v), start, self.pos);
                    Ok(())
                }
                Err(_) => self.err(
                    start,
                    format!("invalid integer literal `{}`", &self.src[start..self.pos]),
                ),
            };
        }
        let mut is_float = false;
        let mut prev = ' ';
        while let Some(c) = self.src[self.pos..].chars().next() {
            let ok = c.is_ascii_digit()
                || c == '_'
                || c == '.'
                || c == 'e'
                || c == 'E'
                || ((c == '+' || c == '-') && matches!(prev, 'e' | 'E'));
            if !ok {
                break;
            }
            is_float |= matches!(c, '.' | 'e' | 'E');
            prev = c;
            self.pos += 1;
        }
        let digits = &self.src[start..self.pos];
        let text: std::borrow::Cow<'_, str> = if digits.contains('_') {
            digits.replace('_', "").into()
        } else {
            digits.into()
        };
        let bad = || format!("invalid number literal `{}`", &self.src[start..self.pos]);
        if let Some(c) = self.src[self.pos..]
            .chars()
            .next()
            .filter(|c| c.is_alphanumeric())
        {
            // Quote through the offending character, which may be several bytes.
            let end = self.pos + c.len_utf8();
            return self.err(
                start,
                format!("invalid number literal `{}`", &self.src[start..end]),
            );
        }
        let tok = if is_float {
            Tok::Float(
                text.parse()
                    .map_err(|_| ParseError::at(self.src, start, bad()))?,
            )
        } else {
            Tok::Int(text.parse().map_err(|_| {
                ParseError::at(
                    self.src,
                    start,
                    format!("integer literal `{text}` is too large"),
                )
            })?)
        };
        self.push(tok, start, self.pos);
        Ok(())
    }

    fn string(&mut self) -> ParseResult<()> {
        let start = self.pos;
        let quote = self.peek();
        let triple: String = std::iter::repeat_n(quote, 3).collect();
        let (delim, single_line) = if self.src[start..].starts_with(&triple) {
            (triple.as_str(), false)
        } else {
            (&triple[..1], true)
        };
        let body_start = start + delim.len();
        let mut i = body_start;
        while i < self.src.len() {
            let rest = &self.src[i..];
            if let Some(escaped) = rest.strip_prefix('\\') {
                i += 1 + escaped.chars().next().map_or(0, char::len_utf8);
            } else if rest.starts_with(delim) {
                self.pos = i + delim.len();
                self.push(Tok::Str, start, self.pos);
                return Ok(());
            } else if single_line && rest.starts_with('\n') {
                break;
            } else {
                i += rest.chars().next().map_or(1, char::len_utf8);
            }
        }
        self.err(start, "unterminated string")
    }

    fn op(&mut self) -> ParseResult<()> {
        let start = self.pos;
        // A lone operator at once; else the longest match (`OPS`' order),
        // bytes compared in place, the first before the rest (a scan of
        // every operator's bytes was half of lexing a GP expression).
        let rest = &self.src.as_bytes()[start..];
        let matches = |op: &&&str| {
            let op = op.as_bytes();
            op[0] == rest[0] && op.len() <= rest.len() && op[1..] == rest[1..op.len()]
        };
        let Some(op) = lone_op(rest[0]).or_else(|| OPS.iter().find(matches).copied()) else {
            return self.err(start, format!("unexpected character `{}`", self.peek()));
        };
        match op {
            "(" | "[" => self.nesting += 1,
            ")" | "]" => self.nesting = self.nesting.saturating_sub(1),
            _ => {}
        }
        self.pos += op.len();
        self.push(Tok::Op(op), start, self.pos);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lone operator is an operator, and starts no longer one.
    #[test]
    fn lone_operators_start_no_longer_operator() {
        for b in 0..=u8::MAX {
            if let Some(op) = lone_op(b) {
                assert!(OPS.contains(&op), "{op}");
                assert!(
                    OPS.iter().all(|o| o.len() == 1 || o.as_bytes()[0] != b),
                    "{op} starts a longer operator"
                );
            }
        }
    }

    fn kinds(src: &str) -> Vec<Tok<'_>> {
        lex(src)
            .expect("lexes")
            .into_iter()
            .map(|t| t.tok)
            .collect()
    }

    #[test]
    fn layout_and_literals() {
        let toks = kinds("def f(x):\n    a = x ** 2  # c\n\n    return (a +\n  1.5e3)\n");
        use Tok::*;
        let n = |s: &'static str| Name(s);
        assert_eq!(
            toks,
            vec![
                n("def"),
                n("f"),
                Op("("),
                n("x"),
                Op(")"),
                Op(":"),
                Newline,
                Indent,
                n("a"),
                Op("="),
                n("x"),
                Op("**"),
                Int(2),
                Newline,
                n("return"),
                Op("("),
                n("a"),
                Op("+"),
                Float(1500.0),
                Op(")"),
                Newline,
                Dedent,
                Eof
            ]
        );
    }

    #[test]
    fn the_first_line_sets_the_base_indentation() {
        let toks = |src: &'static str| -> Vec<Tok<'static>> {
            lex(src).unwrap().into_iter().map(|t| t.tok).collect()
        };
        assert_eq!(toks("  x + 1"), toks("x + 1"));
        assert_eq!(
            toks("\n  # note\n    def f(x):\n        return x\n"),
            toks("def f(x):\n    return x\n")
        );
        assert_eq!(
            lex("  a\nb").unwrap_err().to_string(),
            "2:1: unindent does not match any outer indentation level"
        );
    }

    #[test]
    fn bad_tokens_are_located() {
        assert_eq!(
            lex("a = $").unwrap_err().to_string(),
            "1:5: unexpected character `$`"
        );
        assert_eq!(
            lex("x = 'abc").unwrap_err().to_string(),
            "1:5: unterminated string"
        );
        assert_eq!(
            lex("1.2.3").unwrap_err().to_string(),
            "1:1: invalid number literal `1.2.3`"
        );
        assert_eq!(
            lex("12abc").unwrap_err().to_string(),
            "1:1: invalid number literal `12a`"
        );
        assert_eq!(
            lex("if x:\n    a\n  b\n").unwrap_err().to_string(),
            "3:3: unindent does not match any outer indentation level"
        );
    }
}
