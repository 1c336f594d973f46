"""Point-GNN training losses: vertex classification, box localisation and weight regularisation.

The network predicts, for every vertex of its last graph level, class logits (N, C) and one encoded box per
class (N, C, 7). The loss has three terms (the original's ``models.models.loss`` + ``train.py``):

    total = cls_loss_weight * sum_i l_cls(i) / N_cls
          + loc_loss_weight * sum_{i valid} mean_d w_c(i) * huber(box[i, c_i, d] - target[i, d]) / N_loc
          + regulariser(weights)

where c_i is vertex i's ground-truth class (only the head of the true class is trained), w_c an optional
per-class localisation weight, and the regulariser acts on the weight matrices of the linear layers (the
original's ``slim.fully_connected`` ``weights_regularizer``: weights, not biases).

Normalisation. The original averages each loss over the vertices of one tower and then, with
``unify_copies``, re-weights the towers by their vertex counts, which makes the total the mean over all the
vertices of the global batch. Here the per-vertex losses are *summed* and divided by a normaliser counted
over the whole optimiser step (every DDP rank and every accumulation micro-batch): :func:`loss_counts` gives a
micro-batch's counts, the training loop adds them up (``all_reduce``) and passes a :class:`LossNormaliser`.
So 2 ranks x batch b (or 2 micro-batches of b) give the same gradient as 1 rank x batch 2b.

Hardest-k losses (``top_k_softmax``, ``top_k_huber_loss``) keep, *within each frame*, the ``ceil(top_k_ratio
* n)`` vertices with the largest loss (n = the frame's vertices, or its valid vertices for localisation).
The original keeps a fixed number k per tower; a per-frame fraction keeps the selection independent of how
frames are spread over ranks and micro-batches, and its count is known before the forward pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import NamedTuple

import torch
import torch.nn.functional as F

from pgnn.config.network import LossConfig
from pgnn.nn.segment import at_least_float32


class LossNormaliser(NamedTuple):
    """Global counts over one optimiser step (all ranks, all micro-batches)."""

    num_cls: float
    """Vertices contributing to the classification loss."""
    num_loc: float
    """Valid vertices contributing to the localisation loss."""


# ----------------------------------------------------------------------------------------------------
# Classification: per-vertex losses, shape (N,)
# ----------------------------------------------------------------------------------------------------


def softmax_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, cfg: LossConfig) -> torch.Tensor:
    """Cross-entropy of a softmax over the classes.

    Shapes: logits (N, C), labels (N,) int64 -> (N,)
    """
    return F.cross_entropy(logits, labels, reduction="none")


def focal_sigmoid(logits: torch.Tensor, labels: torch.Tensor, cfg: LossConfig) -> torch.Tensor:
    """Sigmoid focal loss (Lin et al. 2017) on one-vs-all targets, averaged over the C classes.

    l = mean_c a_c (1 - p_t,c)^gamma BCE(x_c, y_c),
    p_t = y p + (1 - y)(1 - p), a_c = y alpha + (1 - y)(1 - alpha).
    (The original averages the (N, C) loss over all N*C entries; the mean over classes here then the sum over
    vertices / N is the same number.)

    Shapes: logits (N, C), labels (N,) int64 -> (N,)
    """
    targets = F.one_hot(labels, logits.shape[1]).to(logits.dtype)  # (N, C)
    bce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")  # (N, C)
    prob = torch.sigmoid(logits)
    prob_t = targets * prob + (1.0 - targets) * (1.0 - prob)
    alpha_t = targets * cfg.focal_alpha + (1.0 - targets) * (1.0 - cfg.focal_alpha)
    return (alpha_t * (1.0 - prob_t).pow(cfg.focal_gamma) * bce).mean(dim=1)


def focal_softmax(logits: torch.Tensor, labels: torch.Tensor, cfg: LossConfig) -> torch.Tensor:
    """Softmax focal loss: (1 - p_y)^gamma * cross-entropy.

    Shapes: logits (N, C), labels (N,) int64 -> (N,)
    """
    log_prob = F.log_softmax(logits, dim=1)  # (N, C)
    log_p_true = log_prob.gather(1, labels[:, None])[:, 0]  # (N,)
    return (1.0 - log_p_true.exp()).pow(cfg.focal_gamma) * (-log_p_true)


CLS_LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor, LossConfig], torch.Tensor]] = {
    "softmax": softmax_cross_entropy,
    "focal_sigmoid": focal_sigmoid,
    "focal_softmax": focal_softmax,
    "top_k_softmax": softmax_cross_entropy,  # then the hardest fraction per frame
}


# ----------------------------------------------------------------------------------------------------
# Localisation: per-vertex, per-dimension losses on the ground-truth class's head, shape (N, 7)
# ----------------------------------------------------------------------------------------------------


def gather_class_boxes(box_pred: torch.Tensor, cls_labels: torch.Tensor) -> torch.Tensor:
    """The box each vertex predicts for its ground-truth class: ``box_pred[i, cls_labels[i]]``.

    Shapes: box_pred (N, C, D), cls_labels (N,) int64 -> (N, D)
    """
    index = cls_labels[:, None, None].expand(-1, 1, box_pred.shape[2])  # (N, 1, D)
    return box_pred.gather(1, index)[:, 0]


def huber_loss(box: torch.Tensor, target: torch.Tensor, cfg: LossConfig) -> torch.Tensor:
    """Element-wise Huber loss (``tf.losses.huber_loss``): x^2/2 if |x| <= delta, else delta (|x| - delta/2).

    Shapes: box (N, D), target (N, D) -> (N, D)
    """
    return F.huber_loss(box, target, reduction="none", delta=cfg.huber_delta)


LOC_LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor, LossConfig], torch.Tensor]] = {
    "huber_loss": huber_loss,
    "top_k_huber_loss": huber_loss,  # then the hardest fraction of each frame's valid vertices
}

_TOP_K_TYPES = {"top_k_softmax", "top_k_huber_loss"}


# ----------------------------------------------------------------------------------------------------
# Regularisation of the linear layers' weight matrices
# ----------------------------------------------------------------------------------------------------


def _l1(params: list[torch.Tensor], kwargs: dict[str, float]) -> torch.Tensor:
    return kwargs["scale"] * sum(p.abs().sum() for p in params)


def _l2(params: list[torch.Tensor], kwargs: dict[str, float]) -> torch.Tensor:
    # slim.l2_regularizer is scale * tf.nn.l2_loss = scale * sum(w^2) / 2
    return kwargs["scale"] * 0.5 * sum(p.square().sum() for p in params)


def _l1_l2(params: list[torch.Tensor], kwargs: dict[str, float]) -> torch.Tensor:
    return _l1(params, {"scale": kwargs["scale_l1"]}) + _l2(params, {"scale": kwargs["scale_l2"]})


REGULARIZERS: dict[str, Callable[[list[torch.Tensor], dict[str, float]], torch.Tensor]] = {
    "l1": _l1,
    "l2": _l2,
    "l1_l2": _l1_l2,
}


def regularized_parameters(module: torch.nn.Module) -> list[torch.Tensor]:
    """The parameters the regulariser acts on: weight matrices (``*.weight``, 2+ dims), not biases/norms."""
    return [p for name, p in module.named_parameters() if name.endswith("weight") and p.dim() >= 2]


def regularization_loss(params: Iterable[torch.Tensor], cfg: LossConfig) -> torch.Tensor:
    """The regulariser's value on ``params`` (0 when ``cfg.regularizer_type`` is None or there are none)."""
    params = list(params)
    if cfg.regularizer_type is None or not params:
        device = params[0].device if params else None
        return torch.zeros((), device=device)
    return REGULARIZERS[cfg.regularizer_type](params, cfg.regularizer_kwargs)


