//! Scratch buffers shared by liveness.
//!
//! Lowering gives every intermediate tensor it cannot fuse its own
//! [`Param::Scratch`]. A deep network (a ResNet) would then need one buffer
//! per layer. [`share`] maps intermediates whose lives do not overlap onto
//! one buffer: a scratch lives from the first to the last top-level
//! statement of the body that names it (each op's loop nests are top-level
//! statements, and the body runs once, in order), and two scratches of the
//! same dtype whose lives are disjoint may hold their elements in the same
//! room. Every lowering writes each element of its scratch before reading
//! it, so a buffer never needs to start zeroed (debug builds of the safe API
//! fill scratch with NaN bytes to keep that true).
//!
//! The shared buffer is one parameter, sized for the largest of its tenants:
//! tenants share when their symbolic dimensions are the same (up to order),
//! and the buffer's shape is those dimensions followed by the largest
//! product of fixed ones.

use crate::iterations::IndexMap;
use crate::{Expr, Extent, Kernel, Param, ParamIdx, Stmt};
use cranelift_entity::EntityRef;
use kiln_ir::types::{DType, Dim, Shape};

/// Maps scratch parameters with disjoint lives onto shared ones (see the
/// module docs), renumbering every parameter reference. The kernel computes
/// the same values with at most as many scratch parameters, each in the
/// position of its first tenant.
pub(super) fn share(kernel: &mut Kernel) {
    let n = kernel.params.len();
    // Each scratch's first and last top-level statement.
    let scratch: Vec<bool> = kernel
        .params
        .iter()
        .map(|p| matches!(p, Param::Scratch { .. }))
        .collect();
    let mut life: Vec<Option<(usize, usize)>> = vec![None; n];
    // Whether a scratch's first statement loads it before it stores it:
    // a matmul's `k` blocks load their sums in the destination before the
    // first block discards them.
    let mut loads_first = vec![false; n];
    let mut born: Vec<ParamIdx> = Vec::new();
    for (at, stmt) in kernel.body.iter_mut().enumerate() {
        each_param(stmt, &mut |p| {
            if scratch[p.index()] {
                let span = life[p.index()].get_or_insert_with(|| {
                    born.push(*p);
                    (at, at)
                });
                span.1 = at;
            }
        });
        // Only a statement where a scratch's life starts is walked again.
        if !born.is_empty() {
            let mut touches = IndexMap::default();
            crate::iterations::first_touches(stmt, &mut touches);
            for p in born.drain(..) {
                loads_first[p.index()] = touches.get(&p) == Some(&false);
            }
        }
    }
    // Greedy by first use over each class of interchangeable buffers (the
    // interval-graph colouring that needs the fewest buffers).
    let mut tenants: Vec<(usize, (usize, usize))> = life
        .iter()
        .enumerate()
        .filter_map(|(p, span)| span.map(|s| (p, s)))
        .collect();
    tenants.sort_by_key(|&(p, (first, _))| (first, p));
    // The shared buffers: their class, their tenants' largest fixed
    // product, the last statement any tenant uses, and the parameter of
    // their first tenant.
    struct Room {
        class: (DType, Vec<kiln_ir::Sym>),
        fixed: u64,
        busy_until: usize,
        param: usize,
        /// Whether its last tenant is a nest's temporary: scratch that one
        /// top-level statement alone names.
        temporary: bool,
    }
    let mut rooms: Vec<Room> = Vec::new();
    let mut home: Vec<usize> = (0..n).collect();
    for (p, (first, last)) in tenants {
        let (dtype, shape) = match &kernel.params[p] {
            Param::Scratch { dtype, shape } => (*dtype, shape),
            _ => unreachable!("only scratch parameters have lives"),
        };
        let (class, fixed) = classify(dtype, shape);
        // The free room of the class closest in size (the largest when
        // none is big enough), so small tenants do not grow big rooms.
        let free = rooms
            .iter()
            .enumerate()
            // A room a nest's temporary left is not for a tenant that loads
            // before it stores: the statements after the nest would read
            // what its temporaries left, and its rows would not be
            // independent (`iterations::nest`), keeping it off the threads
            // (ResNet-18's 512-channel convolutions ran on one thread so).
            .filter(|(_, r)| r.class == class && r.busy_until < first)
            .filter(|(_, r)| !(r.temporary && loads_first[p]))
            .min_by_key(|(_, r)| (r.fixed < fixed, r.fixed.abs_diff(fixed)))
            .map(|(i, _)| i);
        match free {
            Some(i) => {
                let room = &mut rooms[i];
                room.fixed = room.fixed.max(fixed);
                room.busy_until = last;
                room.temporary = first == last;
                home[p] = room.param;
            }
            None => rooms.push(Room {
                class,
                fixed,
                busy_until: last,
                param: p,
                temporary: first == last,
            }),
        }
    }
    if rooms.len() == life.iter().flatten().count() {
        return;
    }
    // The new parameter list: every parameter that is its own home, in
    // order; a shared room takes the shape its largest tenant needs.
    let mut index = vec![usize::MAX; n];
    let mut params = Vec::with_capacity(n);
    for (p, param) in kernel.params.iter().enumerate() {
        if home[p] != p {
            continue;
        }
        index[p] = params.len();
        let shared = rooms.iter().find(|r| r.param == p);
        params.push(match (param, shared) {
            (Param::Scratch { dtype, shape }, Some(room))
                if classify(*dtype, shape).1 != room.fixed =>
            {
                let mut shape: Shape = room.class.1.iter().cloned().map(Dim::Sym).collect();
                shape.push(Dim::Fixed(room.fixed));
                Param::Scratch {
                    dtype: *dtype,
                    shape,
                }
            }
            _ => param.clone(),
        });
    }
    for stmt in &mut kernel.body {
        each_param(stmt, &mut |p| *p = ParamIdx::new(index[home[p.index()]]));
    }
    kernel.params = params;
}

