# Writes tests/filetests/ops/conv2d.kiln and pool2d.kiln with expected values from
# torch (float64; small integers, so every sum is exact whatever the order):
#   .venv/bin/python tests/gen/window_filetests.py tests/filetests/ops
import torch, torch.nn.functional as F
torch.manual_seed(7)

def fmt(t, dt):
    vals = t.flatten().tolist()
    if dt.startswith("i"):
        return "[" + ", ".join(str(int(v)) for v in vals) + "]"
    out = []
    for v in vals:
        if v != v: out.append("nan")
        elif v == float("inf"): out.append("inf")
        elif v == float("-inf"): out.append("-inf")
        else: out.append(repr(float(v)))
    return "[" + ", ".join(out) + "]"

def shape(t):
    return "[" + ", ".join(str(d) for d in t.shape) + "]"

def conv(name, x, w, stride=(1,1), pad=(0,0,0,0), dil=(1,1), groups=1, dt="f64"):
    xp = F.pad(x, (pad[2], pad[3], pad[0], pad[1]))
    y = F.conv2d(xp, w, stride=stride, dilation=dil, groups=groups)
    attrs = ""
    if stride != (1,1): attrs += f" stride [{stride[0]}, {stride[1]}]"
    if pad != (0,0,0,0): attrs += f" pad [{', '.join(map(str,pad))}]"
    if dil != (1,1): attrs += f" dilation [{dil[0]}, {dil[1]}]"
    if groups != 1: attrs += f" groups {groups}"
    return (name, f"{dt}{shape(y)} = conv2d X, W{attrs}", (x, w), y, dt)

def rint(*s): return torch.randint(-4, 5, s).double()

cases = [
    conv("same", rint(1,2,5,5), rint(3,2,3,3), pad=(1,1,1,1)),
    conv("strided_dilated_grouped", rint(2,4,7,6), rint(4,2,2,3), stride=(2,1), pad=(0,1,1,0), dil=(2,2), groups=2),
    conv("depthwise", rint(1,3,4,5), rint(6,1,3,2), stride=(1,2), pad=(2,0,0,1), groups=3),
    conv("pad_beyond_half", rint(1,1,3,2), rint(2,1,2,2), stride=(2,2), pad=(3,3,3,3)),
    conv("one_by_one", rint(1,3,3,3), rint(2,3,1,1), stride=(2,2)),
    conv("ints", rint(1,2,4,4), rint(2,2,3,3), pad=(1,1,1,1), dt="i32"),
]

def pool(name, kind, x, k, stride, pad=(0,0,0,0), dil=(1,1), ceil=False, cip=False, dt="f64"):
    # torch takes symmetric padding: pad asymmetric cases with -inf (max) or
    # handle avg by hand below.
    if kind == "max":
        assert pad[0] == pad[1] and pad[2] == pad[3]
        y = F.max_pool2d(x, k, stride, (pad[0], pad[2]), dil, ceil_mode=ceil)
    else:
        assert pad[0] == pad[1] and pad[2] == pad[3]
        y = F.avg_pool2d(x, k, stride, (pad[0], pad[2]), ceil_mode=ceil, count_include_pad=cip)
    attrs = f" kernel [{k[0]}, {k[1]}] stride [{stride[0]}, {stride[1]}]"
    if pad != (0,0,0,0): attrs += f" pad [{', '.join(map(str,pad))}]"
    if dil != (1,1): attrs += f" dilation [{dil[0]}, {dil[1]}]"
    if ceil: attrs += " ceil_mode"
    if cip: attrs += " count_include_pad"
    return (name, f"{dt}{shape(y)} = {kind}_pool2d X{attrs}", (x,), y, dt)

def emit(title, comment, cases, path):
    lines = [f"# {l}" for l in comment.strip().splitlines()]
    lines.append(f'graph "{title}"')
    v = 0
    outs = []
    runs_in = []
    runs_out = []
    for (name, op, args, y, dt) in cases:
        names = []
        for i, a in enumerate(args):
            nm = f"{name}_{'xw'[i]}"
            if i == 1 and name.endswith("_const"):
                lines.append(f"v{v}: {dt}{shape(a)} = tensor " + fmt(a, dt)[1:-1])
            else:
                lines.append(f'v{v}: {dt}{shape(a)} = input "{nm}"')
                runs_in.append(f"{nm}={fmt(a, dt)}")
            names.append(f"v{v}")
            v += 1
        op = op.replace("X", names[0]).replace("W", names[1] if len(names) > 1 else "")
        lines.append(f"v{v}: {op}")
        outs.append(f'output "{name}" = v{v}')
        runs_out.append(f"{name}={fmt(y, dt)}")
        v += 1
    lines += outs
    lines.append("# run: " + ", ".join(runs_in) + " => " + ", ".join(runs_out))
    open(path, "w").write("\n".join(lines) + "\n")

import sys
out = sys.argv[1]
cases[0] = (cases[0][0] + "_const",) + cases[0][1:]
emit("conv2d", """
conv2d over NCHW with weights [out, in / groups, kh, kw]: stride, asymmetric
padding [top, bottom, left, right], dilation, groups (depthwise: groups = c),
padding beyond half the kernel, a 1x1 kernel, ints. Small integers, so every
sum is exact in any order; the expected values are torch's (F.pad, F.conv2d
in float64), written by tests/gen/window_filetests.py.
""", cases, f"{out}/conv2d.kiln")

