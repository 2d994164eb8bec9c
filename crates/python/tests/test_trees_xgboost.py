"""kiln.trees against XGBoost's own predict: margins bit for bit on every
tier (rows rounded to float32, float32 sums in tree order from the base
score's margin), linked predictions within 2 float32 ulps (kiln's exp is
its own), on rows with NaN, signed zeros, infinities, huge values,
negative fractions and unseen categories."""

import json
import pickle

import numpy as np
import pytest
import xgboost as xgb

import kiln

N_FEATURES = 5
CATEGORICAL = 4
TIERS = ["vm", "cranelift", "llvm"]


def _training_rows(n=1200, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, N_FEATURES))
    x[rng.random(x.shape) < 0.1] = np.nan
    x[:, CATEGORICAL] = rng.integers(0, 40, n)
    x[rng.random(n) < 0.05, CATEGORICAL] = np.nan
    y = np.nan_to_num(x[:, 0]) * 2 + np.sin(np.nan_to_num(x[:, 1])) + (x[:, CATEGORICAL] % 3 == 0)
    return x, y + rng.normal(size=n) * 0.1


def _test_rows(n=400, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, N_FEATURES)) * 2
    x[rng.random(x.shape) < 0.15] = np.nan
    # XGBoost refuses infinities (and values float32 rounds to one) unless
    # `missing=inf`: these are the largest it takes.
    x[:14, 0] = [0.0, -0.0, 3.4e38, -3.4e38, 1e30, -1e30, 1e-36, -1e-46, 1e-45, 3e38, 1e-39, np.nan, 1e-320, -5e-324]
    x[:, CATEGORICAL] = rng.integers(-2, 45, n).astype(float)
    # NaN, negative fractions (no category: unlisted), fractions, huge, unseen.
    x[:12, CATEGORICAL] = [np.nan, -0.5, -0.0, 0.5, 2.9, 1e10, -1e10, -0.99, -1.0, 63.0, 3e38, 16777216.0]
    return x


def _labels(objective, y):
    if objective in ("binary:logistic", "binary:logitraw", "binary:hinge", "reg:logistic"):
        return (y > np.median(y)).astype(float)
    if objective.startswith("multi:"):
        return np.digitize(y, np.quantile(y, [0.33, 0.66])).astype(float)
    if objective in ("count:poisson", "reg:gamma", "reg:tweedie"):
        return np.exp(y / 3)
    return y


OBJECTIVES = [
    "reg:squarederror",
    "binary:logistic",
    "binary:logitraw",
    "binary:hinge",
    "multi:softprob",
    "multi:softmax",
    "count:poisson",
    "reg:gamma",
    "reg:tweedie",
    "reg:absoluteerror",
]


def _train(objective, categorical=True, rounds=12, **params):
    x, y = _training_rows()
    kinds = ["q"] * N_FEATURES
    if categorical:
        kinds[CATEGORICAL] = "c"
    d = xgb.DMatrix(x, label=_labels(objective, y), feature_types=kinds, enable_categorical=categorical)
    p = {"objective": objective, "max_depth": 4, "max_cat_to_onehot": 1, "seed": 0}
    if objective.startswith("multi:"):
        p["num_class"] = 3
    p.update(params)
    return xgb.train(p, d, num_boost_round=rounds)


@pytest.fixture(scope="module")
def models():
    return {objective: _train(objective) for objective in OBJECTIVES}


def _predict(booster, x, **kw):
    kinds = booster.feature_types
    return booster.predict(xgb.DMatrix(x, feature_types=kinds, enable_categorical=True), **kw)


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("objective", OBJECTIVES)
def test_margins_are_xgboosts_bits(models, objective, tier):
    booster = models[objective]
    x = _test_rows()
    f = kiln.trees.compile(booster, tier=tier, raw_score=True)
    got = f(x)
    want = _predict(booster, x, output_margin=True)
    assert got.dtype == np.float32
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("objective", OBJECTIVES)
def test_predictions_match_xgboost(models, objective, tier):
    booster = models[objective]
    x = _test_rows()
    got = kiln.trees.compile(booster, tier=tier)(x)
    want = _predict(booster, x)
    assert got.shape == want.shape
    if objective in ("multi:softmax", "binary:hinge") or objective.startswith("reg:sq"):
        np.testing.assert_array_equal(got, want)
    else:
        ulps = np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))
        assert ulps.max() <= 2, (objective, ulps.max())


