//! Parsing the `.kiln` text format.
//!
//! Line by line, without recursion, so no input can exhaust the stack. The parser
//! resolves value names and reports uses before definitions with their location;
//! everything else about validity (types, arity beyond the syntax, the signature)
//! is the verifier's job, so `kiln check` can report it all at once.

use crate::diag::{ParseError, ParseResult, SourceMap};
use crate::entities::Value;
use crate::graph::{Graph, NodeData};
use crate::op::{BinaryOp, CmpOp, Conv2d, Op, Pool2d, PoolKind, ReduceOp, UnaryOp};
use crate::scalar::parse_scalar;
use crate::types::{DType, Dim, TensorType, Type};
use std::collections::HashMap;

#[derive(Clone, Debug, PartialEq)]
enum Tok<'a> {
    Word(&'a str),
    Str(String),
    Punct(char),
}

/// One line's tokens, with their byte offsets into the whole source.
struct Line<'a> {
    src: &'a str,
    toks: Vec<(usize, Tok<'a>)>,
    pos: usize,
    end: usize,
}

const PUNCT: &[char] = &[':', '=', ',', '[', ']'];

fn lex_line<'a>(src: &'a str, start: usize, text: &'a str) -> ParseResult<Vec<(usize, Tok<'a>)>> {
    let mut toks = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some(&(i, c)) = chars.peek() {
        let at = start + i;
        if c == '#' {
            break;
        } else if c.is_whitespace() {
            chars.next();
        } else if PUNCT.contains(&c) {
            chars.next();
            toks.push((at, Tok::Punct(c)));
        } else if c == '"' {
            chars.next();
            toks.push((at, Tok::Str(lex_string(src, at, &mut chars)?)));
        } else {
            let mut end = text.len();
            while let Some(&(j, d)) = chars.peek() {
                if d.is_whitespace() || PUNCT.contains(&d) || d == '"' || d == '#' {
                    end = j;
                    break;
                }
                chars.next();
            }
            toks.push((at, Tok::Word(&text[i..end])));
        }
    }
    Ok(toks)
}

/// Reads the rest of a double-quoted string with Rust's escapes.
fn lex_string(
    src: &str,
    at: usize,
    chars: &mut impl Iterator<Item = (usize, char)>,
) -> ParseResult<String> {
    let mut out = String::new();
    loop {
        match chars.next() {
            None => return Err(ParseError::at(src, at, "unterminated string")),
            Some((_, '"')) => return Ok(out),
            Some((_, '\\')) => {
                let escaped = match chars.next().map(|(_, c)| c) {
                    Some('n') => '\n',
                    Some('t') => '\t',
                    Some('r') => '\r',
                    Some('0') => '\0',
                    Some(c @ ('\\' | '"' | '\'')) => c,
                    Some('u') => lex_unicode_escape(src, at, chars)?,
                    _ => return Err(ParseError::at(src, at, "unknown escape in string")),
                };
                out.push(escaped);
            }
            Some((_, c)) => out.push(c),
        }
    }
}

fn lex_unicode_escape(
    src: &str,
    at: usize,
    chars: &mut impl Iterator<Item = (usize, char)>,
) -> ParseResult<char> {
    let bad = || ParseError::at(src, at, "bad \\u{…} escape in string");
    if chars.next().map(|(_, c)| c) != Some('{') {
        return Err(bad());
    }
    let mut hex = String::new();
    for (_, c) in chars.by_ref() {
        if c == '}' {
            return u32::from_str_radix(&hex, 16)
                .ok()
                .and_then(char::from_u32)
                .ok_or_else(bad);
        }
        if hex.len() >= 6 {
            break;
        }
        hex.push(c);
    }
    Err(bad())
}

impl<'a> Line<'a> {
    fn err(&self, at: usize, message: impl Into<String>) -> ParseError {
        ParseError::at(self.src, at, message)
    }

