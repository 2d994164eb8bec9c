//! Arbitrary graphs that may be invalid (forward and dangling references, wrong
//! arity, wrong declared types, broken signatures): the verifier reports, never
//! panics. A graph it accepts must optimize, lower, print and parse back, and
//! run in the interpreter without panicking.
#![no_main]

use arbitrary::{Result, Unstructured};
use kiln::ir::{
    BinaryOp, CmpOp, DType, Dim, Graph, NodeData, Op, ReduceOp, TensorType, Type, UnaryOp, Value,
};
use kiln::Data;
use libfuzzer_sys::fuzz_target;

fn ty(u: &mut Unstructured) -> Result<Type> {
    let dtype = *u.choose(&DType::ALL)?;
    Ok(match u.int_in_range(0..=5u8)? {
        0 => Type::Selection(Dim::Sym("n".into())),
        1 => Type::Tensor(TensorType {
            dtype,
            shape: vec![Dim::Sym("m".into())],
        }),
        2 => Type::Tensor(TensorType {
            dtype,
            shape: vec![Dim::Fixed(u.int_in_range(0..=3)?)],
        }),
        // Tensors of rank 2 and 3, sometimes led by the symbol.
        5 if u.ratio(1u8, 2u8)? => Type::Tensor(TensorType {
            dtype,
            shape: shape(u)?,
        }),
        3 | 4 => Type::Tensor(TensorType {
            dtype,
            shape: vec![Dim::Sym("n".into())],
        }),
        _ => Type::scalar(dtype),
    })
}

fn shape(u: &mut Unstructured) -> Result<Vec<Dim>> {
    let mut dims = Vec::new();
    for axis in 0..u.int_in_range(2..=3usize)? {
        dims.push(if axis == 0 && u.ratio(1u8, 4u8)? {
            Dim::Sym("n".into())
        } else {
            Dim::Fixed(u.int_in_range(0..=4)?)
        });
    }
    Ok(dims)
}

/// Any axis numbers, in range or not.
fn axes(u: &mut Unstructured) -> Result<Vec<u32>> {
    (0..u.int_in_range(0..=3usize)?)
        .map(|_| u.int_in_range(0..=3u32))
        .collect()
}

fn op(u: &mut Unstructured) -> Result<Op> {
    Ok(match u.int_in_range(0..=15u8)? {
        9 => Op::MatMul,
        10 => Op::Transpose(axes(u)?),
        11 => Op::Reshape(shape(u)?),
        12 => Op::ReduceAxes {
            op: *u.choose(ReduceOp::ALL)?,
            axes: axes(u)?,
            keepdim: u.arbitrary()?,
        },
        13 => Op::Concat(u.int_in_range(0..=3)?),
        14 => {
            let mut ranges = Vec::new();
            for _ in 0..u.int_in_range(0..=3usize)? {
                ranges.push(if u.ratio(1u8, 3u8)? {
                    None
                } else {
                    // Sometimes empty, reversed, step 0 or past the end.
                    Some(kiln::ir::SliceRange {
                        start: u.int_in_range(0..=5)?,
                        stop: u.int_in_range(0..=5)?,
                        step: u.int_in_range(-3..=3)?,
                    })
                });
            }
            Op::Slice(ranges)
        }
        15 => Op::BroadcastTo(shape(u)?),
        0 => {
            let dtype = *u.choose(&DType::ALL)?;
            Op::Const(kiln_fuzzgen::scalar(u, dtype)?)
        }
        1 => Op::Unary(*u.choose(UnaryOp::ALL)?),
        2 => Op::Binary(*u.choose(BinaryOp::ALL)?),
        3 => Op::Compare(*u.choose(CmpOp::ALL)?),
        4 => Op::Select,
        5 => Op::Cast(*u.choose(&DType::ALL)?),
        6 => Op::Reduce(*u.choose(ReduceOp::ALL)?),
        7 => Op::Filter,
        _ => Op::Input {
            index: u.int_in_range(0..=3)?,
        },
    })
}

fn graph(u: &mut Unstructured) -> Result<Graph> {
    let mut g = Graph::new("verify");
    for input_idx in 0..u.int_in_range(0..=3usize)? {
        let t = ty(u)?;
        g.push_input(&format!("in{input_idx}"), t);
    }
    for _ in 0..u.int_in_range(0..=24usize)? {
        let op = op(u)?;
        // Mostly the right arity and earlier arguments, sometimes not.
        // (`concat` takes one or more: 1 to 3 here.)
        let arity = match op.arity() {
            Some(n) if u.ratio(9u8, 10u8)? => n,
            None if u.ratio(9u8, 10u8)? => u.int_in_range(1..=3)?,
            _ => u.int_in_range(0..=4)?,
        };
        let len = g.len() as u32;
        let mut args = Vec::with_capacity(arity);
        for _ in 0..arity {
            let id = if len > 0 && u.ratio(9u8, 10u8)? {
                u.int_in_range(0..=len - 1)?
            } else {
                u.int_in_range(0..=len + 2)?
            };
            args.push(Value::from_u32(id));
        }
        // Usually the type the op's rule gives, so deep valid graphs happen.
        let arg_types: Option<Vec<&Type>> = args.iter().map(|&a| g.get(a).map(|n| &n.ty)).collect();
        let rule = arg_types.and_then(|ts| kiln::ir::typing::result_type(&op, &ts).ok());
        let declared = match rule {
            Some(t) if u.ratio(7u8, 8u8)? => t,
            _ => ty(u)?,
        };
        g.push_node(NodeData {
            op,
            args,
            ty: declared,
        });
    }
    for out_idx in 0..u.int_in_range(0..=3usize)? {
        let id = u.int_in_range(0..=g.len() as u32 + 1)?;
        g.push_output(&format!("out{out_idx}"), Value::from_u32(id));
    }
    Ok(g)
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(g) = graph(&mut u) else { return };
    let Ok(verified) = kiln::verify(g.clone()) else {
        return;
    };
    let optimized = kiln::optimize(&verified).expect("a verified graph optimizes");
    let _ = kiln::kernel::lower(&optimized, &Default::default());
    let printed = kiln::ir::text::print(&g);
    assert_eq!(
        kiln::ir::text::parse(&printed).expect("printed graphs parse"),
        g
    );
    let n_rows = u.int_in_range(0..=4usize).unwrap_or(0);
    let inputs: Vec<Data> = g
        .inputs()
        .iter()
        .map(|i| {
            let t = g
                .ty(i.value)
                .as_tensor()
                .expect("verified inputs are tensors");
            let value = |u: &mut Unstructured| {
                kiln_fuzzgen::scalar(u, t.dtype).unwrap_or(kiln::Scalar::zero(t.dtype))
            };
            if t.is_scalar() {
                Data::Scalar(value(&mut u))
            } else {
                let mut buf = kiln::Buffer::with_capacity(t.dtype, n_rows);
                for _ in 0..n_rows {
                    buf.push(value(&mut u));
                }
                Data::Column(buf)
            }
        })
        .collect();
    // Wrong lengths for fixed dims are input errors, not panics.
    let _ = kiln::interp::run(&verified, &inputs);
});
