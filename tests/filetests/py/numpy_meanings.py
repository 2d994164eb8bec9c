# Where NumPy and kiln's IR differ, the Python subset means NumPy (checked
# against numpy 2.4): `**` with the literal exponents NumPy special-cases for
# float arrays (0.5 is sqrt: (-inf) ** 0.5 is NaN, (-0.0) ** 0.5 is -0.0;
# 2 is x*x, -1 is 1/x, 1 is x), and shifts by a count outside [0, width):
# 0 for `<<`, 0 or -1 (the sign) for `>>`.
def f(x: float, s: f32, a: i32, c: i32):
    return x ** 0.5, s ** 0.5, x ** 2, x ** -1, x ** 1.0, x ** 0, a << c, a >> c, x ** 3.0
# run: x=-inf, s=-inf, a=1, c=32 => out0=nan, out1=nan, out2=inf, out3=-0.0, out4=-inf, out5=1.0, out6=0, out7=0, out8=-inf
# run: x=-0.0, s=-0.0, a=-8, c=33 => out0=-0.0, out1=-0.0, out2=0.0, out3=-inf, out4=-0.0, out5=1.0, out6=0, out7=-1, out8=-0.0
# run: x=4.0, s=2.0, a=-8, c=-1 => out0=2.0, out1=1.4142135, out2=16.0, out3=0.25, out4=4.0, out5=1.0, out6=0, out7=-1, out8=64.0
# run: x=nan, s=nan, a=5, c=31 => out0=nan, out1=nan, out2=nan, out3=nan, out4=nan, out5=1.0, out6=-2147483648, out7=0
# run: x=-4.0, s=-4.0, a=-8, c=2 => out0=nan, out1=nan, out2=16.0, out3=-0.25, out6=-32, out7=-2, out8=-64.0