    fn next(&mut self, what: &str) -> ParseResult<(usize, Tok<'a>)> {
        let tok = self
            .toks
            .get(self.pos)
            .cloned()
            .ok_or_else(|| self.err(self.end, format!("expected {what}, found end of line")))?;
        self.pos += 1;
        Ok(tok)
    }

    fn expect_punct(&mut self, p: char) -> ParseResult<()> {
        match self.next(&format!("`{p}`"))? {
            (_, Tok::Punct(q)) if q == p => Ok(()),
            (at, _) => Err(self.err(at, format!("expected `{p}`"))),
        }
    }

    fn eat_punct(&mut self, p: char) -> bool {
        if self.toks.get(self.pos).map(|t| &t.1) == Some(&Tok::Punct(p)) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn word(&mut self, what: &str) -> ParseResult<(usize, &'a str)> {
        match self.next(what)? {
            (at, Tok::Word(w)) => Ok((at, w)),
            (at, _) => Err(self.err(at, format!("expected {what}"))),
        }
    }

    fn string(&mut self, what: &str) -> ParseResult<String> {
        match self.next(what)? {
            (_, Tok::Str(s)) => Ok(s),
            (at, _) => Err(self.err(at, format!("expected {what} (a double-quoted string)"))),
        }
    }

    fn finish(&self) -> ParseResult<()> {
        match self.toks.get(self.pos) {
            None => Ok(()),
            Some((at, _)) => Err(self.err(*at, "unexpected text after the end of the line's item")),
        }
    }

    fn ty(&mut self) -> ParseResult<Type> {
        let (at, name) = self.word("a type such as `f64` or `f64[n]`")?;
        let mut dims = Vec::new();
        if self.eat_punct('[') {
            loop {
                let (dim_at, dim) = self.word("a dimension (an integer or a name)")?;
                dims.push(
                    parse_dim(dim)
                        .ok_or_else(|| self.err(dim_at, format!("`{dim}` is not a dimension")))?,
                );
                if !self.eat_punct(',') {
                    break;
                }
            }
            self.expect_punct(']')?;
        }
        if name == "sel" {
            return match <[Dim; 1]>::try_from(dims) {
                Ok([of]) => Ok(Type::Selection(of)),
                Err(_) => Err(self.err(at, "a selection type has exactly one dimension: `sel[n]`")),
            };
        }
        let dtype =
            DType::from_name(name).ok_or_else(|| self.err(at, format!("unknown type `{name}`")))?;
        Ok(Type::Tensor(TensorType { dtype, shape: dims }))
    }
}

fn parse_dim(text: &str) -> Option<Dim> {
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().ok().map(Dim::Fixed);
    }
    let mut chars = text.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    (first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .then(|| Dim::Sym(text.into()))
}

fn parse_value_name(text: &str) -> Option<u32> {
    let digits = text.strip_prefix('v')?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())?
}

/// An op mnemonic other than `input`, `const` and `cast`, which need more than
/// their arguments.
fn op_from_mnemonic(name: &str) -> Option<Op> {
    UnaryOp::from_name(name)
        .map(Op::Unary)
        .or_else(|| BinaryOp::from_name(name).map(Op::Binary))
        .or_else(|| CmpOp::from_name(name).map(Op::Compare))
        .or_else(|| ReduceOp::from_name(name).map(Op::Reduce))
        .or(match name {
            "select" => Some(Op::Select),
            "filter" => Some(Op::Filter),
            "matmul" => Some(Op::MatMul),
            "conv2d" => Some(Op::Conv2d(Conv2d::default())),
            "max_pool2d" | "avg_pool2d" => Some(Op::Pool2d(Pool2d {
                kind: if name == "max_pool2d" {
                    PoolKind::Max
                } else {
                    PoolKind::Avg
                },
                kernel: [1, 1],
                stride: [1, 1],
                padding: [0; 4],
                dilation: [1, 1],
                ceil_mode: false,
                count_include_pad: false,
            })),
            _ => None,
        })
}

