# Equal subexpressions merge (commutative operands in either order).
def f(x, y):
    a = sin(x) * y
    b = y * sin(x)
    return a + b
# run: x=0.0, y=3.0 => out=0.0
# optimized:
# graph "f"
# v0 "x": f64 = input "x"
# v1 "y": f64 = input "y"
# v2: f64 = sin v0
# v3 "a": f64 = mul v1, v2
# v4: f64 = add v3, v3
# output "out" = v4
