; fmaf for wasm32, which has no fused multiply-add: a*b + c rounded once to
; float32, as wasm.js's JavaScript fmaf computes it (the product of two
; float32s is exact in float64; the sum is made exact as s + e by TwoSum;
; an even s with e != 0 moves one ulp toward the exact sum, rounding to odd;
; float32's rounding of that is the correctly rounded result). No fast-math
; flags, so LLVM keeps every IEEE operation as written. wasm.js carries the
; linked module in base64; `bash build.sh` makes it again.
target triple = "wasm32-unknown-unknown"

define float @fmaf(float %a, float %b, float %c) {
entry:
  %ad = fpext float %a to double
  %bd = fpext float %b to double
  %cd = fpext float %c to double
  %p = fmul double %ad, %bd
  %s = fadd double %p, %cd
  %z = fsub double %s, %p
  %sz = fsub double %s, %z
  %t1 = fsub double %p, %sz
  %t2 = fsub double %cd, %z
  %e = fadd double %t1, %t2
  %bits = bitcast double %s to i64
  %low = and i64 %bits, 1
  %even = icmp eq i64 %low, 0
  %inexact = fcmp one double %e, 0.0
  %fix = and i1 %even, %inexact
  %epos = fcmp ogt double %e, 0.0
  %spos = fcmp ogt double %s, 0.0
  %away = icmp eq i1 %epos, %spos
  %up = add i64 %bits, 1
  %down = sub i64 %bits, 1
  %moved = select i1 %away, i64 %up, i64 %down
  %nb = select i1 %fix, i64 %moved, i64 %bits
  %r = bitcast i64 %nb to double
  %f = fptrunc double %r to float
  ret float %f
}