/// A `trees` op's attribute, as `print` writes it: `features F init [..]`
/// and `tree OUTPUT [NODE, ..] [LEAF, ..]` per tree. The structure is the
/// verifier's to check.
fn trees(line: &mut Line<'_>, dtype: DType) -> ParseResult<crate::trees::TreeEnsemble> {
    use crate::trees::{Tree, TreeEnsemble};
    keyword(line, "features")?;
    let n_features = number(line, "a feature count")?;
    keyword(line, "init")?;
    let init = floats(line)?;
    let mut trees = Vec::new();
    while line.pos < line.toks.len() {
        keyword(line, "tree")?;
        let output = number(line, "an output number")?;
        line.expect_punct('[')?;
        let mut nodes = Vec::new();
        while !line.eat_punct(']') {
            if !nodes.is_empty() {
                line.expect_punct(',')?;
            }
            nodes.push(tree_node(line)?);
        }
        let leaves = floats(line)?;
        trees.push(Tree {
            output,
            nodes,
            leaves,
        });
    }
    Ok(TreeEnsemble {
        n_features,
        dtype,
        init,
        trees,
    })
}

/// One node: `fFEATURE (le|lt) THRESHOLD` or `fFEATURE in [WORD, ..]`, then
/// `none|zero|nan`, `left|right` and two children `nI` or `lI`.
fn tree_node(line: &mut Line<'_>) -> ParseResult<crate::trees::TreeNode> {
    use crate::trees::{Child, Missing, SplitTest, TreeNode};
    let (at, word) = line.word("a node's feature, as `f3`")?;
    let feature = word
        .strip_prefix('f')
        .and_then(|d| d.parse().ok())
        .ok_or_else(|| line.err(at, format!("`{word}` is not a feature, as `f3`")))?;
    let (at, test) = line.word("a test: `le`, `lt` or `in`")?;
    let test = match test {
        "le" | "lt" => {
            let (lit_at, lit) = line.word("a threshold")?;
            let t = match parse_scalar(lit, DType::F64) {
                Ok(crate::scalar::Scalar::F64(t)) => t,
                Ok(_) => unreachable!("an f64 literal"),
                Err(e) => return Err(line.err(lit_at, e.to_string())),
            };
            if test == "le" {
                SplitTest::Le(t)
            } else {
                SplitTest::Lt(t)
            }
        }
        "in" => {
            line.expect_punct('[')?;
            let mut words = Vec::new();
            while !line.eat_punct(']') {
                if !words.is_empty() {
                    line.expect_punct(',')?;
                }
                words.push(number(line, "a bitset word")?);
            }
            SplitTest::In(words)
        }
        other => return Err(line.err(at, format!("unknown test `{other}`: `le`, `lt` or `in`"))),
    };
    let (at, missing) = line.word("`none`, `zero` or `nan`")?;
    let missing = match missing {
        "none" => Missing::None,
        "zero" => Missing::Zero,
        "nan" => Missing::Nan,
        other => return Err(line.err(at, format!("`{other}` is not `none`, `zero` or `nan`"))),
    };
    let (at, default) = line.word("`left` or `right`")?;
    let default_left = match default {
        "left" => true,
        "right" => false,
        other => return Err(line.err(at, format!("`{other}` is not `left` or `right`"))),
    };
    let mut child = || -> ParseResult<Child> {
        let (at, word) = line.word("a child, as `n2` or `l0`")?;
        let index = |d: &str| d.parse::<u32>().ok();
        match (word.strip_prefix('n'), word.strip_prefix('l')) {
            (Some(d), _) if index(d).is_some() => Ok(Child::Node(index(d).expect("checked"))),
            (_, Some(d)) if index(d).is_some() => Ok(Child::Leaf(index(d).expect("checked"))),
            _ => Err(line.err(at, format!("`{word}` is not a child, as `n2` or `l0`"))),
        }
    };
    let (left, right) = (child()?, child()?);
    Ok(TreeNode {
        feature,
        test,
        missing,
        default_left,
        left,
        right,
    })
}

