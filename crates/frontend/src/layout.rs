//! Layout ops both tensor frontends need, built once from kiln's `slice`,
//! `concat`, `reshape` and `broadcast_to`: framework axes (negative counts
//! from the end), Python slice bounds, `split` into pieces, `stack`,
//! `-1` in a target shape. Errors are messages for the importer to place.

use kiln_ir::{Builder, Dim, Op, Shape, SliceRange, TypeError, Value};

fn te(e: TypeError) -> String {
    e.message
}

/// The shape of a value (a scalar's is `[]`).
pub fn shape(b: &Builder, v: Value) -> Shape {
    b.ty(v)
        .as_tensor()
        .map(|t| t.shape.clone())
        .unwrap_or_default()
}

/// A framework axis (`-1` is the last) for a tensor of `rank` axes.
pub fn axis(k: i64, rank: usize) -> Result<usize, String> {
    let r = rank as i64;
    if (-r..r).contains(&k) {
        Ok(k.rem_euclid(r) as usize)
    } else {
        Err(format!("axis {k} is out of range for rank {rank}"))
    }
}

/// The fixed extent of `axis` of `v`, or an error naming the symbol.
pub fn fixed_extent(b: &Builder, v: Value, axis: usize) -> Result<u64, String> {
    match &shape(b, v)[axis] {
        Dim::Fixed(n) => Ok(*n),
        Dim::Sym(s) => Err(format!(
            "unsupported: slicing along the symbolic dimension `{s}`"
        )),
    }
}

/// Python's slice `start:stop` (each optional, negatives from the end,
/// clamped) of an axis of extent `extent`, as `(start, stop)`, for a step of
/// 1 or more.
pub fn python_bounds(start: Option<i64>, stop: Option<i64>, extent: u64) -> (u64, u64) {
    let n = extent as i64;
    let clamp = |k: i64| {
        let k = if k < 0 { k + n } else { k };
        k.clamp(0, n) as u64
    };
    (start.map_or(0, clamp), stop.map_or(extent, clamp))
}

/// One item of a Python index (`x[1, 2:5, None, ...]`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Index {
    /// An int: that element, without its axis (negatives from the end).
    At(i64),
    /// `start:stop:step`, each optional (a negative step: backwards).
    Slice([Option<i64>; 3]),
    /// `None` / `np.newaxis`: a new axis of extent 1.
    NewAxis,
    /// `...`: as many whole axes as the other items leave.
    Ellipsis,
}

/// Python's basic indexing (NumPy's and torch's): the items apply to the
/// axes from the left, an int removes its axis, `None` inserts one, one
/// `...` skips the axes the others do not name.
pub fn index(b: &mut Builder, x: Value, items: &[Index]) -> Result<Value, String> {
    let rank = shape(b, x).len();
    let used = items
        .iter()
        .filter(|a| matches!(a, Index::At(_) | Index::Slice(_)))
        .count();
    if used > rank {
        return Err(format!("{used} indices for a tensor of rank {rank}"));
    }
    let mut v = x;
    let mut axis = 0;
    let mut ellipsis = false;
    for item in items {
        match *item {
            Index::At(k) => v = index_axis(b, v, axis, k)?,
            Index::Slice(bounds) => {
                v = slice_python(b, v, axis, bounds)?;
                axis += 1;
            }
            Index::NewAxis => {
                v = unsqueeze(b, v, axis)?;
                axis += 1;
            }
            Index::Ellipsis if !ellipsis => {
                ellipsis = true;
                axis += rank - used;
            }
            Index::Ellipsis => return Err("an index can only have one `...`".into()),
        }
    }
    Ok(v)
}

