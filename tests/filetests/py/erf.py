# The error function and its complement, at points where they are exact
# (values far from 0 round to +-1 and 0/2 in f64), in f64 and f32.
import math
def f(x: float, y: f32):
    return math.erf(x), math.erfc(x), erf(y), erfc(y)
# run: x=0.0, y=0.0 => out0=0.0, out1=1.0, out2=0.0, out3=1.0
# run: x=-0.0, y=-0.0 => out0=-0.0, out1=1.0, out2=-0.0, out3=1.0
# run: x=inf, y=inf => out0=1.0, out1=0.0, out2=1.0, out3=0.0
# run: x=-inf, y=-inf => out0=-1.0, out1=2.0, out2=-1.0, out3=2.0
# run: x=nan, y=nan => out0=nan, out1=nan, out2=nan, out3=nan
# run: x=10.0, y=20.0 => out0=1.0, out1=2.088487583762545e-45, out2=1.0, out3=0.0
# run: x=-30.0, y=-30.0 => out0=-1.0, out1=2.0, out2=-1.0, out3=2.0
