# The pandas-style query over a column, as a mask and as a selection vector.
# columns: *
(x > 2.0) & (x < 6.0), filter((x > 2.0) & (x < 6.0))
# run: x=[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0] => out0=[false, false, false, true, true, true, false, false, false, false], out1=[3, 4, 5]
