"""Population.fit_constants: constants recovered and matched against
scipy.optimize.least_squares, the same fit on every tier, failures that keep
their constants, and bad arguments."""

import numpy as np
import pytest
from scipy.optimize import least_squares

import kiln
from conftest import ROOT

GP = ROOT / "tests" / "fixtures" / "gp"


def test_constants_are_recovered_as_scipy_recovers_them():
    x = np.linspace(0.0, 4.0, 200)
    y = 2.5 * np.sin(1.3 * x) + 0.5
    pop = kiln.Population(["sin(1.0 * x) * 2.0 + 0.1"])
    fit = pop.fit_constants({"x": x}, y)
    ref = least_squares(lambda p: np.sin(p[0] * x) * p[1] + p[2] - y, [1.0, 2.0, 0.1], method="lm")
    np.testing.assert_allclose(fit.constants[0], [1.3, 2.5, 0.5], rtol=1e-8)
    np.testing.assert_allclose(fit.constants[0], ref.x, rtol=1e-8)
    assert fit.mse[0] < 1e-16
    # The fitted expression computes what the constants say.
    again = kiln.Population(fit.exprs)
    np.testing.assert_allclose(again.evaluate({"x": x})[0], y, atol=1e-7)


def test_every_tier_fits_the_same_constants():
    x = np.linspace(-2.0, 2.0, 300)
    y = np.exp(-0.7 * x * x) * 1.8 - 0.25
    exprs = ["exp(-1.0 * x * x) * 1.0 - 0.0", "x * 0.5 + 0.1", "3.0"]
    fits = [kiln.Population(exprs, tier=t).fit_constants({"x": x}, y) for t in kiln.tiers()]
    for f in fits[1:]:
        for a, b in zip(f.constants, fits[0].constants):
            assert a.tobytes() == b.tobytes()
        assert f.mse.tobytes() == fits[0].mse.tobytes()
        assert f.iterations.tolist() == fits[0].iterations.tolist()
    np.testing.assert_allclose(fits[0].constants[0], [0.7, 1.8, 0.25], rtol=1e-7)
    # A constant's least-squares value is the target's mean.
    np.testing.assert_allclose(fits[0].constants[2], [y.mean()], rtol=1e-12)


def test_the_fit_result():
    x = np.linspace(0.0, 5.0, 50)
    y = 2.0 * x + 1.0
    pop = kiln.Population(
        ["x * 1.5 + 0.2", "sqrt(x - 3.0) * 1.5", "x * floor(1.5)", "x +",
         "x + float(int(x) // 0)", "x * x"],
        variables=["x"],
    )
    fit = pop.fit_constants(x[:, None], y, max_iter=50)
    assert isinstance(fit, kiln.Fit)
    constants, mse, iterations = fit
    assert constants is not None and mse.dtype == np.float64 and iterations.dtype == np.int64
    np.testing.assert_allclose(constants[0], [2.0, 1.0], rtol=1e-9)
    assert fit.exprs[0].startswith("x * 2.0") or fit.exprs[0].startswith("x * 1.99999")
    assert set(fit.errors) == {1, 2, 3, 4}
    assert "NaN or infinite" in fit.errors[1] and constants[1].tolist() == [3.0, 1.5]
    assert "Jacobian is zero" in fit.errors[2]
    assert "expected an expression" in fit.errors[3] and len(constants[3]) == 0
    assert "division by zero" in fit.errors[4] and np.isnan(mse[4])
    # No constants: nothing to fit, its error as it stands.
    assert len(constants[5]) == 0 and iterations[5] == 0
    assert mse[5] == pytest.approx(np.mean((x * x - y) ** 2), rel=1e-12)
    assert repr(fit) == "<kiln.Fit of 6 expressions, 4 with errors>"


def test_a_fit_never_raises_the_error_on_the_gp_population():
    exprs = (GP / "gp_population.txt").read_text().splitlines()[:200]
    data = np.loadtxt(GP / "gp_data.csv", delimiter=",", skiprows=1)[:2000]
    X = {f"x{j}": np.ascontiguousarray(data[:, j]) for j in range(data.shape[1])}
    pop = kiln.Population(exprs, variables=list(X))
    start = pop.mse(X, X["x0"])
    fit = pop.fit_constants(X, X["x0"], max_iter=10)
    finite = np.isfinite(start)
    assert np.all(fit.mse[finite] <= start[finite] * (1 + 1e-12))
    assert np.sum(fit.mse[finite] < start[finite] * 0.999) > 50


def test_bad_arguments():
    pop = kiln.Population(["x * 2.0"])
    with pytest.raises(ValueError, match="method must be 'lm'"):
        pop.fit_constants({"x": [1.0]}, [1.0], method="bfgs")
    with pytest.raises(ValueError, match="y has 2 rows, X has 1"):
        pop.fit_constants({"x": [1.0]}, [1.0, 2.0])
    with pytest.raises(ValueError, match="max_iter must be at least 0"):
        pop.fit_constants({"x": [1.0]}, [1.0], max_iter=-1)
