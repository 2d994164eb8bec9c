# A tree from the GP population, over columns (a GP engine evaluates each tree
# over thousands of rows).
# columns: *
sin(sqrt(abs(sin(x4))) * (cos(x3) - x4 / x2))
# run: x2=[1.0, -0.0], x3=[0.0, 0.0], x4=[0.0, 0.0] => out=[0.0, nan]
# run: x2=[2.0], x3=[0.0], x4=[-0.0] => out=[0.0]