fn keyword(line: &mut Line<'_>, word: &str) -> ParseResult<()> {
    match line.word(&format!("`{word}`"))? {
        (_, w) if w == word => Ok(()),
        (at, w) => Err(line.err(at, format!("expected `{word}`, found `{w}`"))),
    }
}

fn number(line: &mut Line<'_>, what: &str) -> ParseResult<u32> {
    let (at, word) = line.word(what)?;
    word.parse()
        .map_err(|_| line.err(at, format!("`{word}` is not {what} (0 to 2^32 - 1)")))
}

/// `[x, y, ..]` of `f64` literals.
fn floats(line: &mut Line<'_>) -> ParseResult<Vec<f64>> {
    line.expect_punct('[')?;
    let mut values = Vec::new();
    while !line.eat_punct(']') {
        if !values.is_empty() {
            line.expect_punct(',')?;
        }
        let (at, lit) = line.word("a number")?;
        match parse_scalar(lit, DType::F64) {
            Ok(crate::scalar::Scalar::F64(v)) => values.push(v),
            Ok(_) => unreachable!("an f64 literal"),
            Err(e) => return Err(line.err(at, e.to_string())),
        }
    }
    Ok(values)
}

/// `[a, b, ...]` of exactly `N` non-negative numbers.
fn numbers<const N: usize>(line: &mut Line<'_>, what: &str) -> ParseResult<[u32; N]> {
    let at = line.toks.get(line.pos).map_or(line.end, |t| t.0);
    line.expect_punct('[')?;
    let mut found = Vec::new();
    while !line.eat_punct(']') {
        if !found.is_empty() {
            line.expect_punct(',')?;
        }
        let (at, word) = line.word(what)?;
        found.push(word.parse::<u32>().map_err(|_| {
            line.err(
                at,
                format!("`{word}` is not a {what} (a number from 0 to 2^32 - 1)"),
            )
        })?);
    }
    <[u32; N]>::try_from(found).map_err(|_| line.err(at, format!("a {what} takes {N} numbers")))
}

/// The keyword attributes after a `conv2d`'s or a pool's argument(s), in any
/// order: `stride [sh, sw]`, `pad [top, bottom, left, right]`, `dilation
/// [dh, dw]`, `groups g` (conv2d); `kernel [kh, kw]`, `ceil_mode`,
/// `count_include_pad` (pools).
fn window_attrs(line: &mut Line<'_>, op: Op) -> ParseResult<Op> {
    let (mut conv, mut pool) = match op {
        Op::Conv2d(c) => (Some(c), None),
        Op::Pool2d(p) => (None, Some(p)),
        op => return Ok(op),
    };
    let mut kernel_given = false;
    while line.pos < line.toks.len() {
        let (at, word) = line.word("an attribute")?;
        match (word, &mut conv, &mut pool) {
            ("stride", Some(c), _) => c.stride = numbers(line, "stride")?,
            ("stride", _, Some(p)) => p.stride = numbers(line, "stride")?,
            ("pad", Some(c), _) => c.padding = numbers(line, "padding")?,
            ("pad", _, Some(p)) => p.padding = numbers(line, "padding")?,
            ("dilation", Some(c), _) => c.dilation = numbers(line, "dilation")?,
            ("dilation", _, Some(p)) => p.dilation = numbers(line, "dilation")?,
            ("groups", Some(c), _) => {
                let (at, word) = line.word("a group count")?;
                c.groups = word
                    .parse()
                    .map_err(|_| line.err(at, format!("`{word}` is not a group count")))?;
            }
            ("kernel", _, Some(p)) => {
                p.kernel = numbers(line, "kernel size")?;
                kernel_given = true;
            }
            ("ceil_mode", _, Some(p)) => p.ceil_mode = true,
            ("count_include_pad", _, Some(p)) => p.count_include_pad = true,
            _ => return Err(line.err(at, format!("unknown attribute `{word}`"))),
        }
    }
    Ok(match (conv, pool) {
        (Some(c), _) => Op::Conv2d(c),
        (_, Some(_)) if !kernel_given => {
            return Err(line.err(line.end, "a pool needs its window: `kernel [kh, kw]`"))
        }
        (_, Some(p)) => Op::Pool2d(p),
        _ => unreachable!("one of the two"),
    })
}

