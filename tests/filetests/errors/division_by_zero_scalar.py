# A scalar integer division by zero names the variable it was assigned to; a
# dead one (not used by any output) is not an error.
def f(a: int, b: int):
    q = a // b
    unused = b % 0
    return q
# run: a=7, b=2 => q=3
# run: a=7, b=0 => error: integer division by zero in v2 (`q`)
