//! Splitting a graph at the values that do not depend on some of its
//! inputs, for a caller that runs it many times with only those inputs
//! changing: a fit moves an expression's constants over the same columns
//! of data, and a GP expression's subtrees without a constant
//! (`sin(cos(exp(x0)))` in `sin(4.26 * x0) / sin(cos(exp(x0)))`) give the
//! same column at every step. [`hoist`] cuts them out into a graph of their
//! own, run once, whose results the rest reads as inputs.
//!
//! Every node keeps its op and its arguments' values, so the two graphs
//! together compute each output bit for bit as the whole graph does
//! (docs/semantics.md: no op's result depends on where it is computed).
//! Nothing here recurses: each step is one sweep of the node arena.

use crate::entities::Value;
use crate::graph::{Graph, NodeData};
use crate::op::Op;
use crate::types::Type;
use crate::SecondaryMap;
use std::collections::HashSet;

/// A graph split in two ([`hoist`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Hoisted {
    /// The hoisted values: the original's inputs they read, and one output
    /// per hoisted value, named as the input of [`Hoisted::rest`] that
    /// reads it.
    pub invariant: Graph,
    /// The original graph with each hoisted value read from an input: every
    /// input of the original (by its name), then those, in node order;
    /// the original's outputs, by their names.
    pub rest: Graph,
}

