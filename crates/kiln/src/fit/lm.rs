//! Levenberg–Marquardt as MINPACK's `lmder` does it (Moré, *The
//! Levenberg–Marquardt algorithm: implementation and theory*, 1978), for
//! the few parameters of an expression over many rows: a trust region on
//! the scaled step `‖D δ‖ ≤ Δ`, `D` the largest column norms of the
//! Jacobian seen so far; each step solves `(JᵀJ + λ D²) δ = -Jᵀr` for the
//! `λ` that fits the region (0, Gauss–Newton, when that fits), found as
//! MINPACK's `lmpar` finds it, by Cholesky of the small normal equations
//! (pivoted where a constant only repeats another's effect, as `qrfac`
//! pivots); the region grows after good steps and shrinks after bad ones
//! by MINPACK's rules. On a smooth problem its trial points are MINPACK's
//! to 9 digits (`the_trial_points_are_minpacks`). The stopping tests and
//! their tolerances are scipy's `least_squares(method="lm")` defaults.
//!
//! It knows nothing of kiln: the residuals and the Jacobian come from a
//! [`Residuals`]. A row whose derivatives are NaN or infinite (where its
//! residual is finite) is left out of the step: its linearization says
//! nothing.

/// The relative tolerances of the stopping tests (scipy's defaults:
/// `ftol`, `xtol` and `gtol`).
const TOL: f64 = 1e-8;

/// MINPACK's initial trust region: `FACTOR · ‖D θ₀‖`.
const FACTOR: f64 = 100.0;

/// The problem: residuals (`values - target`) at given parameters, and
/// with them the Jacobian's columns. Each step evaluates both at its trial
/// point (the derivatives of an expression cost little beside its values,
/// and a step taken, most are, needs them next).
pub(crate) trait Residuals {
    /// Why an evaluation failed.
    type Error;

    /// The residuals at `theta` into `r`, and `∂r/∂θ_p` into `j[p]`.
    fn jacobian(
        &mut self,
        theta: &[f64],
        r: &mut [f64],
        j: &mut [Vec<f64>],
    ) -> Result<(), Self::Error>;
}

/// Where a fit ended.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Outcome {
    /// The parameters (the initial ones when the fit could not start).
    pub theta: Vec<f64>,
    /// The residuals' sum of squares at `theta` ([`dot`]'s order).
    pub cost: f64,
    /// Steps tried (each one evaluation of the residuals).
    pub iterations: usize,
    /// Why the fit could not start, when it could not.
    pub failure: Option<String>,
}

/// How many interleaved partial sums a [`Dot`] keeps: row `i` goes to sum
/// `i % LANES`. Eight are two AVX2 registers, whose chains of additions
/// overlap (one register's chain waits 4 cycles per addition).
const LANES: usize = 8;

/// `Σ a_i b_i` over [`LANES`] interleaved partial sums (fixed order, so the
/// same bits every time; not the row order a single sum would give).
fn dot(a: &[f64], b: &[f64]) -> f64 {
    let mut s = [Dot::default()];
    let whole = a.len() - a.len() % LANES;
    add_together(&mut s, &a[..whole], [&b[..whole]]);
    s[0].finish(&a[whole..], &b[whole..])
}

/// [`dot`]'s partial sums, fed a run of rows at a time (each run a
/// multiple of [`LANES`] long) in row order: the same bits as one [`dot`].
#[derive(Clone, Copy, Default)]
struct Dot([f64; LANES]);

impl Dot {
    /// The sum, with the last rows (fewer than [`LANES`]) added as [`dot`]
    /// does.
    fn finish(self, a: &[f64], b: &[f64]) -> f64 {
        let tail: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        let s = self.0;
        (((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))) + tail
    }
}