# ----------------------------------------------------------------------------------------------------
# Hardest-k selection and counts
# ----------------------------------------------------------------------------------------------------


def top_k_counts(
    eligible: torch.Tensor, frame_index: torch.Tensor, num_frames: int, ratio: float
) -> torch.Tensor:
    """Per-frame number of vertices a hardest-k loss keeps: ``ceil(ratio * eligible vertices of the frame)``.

    Shapes: eligible (N,) bool, frame_index (N,) int64 -> (num_frames,) int64
    """
    n = torch.zeros(num_frames, dtype=torch.int64, device=eligible.device)
    n.index_add_(0, frame_index, eligible.to(torch.int64))
    # round first so that float noise cannot add a vertex (0.1 * 30 = 3.0000000000000004 keeps 3, not 4)
    k = [math.ceil(round(ratio * c, 9)) for c in n.tolist()]
    return torch.tensor(k, dtype=torch.int64, device=n.device)


def top_k_mask(
    loss: torch.Tensor, eligible: torch.Tensor, frame_index: torch.Tensor, num_frames: int, ratio: float
) -> torch.Tensor:
    """Mark, within each frame, the ``ceil(ratio * n_eligible)`` eligible vertices with the largest loss.

    Ties are broken by vertex order (stable sort), so the selection is deterministic.

    Shapes: loss (N,), eligible (N,) bool, frame_index (N,) int64 -> (N,) bool
    """
    if loss.numel() == 0:
        return eligible.clone()
    key = torch.where(eligible, loss.detach(), torch.full_like(loss, -math.inf))  # (N,)
    by_loss = torch.argsort(key, descending=True, stable=True)  # (N,)
    order = by_loss[torch.argsort(frame_index[by_loss], stable=True)]  # grouped by frame, hardest first
    frame_sorted = frame_index[order]
    starts = torch.zeros(num_frames, dtype=torch.int64, device=loss.device)
    counts = torch.bincount(frame_index, minlength=num_frames)
    starts[1:] = torch.cumsum(counts, 0)[:-1]
    rank_in_frame = torch.arange(loss.numel(), device=loss.device) - starts[frame_sorted]  # (N,)
    k = top_k_counts(eligible, frame_index, num_frames, ratio)
    keep_sorted = rank_in_frame < k[frame_sorted]
    mask = torch.zeros_like(eligible)
    mask[order] = keep_sorted
    return mask & eligible


