"""Vertex-classification metrics against scikit-learn on random data."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, precision_score, recall_score

from pgnn.training.metrics import (
    VertexMetricsAccumulator,
    average_precision,
    confusion_matrix,
    per_class_average_precision,
    recall_precision,
)


def _random_batch(rng: np.random.Generator, n: int, c: int) -> tuple[np.ndarray, np.ndarray]:
    labels = rng.integers(0, c, size=n)
    logits = rng.normal(size=(n, c)) + 1.5 * np.eye(c)[labels]  # informative but imperfect
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    return labels, probs


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_recall_precision_match_sklearn(seed: int) -> None:
    rng = np.random.default_rng(seed)
    labels, probs = _random_batch(rng, 500, 4)
    pred = probs.argmax(axis=1)
    recall, precision = recall_precision(confusion_matrix(labels, pred, 4))
    np.testing.assert_allclose(recall, recall_score(labels, pred, labels=range(4), average=None), atol=1e-12)
    np.testing.assert_allclose(
        precision, precision_score(labels, pred, labels=range(4), average=None), atol=1e-12
    )


def test_undefined_recall_and_precision_are_nan() -> None:
    labels = np.array([0, 0, 1, 1])
    pred = np.array([0, 1, 1, 1])
    recall, precision = recall_precision(confusion_matrix(labels, pred, 3))
    assert np.isnan(recall[2]) and np.isnan(precision[2])
    np.testing.assert_allclose(recall[:2], [0.5, 1.0])
    np.testing.assert_allclose(precision[:2], [1.0, 2 / 3])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_average_precision_matches_sklearn(seed: int) -> None:
    rng = np.random.default_rng(seed)
    labels, probs = _random_batch(rng, 400, 3)
    probs[:50] = np.round(probs[:50], 1)  # ties: several vertices at one threshold
    ours = per_class_average_precision(labels, probs)
    for c in range(3):
        assert ours[c] == pytest.approx(average_precision_score(labels == c, probs[:, c]), abs=1e-12)


def test_average_precision_perfect_and_no_positive() -> None:
    assert average_precision(np.array([1, 1, 0, 0], bool), np.array([0.9, 0.8, 0.2, 0.1])) == 1.0
    assert np.isnan(average_precision(np.zeros(4, bool), np.array([0.9, 0.8, 0.2, 0.1])))


def test_accumulator_equals_sklearn_on_binned_scores() -> None:
    rng = np.random.default_rng(7)
    bins = 50
    acc = VertexMetricsAccumulator.empty(4, num_bins=bins)
    all_labels, all_probs = [], []
    for _ in range(3):  # streaming over three batches
        labels, probs = _random_batch(rng, 300, 4)
        acc.update(labels, probs)
        all_labels.append(labels)
        all_probs.append(probs)
    labels, probs = np.concatenate(all_labels), np.concatenate(all_probs)
    out = acc.compute()
    pred = probs.argmax(axis=1)
    np.testing.assert_allclose(out["recall"], recall_score(labels, pred, average=None), atol=1e-12)
    np.testing.assert_allclose(out["precision"], precision_score(labels, pred, average=None), atol=1e-12)
    binned = np.minimum(np.floor(probs * bins), bins - 1)
    for c in range(4):
        expected = average_precision_score(labels == c, binned[:, c])
        assert out["pr_auc"][c] == pytest.approx(expected, abs=1e-12)
    # and close to the exact AP of the raw scores
    np.testing.assert_allclose(out["pr_auc"], per_class_average_precision(labels, probs), atol=0.02)


def test_accumulator_round_trips_and_adds() -> None:
    rng = np.random.default_rng(3)
    a = VertexMetricsAccumulator.empty(3, num_bins=20)
    b = VertexMetricsAccumulator.empty(3, num_bins=20)
    both = VertexMetricsAccumulator.empty(3, num_bins=20)
    for acc in (a, b):
        labels, probs = _random_batch(rng, 100, 3)
        acc.update(labels, probs)
        both.update(labels, probs)
    summed = VertexMetricsAccumulator.from_array(a.to_array() + b.to_array(), 3, 20)
    np.testing.assert_array_equal(summed.to_array(), both.to_array())
    assert summed.confusion.sum() == 200
    with pytest.raises(ValueError, match="expected"):
        VertexMetricsAccumulator.from_array(a.to_array()[:-1], 3, 20)


def test_accumulator_rejects_non_finite_probabilities() -> None:
    acc = VertexMetricsAccumulator.empty(2, num_bins=10)
    with pytest.raises(ValueError, match="finite"):
        acc.update(np.array([0, 1]), np.array([[0.5, 0.5], [np.nan, np.nan]]))
    assert acc.confusion.sum() == 0