/// Advances `N` sums `Σ x·ys[j]` over the same run of rows (a multiple of
/// [`LANES`] long) together: each keeps [`Dot`]'s order and so its bits,
/// and the `N` sums' chains of additions overlap where one at a time
/// would wait for each addition before the next.
/// On x86-64 with AVX2, a [`Dot`]'s sums are two vector registers (the
/// same additions lane by lane, so the same bits: Rust never fuses a
/// multiply and an add).
fn add_together<const N: usize>(dots: &mut [Dot], x: &[f64], ys: [&[f64]; N]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: this CPU has AVX2.
        return unsafe { add_together_avx2(dots, x, ys) };
    }
    add_together_here(dots, x, ys);
}

/// [`add_together`] compiled for AVX2.
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn add_together_avx2<const N: usize>(dots: &mut [Dot], x: &[f64], ys: [&[f64]; N]) {
    add_together_here(dots, x, ys);
}

/// [`add_together`] for the target the caller is compiled for.
#[inline(always)]
fn add_together_here<const N: usize>(dots: &mut [Dot], x: &[f64], ys: [&[f64]; N]) {
    let dots: &mut [Dot; N] = dots.try_into().expect("N sums");
    let ys = ys.map(|y| &y[..x.len()]);
    let mut sums = dots.map(|d| d.0);
    for (i, x) in x.chunks_exact(LANES).enumerate() {
        for (sum, y) in sums.iter_mut().zip(&ys) {
            let y = &y[LANES * i..LANES * i + LANES];
            for l in 0..LANES {
                sum[l] += x[l] * y[l];
            }
        }
    }
    *dots = sums.map(Dot);
}

/// Rows per block of [`gram`]: 8 KiB of each column, so that a block of
/// a few columns stays in L1 while every pair of them is summed.
const GRAM_BLOCK: usize = 1024;

/// `dot(columns[p], columns[q])` for every `q ≤ p` (row major, `k × k`,
/// both triangles) and `dot(columns[p], r)`, bit for bit, in one sweep of
/// the rows in blocks: each column is read from memory once rather than
/// once per pair, and up to four sums advance together ([`add_together`]).
fn gram(columns: &[Vec<f64>], r: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let k = columns.len();
    let n = r.len();
    let whole = n - n % LANES;
    // Row `p` of the sums: `dot(columns[p], columns[q])` at `q ≤ p`, then
    // `dot(columns[p], r)` at `p + 1`.
    let stride = k + 1;
    let partner = |p: usize, q: usize| if q <= p { &columns[q][..] } else { r };
    let mut sums = vec![Dot::default(); k * stride];
    let mut at = 0;
    while at < whole {
        let end = (at + GRAM_BLOCK).min(whole);
        for p in 0..k {
            let x = &columns[p][at..end];
            let row = &mut sums[p * stride..p * stride + p + 2];
            let mut q = 0;
            while q + 4 <= p + 2 {
                let ys = [0, 1, 2, 3].map(|d| &partner(p, q + d)[at..end]);
                add_together(&mut row[q..q + 4], x, ys);
                q += 4;
            }
            match p + 2 - q {
                3 => {
                    let ys = [0, 1, 2].map(|d| &partner(p, q + d)[at..end]);
                    add_together(&mut row[q..], x, ys);
                }
                2 => {
                    let ys = [0, 1].map(|d| &partner(p, q + d)[at..end]);
                    add_together(&mut row[q..], x, ys);
                }
                1 => add_together(&mut row[q..], x, [&partner(p, q)[at..end]]),
                _ => {}
            }
        }
        at = end;
    }
    let mut a = vec![0.0; k * k];
    let mut g = Vec::with_capacity(k);
    for p in 0..k {
        let row = &sums[p * stride..];
        for q in 0..=p {
            let s = row[q].finish(&columns[p][whole..], &columns[q][whole..]);
            a[p * k + q] = s;
            a[q * k + p] = s;
        }
        g.push(row[p + 1].finish(&columns[p][whole..], &r[whole..]));
    }
    (a, g)
}

/// The sum of squares, in [`dot`]'s order.
fn sum_of_squares(r: &[f64]) -> f64 {
    dot(r, r)
}

