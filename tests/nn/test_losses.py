"""Loss terms against hand computations and torch references."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pgnn.config.network import LossConfig
from pgnn.nn.losses import (
    CLS_LOSSES,
    LOC_LOSSES,
    LossNormaliser,
    compute_loss,
    focal_sigmoid,
    focal_softmax,
    gather_class_boxes,
    loss_counts,
    regularization_loss,
    regularized_parameters,
    softmax_cross_entropy,
    top_k_mask,
)

NO_REG = {"regularizer_type": None, "regularizer_kwargs": {}}


def _batch(seed: int = 0, n: int = 40, c: int = 4, d: int = 7) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, c, (n,), generator=g)
    return {
        "logits": torch.randn(n, c, generator=g, dtype=torch.float64),
        "box_pred": torch.randn(n, c, d, generator=g, dtype=torch.float64) * 2,
        "cls_labels": labels,
        "box_targets": torch.randn(n, d, generator=g, dtype=torch.float64),
        "valid": (labels == 1) | (labels == 2),
    }


def _np_log_softmax(x: np.ndarray) -> np.ndarray:
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


def test_defaults_follow_the_original_car_config() -> None:
    cfg = LossConfig()
    assert (cfg.cls_loss_type, cfg.loc_loss_type) == ("softmax", "huber_loss")
    assert (cfg.cls_loss_weight, cfg.loc_loss_weight) == (0.1, 10.0)
    assert cfg.regularizer_type == "l1" and cfg.regularizer_kwargs == {"scale": 5e-7}
    assert set(CLS_LOSSES) == {"softmax", "focal_sigmoid", "focal_softmax", "top_k_softmax"}
    assert set(LOC_LOSSES) == {"huber_loss", "top_k_huber_loss"}


def test_config_rejects_wrong_regularizer_kwargs() -> None:
    with pytest.raises(ValueError, match="expects kwargs"):
        LossConfig(regularizer_type="l1_l2", regularizer_kwargs={"scale": 1.0})
    with pytest.raises(ValueError, match="without a regularizer_type"):
        LossConfig(regularizer_type=None, regularizer_kwargs={"scale": 1.0})
    with pytest.raises(ValueError):
        LossConfig(cls_loss_typo="softmax")


def test_softmax_cross_entropy_by_hand() -> None:
    b = _batch()
    expected = -_np_log_softmax(b["logits"].numpy())[np.arange(40), b["cls_labels"].numpy()]
    got = softmax_cross_entropy(b["logits"], b["cls_labels"], LossConfig())
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12)


def test_focal_losses_by_hand_on_the_originals_example() -> None:
    # the original's own check: labels [1, 2], logits [[-100]*3, [-20, -20, -40]]
    labels = torch.tensor([1, 2])
    logits = torch.tensor([[-100.0, -100.0, -100.0], [-20.0, -20.0, -40.0]], dtype=torch.float64)
    cfg = LossConfig(focal_alpha=0.25, focal_gamma=2.0)
    # softmax focal: row 0 is uniform, p = 1/3; row 1: p_2 = e^-20 / (2 + e^-20)
    p2 = math.exp(-20) / (2 + math.exp(-20))
    expected_softmax = [(2 / 3) ** 2 * math.log(3), (1 - p2) ** 2 * -math.log(p2)]
    np.testing.assert_allclose(focal_softmax(logits, labels, cfg).numpy(), expected_softmax, rtol=1e-12)
    # sigmoid focal, element by element, then the mean over the classes
    x = logits.numpy()
    y = np.eye(3)[labels.numpy()]
    p = 1 / (1 + np.exp(-x))
    bce = -(y * np.log(p) + (1 - y) * np.log1p(-p))
    p_t = y * p + (1 - y) * (1 - p)
    a_t = y * 0.25 + (1 - y) * 0.75
    expected_sigmoid = (a_t * (1 - p_t) ** 2 * bce).mean(axis=1)
    np.testing.assert_allclose(focal_sigmoid(logits, labels, cfg).numpy(), expected_sigmoid, rtol=1e-9)


def test_focal_reduces_to_cross_entropy_at_gamma_zero() -> None:
    b = _batch(1)
    cfg = LossConfig(focal_gamma=0.0, focal_alpha=0.5)
    ce = F.cross_entropy(b["logits"], b["cls_labels"], reduction="none")
    torch.testing.assert_close(focal_softmax(b["logits"], b["cls_labels"], cfg), ce, rtol=1e-12, atol=1e-12)
    bce = F.binary_cross_entropy_with_logits(
        b["logits"], F.one_hot(b["cls_labels"], 4).double(), reduction="none"
    ).mean(dim=1)
    torch.testing.assert_close(focal_sigmoid(b["logits"], b["cls_labels"], cfg), 0.5 * bce)


def test_focal_down_weights_easy_vertices() -> None:
    labels = torch.tensor([0, 0])
    logits = torch.tensor([[5.0, 0.0], [0.2, 0.0]])  # an easy and a hard vertex
    cfg = LossConfig(focal_gamma=2.0)
    ratio = focal_softmax(logits, labels, cfg) / F.cross_entropy(logits, labels, reduction="none")
    assert ratio[0] < 1e-3 < ratio[1] < 1.0


def test_top_k_mask_picks_the_hardest_within_each_frame() -> None:
    loss = torch.tensor([0.1, 0.9, 0.5, 0.3, 2.0, 0.0, 0.4, 1.0])
    frame = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    eligible = torch.tensor([True, True, True, True, True, True, True, False])
    mask = top_k_mask(loss, eligible, frame, 2, ratio=0.5)
    # frame 0: 4 eligible -> 2 hardest (0.9, 0.5); frame 1: 3 eligible -> ceil(1.5) = 2 (2.0, 0.4), not the
    # ineligible 1.0
    assert mask.tolist() == [False, True, True, False, True, False, True, False]


def test_top_k_softmax_is_the_mean_of_the_hardest_fraction() -> None:
    b = _batch(2, n=40)
    frame = torch.arange(40) // 10  # 4 frames of 10 vertices
    cfg = LossConfig(cls_loss_type="top_k_softmax", cls_loss_weight=1.0, top_k_ratio=0.3, **NO_REG)
    out = compute_loss(
        b["logits"],
        b["box_pred"],
        b["cls_labels"],
        b["box_targets"],
        b["valid"],
        None,
        cfg,
        frame_index=frame,
    )
    ce = F.cross_entropy(b["logits"], b["cls_labels"], reduction="none").reshape(4, 10)
    expected = ce.topk(3, dim=1).values.sum() / 12
    torch.testing.assert_close(out["cls"], expected)
    assert loss_counts(b["cls_labels"], b["valid"], cfg, frame)[0] == 12


def test_huber_uses_only_the_true_class_head_of_valid_vertices() -> None:
    b = _batch(3)
    cfg = LossConfig(loc_loss_weight=1.0, **NO_REG)
    box_pred = b["box_pred"].clone().requires_grad_(True)
    out = compute_loss(b["logits"], box_pred, b["cls_labels"], b["box_targets"], b["valid"], None, cfg)
    # by hand: Huber(delta 1) per element, mean over the 7 dims, summed over valid vertices / their count
    labels, valid = b["cls_labels"].numpy(), b["valid"].numpy()
    diff = b["box_pred"].numpy()[np.arange(40), labels] - b["box_targets"].numpy()
    ad = np.abs(diff)
    huber = np.where(ad <= 1.0, 0.5 * diff**2, ad - 0.5)
    expected = huber.mean(axis=1)[valid].sum() / valid.sum()
    assert out["loc"].item() == pytest.approx(expected, rel=1e-12)
    out["loc"].backward()
    grad = box_pred.grad
    head = F.one_hot(b["cls_labels"], 4).bool() & b["valid"][:, None]  # (N, C)
    assert torch.all(grad[~head] == 0)  # other heads and invalid vertices get no gradient
    assert torch.all(grad[head].abs().sum(dim=1) > 0)
    # an invalid vertex's prediction can be anything (even NaN) without changing the loss
    poisoned = b["box_pred"].clone()
    poisoned[~b["valid"]] = float("nan")
    out2 = compute_loss(b["logits"], poisoned, b["cls_labels"], b["box_targets"], b["valid"], None, cfg)
    assert out2["loc"].item() == pytest.approx(expected, rel=1e-12)


def test_huber_delta_and_gather() -> None:
    box_pred = torch.zeros(2, 3, 1)
    box_pred[0, 2, 0] = 3.0
    box_pred[1, 0, 0] = 0.5
    labels = torch.tensor([2, 0])
    assert gather_class_boxes(box_pred, labels).tolist() == [[3.0], [0.5]]
    out = LOC_LOSSES["huber_loss"](
        gather_class_boxes(box_pred, labels), torch.zeros(2, 1), LossConfig(huber_delta=2.0)
    )
    assert out[:, 0].tolist() == [2.0 * (3.0 - 1.0), 0.125]  # linear beyond delta, quadratic inside


def test_top_k_huber_keeps_the_hardest_valid_vertices() -> None:
    box_targets = torch.zeros(6, 1)
    box_pred = torch.tensor([0.1, 3.0, 0.2, 0.4, 5.0, 9.0]).reshape(6, 1, 1)
    labels = torch.zeros(6, dtype=torch.int64)
    valid = torch.tensor([True, True, True, True, True, False])
    cfg = LossConfig(loc_loss_type="top_k_huber_loss", loc_loss_weight=1.0, top_k_ratio=0.4, **NO_REG)
    out = compute_loss(torch.zeros(6, 1), box_pred, labels, box_targets, valid, None, cfg)
    # ceil(0.4 * 5 valid) = 2 hardest valid: 5.0 and 3.0 (the invalid 9.0 is ignored)
    assert out["loc"].item() == pytest.approx(((5.0 - 0.5) + (3.0 - 0.5)) / 2)


def test_classwise_loc_weight_and_logging_sums() -> None:
    b = _batch(4)
    cfg = LossConfig(loc_loss_weight=2.0, classwise_loc_loss_weight=(0.0, 1.0, 3.0, 0.0), **NO_REG)
    out = compute_loss(b["logits"], b["box_pred"], b["cls_labels"], b["box_targets"], b["valid"], None, cfg)
    elem = 2.0 * F.huber_loss(
        gather_class_boxes(b["box_pred"], b["cls_labels"]), b["box_targets"], reduction="none"
    )
    elem = elem * torch.tensor([0.0, 1.0, 3.0, 0.0], dtype=torch.float64)[b["cls_labels"]][:, None]
    for c in (1, 2):
        rows = b["cls_labels"] == c
        torch.testing.assert_close(out["loc_class_dim"][c], elem[rows].sum(dim=0))
        assert out["loc_class_count"][c] == int(rows.sum())
    assert torch.all(out["loc_class_dim"][[0, 3]] == 0) and out["loc_class_count"][[0, 3]].sum() == 0
    expected = elem.mean(dim=1)[b["valid"]].sum() / b["valid"].sum()
    torch.testing.assert_close(out["loc"], expected)


def test_regularizers_act_on_weight_matrices_only() -> None:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4), torch.nn.Linear(4, 2))
    params = regularized_parameters(net)
    assert [tuple(p.shape) for p in params] == [(4, 3), (2, 4)]
    w = [p.detach().numpy() for p in params]
    l1 = regularization_loss(params, LossConfig(regularizer_type="l1", regularizer_kwargs={"scale": 0.1}))
    assert l1.item() == pytest.approx(0.1 * sum(np.abs(x).sum() for x in w), rel=1e-6)
    l2 = regularization_loss(params, LossConfig(regularizer_type="l2", regularizer_kwargs={"scale": 0.1}))
    assert l2.item() == pytest.approx(0.1 * sum((x**2).sum() for x in w) / 2, rel=1e-6)
    l1l2 = regularization_loss(
        params, LossConfig(regularizer_type="l1_l2", regularizer_kwargs={"scale_l1": 0.1, "scale_l2": 0.1})
    )
    assert l1l2.item() == pytest.approx(l1.item() + l2.item(), rel=1e-6)
    assert regularization_loss(params, LossConfig(**NO_REG)).item() == 0.0


def test_total_is_the_sum_of_the_terms() -> None:
    b = _batch(5)
    net = torch.nn.Linear(3, 3)
    cfg = LossConfig()
    out = compute_loss(
        b["logits"],
        b["box_pred"],
        b["cls_labels"],
        b["box_targets"],
        b["valid"],
        regularized_parameters(net),
        cfg,
    )
    assert out["reg"].item() > 0
    torch.testing.assert_close(out["total"], out["cls"] + out["loc"] + out["reg"])
    ce = F.cross_entropy(b["logits"], b["cls_labels"])
    torch.testing.assert_close(out["cls"], 0.1 * ce)


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"cls_loss_type": "focal_sigmoid"},
        {"cls_loss_type": "top_k_softmax", "loc_loss_type": "top_k_huber_loss"},
    ],
)
def test_split_batch_with_global_normaliser_equals_whole_batch(overrides: dict) -> None:
    """Two halves (two ranks or micro-batches) with the global counts give the whole batch's loss and grad."""
    b = _batch(6, n=60)
    frame = torch.arange(60) // 15  # 4 frames; halves hold 2 frames each
    cfg = LossConfig(**overrides, **NO_REG)

    logits = b["logits"].clone().requires_grad_(True)
    whole = compute_loss(
        logits, b["box_pred"], b["cls_labels"], b["box_targets"], b["valid"], None, cfg, frame_index=frame
    )
    whole["total"].backward()
    grad_whole = logits.grad.clone()

    halves = [slice(0, 30), slice(30, 60)]
    counts = sum(loss_counts(b["cls_labels"][h], b["valid"][h], cfg, frame[h] - frame[h][0]) for h in halves)
    norm = LossNormaliser(float(counts[0]), float(counts[1]))
    logits.grad = None
    total = 0.0
    for h in halves:
        part = compute_loss(
            logits[h],
            b["box_pred"][h],
            b["cls_labels"][h],
            b["box_targets"][h],
            b["valid"][h],
            None,
            cfg,
            norm,
            frame_index=frame[h] - frame[h][0],
        )
        part["total"].backward()
        total += part["total"].item()
    assert total == pytest.approx(whole["total"].item(), rel=1e-12)
    torch.testing.assert_close(logits.grad, grad_whole, rtol=1e-12, atol=1e-15)


def test_no_valid_vertex_gives_zero_loc_loss() -> None:
    b = _batch(7)
    out = compute_loss(
        b["logits"],
        b["box_pred"],
        b["cls_labels"],
        b["box_targets"],
        torch.zeros(40, dtype=bool),
        None,
        LossConfig(**NO_REG),
    )
    assert out["loc"].item() == 0.0 and torch.isfinite(out["total"])
