//! Printing a graph in the `.kiln` text format.

use super::quote;
use crate::graph::Graph;
use crate::op::Op;
use std::fmt::Write;

/// The graph in the text format; [`super::parse()`] reads it back to an equal graph.
pub fn print(graph: &Graph) -> String {
    let mut out = String::new();
    if !graph.name.is_empty() {
        writeln!(out, "graph {}", quote(&graph.name)).expect("writing to a String");
    }
    for (value, node) in graph.nodes() {
        write!(out, "{value}").expect("writing to a String");
        if let Some(name) = graph.source_name(value) {
            write!(out, " {}", quote(name)).expect("writing to a String");
        }
        write!(out, ": {} = {}", node.ty, node.op.mnemonic()).expect("writing to a String");
        match &node.op {
            Op::Input { index } => {
                let name = graph
                    .inputs()
                    .get(*index as usize)
                    .map_or("?", |i| i.name.as_str());
                write!(out, " {}", quote(name)).expect("writing to a String");
            }
            Op::Const(c) => write!(out, " {c}").expect("writing to a String"),
            Op::Tensor(t) => {
                for (idx, v) in t.values.iter().enumerate() {
                    let sep = if idx == 0 { " " } else { ", " };
                    write!(out, "{sep}{v}").expect("writing to a String");
                }
            }
            _ => {
                for (arg_idx, arg) in node.args.iter().enumerate() {
                    let sep = if arg_idx == 0 { " " } else { ", " };
                    write!(out, "{sep}{arg}").expect("writing to a String");
                }
                match &node.op {
                    Op::Transpose(perm) => write!(out, " {perm:?}").expect("writing to a String"),
                    Op::Trees(e) => print_trees(&mut out, e),
                    Op::IsIn(set) => {
                        out.push_str(" [");
                        for (idx, v) in set.iter().enumerate() {
                            let sep = if idx == 0 { "" } else { ", " };
                            write!(out, "{sep}{v}").expect("writing to a String");
                        }
                        out.push(']');
                    }
                    Op::Concat(axis) | Op::Gather(axis) | Op::IndexAdd(axis) => {
                        write!(out, " [{axis}]").expect("writing to a String")
                    }
                    Op::Slice(ranges) => {
                        out.push_str(" [");
                        for (idx, r) in ranges.iter().enumerate() {
                            if idx > 0 {
                                out.push_str(", ");
                            }
                            match r {
                                Some(r) => write!(out, "{r}").expect("writing to a String"),
                                None => out.push(':'),
                            }
                        }
                        out.push(']');
                    }
                    Op::ReduceAxes { op, axes, keepdim } => {
                        write!(out, " {axes:?} {op}").expect("writing to a String");
                        if *keepdim {
                            out.push_str(" keepdim");
                        }
                    }
                    Op::Conv2d(c) => {
                        if c.stride != [1, 1] {
                            write!(out, " stride {:?}", c.stride).expect("writing to a String");
                        }
                        if c.padding != [0; 4] {
                            write!(out, " pad {:?}", c.padding).expect("writing to a String");
                        }
                        if c.dilation != [1, 1] {
                            write!(out, " dilation {:?}", c.dilation).expect("writing to a String");
                        }
                        if c.groups != 1 {
                            write!(out, " groups {}", c.groups).expect("writing to a String");
                        }
                    }
                    Op::Pool2d(p) => {
                        write!(out, " kernel {:?} stride {:?}", p.kernel, p.stride)
                            .expect("writing to a String");
                        if p.padding != [0; 4] {
                            write!(out, " pad {:?}", p.padding).expect("writing to a String");
                        }
                        if p.dilation != [1, 1] {
                            write!(out, " dilation {:?}", p.dilation).expect("writing to a String");
                        }
                        if p.ceil_mode {
                            out.push_str(" ceil_mode");
                        }
                        if p.count_include_pad {
                            out.push_str(" count_include_pad");
                        }
                    }
                    _ => {}
                }
            }
        }
        out.push('\n');
    }
    for output in graph.outputs() {
        writeln!(out, "output {} = {}", quote(&output.name), output.value)
            .expect("writing to a String");
    }
    out
}

/// A tree ensemble's attribute: `features F init [..]`, then per tree
/// `tree OUTPUT [NODE, ..] [LEAF, ..]`, a node being `fFEATURE TEST
/// MISSING DEFAULT LEFT RIGHT` (docs/semantics.md shows one).
fn print_trees(out: &mut String, e: &crate::trees::TreeEnsemble) {
    use crate::scalar::write_f64;
    use crate::trees::{Child, Missing, SplitTest};
    let floats = |out: &mut String, values: &[f64]| {
        out.push('[');
        for (idx, v) in values.iter().enumerate() {
            if idx > 0 {
                out.push_str(", ");
            }
            write_f64(out, *v).expect("writing to a String");
        }
        out.push(']');
    };
    write!(out, " features {} init ", e.n_features).expect("writing to a String");
    floats(out, &e.init);
    for tree in &e.trees {
        write!(out, " tree {} [", tree.output).expect("writing to a String");
        for (idx, node) in tree.nodes.iter().enumerate() {
            if idx > 0 {
                out.push_str(", ");
            }
            write!(out, "f{} ", node.feature).expect("writing to a String");
            match &node.test {
                SplitTest::Le(t) | SplitTest::Lt(t) => {
                    out.push_str(if matches!(node.test, SplitTest::Le(_)) {
                        "le "
                    } else {
                        "lt "
                    });
                    write_f64(out, *t).expect("writing to a String");
                }
                SplitTest::In(words) => write!(out, "in {words:?}").expect("writing to a String"),
            }
            let missing = match node.missing {
                Missing::None => "none",
                Missing::Zero => "zero",
                Missing::Nan => "nan",
            };
            let default = if node.default_left { "left" } else { "right" };
            write!(out, " {missing} {default}").expect("writing to a String");
            for child in [node.left, node.right] {
                match child {
                    Child::Node(i) => write!(out, " n{i}"),
                    Child::Leaf(i) => write!(out, " l{i}"),
                }
                .expect("writing to a String");
            }
        }
        out.push_str("] ");
        floats(out, &tree.leaves);
    }
}
