# Found by tests/properties.rs (PROPERTY_CASES=20000) and tests/differential.rs
# (DIFFERENTIAL_CASES=100000): `simplify` rewrote select(c, b, b) to b, dropping
# a condition that divides by zero, so the optimized graph succeeded where the
# graph as written fails. Fixed in passes/simplify.rs: the rule now requires
# that the condition cannot fail.
def f(a: int, b: int):
    return a + (b if (a // a) < a else b)
# run: a=0, b=0 => error: integer division by zero
# run: a=2, b=5 => out=7