def _frames(frame_index: torch.Tensor | None, n: int, device: torch.device) -> tuple[torch.Tensor, int]:
    if frame_index is None:
        return torch.zeros(n, dtype=torch.int64, device=device), 1
    num_frames = int(frame_index.max().item()) + 1 if frame_index.numel() else 1
    return frame_index, num_frames


def loss_counts(
    cls_labels: torch.Tensor, valid: torch.Tensor, cfg: LossConfig, frame_index: torch.Tensor | None = None
) -> torch.Tensor:
    """Counts of one micro-batch that normalise its losses: ``[num_cls, num_loc]`` (float64).

    Sum these over all ranks and micro-batches of an optimiser step and build a :class:`LossNormaliser`.

    Shapes: cls_labels (N,), valid (N,) bool, frame_index (N,) or None -> (2,) float64
    """
    n = cls_labels.shape[0]
    frame_index, num_frames = _frames(frame_index, n, cls_labels.device)
    if cfg.cls_loss_type in _TOP_K_TYPES:
        everyone = torch.ones(n, dtype=torch.bool, device=cls_labels.device)
        num_cls = int(top_k_counts(everyone, frame_index, num_frames, cfg.top_k_ratio).sum())
    else:
        num_cls = n
    valid = valid.to(torch.bool)
    if cfg.loc_loss_type in _TOP_K_TYPES:
        num_loc = int(top_k_counts(valid, frame_index, num_frames, cfg.top_k_ratio).sum())
    else:
        num_loc = int(valid.sum())
    return torch.tensor([num_cls, num_loc], dtype=torch.float64)


# ----------------------------------------------------------------------------------------------------
# The whole loss
# ----------------------------------------------------------------------------------------------------


