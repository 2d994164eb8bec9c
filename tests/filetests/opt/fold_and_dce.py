# Constant subexpressions fold with the semantics module; dead code goes.
def f(x):
    k = (2 + 3 * 4) / 8
    dead = x * 100.0
    return x * k + 10 // 3
# run: x=2.0 => out=6.5
# optimized:
# graph "f"
# v0 "x": f64 = input "x"
# v1 "k": f64 = const 1.75
# v2: f64 = mul v0, v1
# v3: f64 = const 3.0
# v4: f64 = add v2, v3
# output "out" = v4