/// `[:, 1:3, 0:8:2]` after a `slice`'s argument.
fn slice_ranges(line: &mut Line<'_>) -> ParseResult<Vec<Option<crate::op::SliceRange>>> {
    line.expect_punct('[')?;
    let mut ranges = Vec::new();
    while !line.eat_punct(']') {
        if !ranges.is_empty() {
            line.expect_punct(',')?;
        }
        if line.eat_punct(':') {
            ranges.push(None);
            continue;
        }
        let bound = |line: &mut Line<'_>, what: &str| -> ParseResult<u64> {
            let (at, word) = line.word(what)?;
            word.parse::<u64>()
                .map_err(|_| line.err(at, format!("`{word}` is not {what}")))
        };
        let start = bound(line, "a slice start")?;
        line.expect_punct(':')?;
        let stop = bound(line, "a slice stop")?;
        let step = if line.eat_punct(':') {
            let (at, word) = line.word("a slice step")?;
            word.parse::<i64>()
                .map_err(|_| line.err(at, format!("`{word}` is not a slice step")))?
        } else {
            1
        };
        ranges.push(Some(crate::op::SliceRange { start, stop, step }));
    }
    Ok(ranges)
}

struct Parser<'a> {
    src: &'a str,
    graph: Graph,
    source_map: SourceMap,
    values: HashMap<u32, Value>,
    seen_node: bool,
}

impl<'a> Parser<'a> {
    fn value_ref(&self, line: &mut Line<'a>) -> ParseResult<Value> {
        let (at, word) = line.word("a value such as `v0`")?;
        let number = parse_value_name(word)
            .ok_or_else(|| line.err(at, format!("`{word}` is not a value name such as `v0`")))?;
        self.values
            .get(&number)
            .copied()
            .ok_or_else(|| line.err(at, format!("`{word}` is used before it is defined")))
    }

    fn item(&mut self, line: &mut Line<'a>) -> ParseResult<()> {
        let (at, word) = line.word("`graph`, `output` or a value definition")?;
        match word {
            "graph" if !self.seen_node => {
                self.graph.name = line.string("the graph's name")?;
            }
            "output" => {
                let name = line.string("the output's name")?;
                line.expect_punct('=')?;
                let value = self.value_ref(line)?;
                self.graph.push_output(&name, value);
            }
            _ => {
                let number = parse_value_name(word).ok_or_else(|| {
                    line.err(
                        at,
                        format!("expected `graph`, `output` or a value definition, found `{word}`"),
                    )
                })?;
                if self.values.contains_key(&number) {
                    return Err(line.err(at, format!("`{word}` is defined twice")));
                }
                let value = self.node(line)?;
                self.source_map
                    .set(value, crate::diag::Loc::of_offset(self.src, at));
                self.values.insert(number, value);
                self.seen_node = true;
            }
        }
        line.finish()
    }

