# A scalar parameter broadcasts against columns; reductions give scalars.
# The annotation `float[n]` makes `x` a column.
def f(x: float[n], scale):
    y = x * scale
    return y, sum(y), mean(y), min(y), max(y), len(y)
# run: x=[1.0, 2.0, 3.0], scale=2.0 => y=[2.0, 4.0, 6.0], out1=12.0, out2=4.0, out3=2.0, out4=6.0, out5=3
# run: x=[], scale=2.0 => y=[], out1=0.0, out2=nan, out3=inf, out4=-inf, out5=0
