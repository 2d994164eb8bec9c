"""kiln.trees against scikit-learn's own predict and predict_proba: trees,
forests and gradient boosting, bit for bit on every tier (the rows rounded
to float32 as scikit-learn's trees read them, float64 thresholds and sums
in scikit-learn's order), the sigmoid and softmax of gradient-boosted
classifiers within 2 ulps (kiln's exp is its own)."""

import pickle

import numpy as np
import pandas as pd
import pytest
from sklearn import ensemble, tree

import kiln

TIERS = ["vm", "cranelift", "llvm"]
N_FEATURES = 5


def _rows(n, seed, nan=True):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, N_FEATURES)) * 2
    if nan:
        x[rng.random(x.shape) < 0.08] = np.nan
    return x


def _target(x):
    x = np.nan_to_num(x)
    return x[:, 0] * 2 + np.sin(x[:, 1]) + (x[:, 2] > 0.5)


def _test_rows(nan=True):
    x = _rows(300, 1, nan)
    # Values float32 rounds onto or off a float64 threshold, signed zeros,
    # subnormals, the largest finite float32s.
    x[:10, 0] = [0.0, -0.0, 1e-40, -1e-45, 3.4e38, -3.4e38, 0.1, 1 / 3, 2 / 3, 1e-7]
    return x


def _classes(y, k):
    return np.digitize(y, np.quantile(y, np.linspace(0, 1, k + 1)[1:-1]))


MODELS = {
    "tree_regressor": lambda: tree.DecisionTreeRegressor(max_depth=6, random_state=0),
    "tree_classifier": lambda: tree.DecisionTreeClassifier(max_depth=6, random_state=0),
    "forest_regressor": lambda: ensemble.RandomForestRegressor(n_estimators=20, max_depth=6, random_state=0),
    "forest_classifier": lambda: ensemble.RandomForestClassifier(n_estimators=20, max_depth=6, random_state=0),
    "extra_trees_regressor": lambda: ensemble.ExtraTreesRegressor(n_estimators=10, max_depth=6, random_state=0),
    "gb_regressor": lambda: ensemble.GradientBoostingRegressor(n_estimators=30, max_depth=3, random_state=0),
    "gb_binary": lambda: ensemble.GradientBoostingClassifier(n_estimators=20, max_depth=3, random_state=0),
    "gb_multiclass": lambda: ensemble.GradientBoostingClassifier(n_estimators=15, max_depth=3, random_state=0),
    "hgb_regressor": lambda: ensemble.HistGradientBoostingRegressor(max_iter=30, random_state=0),
    "hgb_binary": lambda: ensemble.HistGradientBoostingClassifier(max_iter=20, random_state=0),
    "hgb_multiclass": lambda: ensemble.HistGradientBoostingClassifier(max_iter=15, random_state=0),
}
# Gradient boosting (not Hist) takes no NaN.
TAKES_NAN = {name for name in MODELS if not name.startswith("gb_")}
LINKED = {"gb_binary", "gb_multiclass", "hgb_binary", "hgb_multiclass"}


@pytest.fixture(scope="module")
def fitted():
    out = {}
    for name, make in MODELS.items():
        x = _rows(1000, 0, nan=name in TAKES_NAN)
        y = _target(x)
        if "classifier" in name or "binary" in name or "multiclass" in name:
            y = _classes(y, 3 if ("multiclass" in name or "classifier" in name) else 2)
        out[name] = make().fit(x, y)
    return out


def _want(model, x):
    if hasattr(model, "predict_proba"):
        return model.predict_proba(x)
    return model.predict(x)


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("name", list(MODELS))
def test_predictions_are_sklearns(fitted, name, tier):
    model = fitted[name]
    x = _test_rows(nan=name in TAKES_NAN)
    got = kiln.trees.compile(model, tier=tier)(x)
    want = _want(model, x)
    assert got.shape == want.shape and got.dtype == np.float64
    if name in LINKED:
        if got.shape[1] == 2:
            # [1 - p, p]: p within 2 ulps, and 1 - p computed from it.
            np.testing.assert_array_equal(got[:, 0], 1 - got[:, 1])
            got, want = got[:, 1:], want[:, 1:]
        ulps = np.abs(got.view(np.int64) - want.view(np.int64))
        assert ulps.max() <= 2, ulps.max()
    else:
        np.testing.assert_array_equal(got.view(np.int64), want.view(np.int64))


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("name", ["gb_regressor", "gb_binary", "gb_multiclass", "hgb_binary", "hgb_multiclass"])
def test_raw_scores_are_sklearns_bits(fitted, name, tier):
    model = fitted[name]
    x = _test_rows(nan=name in TAKES_NAN)
    got = kiln.trees.compile(model, tier=tier, raw_score=True)(x)
    want = model.decision_function(x) if hasattr(model, "decision_function") else model.predict(x)
    np.testing.assert_array_equal(got.view(np.int64), want.view(np.int64))


def test_multi_output_regression_and_named_columns():
    x = _rows(500, 2)
    y = np.stack([_target(x), -_target(x) * 3], axis=1)
    frame = pd.DataFrame(x, columns=["a", "b c", "d", "e", "f"])
    model = ensemble.RandomForestRegressor(n_estimators=5, max_depth=5, random_state=0).fit(frame, y)
    rows = pd.DataFrame(_test_rows(), columns=frame.columns)
    want = model.predict(rows)
    f = kiln.trees.compile(model, columns=True, tier="cranelift")
    assert sorted(f.inputs) == sorted(frame.columns)
    got = f(**{c: rows[c].to_numpy() for c in rows.columns})
    np.testing.assert_array_equal(got, want)
    g = pickle.loads(pickle.dumps(kiln.trees.compile(model)))
    np.testing.assert_array_equal(g(rows.to_numpy()), want)


def test_what_kiln_does_not_read_is_a_clear_error(fitted):
    with pytest.raises(ValueError, match="not fitted"):
        kiln.trees.compile(ensemble.RandomForestRegressor())
    with pytest.raises(TypeError, match="not a tree model"):
        from sklearn.linear_model import LinearRegression

        kiln.trees.compile(LinearRegression().fit(np.zeros((3, 2)), np.zeros(3)))
    x = _rows(300, 3, nan=False)
    frame = pd.DataFrame(x, columns=list("abcde"))
    frame["kind"] = pd.Categorical(np.arange(300) % 4)
    hgb = ensemble.HistGradientBoostingRegressor(max_iter=3, categorical_features="from_dtype").fit(frame, _target(x))
    with pytest.raises(ValueError, match="categorical features"):
        kiln.trees.compile(hgb)
    with pytest.raises(ValueError, match="x"):
        kiln.trees.compile(fitted["tree_regressor"], tier="vm")(np.zeros((2, 3)))