/// The Euclidean norm of `values` without overflow or underflow in its
/// squares (scaled by the largest magnitude first, as BLAS's `dnrm2`).
fn norm(values: impl Iterator<Item = f64> + Clone) -> f64 {
    let largest = values.clone().fold(0.0, |m: f64, v| m.max(v.abs()));
    if largest == 0.0 || !largest.is_finite() {
        return largest;
    }
    largest
        * values
            .map(|v| (v / largest) * (v / largest))
            .sum::<f64>()
            .sqrt()
}

/// The Jacobian prepared for the step: where some rows' derivatives are
/// not all finite, its columns and `r` with those rows set to 0 (they say
/// nothing of the step); the columns' norms; their products with each
/// other and with `r` ([`gram`]).
struct Linearized {
    /// The masked columns and residuals, when some row is masked.
    masked: Option<(Vec<Vec<f64>>, Vec<f64>)>,
    norms: Vec<f64>,
    usable_rows: usize,
    /// `JᵀJ` (`k × k`, row major) and `Jᵀr`, over the masked columns.
    products: (Vec<f64>, Vec<f64>),
}

impl Linearized {
    fn new(j: &[Vec<f64>], r: &[f64]) -> Linearized {
        let n = r.len();
        let mut products = gram(j, r);
        // A column's square sum is finite when all its entries are (the
        // products then are what the step reads); where one is not, look.
        let k = j.len();
        let finite = (0..k).all(|p| products.0[p * k + p].is_finite())
            || j.iter().all(|c| c.iter().all(|x| x.is_finite()));
        let usable = |i: usize| j.iter().all(|c| c[i].is_finite());
        let masked = if finite {
            None
        } else {
            let keep = |v: &[f64]| -> Vec<f64> {
                (0..n).map(|i| if usable(i) { v[i] } else { 0.0 }).collect()
            };
            let (columns, r): (Vec<Vec<f64>>, Vec<f64>) =
                (j.iter().map(|c| keep(c)).collect(), keep(r));
            products = gram(&columns, &r);
            Some((columns, r))
        };
        let usable_rows = match &masked {
            None => n,
            Some(_) => (0..n).filter(|&i| usable(i)).count(),
        };
        let mut lin = Linearized {
            masked,
            norms: Vec::new(),
            usable_rows,
            products,
        };
        let columns = lin.columns(j).0;
        lin.norms = columns
            .iter()
            .enumerate()
            .map(|(p, c)| {
                // Squares directly; scaled where they overflow or underflow.
                let sq = lin.products.0[p * k + p];
                if sq.is_finite() && sq > 1e-280 {
                    sq.sqrt()
                } else {
                    norm(c.iter().copied())
                }
            })
            .collect();
        lin
    }

    /// The columns and residuals the step reads.
    fn columns<'a>(&'a self, j: &'a [Vec<f64>]) -> (&'a [Vec<f64>], Option<&'a [f64]>) {
        match &self.masked {
            None => (j, None),
            Some((columns, r)) => (columns, Some(r)),
        }
    }

    /// The normal equations in the scaled parameters `z = D δ`: `J̃ᵀJ̃`
    /// (`k × k`, row major) and `J̃ᵀr` with `J̃ = J D⁻¹`. Scaled, their
    /// entries stay near 1 however large the derivatives are (a product
    /// that overflows is taken over the scaled columns).
    fn normal_equations(&self, j: &[Vec<f64>], r: &[f64], d: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let (columns, masked_r) = self.columns(j);
        let r = masked_r.unwrap_or(r);
        let k = columns.len();
        let (products, with_r) = &self.products;
        let scaled_dot = |xy: f64, x: &[f64], dx: f64, y: &[f64], dy: f64| {
            let s = xy / dx / dy;
            if s.is_finite() {
                s
            } else {
                let (ix, iy) = (1.0 / dx, 1.0 / dy);
                let xs: Vec<f64> = x.iter().map(|v| v * ix).collect();
                let ys: Vec<f64> = y.iter().map(|v| v * iy).collect();
                dot(&xs, &ys)
            }
        };
        let mut a = vec![0.0; k * k];
        let mut g = vec![0.0; k];
        for p in 0..k {
            for q in 0..=p {
                let s = scaled_dot(products[p * k + q], &columns[p], d[p], &columns[q], d[q]);
                a[p * k + q] = s;
                a[q * k + p] = s;
            }
            g[p] = scaled_dot(with_r[p], &columns[p], d[p], r, 1.0);
        }
        (a, g)
    }
}

