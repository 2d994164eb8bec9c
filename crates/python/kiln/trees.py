"""``kiln.trees``: tree-ensemble models compiled into code.

:func:`compile` reads a LightGBM model (a ``lightgbm.Booster``, a fitted
``LGBMRegressor``/``LGBMClassifier``/``LGBMRanker``, the text
``save_model`` writes, or a path to it), an XGBoost model (a Booster, a
fitted ``XGBRegressor``/``XGBClassifier``, its JSON or a path to it) or a
fitted scikit-learn tree, forest or gradient-boosting estimator
into one ``trees`` op of kiln's IR,
with the model's link after it, and compiles that like any other graph: the
result is a :class:`kiln.Function` on every tier. Its raw scores are the
library's bits (the same comparisons, the same sums in tree order, in the
library's dtype: ``float64`` for LightGBM and scikit-learn, ``float32`` for
XGBoost); its linked predictions are within 2 ulps of the library's
(kiln's ``exp`` is its own, docs/semantics.md), and within 1e-13
relative for LightGBM's ``cross_entropy_lambda``, whose
``log(1 + exp(x))`` magnifies ``exp``'s last bit.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from . import _kiln

__all__ = ["compile", "TREE_SELECTS"]

#: The most nodes (splits, summed over the trees) an ensemble may have for
#: the LLVM tier to compile it as straight-line selects: every node's test
#: and a select per node, branch-free, a row loop that runs in vector lanes.
#: A larger ensemble is walked through a table, as the other tiers walk
#: every ensemble; its code does not grow with the model, so it compiles in
#: a fraction of a second where the selects of a model near this size take
#: LLVM tens of seconds (docs/performance.md).
TREE_SELECTS: int = _kiln._TREE_SELECTS


def _format(text: str) -> str:
    head = text.lstrip()
    if head.startswith("{"):
        return "xgboost"
    if head.startswith("kiln-trees v0"):
        return "kiln-trees"
    return "lightgbm"


# scikit-learn's estimators, written as kiln's tree-model text (the format
# of `kiln_frontend::trees::kiln`): each fitted tree's arrays become one
# `trees` op with scikit-learn's rules. A tree or forest reads its rows as
# float32 (`DTYPE`) and compares them with float64 thresholds, `x <= t`,
# NaN going where `missing_go_to_left` says; its values are float64 sums.
# Gradient boosting starts from its init estimator's constant raw score and
# adds `learning_rate * value` per stage, as `predict_stages` does.


def _walk(left, right, is_leaf):
    """Nodes renumbered from the root: (internal order, leaf order, maps)."""
    node_of, leaf_of, internal, leaves = {}, {}, [], []
    stack = [0]
    while stack:
        i = stack.pop()
        if is_leaf(i):
            leaf_of[i] = len(leaves)
            leaves.append(i)
        else:
            node_of[i] = len(internal)
            internal.append(i)
            stack.append(int(right[i]))
            stack.append(int(left[i]))
    return internal, leaves, node_of, leaf_of


def _tree_text(output, feature, threshold, left, right, go_left, is_leaf, leaf_value):
    """One `tree OUTPUT [nodes] [leaves]` of the IR's `trees` syntax."""
    internal, leaves, node_of, leaf_of = _walk(left, right, is_leaf)

    def child(c):
        c = int(c)
        return f"l{leaf_of[c]}" if c in leaf_of else f"n{node_of[c]}"

    nodes = []
    for i in internal:
        side = "left" if go_left[i] else "right"
        t = float(threshold[i])
        nodes.append(f"f{int(feature[i])} le {t!r} nan {side} {child(left[i])} {child(right[i])}")
    values = ", ".join(repr(float(leaf_value[i])) for i in leaves)
    return f"tree {output} [{', '.join(nodes)}] [{values}]"


def _sklearn_tree(tree, outputs, scale=None, first_output=0):
    """An sklearn `Tree`'s text, one IR tree per leaf column `outputs`
    (a function of the tree's `value` array) gives, adding to outputs
    `first_output`, `first_output + 1`, …"""
    left, right = tree.children_left, tree.children_right
    go_left = getattr(tree, "missing_go_to_left", None)
    if go_left is None:
        go_left = [0] * len(left)
    columns = outputs(tree.value)
    if scale is not None:
        columns = [scale * c for c in columns]
    return [
        _tree_text(first_output + k, tree.feature, tree.threshold, left, right, go_left,
                   lambda i: left[i] == -1, col)
        for k, col in enumerate(columns)
    ]