def test_estimators_paths_text_and_pickles(models, tmp_path):
    x, y = _training_rows()
    x = x[:, :CATEGORICAL]
    est = xgb.XGBRegressor(n_estimators=15, max_depth=3).fit(x, y)
    rows = _test_rows()[:, :CATEGORICAL]
    want = est.predict(rows)
    f = kiln.trees.compile(est)
    np.testing.assert_array_equal(f(rows), want)
    path = tmp_path / "model.json"
    est.save_model(path)
    np.testing.assert_array_equal(kiln.trees.compile(path, tier="vm")(rows), want)
    np.testing.assert_array_equal(kiln.trees.compile(str(path), tier="vm")(rows), want)
    np.testing.assert_array_equal(kiln.trees.compile(path.read_text(), tier="vm")(rows), want)
    g = pickle.loads(pickle.dumps(f))
    np.testing.assert_array_equal(g(rows), want)
    # A classifier's predict_proba is the sigmoid's [1 - p, p]; kiln gives p.
    clf = xgb.XGBClassifier(n_estimators=10, max_depth=3).fit(x, y > 0)
    p = kiln.trees.compile(clf)(rows)
    ulps = np.abs(p.view(np.int32).astype(np.int64) - clf.predict_proba(rows)[:, 1].view(np.int32))
    assert ulps.max() <= 2


def test_columns_by_name(models):
    booster = _train("reg:squarederror", categorical=False)
    booster.feature_names = ["a", "b", "c", "d", "e"]
    x = _test_rows()
    f = kiln.trees.compile(booster, columns=True, tier="cranelift")
    assert sorted(f.inputs) == ["a", "b", "c", "d", "e"]
    got = f(**{name: x[:, i] for i, name in enumerate("abcde")})
    want = booster.predict(xgb.DMatrix(x, feature_names=list("abcde")))
    np.testing.assert_array_equal(got, want)


def test_a_random_forest_and_parallel_trees():
    booster = _train("reg:squarederror", categorical=False, num_parallel_tree=4, subsample=0.7,
                     colsample_bynode=0.8, learning_rate=1.0, rounds=1)
    x = _test_rows()
    got = kiln.trees.compile(booster)(x)
    np.testing.assert_array_equal(got, booster.predict(xgb.DMatrix(x)))


@pytest.mark.parametrize("objective", ["reg:squarederror", "binary:logistic", "multi:softprob"])
def test_dart_scales_each_tree_by_its_weight(objective):
    booster = _train(objective, booster="dart", rate_drop=0.3, skip_drop=0.0, rounds=10)
    weights = json.loads(bytes(booster.save_raw("json")))["learner"]["gradient_booster"]["weight_drop"]
    assert len(set(weights)) > 1
    x = _test_rows()
    for tier in TIERS:
        got = kiln.trees.compile(booster, tier=tier, raw_score=True)(x)
        want = _predict(booster, x, output_margin=True)
        np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))


def test_multi_target_regression():
    x, y = _training_rows()
    ys = np.stack([y, -y, y * y], axis=1)
    booster = xgb.train({"tree_method": "hist", "max_depth": 3}, xgb.DMatrix(x[:, :4], label=ys), 8)
    rows = _test_rows()[:, :4]
    got = kiln.trees.compile(booster)(rows)
    want = booster.predict(xgb.DMatrix(rows))
    assert got.shape == want.shape == (len(rows), 3)
    np.testing.assert_array_equal(got, want)


def test_bad_models_are_clear_errors(models):
    text = bytes(models["binary:logistic"].save_raw("json")).decode()
    j = json.loads(text)
    cases = []
    bad = json.loads(text)
    bad["learner"]["objective"]["name"] = "reg:mystery"
    cases.append((json.dumps(bad), "unknown objective `reg:mystery`"))
    bad = json.loads(text)
    bad["learner"]["gradient_booster"]["model"]["trees"][0]["left_children"][0] = 0
    cases.append((json.dumps(bad), "tree 0: node 0 is reached twice"))
    bad = json.loads(text)
    bad["learner"]["gradient_booster"]["model"]["trees"][1]["split_indices"].pop()
    cases.append((json.dumps(bad), "tree 1: `split_indices` has"))
    bad = json.loads(text)
    bad["learner"]["gradient_booster"]["model"]["trees"][0]["split_indices"][0] = 99
    cases.append((json.dumps(bad), "feature 99 of 5"))
    bad = json.loads(text)
    bad["learner"]["gradient_booster"]["name"] = "gblinear"
    cases.append((json.dumps(bad), "the `gblinear` booster is not supported"))
    dart = json.loads(bytes(_train("reg:squarederror", booster="dart", rate_drop=0.3, rounds=4).save_raw("json")))
    dart["learner"]["gradient_booster"]["weight_drop"].pop()
    cases.append((json.dumps(dart), "4 trees but 3 weight_drop entries"))
    cases.append((text[: len(text) // 2], "the JSON ends"))
    cases.append(('{"learner": ' + "[" * 100 + "]" * 100 + "}", "nested deeper"))
    for src, says in cases:
        with pytest.raises(kiln.ParseError, match=None) as e:
            kiln.trees.compile(src, tier="vm")
        assert says in str(e.value), (says, str(e.value))
    assert j["learner"]["objective"]["name"] == "binary:logistic"


def test_bad_rows_are_clear_errors(models):
    f = kiln.trees.compile(models["reg:squarederror"], tier="vm")
    with pytest.raises(ValueError, match="x"):
        f(np.zeros((3, N_FEATURES + 1)))
    with pytest.raises(TypeError):
        kiln.trees.compile(3.5)