/// The Cholesky factor `L` (`k × k`, row major, lower) of a symmetric
/// positive definite `a`: `a = L Lᵀ`; `None` when `a` is not positive
/// definite (or holds a NaN).
fn cholesky(a: &[f64], k: usize) -> Option<Vec<f64>> {
    let mut l = vec![0.0; k * k];
    for i in 0..k {
        for j in 0..=i {
            let mut s = a[i * k + j];
            for p in 0..j {
                s -= l[i * k + p] * l[j * k + p];
            }
            if i == j {
                // Not positive, or NaN or infinite.
                if s.is_nan() || s <= 0.0 || s.is_infinite() {
                    return None;
                }
                l[i * k + i] = s.sqrt();
            } else {
                l[i * k + j] = s / l[j * k + j];
            }
        }
    }
    Some(l)
}

/// `y` solving `L y = b` for a lower triangular `L`.
fn forward(l: &[f64], b: &[f64]) -> Vec<f64> {
    let k = b.len();
    let mut y = vec![0.0; k];
    for i in 0..k {
        let mut s = b[i];
        for p in 0..i {
            s -= l[i * k + p] * y[p];
        }
        y[i] = s / l[i * k + i];
    }
    y
}

/// `x` solving `L Lᵀ x = b`.
fn cholesky_solve_with(l: &[f64], b: &[f64]) -> Vec<f64> {
    let k = b.len();
    let y = forward(l, b);
    let mut x = vec![0.0; k];
    for i in (0..k).rev() {
        let mut s = y[i];
        for p in i + 1..k {
            s -= l[p * k + i] * x[p];
        }
        x[i] = s / l[i * k + i];
    }
    x
}

/// Solves `a x = b` for a symmetric positive definite `a` (`k × k`, row
/// major) by Cholesky; `None` when `a` is not positive definite.
#[cfg(test)]
fn cholesky_solve(a: &[f64], b: &[f64], k: usize) -> Option<Vec<f64>> {
    cholesky(a, k).map(|l| cholesky_solve_with(&l, b))
}

/// The scaled step `z(λ)` solving `(Ã + λ I) z = -g̃`, with the Cholesky
/// factor of `Ã + λ I` when that matrix is positive definite. Where it is
/// not (`λ` is 0 or too small to lift a constant that only repeats
/// another's effect: `a * x + log(b) + c`), MINPACK's step: the columns
/// taken in order of their remaining norm (`qrfac`'s pivoting, here a
/// pivoted Cholesky) until the rest depend on them within rounding, the
/// least-squares step over those, and 0 for the rest.
fn step(a: &[f64], g: &[f64], lambda: f64) -> (Vec<f64>, Option<Vec<f64>>) {
    let k = g.len();
    let mut m = a.to_vec();
    for p in 0..k {
        m[p * k + p] += lambda;
    }
    let minus_g: Vec<f64> = g.iter().map(|x| -x).collect();
    if let Some(l) = cholesky(&m, k) {
        return (cholesky_solve_with(&l, &minus_g), Some(l));
    }
    // Pivoted Cholesky: `left` is what remains of `m` after the columns
    // taken; a column depends on them when what remains of its diagonal
    // is within rounding of nothing.
    let largest = (0..k).map(|p| m[p * k + p]).fold(0.0, f64::max);
    let tiny = largest * f64::EPSILON * k as f64;
    let mut left = m.clone();
    let mut order: Vec<usize> = (0..k).collect();
    let mut rank = 0;
    while rank < k {
        let (at, &best) = order[rank..]
            .iter()
            .enumerate()
            .max_by(|(_, &p), (_, &q)| left[p * k + p].total_cmp(&left[q * k + q]))
            .expect("a column is left");
        // (NaN is never taken.)
        if left[best * k + best].partial_cmp(&tiny) != Some(std::cmp::Ordering::Greater) {
            break;
        }
        order.swap(rank, rank + at);
        let pivot = left[best * k + best];
        for &p in &order[rank + 1..] {
            let f = left[p * k + best] / pivot;
            for &q in &order[rank + 1..] {
                left[p * k + q] -= f * left[best * k + q];
            }
        }
        rank += 1;
    }
    let taken = &order[..rank];
    let sub: Vec<f64> = taken
        .iter()
        .flat_map(|&p| taken.iter().map(|&q| m[p * k + q]).collect::<Vec<_>>())
        .collect();
    let rhs: Vec<f64> = taken.iter().map(|&p| minus_g[p]).collect();
    let mut z = vec![0.0; k];
    if let Some(l) = cholesky(&sub, rank) {
        for (&p, v) in taken.iter().zip(cholesky_solve_with(&l, &rhs)) {
            z[p] = v;
        }
    }
    (z, None)
}

