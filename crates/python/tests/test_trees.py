"""kiln.trees against LightGBM's own predict: raw scores bit for bit on
every tier, linked predictions within 2 ulps (kiln's exp is its own), on
rows with NaN, signed zeros, infinities, huge values and unseen categories."""

import pickle

import lightgbm as lgb
import numpy as np
import pandas as pd
import pytest

import kiln

N_FEATURES = 6
CATEGORICAL = 5


def _training_rows(n=1500, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, N_FEATURES))
    x[rng.random(x.shape) < 0.1] = np.nan
    x[:, CATEGORICAL] = rng.integers(0, 12, n)
    x[rng.random(n) < 0.05, CATEGORICAL] = np.nan
    y = np.nan_to_num(x[:, 0]) * 2 + np.sin(np.nan_to_num(x[:, 1])) + (x[:, CATEGORICAL] % 3 == 0)
    return x, y + rng.normal(size=n) * 0.1


def _test_rows(n=400, seed=1):
    """Rows with the values the rules single out."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, N_FEATURES)) * 2
    x[rng.random(x.shape) < 0.15] = np.nan
    x[:12, 0] = [0.0, -0.0, np.inf, -np.inf, 1e300, -1e300, 1e-36, -1e-36, 1e-35, 1e-30, 5e-324, np.nan]
    x[:, CATEGORICAL] = rng.integers(-2, 15, n).astype(float)
    # NaN, a negative fraction (category 0), fractions, huge, infinite and unseen categories.
    x[:10, CATEGORICAL] = [np.nan, -0.5, 0.5, 2.9, 1e10, -1e10, np.inf, -np.inf, 31.0, 1e300]
    return x


OBJECTIVES = {
    "regression": {"objective": "regression"},
    "zero_as_missing": {"objective": "regression", "zero_as_missing": True},
    "binary": {"objective": "binary"},
    "multiclass": {"objective": "multiclass", "num_class": 3},
    "poisson": {"objective": "poisson"},
    "random_forest": {"objective": "regression", "boosting": "rf", "bagging_freq": 1, "bagging_fraction": 0.5},
    "sqrt": {"objective": "regression", "reg_sqrt": True},
    "cross_entropy_lambda": {"objective": "cross_entropy_lambda"},
}


def _target(name, y):
    if name in ("binary", "cross_entropy_lambda"):
        return (y > 0.5).astype(float)
    if name == "multiclass":
        return np.digitize(y, [-1, 1]).astype(float)
    if name == "poisson":
        return np.exp(y / 3)
    return y


@pytest.fixture(scope="module", params=sorted(OBJECTIVES))
def booster(request):
    x, y = _training_rows()
    params = dict(OBJECTIVES[request.param], verbose=-1, num_leaves=15, min_data_in_leaf=5)
    data = lgb.Dataset(x, _target(request.param, y), categorical_feature=[CATEGORICAL])
    return lgb.train(params, data, num_boost_round=25)


def _ulps(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    both_nan = np.isnan(a) & np.isnan(b)
    d = np.abs(a.view(np.int64) - b.view(np.int64))
    return np.where(both_nan, 0, d)


def test_raw_scores_are_lightgbms_bits(booster, tier):
    x = _test_rows()
    f = kiln.trees.compile(booster, tier=tier, raw_score=True)
    got, want = f(x), booster.predict(x, raw_score=True)
    assert got.shape == want.shape
    assert _ulps(got, want).max() == 0


def test_predictions_are_within_two_ulps(booster, tier):
    x = _test_rows()
    got, want = kiln.trees.compile(booster, tier=tier)(x), booster.predict(x)
    assert got.shape == want.shape
    if "cross_entropy_lambda" in booster.model_to_string():
        # log(1 + exp(x)) turns exp's last bit into log's relative error
        # over the small sum's ulp: the same formula, amplified.
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=0)
    else:
        assert _ulps(got, want).max() <= 2


def test_every_tier_gives_the_same_bits(booster):
    x = _test_rows()
    results = [kiln.trees.compile(booster, tier=t)(x) for t in kiln.tiers()]
    for r in results[1:]:
        assert _ulps(r, results[0]).max() == 0


@pytest.fixture(scope="module", params=[("selects in groups", 60, 31), ("walk", 400, 63)])
def big_booster(request):
    """Ensembles past one group of the LLVM tier's straight-line selects
    (60 trees: about 1,800 nodes in groups of 512, in blocks of 128 rows)
    and past its selects altogether (400 full trees of 63 leaves: 24,800
    nodes, which every tier walks in blocks of 512 rows and groups of 8)."""
    kind, n_trees, leaves = request.param
    x, y = _training_rows(3000)
    # Any leaf with data: every tree grows all its leaves.
    params = dict(verbose=-1, num_leaves=leaves, objective="binary")
    params.update(min_data_in_leaf=2, min_sum_hessian_in_leaf=0)
    data = lgb.Dataset(x, (y > 0.5).astype(float), categorical_feature=[CATEGORICAL])
    booster = lgb.train(params, data, num_boost_round=n_trees)
    nodes = sum(t["num_leaves"] - 1 for t in booster.dump_model()["tree_info"])
    assert (nodes > kiln.trees.TREE_SELECTS) == (kind == "walk"), nodes
    return booster


def test_big_ensembles_over_blocks_of_rows(big_booster, tier):
    f = kiln.trees.compile(big_booster, tier=tier, raw_score=True)
    rows = np.concatenate([_test_rows(400, seed=2), _test_rows(400, seed=3), _test_rows(400, seed=4)])
    # Row counts around the groups of 8, the selects' blocks of 128 and the
    # walk's blocks of 512: full and partial ones.
    for n_rows in [1, 7, 9, 130, 1100]:
        x = rows[:n_rows]
        assert _ulps(f(x), big_booster.predict(x, raw_score=True)).max() == 0, n_rows


def test_text_paths_estimators_and_pickles(tmp_path):
    x, y = _training_rows(600)
    est = lgb.LGBMRegressor(n_estimators=10, num_leaves=7, verbose=-1).fit(x, y)
    want = est.predict(_test_rows())
    path = tmp_path / "model.txt"
    est.booster_.save_model(path)
    for model in (est, est.booster_, path, str(path), path.read_text()):
        f = kiln.trees.compile(model, tier="cranelift")
        assert _ulps(f(_test_rows()), want).max() <= 2
    again = pickle.loads(pickle.dumps(kiln.trees.compile(path)))
    assert _ulps(again(_test_rows()), want).max() <= 2


def test_columns_by_name_from_a_data_frame():
    x, y = _training_rows(600)
    names = [f"feat_{i}" for i in range(N_FEATURES)]
    frame = pd.DataFrame(x, columns=names)
    booster = lgb.train({"verbose": -1, "num_leaves": 7}, lgb.Dataset(frame, y), num_boost_round=8)
    f = kiln.trees.compile(booster, columns=True)
    assert list(f.inputs) == names
    rows = pd.DataFrame(_test_rows(), columns=names)
    # Any column order: the inputs are named.
    shuffled = rows[names[::-1]]
    got = f(**{name: shuffled[name] for name in f.inputs})
    assert _ulps(got, booster.predict(rows)).max() <= 2


def test_float32_rows_are_widened_as_lightgbm_widens_them():
    x, y = _training_rows(600)
    booster = lgb.train({"verbose": -1, "num_leaves": 7}, lgb.Dataset(x, y), num_boost_round=8)
    with np.errstate(over="ignore"):  # 1e300 becomes inf, as intended
        rows = _test_rows().astype(np.float32)
    got = kiln.trees.compile(booster, raw_score=True)(rows)
    assert _ulps(got, booster.predict(rows, raw_score=True)).max() == 0


def test_bad_models_and_bad_rows_are_clear_errors():
    x, y = _training_rows(300)
    booster = lgb.train({"verbose": -1, "num_leaves": 4}, lgb.Dataset(x, y), num_boost_round=2)
    f = kiln.trees.compile(booster)
    with pytest.raises(ValueError, match="x"):
        f(np.zeros((3, N_FEATURES - 1)))
    with pytest.raises(TypeError):
        kiln.trees.compile(42)
    text = booster.model_to_string()
    with pytest.raises(kiln.ParseError, match="not a number"):
        kiln.trees.compile(text.replace("threshold=", "threshold=x", 1))
    with pytest.raises(kiln.ParseError, match="leaf_value"):
        kiln.trees.compile(text.replace("leaf_value=", "leaf_value=1 ", 1))
    with pytest.raises(kiln.ParseError, match="unknown objective"):
        kiln.trees.compile(text.replace("objective=regression", "objective=mystery", 1))
    # A child pointing back at the root would walk forever: refused, at its tree.
    bad = text.replace("left_child=1", "left_child=0", 1)
    assert bad != text
    with pytest.raises(kiln.ParseError, match=r":\d+:1: error: tree \d+: node 0 is reached twice"):
        kiln.trees.compile(bad)


def test_linear_trees_are_refused_by_name():
    x, y = _training_rows(300)
    x = np.nan_to_num(x)
    booster = lgb.train(
        {"verbose": -1, "num_leaves": 4, "linear_tree": True}, lgb.Dataset(x, y), num_boost_round=2
    )
    with pytest.raises(kiln.ParseError, match="linear trees"):
        kiln.trees.compile(booster)
