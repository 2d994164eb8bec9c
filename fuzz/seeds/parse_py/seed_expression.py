# The seed expression from the issue: constants fold, `/` is true division.
(2+3*b+33*(10/2)+1+3/3+a)/2
# run: a=1.0, b=2.0 => out=88.0
# run: a=0.0, b=0.0 => out=84.5
