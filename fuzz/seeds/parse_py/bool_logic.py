# `and`/`or`/`not` take truthiness; `&`/`|`/`^`/`~` are logical on bools and
# bitwise on ints; comparisons chain.
def f(a: int, b: int, p: bool):
    return (a and b), (not a) or p, a & b, a | b, a ^ b, ~a, ~p, 0 < a < b
# run: a=6, b=3, p=false => out0=true, out1=false, out2=2, out3=7, out4=5, out5=-7, out6=true, out7=false
# run: a=0, b=3, p=false => out0=false, out1=true, out7=false
# run: a=1, b=3, p=true => out6=false, out7=true