x = torch.randint(-9, 10, (2, 2, 7, 6)).double()
pools = [
    pool("max_3x3_s2_p1", "max", x, (3,3), (2,2), (1,1,1,1)),
    pool("max_ceil", "max", x, (2,2), (2,2), ceil=True),
    pool("max_dilated", "max", x, (2,3), (1,2), (1,1,1,1), dil=(2,2), ceil=True),
    pool("avg_3x3_s2_p1", "avg", x, (3,3), (2,2), (1,1,1,1)),
    pool("avg_count_pad", "avg", x, (3,3), (2,2), (1,1,1,1), cip=True),
    pool("avg_ceil_count_pad", "avg", x, (3,2), (2,3), (1,1,1,1), ceil=True, cip=True),
    pool("avg_ceil", "avg", x, (3,2), (2,3), (1,1,1,1), ceil=True),
    pool("max_ints", "max", x, (3,3), (3,3), (1,1,1,1), ceil=True, dt="i32"),
]
emit("pool2d", """
max_pool2d and avg_pool2d: kernel, stride, padding, dilation (max),
ceil_mode (the last window may hang over the bottom or right padding, but
starts inside), count_include_pad (avg divides by the window clipped to the
padded input, else by its taps inside the input). Expected values are
torch's (F.max_pool2d, F.avg_pool2d in float64), written by
tests/gen/window_filetests.py.
""", pools, f"{out}/pool2d.kiln")

# A small CNN, as the objects test builds one, in f32 with values on a grid
# (weights multiples of 1/8, inputs of 1/4), so every sum is exact and each
# average one division: torch's f32 results are the bits every tier must give.
def grid(n, mul, mod, off, step):
    return torch.tensor([((i * mul) % mod - off) * step for i in range(n)], dtype=torch.float32)

x = grid(120, 29, 23, 11, 0.25).reshape(2, 2, 6, 5)
w1 = grid(54, 37, 17, 8, 0.125).reshape(3, 2, 3, 3)
b1 = torch.tensor([0.5, -0.25, 0.125])
w2 = grid(12, 11, 7, 3, 0.5).reshape(6, 1, 2, 1)
y = F.conv2d(F.pad(x, (1, 1, 1, 0)), w1, stride=2) + b1.reshape(3, 1, 1)
y = torch.relu(y)
z = F.conv2d(F.pad(y, (0, 0, 1, 0)), w2, dilation=(2, 1), groups=3)
outs = {
    "max": F.max_pool2d(z, 2, 2, 1, ceil_mode=True),
    "avg": F.avg_pool2d(y, 2, 2, 1, count_include_pad=True),
    "avg_ceil": F.avg_pool2d(F.pad(y, (0, 0, 0, 0)), (3, 2), 2, (1, 0), ceil_mode=True, count_include_pad=False),
    "global": z.mean(dim=(2, 3), keepdim=True),
}
t = lambda v: ", ".join(repr(float(a)) for a in v.flatten().tolist())
src = f'''# A small CNN on every tier (the wasm modules included): a strided
# convolution with asymmetric padding and a bias, ReLU, a dilated depthwise
# convolution, max pooling with ceil_mode and padding, average pooling
# counting and not counting the padding, global average pooling. Values on a
# grid make every sum exact, so torch's f32 results (written by
# tests/gen/window_filetests.py) are the bits.
graph "small_cnn"
v0: f32[2, 2, 6, 5] = input "x"
v1: f32[3, 2, 3, 3] = tensor {t(w1)}
v2: f32[2, 3, 3, 3] = conv2d v0, v1 stride [2, 2] pad [1, 0, 1, 1]
v3: f32[3, 1, 1] = tensor 0.5, -0.25, 0.125
v4: f32[2, 3, 3, 3] = add v2, v3
v5: f32 = const 0.0
v6: f32[2, 3, 3, 3] = max v4, v5
v7: f32[6, 1, 2, 1] = tensor {t(w2)}
v8: f32[2, 6, 2, 3] = conv2d v6, v7 pad [1, 0, 0, 0] dilation [2, 1] groups 3
v9: f32[2, 6, 2, 2] = max_pool2d v8 kernel [2, 2] stride [2, 2] pad [1, 1, 1, 1] ceil_mode
v10: f32[2, 3, 2, 2] = avg_pool2d v6 kernel [2, 2] stride [2, 2] pad [1, 1, 1, 1] count_include_pad
v11: f32[2, 3, 2, 2] = avg_pool2d v6 kernel [3, 2] stride [2, 2] pad [1, 1, 0, 0] ceil_mode
v12: f32[2, 6, 1, 1] = reduce_axes v8 [2, 3] mean keepdim
output "max" = v9
output "avg" = v10
output "avg_ceil" = v11
output "global" = v12
# run: x=[{t(x)}] => ''' + ", ".join(f"{k}=[{t(v)}]" for k, v in outs.items()) + "\n"
open(f"{out}/small_cnn.kiln", "w").write(src)