/// MINPACK's `lmpar`, in the scaled parameters: the `λ ≥ 0` whose step
/// `z(λ)` fits the trust region `Δ` within 10 % (0 when the Gauss–Newton
/// step already does), with its step. As `lmpar` does it: a lower bound
/// from the Gauss–Newton step (where `Ã` has full rank) and an upper one,
/// `‖g̃‖ / Δ`; from `par` (the last step's `λ`, clamped to them), Newton's
/// method on `1/‖z(λ)‖ = 1/Δ`, at most 10 tries (each a `k × k`
/// Cholesky). `None` where `Ã` or `g̃` is not finite.
fn fit_region(a: &[f64], g: &[f64], delta: f64, par: f64) -> Option<(f64, Vec<f64>)> {
    const DWARF: f64 = f64::MIN_POSITIVE;
    if !a.iter().chain(g).all(|v| v.is_finite()) {
        return None;
    }
    let size = |z: &[f64]| norm(z.iter().copied());
    let (gn, factor) = step(a, g, 0.0);
    let dxnorm = size(&gn);
    let mut fp = dxnorm - delta;
    if fp <= 0.1 * delta {
        return Some((0.0, gn));
    }
    // The Newton correction `((fp / Δ) / ‖w‖) / ‖w‖`, `w` solving
    // `L w = z / ‖z‖` (`lmpar`'s, on `1/‖z‖`).
    let correction = |l: &[f64], z: &[f64], length: f64, fp: f64| {
        let unit: Vec<f64> = z.iter().map(|v| v / length).collect();
        let w = size(&forward(l, &unit));
        ((fp / delta) / w) / w
    };
    let mut parl = match &factor {
        Some(l) => correction(l, &gn, dxnorm, fp),
        None => 0.0,
    };
    let gnorm = size(g);
    let mut paru = gnorm / delta;
    if paru == 0.0 {
        paru = DWARF / delta.min(0.1);
    }
    let mut par = par.max(parl).min(paru);
    if par == 0.0 {
        par = gnorm / dxnorm;
    }
    let mut tries = 0;
    loop {
        tries += 1;
        if par == 0.0 {
            par = DWARF.max(0.001 * paru);
        }
        let (z, l) = step(a, g, par);
        let length = size(&z);
        let last = fp;
        fp = length - delta;
        let done = fp.abs() <= 0.1 * delta || (parl == 0.0 && fp <= last && last < 0.0);
        // `λ` too small to lift a dependent column: `lmpar`'s correction
        // is 0 there (a division by its zero pivot), so its later tries
        // repeat this one.
        let Some(l) = l.filter(|_| !done && tries < 10) else {
            return Some((par, z));
        };
        let parc = correction(&l, &z, length, fp);
        if fp > 0.0 {
            parl = parl.max(par);
        }
        if fp < 0.0 {
            paru = paru.min(par);
        }
        par = parl.max(par + parc);
    }
}