/// `x[start:stop:step]` along `axis` with Python's bounds and steps (a
/// negative step reads backwards: `x[::-1]`, `x[5:1:-2]`).
pub fn slice_python(
    b: &mut Builder,
    x: Value,
    axis: usize,
    [start, stop, step]: [Option<i64>; 3],
) -> Result<Value, String> {
    let step = step.unwrap_or(1);
    if step == 0 {
        return Err("slice step cannot be zero".into());
    }
    if start.is_none() && stop.is_none() && step == 1 {
        return Ok(x);
    }
    let extent = fixed_extent(b, x, axis)?;
    let range = SliceRange::python(start, stop, step, extent).ok_or_else(|| {
        let bound = |k: Option<i64>| k.map(|k| k.to_string()).unwrap_or_default();
        format!(
            "the slice {}:{}:{step} of axis {axis} (extent {extent}) is empty; kiln has no empty tensors",
            bound(start),
            bound(stop)
        )
    })?;
    slice_range(b, x, axis, range)
}

/// `x[index]` along `axis`: that element, without the axis.
pub fn index_axis(b: &mut Builder, x: Value, axis: usize, index: i64) -> Result<Value, String> {
    let extent = fixed_extent(b, x, axis)?;
    if !(-(extent as i64)..extent as i64).contains(&index) {
        return Err(format!("index {index} is out of range for extent {extent}"));
    }
    let i = index.rem_euclid(extent as i64) as u64;
    let piece = slice_axis(b, x, axis, (i, i + 1))?;
    squeeze(b, piece, axis)
}

/// `v[start:stop]` along `axis`, the other axes whole; `stop` is clamped to
/// the extent (`u64::MAX`: to the end). The whole axis is `v` itself (so a
/// symbolic axis passes through whole); an empty range is an error (kiln
/// has no empty tensors).
pub fn slice_axis(
    b: &mut Builder,
    v: Value,
    axis: usize,
    (start, stop): (u64, u64),
) -> Result<Value, String> {
    let extent = match &shape(b, v)[axis] {
        // Only the whole of a symbolic axis can be taken.
        Dim::Sym(_) if start == 0 && stop == u64::MAX => return Ok(v),
        _ => fixed_extent(b, v, axis)?,
    };
    let stop = stop.min(extent);
    if start >= stop {
        return Err(format!(
            "the slice {start}:{stop} of axis {axis} (extent {extent}) is empty; kiln has no empty tensors"
        ));
    }
    slice_range(
        b,
        v,
        axis,
        SliceRange {
            start,
            stop,
            step: 1,
        },
    )
}

/// `v` along `axis` by a non-empty `range` within its fixed extent, the
/// other axes whole; the whole axis in order is `v` itself.
fn slice_range(b: &mut Builder, v: Value, axis: usize, range: SliceRange) -> Result<Value, String> {
    let rank = shape(b, v).len();
    if range.start == 0 && range.step == 1 && Dim::Fixed(range.stop) == shape(b, v)[axis] {
        return Ok(v);
    }
    let mut ranges = vec![None; rank];
    ranges[axis] = Some(range);
    b.op(Op::Slice(ranges), &[v]).map_err(te)
}

/// `v` cut along `axis` into pieces of the given sizes, in order.
pub fn split(b: &mut Builder, v: Value, axis: usize, sizes: &[u64]) -> Result<Vec<Value>, String> {
    let extent = fixed_extent(b, v, axis)?;
    if sizes.iter().sum::<u64>() != extent {
        return Err(format!(
            "split sizes {sizes:?} do not add up to the extent {extent} of axis {axis}"
        ));
    }
    let mut start = 0;
    let mut pieces = Vec::with_capacity(sizes.len());
    for &size in sizes {
        pieces.push(slice_axis(b, v, axis, (start, start + size))?);
        start += size;
    }
    Ok(pieces)
}

/// Pieces of `size` along `axis` (torch `split(int)`: the last may be
/// smaller); `chunks` pieces as torch `chunk` does (size `ceil(n / chunks)`).
pub fn piece_sizes(extent: u64, size: u64) -> Result<Vec<u64>, String> {
    if size == 0 {
        return Err("a split size of 0".into());
    }
    let mut sizes = vec![size; (extent / size) as usize];
    if !extent.is_multiple_of(size) {
        sizes.push(extent % size);
    }
    Ok(sizes)
}