def compute_loss(
    logits: torch.Tensor,
    box_pred: torch.Tensor,
    cls_labels: torch.Tensor,
    box_targets: torch.Tensor,
    valid: torch.Tensor,
    params: Iterable[torch.Tensor] | None,
    cfg: LossConfig,
    normaliser: LossNormaliser | None = None,
    frame_index: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Point-GNN's loss terms on one micro-batch, normalised by the step's global counts; in float32
    (half-precision ``logits`` and ``box_pred`` from autocast are cast first).

    Args:
        logits: class logits of the last level's vertices.
        box_pred: encoded boxes, one per class.
        cls_labels: ground-truth class of each vertex.
        box_targets: encoded ground-truth box of each vertex (meaningful where ``valid``).
        valid: whether a vertex has a box to regress.
        params: tensors to regularise (see :func:`regularized_parameters`); None for no regulariser term
            (e.g. on all but one micro-batch of an accumulated step).
        cfg: loss settings.
        normaliser: global counts of the step; None uses this micro-batch's own counts (:func:`loss_counts`).
        frame_index: frame of each vertex within the micro-batch (for the per-frame hardest-k losses); None
            means one frame.

    Returns:
        ``cls``, ``loc``, ``reg``, ``total`` (scalars, differentiable); ``loc_class_dim`` (C, D): the summed
        weighted localisation loss per ground-truth class and box dimension, and ``loc_class_count`` (C,): the
        vertices behind each row (both detached, for logging).

    Shapes: logits (N, C), box_pred (N, C, D), cls_labels (N,) int64, box_targets (N, D), valid (N,) bool,
        frame_index (N,) int64
    """
    logits, box_pred = at_least_float32(logits), at_least_float32(box_pred)  # autocast's: losses in float32
    n, num_classes = logits.shape
    valid = valid.to(torch.bool)
    cls_labels = cls_labels.to(torch.int64)
    frame_index, num_frames = _frames(frame_index, n, logits.device)
    if normaliser is None:
        counts = loss_counts(cls_labels, valid, cfg, frame_index)
        normaliser = LossNormaliser(float(counts[0]), float(counts[1]))

    cls_per_vertex = CLS_LOSSES[cfg.cls_loss_type](logits, cls_labels, cfg)  # (N,)
    if cfg.cls_loss_type in _TOP_K_TYPES:
        everyone = torch.ones(n, dtype=torch.bool, device=logits.device)
        keep = top_k_mask(cls_per_vertex, everyone, frame_index, num_frames, cfg.top_k_ratio)
        cls_per_vertex = torch.where(keep, cls_per_vertex, torch.zeros_like(cls_per_vertex))
    cls = cfg.cls_loss_weight * cls_per_vertex.sum() / max(normaliser.num_cls, 1.0)

    box_true_class = gather_class_boxes(box_pred, cls_labels)  # (N, D)
    loc_elem = cfg.loc_loss_weight * LOC_LOSSES[cfg.loc_loss_type](box_true_class, box_targets, cfg)  # (N, D)
    if cfg.classwise_loc_loss_weight is not None:
        class_weight = loc_elem.new_tensor(cfg.classwise_loc_loss_weight)  # (C,)
        loc_elem = loc_elem * class_weight[cls_labels][:, None]
    keep_loc = valid
    if cfg.loc_loss_type in _TOP_K_TYPES:
        keep_loc = top_k_mask(loc_elem.mean(dim=1), valid, frame_index, num_frames, cfg.top_k_ratio)
    # where(), not a product: a non-finite prediction on an invalid vertex must not poison the sum
    loc_elem = torch.where(keep_loc[:, None], loc_elem, torch.zeros_like(loc_elem))  # (N, D)
    loc = loc_elem.mean(dim=1).sum() / max(normaliser.num_loc, 1.0)

    reg = regularization_loss(params, cfg) if params is not None else torch.zeros((), device=logits.device)
    reg = reg.to(logits.device)

    with torch.no_grad():
        loc_class_dim = loc_elem.new_zeros(num_classes, loc_elem.shape[1])  # (C, D)
        loc_class_dim.index_add_(0, cls_labels, loc_elem.detach())
        loc_class_count = torch.bincount(cls_labels[keep_loc], minlength=num_classes)

    return {
        "cls": cls,
        "loc": loc,
        "reg": reg,
        "total": cls + loc + reg,
        "loc_class_dim": loc_class_dim,
        "loc_class_count": loc_class_count,
    }