/// The residuals and Jacobians of a fit's evaluations, kept from one fit
/// to the next: a population's fits on one thread reuse their memory
/// (new memory costs the kernel's clearing of its pages).
#[derive(Default)]
pub(crate) struct Scratch {
    r: Vec<f64>,
    j: Vec<Vec<f64>>,
    trial: Vec<f64>,
    trial_j: Vec<Vec<f64>>,
}

/// The first `k` of `c`'s columns, each `n` rows long (their values
/// whatever they were); the columns past them are kept for a later call,
/// so that a fit after a fit with more parameters allocates nothing.
pub(crate) fn columns_of(c: &mut Vec<Vec<f64>>, k: usize, n: usize) -> &mut [Vec<f64>] {
    if c.len() < k {
        c.resize_with(k, Vec::new);
    }
    let c = &mut c[..k];
    for c in c.iter_mut() {
        c.resize(n, 0.0);
    }
    c
}

/// Fits `theta0` to lower the residuals' sum of squares, in at most
/// `max_iter` steps.
pub(crate) fn minimize<R: Residuals>(
    problem: &mut R,
    theta0: Vec<f64>,
    n_rows: usize,
    max_iter: usize,
    scratch: &mut Scratch,
) -> Result<Outcome, R::Error> {
    let k = theta0.len();
    let mut theta = theta0;
    let Scratch {
        r,
        j,
        trial,
        trial_j,
    } = scratch;
    for v in [&mut *r, &mut *trial] {
        v.resize(n_rows, 0.0);
    }
    let j = columns_of(j, k, n_rows);
    let trial_j = columns_of(trial_j, k, n_rows);
    problem.jacobian(&theta, r, j)?;
    let mut cost = sum_of_squares(r);
    let give_up = |theta: Vec<f64>, cost: f64, why: &str| Outcome {
        theta,
        cost,
        iterations: 0,
        failure: Some(why.to_string()),
    };
    if !cost.is_finite() {
        return Ok(give_up(
            theta,
            cost,
            "it is NaN or infinite at its initial constants",
        ));
    }
    if k == 0 || cost == 0.0 {
        return Ok(Outcome {
            theta,
            cost,
            iterations: 0,
            failure: None,
        });
    }
    let lin = Linearized::new(j, r);
    if lin.norms.iter().all(|&n| n == 0.0) {
        let why = if lin.usable_rows == 0 {
            "its Jacobian is NaN or infinite at its initial constants"
        } else {
            "its Jacobian is zero: no constant changes its value"
        };
        return Ok(give_up(theta, cost, why));
    }
    // MINPACK's scaling (mode 1): each column's largest norm so far.
    let mut d: Vec<f64> = lin
        .norms
        .iter()
        .map(|&n| if n == 0.0 { 1.0 } else { n })
        .collect();
    let (mut a, mut g) = lin.normal_equations(j, r, &d);
    let scaled_theta = |d: &[f64], theta: &[f64]| norm(d.iter().zip(theta).map(|(d, t)| d * t));
    let mut delta = FACTOR * scaled_theta(&d, &theta);
    if delta == 0.0 || !delta.is_finite() {
        delta = FACTOR;
    }
    let mut lambda = 0.0;
    let mut iterations = 0;
    let mut first = true;
    'outer: while iterations < max_iter {
        // The residual's largest cosine with a Jacobian column.
        let r_norm = cost.sqrt();
        let cosine = (0..k)
            .map(|p| {
                let n = a[p * k + p].sqrt();
                if n == 0.0 {
                    0.0
                } else {
                    g[p].abs() / (n * r_norm)
                }
            })
            .fold(0.0, f64::max);
        if cosine <= TOL {
            break;
        }
        // Steps from this Jacobian until one is taken.
        loop {
            if iterations >= max_iter {
                break 'outer;
            }
            let Some((l, z)) = fit_region(&a, &g, delta, lambda) else {
                break 'outer;
            };
            lambda = l;
            let step_norm = norm(z.iter().copied());
            if first {
                delta = delta.min(step_norm);
                first = false;
            }
            let next: Vec<f64> = (0..k).map(|p| theta[p] + z[p] / d[p]).collect();
            iterations += 1;
            problem.jacobian(&next, trial, trial_j)?;
            let cost_next = sum_of_squares(trial);
            // MINPACK's reductions, relative to the cost: the actual one, and
            // the one the linear model predicts (‖J δ‖² is zᵀ Ã z).
            let actual = if cost_next.is_finite() && cost_next < 100.0 * cost {
                1.0 - cost_next / cost
            } else {
                -1.0
            };
            let jz: f64 = (0..k)
                .map(|p| z[p] * (0..k).map(|q| a[p * k + q] * z[q]).sum::<f64>())
                .sum::<f64>()
                / cost;
            let damp = lambda * step_norm * step_norm / cost;
            let predicted = jz + 2.0 * damp;
            let slope = -(jz + damp);
            let ratio = if predicted == 0.0 {
                0.0
            } else {
                actual / predicted
            };
            if ratio <= 0.25 {
                let mut shrink = if actual >= 0.0 {
                    0.5
                } else {
                    0.5 * slope / (slope + 0.5 * actual)
                };
                if !cost_next.is_finite() || cost_next >= 100.0 * cost || shrink < 0.1 {
                    shrink = 0.1;
                }
                delta = shrink * delta.min(step_norm / 0.1);
                lambda /= shrink;
            } else if lambda == 0.0 || ratio >= 0.75 {
                delta = step_norm / 0.5;
                lambda *= 0.5;
            }
            let taken = ratio >= 1e-4;
            if taken {
                std::mem::swap(r, trial);
                j.swap_with_slice(trial_j);
                theta = next;
                cost = cost_next;
                let lin = Linearized::new(j, r);
                for (d, n) in d.iter_mut().zip(&lin.norms) {
                    *d = d.max(*n);
                }
                (a, g) = lin.normal_equations(j, r, &d);
            }
            let converged = (actual.abs() <= TOL && predicted <= TOL && 0.5 * ratio <= 1.0)
                || delta <= TOL * scaled_theta(&d, &theta)
                || cost == 0.0;
            if converged {
                break 'outer;
            }
            if taken {
                break;
            }
        }
    }
    Ok(Outcome {
        theta,
        cost,
        iterations,
        failure: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rosenbrock's function as residuals: `10 (y - x²)` and `1 - x`.
    struct Rosenbrock;

    impl Residuals for Rosenbrock {
        type Error = ();

        fn jacobian(&mut self, t: &[f64], r: &mut [f64], j: &mut [Vec<f64>]) -> Result<(), ()> {
            r[0] = 10.0 * (t[1] - t[0] * t[0]);
            r[1] = 1.0 - t[0];
            j[0][0] = -20.0 * t[0];
            j[1][0] = 10.0;
            j[0][1] = -1.0;
            j[1][1] = 0.0;
            Ok(())
        }
    }

    #[test]
    fn rosenbrock_from_minpacks_start() {
        let out = minimize(
            &mut Rosenbrock,
            vec![-1.2, 1.0],
            2,
            100,
            &mut Scratch::default(),
        )
        .unwrap();
        assert!(
            (out.theta[0] - 1.0).abs() < 1e-10 && (out.theta[1] - 1.0).abs() < 1e-10,
            "{out:?}"
        );
        assert!(out.iterations < 30, "{out:?}");
    }

    #[test]
    fn cholesky_solves_a_small_system() {
        let a = [4.0, 2.0, 2.0, 3.0];
        let x = cholesky_solve(&a, &[2.0, 1.0], 2).expect("positive definite");
        assert!((4.0 * x[0] + 2.0 * x[1] - 2.0).abs() < 1e-15);
        assert!((2.0 * x[0] + 3.0 * x[1] - 1.0).abs() < 1e-15);
        assert!(cholesky_solve(&[1.0, 2.0, 2.0, 1.0], &[1.0, 1.0], 2).is_none());
    }

    #[test]
    fn gram_sums_every_pair_with_dots_bits() {
        // Numbers whose sums round differently in every order: a change of
        // order anywhere changes some bit.
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        };
        for k in 1..=7 {
            for n in [0, 3, 4, 9, 1023, 1025, 2050, 5003] {
                let columns: Vec<Vec<f64>> = (0..k)
                    .map(|_| (0..n).map(|_| next() * 1e3).collect())
                    .collect();
                let r: Vec<f64> = (0..n).map(|_| next()).collect();
                let (a, g) = gram(&columns, &r);
                for p in 0..k {
                    for q in 0..k {
                        let want = dot(&columns[p], &columns[q]);
                        assert_eq!(a[p * k + q].to_bits(), want.to_bits(), "{k} {n} ({p}, {q})");
                    }
                    let want = dot(&columns[p], &r);
                    assert_eq!(g[p].to_bits(), want.to_bits(), "{k} {n} r {p}");
                }
            }
        }
    }

    /// `sqrt|p| u - y`: a step that crosses the kink at 0, so that the
    /// trust region decides each trial point.
    #[derive(Default)]
    struct Kink {
        tried: Vec<f64>,
    }

    impl Residuals for Kink {
        type Error = ();

        fn jacobian(&mut self, t: &[f64], r: &mut [f64], j: &mut [Vec<f64>]) -> Result<(), ()> {
            self.tried.push(t[0]);
            for (i, r) in r.iter_mut().enumerate() {
                let u = 1.0 + (i % 5) as f64 / 10.0;
                let y = -((i % 3) as f64) + 0.5 * (i % 2) as f64;
                *r = t[0].abs().sqrt() * u - y;
                j[0][i] = t[0].signum() / (2.0 * t[0].abs().sqrt()) * u;
            }
            Ok(())
        }
    }

    #[test]
    fn the_trial_points_are_minpacks() {
        // scipy 1.17's least_squares(method="lm", jac=...), MINPACK's
        // lmder, on the same residuals: its evaluations' points.
        let minpack = [
            3.54,
            -5.77587878068928,
            -0.23775272309802276,
            0.8171939253053027,
            0.43327765920335803,
            0.02694388297871575,
            -0.1512717142796317,
            -0.03344925162168081,
        ];
        let mut kink = Kink::default();
        minimize(&mut kink, vec![3.54], 40, 7, &mut Scratch::default()).unwrap();
        assert_eq!(kink.tried.len(), minpack.len());
        for (got, want) in kink.tried.iter().zip(minpack) {
            assert!((got - want).abs() <= 1e-9 * want.abs(), "{:?}", kink.tried);
        }
    }

    /// `a x - log|b| + sqrt|sin c|` against `x` (a GP fixture's
    /// expression, `3.97 * x0 - log(abs(4.13)) + sqrt(abs(sin(4.49)))`):
    /// `b` and `c` only move one intercept, so `JᵀJ` is singular and the
    /// Gauss–Newton step is MINPACK's (the pivoted columns until the rest
    /// depend on them).
    struct Redundant;

    impl Residuals for Redundant {
        type Error = ();

        fn jacobian(&mut self, t: &[f64], r: &mut [f64], j: &mut [Vec<f64>]) -> Result<(), ()> {
            let (a, b, c) = (t[0], t[1], t[2]);
            let root = c.sin().abs().sqrt();
            for (i, r) in r.iter_mut().enumerate() {
                let x = i as f64 / 10.0 - 2.0;
                *r = a * x - b.abs().ln() + root - x;
                j[0][i] = x;
                j[1][i] = -1.0 / b;
                j[2][i] = c.sin().signum() * c.cos() / (2.0 * root);
            }
            Ok(())
        }
    }

    #[test]
    fn a_constant_that_repeats_another_does_not_stall_the_fit() {
        let out = minimize(
            &mut Redundant,
            vec![3.97, 4.13, 4.49],
            40,
            10,
            &mut Scratch::default(),
        )
        .unwrap();
        // scipy's `least_squares(method="lm")` ends at 5e-31 on the
        // fixture's rows; a stalled step search, far above it.
        assert!(out.cost < 1e-20, "{out:?}");
        assert!((out.theta[0] - 1.0).abs() < 1e-10, "{out:?}");
    }
}
