//! Located errors for text inputs, and the map from graph values back to the
//! source text they came from.

use crate::entities::Value;
use cranelift_entity::SecondaryMap;

/// A 1-based line and column (columns count characters).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Loc {
    /// Line, from 1.
    pub line: u32,
    /// Column, from 1.
    pub col: u32,
}

impl Loc {
    /// The location of byte offset `offset` in `source`.
    pub fn of_offset(source: &str, offset: usize) -> Loc {
        let offset = offset.min(source.len());
        let before = source.get(..offset).unwrap_or(source);
        // Bytes, not a `str` pattern search: a front end locates every node
        // it makes, and this loop vectorizes.
        let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let col = before[line_start..].chars().count() + 1;
        Loc {
            line: line as u32,
            col: col as u32,
        }
    }
}

/// The line starts of a source text, to locate many offsets in it: a line
/// by binary search, a column by counting characters from the line's start
/// (bytes, where the text is ASCII). [`Loc::of_offset`] gives the same
/// locations, scanning from the start for each.
#[derive(Clone, Debug)]
pub struct Lines<'a> {
    source: &'a str,
    starts: Vec<usize>,
    ascii: bool,
}

impl<'a> Lines<'a> {
    /// The line starts of `source`.
    pub fn new(source: &'a str) -> Lines<'a> {
        let starts = std::iter::once(0)
            .chain(
                source
                    .bytes()
                    .enumerate()
                    .filter(|&(_, b)| b == b'\n')
                    .map(|(i, _)| i + 1),
            )
            .collect();
        Lines {
            source,
            starts,
            ascii: source.is_ascii(),
        }
    }

    /// The location of byte offset `offset`, as [`Loc::of_offset`] gives it.
    pub fn loc(&self, offset: usize) -> Loc {
        let offset = offset.min(self.source.len());
        // The last line starting at or before `offset`.
        let line = self.starts.partition_point(|&s| s <= offset) - 1;
        let start = self.starts[line];
        let col = if self.ascii {
            offset - start
        } else {
            match self.source.get(start..offset) {
                Some(before) => before.chars().count(),
                // Inside a character: as `of_offset` does.
                None => return Loc::of_offset(self.source, offset),
            }
        };
        Loc {
            line: line as u32 + 1,
            col: col as u32 + 1,
        }
    }
}

/// An error in source text, at a location.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}:{}: {message}", loc.line, loc.col)]
pub struct ParseError {
    /// Where the problem is.
    pub loc: Loc,
    /// What is wrong.
    pub message: String,
}

/// Result of parsing source text.
pub type ParseResult<T> = Result<T, ParseError>;

impl ParseError {
    /// An error at byte offset `offset` of `source`.
    pub fn at(source: &str, offset: usize, message: impl Into<String>) -> ParseError {
        ParseError {
            loc: Loc::of_offset(source, offset),
            message: message.into(),
        }
    }

    /// The error as a compiler prints it: `file:line:col: error: message`, then the
    /// offending line and a caret under the column.
    pub fn render(&self, file: &str, source: &str) -> String {
        render_located(file, source, self.loc, &self.message)
    }
}

/// Renders `message` at `loc` of `source` as `file:line:col: error: message`
/// followed by the line and a caret.
pub fn render_located(file: &str, source: &str, loc: Loc, message: &str) -> String {
    let mut out = format!("{file}:{}:{}: error: {message}", loc.line, loc.col);
    if let Some(line) = source.lines().nth(loc.line.saturating_sub(1) as usize) {
        // Long lines (a 10 MB one-liner) are shown around the column only.
        let chars: Vec<char> = line.chars().collect();
        let col = (loc.col as usize).saturating_sub(1).min(chars.len());
        let start = col.saturating_sub(60);
        let end = (col + 60).min(chars.len());
        let shown: String = chars[start..end]
            .iter()
            .map(|&c| if c == '\t' { ' ' } else { c })
            .collect();
        out.push_str(&format!("\n  {shown}\n  {}^", " ".repeat(col - start)));
    }
    out
}

/// Where each graph value came from in the source text, when known.
#[derive(Clone, Debug, Default)]
pub struct SourceMap {
    locs: SecondaryMap<Value, Option<Loc>>,
}

impl SourceMap {
    /// An empty map with room for the locations of `values` values.
    pub fn with_capacity(values: usize) -> SourceMap {
        SourceMap {
            locs: SecondaryMap::with_capacity(values),
        }
    }

    /// Records that `value` came from `loc`.
    pub fn set(&mut self, value: Value, loc: Loc) {
        self.locs[value] = Some(loc);
    }

    /// The location `value` came from.
    pub fn get(&self, value: Value) -> Option<Loc> {
        self.locs.get(value).copied().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Lines::loc` gives `Loc::of_offset`'s location for every offset,
    /// in ASCII text and in text with multi-byte characters and blank lines.
    #[test]
    fn lines_locate_as_of_offset_does() {
        for source in ["", "x + 1", "a = 1\n\nb = a * 2\n", "é = 1\n  ψ + é\nz\n"] {
            let lines = Lines::new(source);
            for offset in 0..=source.len() + 2 {
                assert_eq!(
                    lines.loc(offset),
                    Loc::of_offset(source, offset),
                    "{source:?} at {offset}"
                );
            }
        }
    }

    #[test]
    fn renders_the_line_and_a_caret() {
        let src = "a = 1\nb = a +* 2\n";
        let err = ParseError::at(src, 12, "expected an expression");
        assert_eq!(
            err.render("f.py", src),
            "f.py:2:7: error: expected an expression\n  b = a +* 2\n        ^"
        );
    }
}
