# Promotion: literals are weak (f32 * 2.5 stays f32, i32 + 1 stays i32); ints
# and floats meet in the float type; `/` and `**` compute in floating point.
def f(s: f32, k: i32, n: int, flag: bool):
    a = s * 2.5
    b = k + 1
    c = n * s
    d = k / 2
    e = flag + flag
    g = n ** 2
    return a, b, c, d, e, g
# run: s=1.5, k=2147483647, n=3, flag=true => a=3.75, b=-2147483648, c=4.5, d=1073741823.5, e=2, g=9.0
