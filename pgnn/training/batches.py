"""Training batches: record sources, collation of frames into one graph batch, the data loader."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from pgnn.core.errors import DataError
from pgnn.nn.graph_input import GraphInput, collate_graphs, graph_input_from_arrays


class RecordSource(Protocol):
    """Training records: ``source[i]`` is one frame's dict of numpy arrays (see :func:`collate_records`)."""

    def __len__(self) -> int: ...

    def __getitem__(self, i: int) -> Mapping[str, np.ndarray]: ...


class SubsetSource:
    """The records ``indices`` of a source, in that order (``set_epoch`` and ``rebuilds`` pass through)."""

    def __init__(self, source: RecordSource, indices: Sequence[int]) -> None:
        self.source = source
        self.indices = [int(i) for i in indices]
        if any(not 0 <= i < len(source) for i in self.indices):
            raise IndexError(f"subset indices out of range for {len(source)} records")
        if hasattr(source, "set_epoch"):
            self.set_epoch = source.set_epoch

    @property
    def rebuilds(self) -> bool:
        return bool(getattr(self.source, "rebuilds", False))

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> Mapping[str, np.ndarray]:
        return self.source[self.indices[i]]


@dataclass(frozen=True)
class TrainBatch:
    """A collated micro-batch: the graph and the targets of its output vertices (rows of ``vertex_coord[1]``).

    Shapes: cls_labels (N,) int64, box_targets (N, D) float32, valid (N,) bool; graph.batch (N,) frame of each
    """

    graph: GraphInput
    cls_labels: torch.Tensor
    box_targets: torch.Tensor
    valid: torch.Tensor
    indices: tuple[int, ...]

    def to(self, device: torch.device) -> TrainBatch:
        return TrainBatch(
            graph=self.graph.to(device),
            cls_labels=self.cls_labels.to(device),
            box_targets=self.box_targets.to(device),
            valid=self.valid.to(device),
            indices=self.indices,
        )


class RecordDataset(torch.utils.data.Dataset):
    """A torch ``Dataset`` over a record source; item i is ``(i, source[i])``.

    A source whose samples change with the epoch (``pgnn.training.dataset.AugmentedRecords``) has
    ``set_epoch``; its
    items are asked for as ``(epoch, i)`` and the epoch is set, in the process that builds the record, first.
    """

    def __init__(self, source: RecordSource) -> None:
        self.source = source

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, key: int | tuple[int, int]) -> tuple[int, Mapping[str, np.ndarray]]:
        if isinstance(key, tuple):
            epoch, i = key
            self.source.set_epoch(epoch)  # type: ignore[attr-defined]
            return i, self.source[i]
        return key, self.source[key]


def _targets(
    record: Mapping[str, np.ndarray], n: int, where: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    for key in ("cls_labels", "box_targets", "valid_box"):
        if key not in record:
            raise DataError(where, f"expected a {key!r} array in the training record, got none")
    cls_labels = np.asarray(record["cls_labels"]).reshape(-1)
    box_targets = np.asarray(record["box_targets"])
    box_targets = box_targets.reshape(box_targets.shape[0], -1) if box_targets.ndim == 3 else box_targets
    valid = np.asarray(record["valid_box"]).reshape(-1)
    if cls_labels.shape != (n,) or valid.shape != (n,) or box_targets.ndim != 2 or box_targets.shape[0] != n:
        raise DataError(
            where,
            f"expected targets for the {n} output vertices (cls_labels (N,), box_targets (N, D), "
            f"valid_box (N,)), got {cls_labels.shape}, {box_targets.shape}, {valid.shape}",
        )
    return cls_labels, box_targets, valid


def collate_records(items: Sequence[tuple[int, Mapping[str, np.ndarray]]]) -> TrainBatch:
    """Frames -> one batch: graphs via ``collate_graphs``, targets concatenated in the same vertex order.

    Each record holds the graph arrays read by :func:`pgnn.nn.model.graph_input_from_arrays` (``features``,
    ``vertex_coord_i``, ``keypoint_indices_i``, ``edges_i``) and targets over the output vertices (the rows
    of ``vertex_coord_1``, which the last level repeats): ``cls_labels`` (N,), ``box_targets`` (N, D),
    ``valid_box`` (N,).
    """

    graphs, labels, boxes, valids = [], [], [], []
    for index, record in items:
        frame = f" (frame {record['frame_id']})" if "frame_id" in record else ""
        where = f"training record {index}{frame}"
        g = graph_input_from_arrays(record, "cpu", source=where)
        c, b, v = _targets(record, g.vertex_coord[1].shape[0], where)
        graphs.append(g)
        labels.append(torch.from_numpy(c.astype(np.int64)))
        boxes.append(torch.from_numpy(np.ascontiguousarray(b, dtype=np.float32)))
        valids.append(torch.from_numpy(v.astype(bool)))
    return TrainBatch(
        graph=collate_graphs(graphs),
        cls_labels=torch.cat(labels),
        box_targets=torch.cat(boxes),
        valid=torch.cat(valids),
        indices=tuple(i for i, _ in items),
    )


def _worker_init(_worker_id: int) -> None:
    torch.set_num_threads(1)


def batch_loader(dataset: RecordDataset, plan: Iterator[list[int]], num_workers: int) -> Iterator[TrainBatch]:
    """Load and collate the planned micro-batches in order, ``num_workers`` processes ahead (one loader, and
    one set of workers, for the whole run)."""
    return iter(
        torch.utils.data.DataLoader(
            dataset,
            batch_sampler=plan,
            collate_fn=collate_records,
            num_workers=num_workers,
            worker_init_fn=_worker_init if num_workers > 0 else None,
        )
    )