/// `v` with an axis of extent 1 inserted at `axis` (0..=rank).
pub fn unsqueeze(b: &mut Builder, v: Value, axis: usize) -> Result<Value, String> {
    let mut s = shape(b, v);
    s.insert(axis, Dim::Fixed(1));
    b.op(Op::Reshape(s), &[v]).map_err(te)
}

/// `v` without its axis `axis`, which must have extent 1.
pub fn squeeze(b: &mut Builder, v: Value, axis: usize) -> Result<Value, String> {
    let mut s = shape(b, v);
    if s[axis] != Dim::Fixed(1) {
        return Err(format!("cannot squeeze axis {axis}, which is {}", s[axis]));
    }
    s.remove(axis);
    b.op(Op::Reshape(s), &[v]).map_err(te)
}

/// `stack(values, axis)`: each gets a new axis there, then one `concat`.
pub fn stack(b: &mut Builder, values: &[Value], axis: usize) -> Result<Value, String> {
    let parts = values
        .iter()
        .map(|&v| unsqueeze(b, v, axis))
        .collect::<Result<Vec<_>, _>>()?;
    concat(b, &parts, axis)
}

/// `concat(values, axis)`; one value is itself.
pub fn concat(b: &mut Builder, values: &[Value], axis: usize) -> Result<Value, String> {
    match values {
        [] => Err("concat of no tensors".into()),
        [v] => Ok(*v),
        _ => b.op(Op::Concat(axis as u32), values).map_err(te),
    }
}

/// `unstack(v, axis)`: every index along `axis`, without that axis.
pub fn unstack(b: &mut Builder, v: Value, axis: usize) -> Result<Vec<Value>, String> {
    let extent = fixed_extent(b, v, axis)?;
    (0..extent)
        .map(|i| {
            let piece = slice_axis(b, v, axis, (i, i + 1))?;
            squeeze(b, piece, axis)
        })
        .collect()
}

/// A target shape with at most one `-1`, inferred from `v`'s element
/// count (torch `view`/`reshape`, TF `Reshape`).
pub fn target_shape(b: &Builder, v: Value, wanted: &[i64]) -> Result<Shape, String> {
    let total = shape(b, v).iter().try_fold(1u64, |acc, d| match d {
        Dim::Fixed(n) => acc
            .checked_mul(*n)
            .ok_or_else(|| "too many elements".to_string()),
        Dim::Sym(s) => Err(format!(
            "unsupported: a reshape along the symbolic dimension `{s}`"
        )),
    })?;
    let mut known: u64 = 1;
    let mut infer = None;
    let mut dims = Vec::with_capacity(wanted.len());
    for (idx, &d) in wanted.iter().enumerate() {
        match d {
            -1 if infer.is_none() => {
                infer = Some(idx);
                dims.push(Dim::Fixed(0));
            }
            d if d >= 0 => {
                known = known.saturating_mul(d as u64);
                dims.push(Dim::Fixed(d as u64));
            }
            d => return Err(format!("a shape takes sizes (and one -1), got {d}")),
        }
    }
    if let Some(idx) = infer {
        if known == 0 || total % known != 0 {
            return Err(format!(
                "cannot infer -1 in a shape of {known} for {total} elements"
            ));
        }
        dims[idx] = Dim::Fixed(total / known);
    }
    Ok(dims)
}

/// `broadcast_to(v, shape)`; the same shape is `v` itself.
pub fn broadcast_to(b: &mut Builder, v: Value, to: Shape) -> Result<Value, String> {
    if shape(b, v) == to {
        return Ok(v);
    }
    b.op(Op::BroadcastTo(to), &[v]).map_err(te)
}
