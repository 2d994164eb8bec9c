//! Levenberg–Marquardt as MINPACK's `lmder` does it (Moré, *The
//! Levenberg–Marquardt algorithm: implementation and theory*, 1978), for
//! the few parameters of an expression over many rows: a trust region on
//! the scaled step `‖D δ‖ ≤ Δ`, `D` the largest column norms of the
//! Jacobian seen so far; each step solves `(JᵀJ + λ D²) δ = -Jᵀr` for the
//! `λ` that fits the region (0, Gauss–Newton, when that fits), by Cholesky
//! of the small normal equations; the region grows after good steps and
//! shrinks after bad ones by MINPACK's rules. The stopping tests and
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

/// `Σ a_i b_i` over four interleaved partial sums (fixed order, so the
/// same bits every time; not the row order a single sum would give).
fn dot(a: &[f64], b: &[f64]) -> f64 {
    let mut s = Dot::default();
    let whole = a.len() - a.len() % 4;
    s.add(&a[..whole], &b[..whole]);
    s.finish(&a[whole..], &b[whole..])
}

/// [`dot`]'s four partial sums, fed a run of rows at a time (each run a
/// multiple of 4 long) in row order: the same bits as one [`dot`].
#[derive(Clone, Copy, Default)]
struct Dot([f64; 4]);

impl Dot {
    fn add(&mut self, a: &[f64], b: &[f64]) {
        for (x, y) in a.chunks_exact(4).zip(b.chunks_exact(4)) {
            for l in 0..4 {
                self.0[l] += x[l] * y[l];
            }
        }
    }

    /// The sum, with the last rows (fewer than 4) added as [`dot`] does.
    fn finish(self, a: &[f64], b: &[f64]) -> f64 {
        let tail: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        let s = self.0;
        (s[0] + s[1]) + (s[2] + s[3]) + tail
    }
}

/// Advances `N` sums `Σ x·ys[j]` over the same run of rows (a multiple of
/// 4 long) together: each keeps [`Dot`]'s order and so its bits, and the
/// `N` chains of additions overlap where one [`Dot::add`] at a time waits
/// for each addition before the next.
fn add_together<const N: usize>(dots: &mut [Dot], x: &[f64], ys: [&[f64]; N]) {
    let dots: &mut [Dot; N] = dots.try_into().expect("N sums");
    let ys = ys.map(|y| &y[..x.len()]);
    let mut sums = dots.map(|d| d.0);
    for (i, x) in x.chunks_exact(4).enumerate() {
        for (sum, y) in sums.iter_mut().zip(&ys) {
            let y = &y[4 * i..4 * i + 4];
            for l in 0..4 {
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
/// once per pair, and four sums advance together ([`add_together`]).
fn gram(columns: &[Vec<f64>], r: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let k = columns.len();
    let n = r.len();
    let whole = n - n % 4;
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

/// Solves `a x = b` for a symmetric positive definite `a` (`k × k`, row
/// major) by Cholesky; `None` when `a` is not positive definite.
pub(crate) fn cholesky_solve(a: &[f64], b: &[f64], k: usize) -> Option<Vec<f64>> {
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
    let mut y = vec![0.0; k];
    for i in 0..k {
        let mut s = b[i];
        for p in 0..i {
            s -= l[i * k + p] * y[p];
        }
        y[i] = s / l[i * k + i];
    }
    let mut x = vec![0.0; k];
    for i in (0..k).rev() {
        let mut s = y[i];
        for p in i + 1..k {
            s -= l[p * k + i] * x[p];
        }
        x[i] = s / l[i * k + i];
    }
    Some(x)
}

/// The scaled step `z(λ)` solving `(Ã + λ I) z = -g̃`, or `None` where
/// that matrix is not positive definite.
fn step(a: &[f64], g: &[f64], lambda: f64) -> Option<Vec<f64>> {
    let k = g.len();
    let mut m = a.to_vec();
    for p in 0..k {
        m[p * k + p] += lambda;
    }
    let minus_g: Vec<f64> = g.iter().map(|x| -x).collect();
    cholesky_solve(&m, &minus_g, k)
}

/// MINPACK's `lmpar` in the scaled parameters: the `λ ≥ 0` whose step
/// fits the trust region `Δ` (within 10 %), or 0 when the Gauss–Newton step
/// already does, with its step. A safeguarded Newton iteration on
/// `‖z(λ)‖ = Δ` within a bracket (each try a `k × k` Cholesky), from
/// `hint`, the last step's `λ`. `None` when no `λ` gives a step.
fn fit_region(a: &[f64], g: &[f64], delta: f64, hint: f64) -> Option<(f64, Vec<f64>)> {
    let size = |z: &[f64]| norm(z.iter().copied());
    if let Some(z) = step(a, g, 0.0) {
        if size(&z) <= 1.1 * delta {
            return Some((0.0, z));
        }
    }
    // An upper bound: ‖g̃‖ / Δ, raised until the step fits.
    let mut hi = (size(g) / delta).max(f64::MIN_POSITIVE);
    let mut fits = false;
    for _ in 0..64 {
        if step(a, g, hi).is_some_and(|z| size(&z) <= delta) {
            fits = true;
            break;
        }
        hi *= 10.0;
    }
    if !fits {
        return None;
    }
    let mut lo = 0.0f64;
    let mut lambda = if hint > 0.0 && hint < hi {
        hint
    } else {
        hi * 1e-3
    };
    let mut best = None;
    for _ in 0..40 {
        let Some(z) = step(a, g, lambda) else {
            lo = lambda;
            lambda = (lo * hi).sqrt();
            continue;
        };
        let length = size(&z);
        let phi = length - delta;
        if phi.abs() <= 0.1 * delta {
            return Some((lambda, z));
        }
        if phi > 0.0 {
            lo = lambda;
        } else {
            hi = lambda;
            best = Some((lambda, z.clone()));
        }
        // Newton on φ(λ) = ‖z‖ - Δ: φ' = -zᵀ (Ã + λI)⁻¹ z / ‖z‖.
        let minus_z: Vec<f64> = z.iter().map(|x| -x).collect();
        let newton = step(a, &minus_z, lambda).map(|s| {
            let slope = -z.iter().zip(&s).map(|(z, s)| z * s).sum::<f64>() / length;
            lambda - phi / slope
        });
        lambda = match newton {
            Some(next) if next > lo && next < hi => next,
            _ if lo == 0.0 => hi * 1e-3,
            _ => (lo * hi).sqrt(),
        };
    }
    best.or_else(|| step(a, g, hi).map(|z| (hi, z)))
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

/// `k` columns of `n` rows (their values whatever they were).
pub(crate) fn columns_of(c: &mut Vec<Vec<f64>>, k: usize, n: usize) {
    c.resize_with(k, Vec::new);
    for c in c {
        c.resize(n, 0.0);
    }
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
    columns_of(j, k, n_rows);
    columns_of(trial_j, k, n_rows);
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
                std::mem::swap(j, trial_j);
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
}
