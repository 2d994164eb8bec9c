# Float division by zero follows IEEE 754; so do // and % on floats.
def f(x: float, y: float):
    return x / y, x // y, x % y
# run: x=1.0, y=0.0 => out0=inf, out1=inf, out2=nan
# run: x=-1.0, y=0.0 => out0=-inf, out1=-inf
# run: x=0.0, y=0.0 => out0=nan, out1=nan
