# The real-valued NumPy ufuncs numexpr and pandas.eval accept, with NumPy's
# values (written from NumPy 2's definitions, checked against numpy 2.4):
# sign is 0.0 for either zero and NaN for NaN; signbit of -0.0 is true; fmax
# and fmin ignore a NaN and keep the first of two equal zeros; clip is
# minimum(maximum(x, lo), hi); logaddexp(x, x) is x + ln 2.
import numpy as np
def f(x: float, y: float, k: int):
    return (np.arcsinh(x), np.arccosh(y), np.arctanh(x), np.sign(x), np.sign(k),
            np.signbit(x), np.nextafter(x, y), np.isinf(x), np.isfinite(x), np.isinf(k),
            np.logaddexp(x, y), np.deg2rad(y), np.rad2deg(y), np.clip(x, -1.0, 1.0),
            np.fmax(x, y), np.fmin(x, y), np.real(x), np.conj(k), np.clip(k, 0, 10))
# run: x=0.0, y=1.0, k=-3 => out0=0.0, out1=0.0, out2=0.0, out3=0.0, out4=-1, out5=false, out6=5e-324, out7=false, out8=true, out9=false, out10=1.3132616875182228, out11=0.017453292519943295, out12=57.29577951308232, out13=0.0, out14=1.0, out15=0.0, out16=0.0, out17=-3, out18=0
# run: x=-0.0, y=0.0, k=0 => out0=-0.0, out2=-0.0, out3=0.0, out4=0, out5=true, out6=0.0, out10=0.6931471805599453, out11=0.0, out13=-0.0, out14=-0.0, out15=-0.0, out16=-0.0, out18=0
# run: x=nan, y=2.0, k=12 => out0=nan, out1=1.3169578969248166, out2=nan, out3=nan, out4=1, out5=false, out6=nan, out7=false, out8=false, out10=nan, out13=nan, out14=2.0, out15=2.0, out18=10
# run: x=-inf, y=-inf, k=5 => out0=-inf, out1=nan, out3=-1.0, out5=true, out7=true, out8=false, out10=-inf, out11=-inf, out13=-1.0, out14=-inf, out15=-inf
# run: x=inf, y=nan, k=1 => out0=inf, out2=nan, out3=1.0, out6=nan, out7=true, out8=false, out10=nan, out13=1.0, out14=inf, out15=inf
# run: x=1.0, y=180.0, k=7 => out0=0.881373587019543, out2=inf, out6=1.0000000000000002, out10=180.0, out11=3.141592653589793, out12=10313.240312354817, out13=1.0, out14=180.0, out15=1.0