def _sklearn_text(model: Any) -> str:
    import numpy as np

    name = type(model).__name__
    if not hasattr(model, "n_features_in_"):
        raise ValueError(f"{name} is not fitted")
    n_features = int(model.n_features_in_)
    header = ["kiln-trees v0", "input f32"]
    trees: list[str] = []
    init = None  # each output's starting value; zeros for trees and forests

    def regression(value):
        return [value[:, k, 0] for k in range(value.shape[1])]

    def proba(value):
        # A classifier's `value` holds each leaf's class fractions, which
        # `predict_proba` returns as they are (scikit-learn >= 1.4).
        if value.shape[1] != 1:
            raise ValueError(f"{name}: multi-output classifiers are not supported")
        return [value[:, 0, k] for k in range(value.shape[2])]

    kind = name.replace("ExtraTrees", "RandomForest").replace("ExtraTree", "DecisionTree")
    if kind in ("DecisionTreeRegressor", "DecisionTreeClassifier"):
        outputs = regression if kind.endswith("Regressor") else proba
        trees = _sklearn_tree(model.tree_, outputs)
        init = np.zeros(len(trees))
    elif kind in ("RandomForestRegressor", "RandomForestClassifier"):
        outputs = regression if kind.endswith("Regressor") else proba
        for est in model.estimators_:
            trees += _sklearn_tree(est.tree_, outputs)
        header.append(f"average {len(model.estimators_)}")
        init = np.zeros(len(trees) // len(model.estimators_))
    elif kind in ("GradientBoostingRegressor", "GradientBoostingClassifier"):
        from sklearn.dummy import DummyClassifier, DummyRegressor

        if not (isinstance(model.init_, str) and model.init_ == "zero") and not isinstance(
            model.init_, (DummyClassifier, DummyRegressor)
        ):
            raise ValueError(f"{name}: an init estimator other than a constant is not supported")
        init = model._raw_predict_init(np.zeros((1, n_features), dtype=np.float32))[0]
        for stage in model.estimators_:
            for k, est in enumerate(stage):
                trees += _sklearn_tree(est.tree_, lambda v: [v[:, 0, 0]], model.learning_rate, k)
        if kind.endswith("Classifier"):
            header.append("link sigmoid-pair" if len(init) == 1 else "link softmax")
    elif kind in ("HistGradientBoostingRegressor", "HistGradientBoostingClassifier"):
        if getattr(model, "is_categorical_", None) is not None and np.any(model.is_categorical_):
            raise ValueError(f"{name}: categorical features are not supported yet")
        header[1] = "input f64"  # X_DTYPE
        init = np.asarray(model._baseline_prediction, dtype=np.float64).reshape(-1)
        for stage in model._predictors:
            for k, predictor in enumerate(stage):
                n = predictor.nodes
                trees.append(
                    _tree_text(
                        k, n["feature_idx"], n["num_threshold"], n["left"], n["right"],
                        n["missing_go_to_left"], lambda i, n=n: bool(n["is_leaf"][i]), n["value"],
                    )
                )
        if kind.endswith("Classifier"):
            header.append("link sigmoid-pair" if len(init) == 1 else "link softmax")
    else:
        raise TypeError(
            f"{name} is not a tree model kiln reads: scikit-learn's DecisionTree, ExtraTree(s), "
            "RandomForest, GradientBoosting and HistGradientBoosting regressors and classifiers"
        )
    for feature in getattr(model, "feature_names_in_", []):
        feature = str(feature)
        if "\n" in feature or "\r" in feature:
            raise ValueError(f"{name}: a feature name holds a line break: {feature!r}")
        header.append(f"feature {feature}")
    init_text = ", ".join(repr(float(v)) for v in init)
    body = f"trees features {n_features} init [{init_text}] " + " ".join(trees)
    return "\n".join(header + [body]) + "\n"


def _model_text(model: Any) -> tuple[str, str, str]:
    """The model's text, its format and the name messages give it."""
    if type(model).__module__.startswith("sklearn."):
        return _sklearn_text(model), "kiln-trees", f"<{type(model).__name__}>"
    booster = getattr(model, "booster_", None)  # a fitted LightGBM estimator
    if booster is not None and hasattr(booster, "model_to_string"):
        model = booster
    if hasattr(model, "model_to_string"):
        return model.model_to_string(), "lightgbm", "<lightgbm.Booster>"
    if hasattr(model, "get_booster"):  # a fitted XGBoost estimator
        model = model.get_booster()
    if hasattr(model, "save_raw") and hasattr(model, "get_dump"):  # an xgboost.Booster
        return bytes(model.save_raw("json")).decode(), "xgboost", "<xgboost.Booster>"
    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    if isinstance(model, str):
        if model.startswith("tree\n") or model.startswith("tree\r\n"):
            return model, "lightgbm", "<model>"
        if model.lstrip().startswith("{"):
            return model, "xgboost", "<model>"
        if model.startswith("kiln-trees v0"):
            return model, "kiln-trees", "<model>"
        text = Path(model).read_text()
        return text, _format(text), model
    raise TypeError(
        "model must be a LightGBM or XGBoost booster, a fitted LightGBM or XGBoost "
        "estimator, a LightGBM text model, an XGBoost JSON model or a path to one, "
        f"not {type(model).__name__}"
    )


def compile(
    model: Any,
    *,
    tier: str = "auto",
    raw_score: bool = False,
    columns: bool = False,
    optimize: bool = True,
):
    """Compiles a tree-ensemble model into a :class:`kiln.Function`.

    The function takes ``x``, a 2-D array of rows by the model's features
    (any float dtype NumPy can cast to ``float64``; a DataFrame's values in
    its column order, as ``Booster.predict`` reads them), and returns what
    the library's ``predict`` returns: ``(rows,)`` for a model with one
    output, ``(rows, classes)`` for a multiclass one (``float32`` for
    XGBoost; ``predict_proba``'s columns for a scikit-learn classifier).
    ``raw_score=True`` returns the raw scores (LightGBM's ``raw_score=True``,
    XGBoost's ``output_margin=True``, scikit-learn's ``decision_function``
    or a forest's unaveraged sums). ``columns=True`` takes one
    ``float64`` column per feature instead, named after the model's
    features (``f(**{name: df[name] for name in f.inputs})``). ``tier`` is
    as :func:`kiln.compile` takes it.
    """
    from . import _spec

    text, fmt, name = _model_text(model)
    spec = _spec(text, fmt, None, None, None, raw_score=raw_score, columns=columns)
    spec["name"] = name
    recipe = ("compile", spec, tier, optimize)
    return _kiln.compile(spec, tier, bool(optimize), recipe)
