# The function from the torch.fx tutorial; only `a` is live.
def fn(x):
    a = x + 2.0
    b = a + 2.0
    b += b
    c = b - a
    e = a * 3
    e = e / c
    d = b + c + a
    return a
# run: x=2.0 => a=4.0
# run: x=-2.0 => a=0.0