    /// Parses `["name"] : type = op args` after the value name.
    fn node(&mut self, line: &mut Line<'a>) -> ParseResult<Value> {
        let source_name = match line.toks.get(line.pos) {
            Some((_, Tok::Str(_))) => Some(line.string("a source name")?),
            _ => None,
        };
        line.expect_punct(':')?;
        let ty = line.ty()?;
        line.expect_punct('=')?;
        let (op_at, mnemonic) = line.word("an op")?;
        let value = match mnemonic {
            "input" => {
                let name = line.string("the input's name")?;
                self.graph.push_input(&name, ty)
            }
            "const" => {
                let (lit_at, lit) = line.word("a literal")?;
                let dtype = ty
                    .dtype()
                    .ok_or_else(|| line.err(op_at, "a constant cannot be a selection"))?;
                let c = parse_scalar(lit, dtype).map_err(|e| line.err(lit_at, e.to_string()))?;
                self.graph.push_node(NodeData {
                    op: Op::Const(c),
                    args: Vec::new(),
                    ty,
                })
            }
            "tensor" => {
                let t = ty
                    .as_tensor()
                    .ok_or_else(|| line.err(op_at, "a tensor constant cannot be a selection"))?;
                let dims = t
                    .shape
                    .iter()
                    .map(|d| match d {
                        Dim::Fixed(n) => Some(*n),
                        Dim::Sym(_) => None,
                    })
                    .collect::<Option<Vec<u64>>>()
                    .ok_or_else(|| line.err(op_at, "a tensor constant has fixed dimensions"))?;
                let mut values = Vec::new();
                while line.pos < line.toks.len() {
                    if !values.is_empty() {
                        line.expect_punct(',')?;
                    }
                    let (lit_at, lit) = line.word("a literal")?;
                    values.push(
                        parse_scalar(lit, t.dtype).map_err(|e| line.err(lit_at, e.to_string()))?,
                    );
                }
                let dtype = t.dtype;
                self.graph.push_node(NodeData {
                    op: Op::Tensor(std::sync::Arc::new(crate::op::TensorConst {
                        dtype,
                        dims,
                        values,
                    })),
                    args: Vec::new(),
                    ty,
                })
            }
            _ => {
                let op = match mnemonic {
                    "reshape" => Op::Reshape(
                        ty.as_tensor()
                            .ok_or_else(|| line.err(op_at, "cannot reshape to a selection"))?
                            .shape
                            .clone(),
                    ),
                    "broadcast_to" => Op::BroadcastTo(
                        ty.as_tensor()
                            .ok_or_else(|| line.err(op_at, "cannot broadcast to a selection"))?
                            .shape
                            .clone(),
                    ),
                    // The permutation follows the argument.
                    "transpose" => Op::Transpose(Vec::new()),
                    // The axis follows the arguments; the ranges, the argument.
                    "concat" => Op::Concat(0),
                    "gather" => Op::Gather(0),
                    "index_add" => Op::IndexAdd(0),
                    "isin" => Op::IsIn(Vec::new().into()),
                    "trees" => Op::Trees(std::sync::Arc::new(crate::trees::TreeEnsemble {
                        n_features: 0,
                        dtype: ty.dtype().unwrap_or(DType::F64),
                        init: Vec::new(),
                        trees: Vec::new(),
                    })),
                    "slice" => Op::Slice(Vec::new()),
                    // So do the axes, the reduction and `keepdim`.
                    "reduce_axes" => Op::ReduceAxes {
                        op: ReduceOp::Sum,
                        axes: Vec::new(),
                        keepdim: false,
                    },
                    "cast" => Op::Cast(
                        ty.dtype()
                            .ok_or_else(|| line.err(op_at, "cannot cast to a selection"))?,
                    ),
                    _ => op_from_mnemonic(mnemonic)
                        .ok_or_else(|| line.err(op_at, format!("unknown op `{mnemonic}`")))?,
                };
                let mut args = Vec::new();
                match op.arity() {
                    Some(n) => {
                        for arg_idx in 0..n {
                            if arg_idx > 0 {
                                line.expect_punct(',')?;
                            }
                            args.push(self.value_ref(line)?);
                        }
                    }
                    // `concat v1, v2 [axis]`: values up to the `[`.
                    None => loop {
                        args.push(self.value_ref(line)?);
                        if !line.eat_punct(',') {
                            break;
                        }
                    },
                }
                let axis_list = |line: &mut Line<'a>| -> ParseResult<Vec<u32>> {
                    line.expect_punct('[')?;
                    let mut axes = Vec::new();
                    while !line.eat_punct(']') {
                        if !axes.is_empty() {
                            line.expect_punct(',')?;
                        }
                        let (at, word) = line.word("an axis")?;
                        axes.push(word.parse::<u32>().map_err(|_| {
                            line.err(at, format!("`{word}` is not an axis number"))
                        })?);
                    }
                    Ok(axes)
                };
                let op = match op {
                    Op::Transpose(_) => Op::Transpose(axis_list(line)?),
                    Op::Concat(_) => {
                        let at = line.toks.get(line.pos).map_or(line.end, |t| t.0);
                        match axis_list(line)?.as_slice() {
                            [axis] => Op::Concat(*axis),
                            _ => return Err(line.err(at, "`concat` takes one axis, as `[1]`")),
                        }
                    }
                    Op::Gather(_) => {
                        let at = line.toks.get(line.pos).map_or(line.end, |t| t.0);
                        match axis_list(line)?.as_slice() {
                            [axis] => Op::Gather(*axis),
                            _ => return Err(line.err(at, "`gather` takes one axis, as `[0]`")),
                        }
                    }
                    Op::IndexAdd(_) => {
                        let at = line.toks.get(line.pos).map_or(line.end, |t| t.0);
                        match axis_list(line)?.as_slice() {
                            [axis] => Op::IndexAdd(*axis),
                            _ => return Err(line.err(at, "`index_add` takes one axis, as `[0]`")),
                        }
                    }
                    Op::Slice(_) => Op::Slice(slice_ranges(line)?),
                    Op::Trees(e) => Op::Trees(std::sync::Arc::new(trees(line, e.dtype)?)),
                    Op::IsIn(_) => {
                        // The set's values are the argument's dtype.
                        let dtype = self.graph.node(args[0]).ty.dtype().unwrap_or(DType::F64);
                        line.expect_punct('[')?;
                        let mut values = Vec::new();
                        while !line.eat_punct(']') {
                            if !values.is_empty() {
                                line.expect_punct(',')?;
                            }
                            let (at, lit) = line.word("a literal")?;
                            values.push(
                                parse_scalar(lit, dtype)
                                    .map_err(|e| line.err(at, e.to_string()))?,
                            );
                        }
                        Op::IsIn(crate::semantics::isin_set(values, dtype).into())
                    }
                    Op::ReduceAxes { .. } => {
                        let axes = axis_list(line)?;
                        let (at, name) = line.word("a reduction")?;
                        let op = ReduceOp::from_name(name)
                            .ok_or_else(|| line.err(at, format!("unknown reduction `{name}`")))?;
                        let keepdim =
                            matches!(line.toks.get(line.pos), Some((_, Tok::Word("keepdim"))));
                        if keepdim {
                            line.pos += 1;
                        }
                        Op::ReduceAxes { op, axes, keepdim }
                    }
                    op @ (Op::Conv2d(_) | Op::Pool2d(_)) => window_attrs(line, op)?,
                    op => op,
                };
                self.graph.push_node(NodeData { op, args, ty })
            }
        };
        if let Some(name) = source_name {
            self.graph.set_source_name(value, &name);
        }
        Ok(value)
    }
}