/// Splits `graph` at the values that do not depend on the inputs named in
/// `varying`: each such value that the rest of the graph reads, or that an
/// output returns, and whose type `hoistable` accepts, becomes an output of
/// [`Hoisted::invariant`] and an input of [`Hoisted::rest`]. Inputs,
/// constants and values computed from constants alone are never hoisted
/// (they cost nothing to read), nor is a value of a type `hoistable`
/// refuses: it stays in the rest, computed from hoisted values where it
/// can be. `None` when nothing is hoisted.
pub fn hoist(
    graph: &Graph,
    varying: &[&str],
    hoistable: impl Fn(&Type) -> bool,
) -> Option<Hoisted> {
    // Which values depend on a varying input, and which on any input (a
    // value computed from constants alone, such as a derivative's
    // broadcast `1`, stays: its shape may name a dimension only the rest's
    // inputs have, and it costs no read).
    let mut depends: SecondaryMap<Value, bool> = SecondaryMap::with_capacity(graph.len());
    let mut reads: SecondaryMap<Value, bool> = SecondaryMap::with_capacity(graph.len());
    for input in graph.inputs() {
        reads[input.value] = true;
        if varying.contains(&input.name.as_str()) {
            depends[input.value] = true;
        }
    }
    for (value, node) in graph.nodes() {
        if node.args.iter().any(|&a| depends[a]) {
            depends[value] = true;
        }
        if node.args.iter().any(|&a| reads[a]) {
            reads[value] = true;
        }
    }
    // From the outputs back: what the rest computes, and where it reads a
    // hoisted value instead.
    let mut in_rest: SecondaryMap<Value, bool> = SecondaryMap::with_capacity(graph.len());
    let mut hoisted: SecondaryMap<Value, bool> = SecondaryMap::with_capacity(graph.len());
    for output in graph.outputs() {
        in_rest[output.value] = true;
    }
    let mut any = false;
    for (value, node) in graph.nodes().rev() {
        if !in_rest[value] {
            continue;
        }
        let cheap = matches!(node.op, Op::Input { .. } | Op::Const(_) | Op::Tensor(_));
        if !depends[value] && reads[value] && !cheap && hoistable(&node.ty) {
            hoisted[value] = true;
            any = true;
        } else {
            for &arg in &node.args {
                in_rest[arg] = true;
            }
        }
    }
    if !any {
        return None;
    }
    // What the hoisted values are computed from.
    let mut in_invariant: SecondaryMap<Value, bool> = SecondaryMap::with_capacity(graph.len());
    for (value, node) in graph.nodes().rev() {
        if hoisted[value] || in_invariant[value] {
            in_invariant[value] = true;
            for &arg in &node.args {
                in_invariant[arg] = true;
            }
        }
    }
    // Names for the new inputs that no input of the graph has.
    let taken: HashSet<&str> = graph.inputs().iter().map(|i| i.name.as_str()).collect();
    let mut count = 0usize;
    let mut fresh = || loop {
        let name = format!("%hoisted{count}");
        count += 1;
        if !taken.contains(name.as_str()) {
            return name;
        }
    };

    let mut invariant = Graph::new(&graph.name);
    let mut rest = Graph::new(&graph.name);
    let mut inv_map: SecondaryMap<Value, Option<Value>> = SecondaryMap::with_capacity(graph.len());
    let mut rest_map: SecondaryMap<Value, Option<Value>> = SecondaryMap::with_capacity(graph.len());
    let copy = |into: &mut Graph, map: &SecondaryMap<Value, Option<Value>>, node: &NodeData| {
        let args = node
            .args
            .iter()
            .map(|&a| map[a].expect("arguments come first"));
        into.push_node(NodeData {
            op: node.op.clone(),
            args: args.collect(),
            ty: node.ty.clone(),
        })
    };
    for (value, node) in graph.nodes() {
        let input_name = match node.op {
            Op::Input { index } => Some(graph.inputs()[index as usize].name.as_str()),
            _ => None,
        };
        if in_invariant[value] {
            inv_map[value] = Some(match input_name {
                Some(name) => invariant.push_input(name, node.ty.clone()),
                None => copy(&mut invariant, &inv_map, node),
            });
        }
        if hoisted[value] {
            let name = fresh();
            invariant.push_output(&name, inv_map[value].expect("computed above"));
            rest_map[value] = Some(rest.push_input(&name, node.ty.clone()));
        } else if let Some(name) = input_name {
            rest_map[value] = Some(rest.push_input(name, node.ty.clone()));
        } else if in_rest[value] {
            rest_map[value] = Some(copy(&mut rest, &rest_map, node));
        }
        for (map, into) in [(&inv_map, &mut invariant), (&rest_map, &mut rest)] {
            if let (Some(new), Some(name)) = (map[value], graph.source_name(value)) {
                into.set_source_name(new, name);
            }
        }
    }
    for output in graph.outputs() {
        rest.push_output(
            &output.name,
            rest_map[output.value].expect("outputs are in the rest"),
        );
    }
    Some(Hoisted { invariant, rest })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::{parse, print};
    use crate::types::DType;

    fn columns(ty: &Type) -> bool {
        matches!(ty, Type::Tensor(t) if t.dtype == DType::F64 && t.shape.len() == 1)
    }

    #[test]
    fn subtrees_without_the_varying_inputs_are_hoisted() {
        // sin(c * x) / sin(cos(x)) + y, varying in c.
        let g = parse(
            "v0: f64[n] = input \"x\"\n\
             v1: f64 = input \"c\"\n\
             v2: f64[n] = input \"y\"\n\
             v3: f64[n] = mul v1, v0\n\
             v4: f64[n] = sin v3\n\
             v5: f64[n] = cos v0\n\
             v6: f64[n] = sin v5\n\
             v7: f64[n] = div v4, v6\n\
             v8: f64[n] = add v7, v2\n\
             output \"r\" = v8\n",
        )
        .unwrap();
        let h = hoist(&g, &["c"], columns).expect("sin(cos(x)) is hoisted");
        assert_eq!(
            print(&h.invariant),
            "v0: f64[n] = input \"x\"\n\
             v1: f64[n] = cos v0\n\
             v2: f64[n] = sin v1\n\
             output \"%hoisted0\" = v2\n"
        );
        // `y` is an input: read as it is, not hoisted.
        assert_eq!(
            print(&h.rest),
            "v0: f64[n] = input \"x\"\n\
             v1: f64 = input \"c\"\n\
             v2: f64[n] = input \"y\"\n\
             v3: f64[n] = mul v1, v0\n\
             v4: f64[n] = sin v3\n\
             v5: f64[n] = input \"%hoisted0\"\n\
             v6: f64[n] = div v4, v5\n\
             v7: f64[n] = add v6, v2\n\
             output \"r\" = v7\n"
        );
        crate::verify(h.invariant).unwrap();
        crate::verify(h.rest).unwrap();
    }

    #[test]
    fn a_value_of_a_refused_type_stays_and_reads_hoisted_ones() {
        // where(exp(x) > 1, c, x): the comparison is bool, so it stays in the
        // rest; exp(x), which it reads, is hoisted. An output that does not
        // depend on `c` is hoisted whole, under a name no input has.
        let g = parse(
            "v0: f64[n] = input \"x\"\n\
             v1: f64 = input \"c\"\n\
             v2: f64[n] = input \"%hoisted0\"\n\
             v3: f64[n] = exp v0\n\
             v4: f64 = const 1.0\n\
             v5: bool[n] = gt v3, v4\n\
             v6: f64[n] = select v5, v1, v0\n\
             v7: f64[n] = add v3, v2\n\
             output \"r\" = v6\n\
             output \"s\" = v7\n",
        )
        .unwrap();
        let h = hoist(&g, &["c"], columns).expect("exp(x) is hoisted");
        assert_eq!(
            h.invariant
                .outputs()
                .iter()
                .map(|o| o.name.as_str())
                .collect::<Vec<_>>(),
            ["%hoisted1", "%hoisted2"]
        );
        assert_eq!(
            print(&h.rest),
            "v0: f64[n] = input \"x\"\n\
             v1: f64 = input \"c\"\n\
             v2: f64[n] = input \"%hoisted0\"\n\
             v3: f64[n] = input \"%hoisted1\"\n\
             v4: f64 = const 1.0\n\
             v5: bool[n] = gt v3, v4\n\
             v6: f64[n] = select v5, v1, v0\n\
             v7: f64[n] = input \"%hoisted2\"\n\
             output \"r\" = v6\n\
             output \"s\" = v7\n"
        );
        crate::verify(h.invariant).unwrap();
        crate::verify(h.rest).unwrap();
    }

    #[test]
    fn values_of_constants_alone_stay() {
        // `1` spread over the rows (a Jacobian's `d(x + c)/dc`) reads no
        // input: it stays in the rest, where an input gives `n`; `exp(x)`
        // is hoisted.
        let g = parse(
            "v0: f64[n] = input \"x\"\n\
             v1: f64 = input \"c\"\n\
             v2: f64[n] = exp v0\n\
             v3: f64[n] = add v2, v1\n\
             v4: f64 = const 1.0\n\
             v5: f64[n] = broadcast_to v4\n\
             output \"r\" = v3\n\
             output \"dr/dc\" = v5\n",
        )
        .unwrap();
        let h = hoist(&g, &["c"], columns).expect("exp(x) is hoisted");
        assert_eq!(h.invariant.outputs().len(), 1);
        assert!(print(&h.rest).contains("broadcast_to"));
        crate::verify(h.invariant).unwrap();
        crate::verify(h.rest).unwrap();
    }

    #[test]
    fn nothing_to_hoist() {
        // Every op depends on `c`; inputs and constants are not hoisted.
        let g = parse(
            "v0: f64[n] = input \"x\"\n\
             v1: f64 = input \"c\"\n\
             v2: f64 = const 2.0\n\
             v3: f64[n] = mul v1, v0\n\
             v4: f64[n] = add v3, v2\n\
             output \"r\" = v4\n",
        )
        .unwrap();
        assert_eq!(hoist(&g, &["c"], columns), None);
        // A varying name the graph does not have: the whole result is invariant.
        let h = hoist(&g, &["d"], columns).expect("everything is invariant");
        assert_eq!(h.rest.inputs().len(), 3);
    }
}
