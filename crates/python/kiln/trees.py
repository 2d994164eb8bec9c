"""``kiln.trees``: tree-ensemble models compiled into code.

:func:`compile` reads a LightGBM model (a ``lightgbm.Booster``, a fitted
``LGBMRegressor``/``LGBMClassifier``/``LGBMRanker``, the text
``save_model`` writes, or a path to it) into one ``trees`` op of kiln's IR,
with the model's link after it, and compiles that like any other graph: the
result is a :class:`kiln.Function` on every tier. Its raw scores are
LightGBM's bits (the same comparisons, the same sums in tree order, in
``float64``); its linked predictions are within 2 ulps of LightGBM's
(kiln's ``exp`` is its own, docs/semantics.md), and within 1e-13
relative for ``cross_entropy_lambda``, whose ``log(1 + exp(x))`` magnifies
``exp``'s last bit.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["compile"]


def _format(text: str) -> str:
    head = text.lstrip()
    if head.startswith("{"):
        return "xgboost"
    return "lightgbm"


def _model_text(model: Any) -> tuple[str, str, str]:
    """The model's text, its format and the name messages give it."""
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
    ``Booster.predict(x)`` returns: ``(rows,)`` for a model with one output,
    ``(rows, classes)`` for a multiclass one. ``raw_score=True`` returns the
    raw scores (``predict(x, raw_score=True)``). ``columns=True`` takes one
    ``float64`` column per feature instead, named after the model's
    features (``f(**{name: df[name] for name in f.inputs})``). ``tier`` is
    as :func:`kiln.compile` takes it.
    """
    from . import _kiln, _spec

    text, fmt, name = _model_text(model)
    spec = _spec(text, fmt, None, None, None, raw_score=raw_score, columns=columns)
    spec["name"] = name
    recipe = ("compile", spec, tier, optimize)
    return _kiln.compile(spec, tier, bool(optimize), recipe)