/// Parses a graph from the text format. The graph is not verified.
pub fn parse(src: &str) -> ParseResult<Graph> {
    parse_with_source_map(src).map(|(graph, _)| graph)
}

/// Parses a graph and the location of each node's definition.
pub fn parse_with_source_map(src: &str) -> ParseResult<(Graph, SourceMap)> {
    let mut parser = Parser {
        src,
        graph: Graph::default(),
        source_map: SourceMap::default(),
        values: HashMap::new(),
        seen_node: false,
    };
    let mut start = 0;
    for text in src.split_inclusive('\n') {
        let toks = lex_line(src, start, text)?;
        let end = start + text.trim_end_matches(['\n', '\r']).len();
        if !toks.is_empty() {
            let mut line = Line {
                src,
                toks,
                pos: 0,
                end,
            };
            parser.item(&mut line)?;
        }
        start += text.len();
    }
    Ok((parser.graph, parser.source_map))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::print;

    const FN: &str = "graph \"fn\"\n\
        v0 \"x\": f64[n] = input \"x\"\n\
        v1: f64 = const -0.0\n\
        v2 \"a\\n\\\"q\\\"\": f64[n] = add v0, v1\n\
        v3: i32[n] = cast v2\n\
        v4: bool[n] = lt v2, v1\n\
        v5: sel[n] = filter v4\n\
        v6: f64 = const nan(0x7ff8000000000001)\n\
        v7: f64[n] = select v4, v2, v6\n\
        output \"a\" = v2\n\
        output \"s\" = v5\n\
        output \"c\" = v3\n\
        output \"m\" = v7\n";

    #[test]
    fn round_trips_exactly() {
        let graph = parse(FN).expect("parses");
        assert_eq!(print(&graph), FN);
        assert_eq!(parse(&print(&graph)).expect("parses again"), graph);
        crate::verify(graph).expect("valid");
    }

    fn check_err(src: &str, expect: &str) {
        let err = parse(src).expect_err("should not parse");
        assert_eq!(err.to_string(), expect);
    }

    #[test]
    fn errors_are_located() {
        check_err(
            "v0: f64 = input \"x\"\nv1: f64 = add v0, v2\n",
            "2:19: `v2` is used before it is defined",
        );
        check_err("v0: f65 = input \"x\"", "1:5: unknown type `f65`");
        check_err("v0: f64 = frobnicate v0", "1:11: unknown op `frobnicate`");
        check_err(
            "v0: f64 = const 1.5.5",
            "1:17: `1.5.5` is not a valid f64 literal",
        );
        check_err("v0: f64 = input \"x", "1:17: unterminated string");
        check_err(
            "v0: f64 = input \"x\"\nv0: f64 = neg v0",
            "2:1: `v0` is defined twice",
        );
        check_err(
            "v0: f64 = input \"x\"\nv1: f64 = add v0",
            "2:17: expected `,`, found end of line",
        );
        check_err(
            "v0: f64 = input \"x\" junk",
            "1:21: unexpected text after the end of the line's item",
        );
        check_err(
            "v0: sel[n, m] = input \"x\"",
            "1:5: a selection type has exactly one dimension: `sel[n]`",
        );
        check_err(
            "hello",
            "1:1: expected `graph`, `output` or a value definition, found `hello`",
        );
        check_err(
            "v0: i32 = const 99999999999",
            "1:17: `99999999999` is not a valid i32 literal",
        );
        let x = "v0: f32[2, 3] = input \"x\"\n";
        check_err(
            &format!("{x}v1: f32[4, 3] = concat v0, v0"),
            "2:30: expected `[`, found end of line",
        );
        check_err(
            &format!("{x}v1: f32[4, 3] = concat v0, v0 [0, 1]"),
            "2:31: `concat` takes one axis, as `[1]`",
        );
        check_err(
            &format!("{x}v1: f32[2, 1] = slice v0 [:, 1:x]"),
            "2:32: `x` is not a slice stop",
        );
        check_err(
            &format!("{x}v1: f32[2, 1] = slice v0 [:, 1]"),
            "2:31: expected `:`",
        );
        check_err(
            "\u{1F600}",
            "1:1: expected `graph`, `output` or a value definition, found `\u{1F600}`",
        );
    }
}