/// A scratch buffer's class (dtype, sorted symbolic dimensions) and the
/// product of its fixed dimensions.
fn classify(dtype: DType, shape: &[Dim]) -> ((DType, Vec<kiln_ir::Sym>), u64) {
    let mut symbols = Vec::new();
    let mut fixed = 1u64;
    for d in shape {
        match d {
            Dim::Fixed(k) => fixed = fixed.saturating_mul(*k),
            Dim::Sym(s) => symbols.push(*s),
        }
    }
    symbols.sort();
    ((dtype, symbols), fixed)
}

/// Calls `f` with every parameter a statement (and what it nests) names.
fn each_param(stmt: &mut Stmt, f: &mut impl FnMut(&mut ParamIdx)) {
    match stmt {
        Stmt::Let(_, expr) => match expr {
            Expr::Input(p)
            | Expr::Load(p, _)
            | Expr::LoadBit(p, _)
            | Expr::ExtentValue(Extent::Param(p)) => f(p),
            _ => {}
        },
        Stmt::Loop { extent, body, .. } => {
            if let Extent::Param(p) = extent {
                f(p);
            }
            for s in body {
                each_param(s, f);
            }
        }
        Stmt::Store(p, ..)
        | Stmt::StoreCount(p, _)
        | Stmt::KeepRow { sel: p, .. }
        | Stmt::Prefetch(p, _) => f(p),
        Stmt::CheckNonZero(..) | Stmt::Set(..) => {}
    }
}

#[cfg(test)]
mod tests {
    use crate::tensor::tests::scratch;

    /// `layers` Linear layers of `width` units with a ReLU, from `x: f32[n,
    /// width]`.
    fn mlp(batch: &str, layers: usize) -> String {
        let mut src = format!("v0: f32[{batch}, 6] = input \"x\"\nv1: f32 = const 0.0\n");
        let mut last = 0;
        for layer in 0..layers {
            let v = 2 + layer * 3;
            src.push_str(&format!(
                "v{v}: f32[6, 6] = input \"w{layer}\"\n\
                 v{}: f32[{batch}, 6] = matmul v{last}, v{v}\n\
                 v{}: f32[{batch}, 6] = max v{}, v1\n",
                v + 1,
                v + 2,
                v + 1
            ));
            last = v + 2;
        }
        src.push_str(&format!("output \"y\" = v{last}\n"));
        src
    }

    #[test]
    fn layers_take_turns_in_two_buffers() {
        // Each hidden layer's activations live from the layer that writes
        // them to the next, which reads them: two buffers take turns.
        assert_eq!(scratch(&mlp("4", 2)), ["f32[4, 6]"]);
        assert_eq!(scratch(&mlp("4", 6)), ["f32[4, 6]", "f32[4, 6]"]);
        assert_eq!(scratch(&mlp("n", 6)), ["f32[n, 6]", "f32[n, 6]"]);
    }

    #[test]
    fn a_convolution_chain_needs_a_few_buffers_whatever_its_depth() {
        let chain = |depth: usize| {
            let mut src = String::from("v0: f32[1, 4, 9, 9] = input \"x\"\n");
            for layer in 0..depth {
                let v = 1 + layer * 2;
                src.push_str(&format!(
                    "v{v}: f32[4, 4, 3, 3] = input \"w{layer}\"\n\
                     v{}: f32[1, 4, 9, 9] = conv2d v{}, v{v} pad [1, 1, 1, 1]\n",
                    v + 1,
                    v - 1
                ));
            }
            src.push_str(&format!("output \"y\" = v{}\n", depth * 2));
            src
        };
        // One activation between layers (a convolution reads its input
        // only to copy it zero-padded), the padded copy, and four
        // accumulator planes: six buffers at any depth, where each layer
        // had six of its own.
        let two = scratch(&chain(2));
        assert_eq!(
            two,
            [
                "f32[1, 4, 9, 9]",
                "f32[1, 4, 13, 11]",
                "f32[112]",
                "f32[112]",
                "f32[112]",
                "f32[112]"
            ]
        );
        assert_eq!(scratch(&chain(12)), two);
    }

    #[test]
    fn only_buffers_of_one_dtype_and_one_symbolic_shape_are_shared() {
        // Three intermediates in turn: f32[4, 6], f64[4, 6], f32[n, 6].
        let src = "v0: f32[4, 6] = input \"x\"\n\
                   v1: f32[6, 6] = input \"w\"\n\
                   v2: f32[4, 6] = matmul v0, v1\n\
                   v3: f32[4, 6] = matmul v2, v1\n\
                   v4: f64[4, 6] = cast v3\n\
                   v5: f64[6, 6] = input \"w64\"\n\
                   v6: f64[4, 6] = matmul v4, v5\n\
                   v7: f64[4, 6] = matmul v6, v5\n\
                   v8: f32[n, 4] = input \"z\"\n\
                   v9: f32[4, 6] = input \"w2\"\n\
                   v10: f32[n, 6] = matmul v8, v9\n\
                   v11: f32[n, 6] = matmul v10, v1\n\
                   output \"a\" = v7\n\
                   output \"b\" = v11\n";
        let mut found = scratch(src);
        found.sort();
        // v2 and v3 overlap (v3 reads v2), as do v4 and v6; v10 could take
        // a room of v2 or v3 but for its `n`, and v6 one of them but for its
        // dtype.
        assert_eq!(
            found,
            [
                "f32[4, 6]",
                "f32[4, 6]",
                "f32[n, 6]",
                "f64[4, 6]",
                "f64[4, 6]"
            ]
        );
    }
}
