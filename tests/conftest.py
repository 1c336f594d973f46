"""Shared test fixtures (plain helpers: ``helpers.py``).

Real data lives in ``../shared/data`` (read-only; CI has it there). A test that needs it fails with a clear
message when it is missing on CI, and is skipped (visibly, with the reason) only off CI.

The session fixtures are built once per pytest-xdist worker and are read-only: the files they write are
checked at the end of the session (a test that changed, added or removed one fails there: copy them first),
and what they return is either immutable or a fresh copy per test.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import BIN_FRAME, REFERENCE_FRAMES, TINY_MODEL, cli, save_random_checkpoint, torch_threads

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("PGNN_SHARED", REPO.parent / "shared"))

# The suite runs one pytest-xdist worker per core, so a test's OpenMP threads share the cores with another
# worker: threads that spin while they wait lose whole time slices to it (measure it with
# `benchmarks/profile_train.py threads --busy 1`). Sleeping at once keeps a 2-thread test near its fair
# share; results do not depend on the wait policy.
os.environ.setdefault("GOMP_SPINCOUNT", "0")


def _need(path: Path) -> Path:
    if not path.exists():
        msg = f"shared data missing: {path} (set PGNN_SHARED to the shared/ folder)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return path


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data``."""
    return _need(SHARED / "data")


@pytest.fixture(scope="session")
def kitti_sample() -> Path:
    """The 9 real KITTI frames: a KITTI root whose ``training/`` holds velodyne, calib, label_2, image_2."""
    return _need(SHARED / "data" / "kitti_sample")


@pytest.fixture(scope="session")
def pointgnn_reference() -> Path:
    """The authors' weights and the original TF model's inputs and outputs on 7 real frames."""
    return _need(SHARED / "data" / "pointgnn_reference")


def flip_data_page_bytes(path: Path, column: str) -> None:
    """Flip two bytes in the page data (past the page header: near the end of the column chunk, which ends
    with a data page) of ``column`` (row group 0) of a parquet file."""
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(path).metadata.row_group(0)
    chunk = next(meta.column(i) for i in range(meta.num_columns) if meta.column(i).path_in_schema == column)
    start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    at = start + chunk.total_compressed_size - 3
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    data[at + 1] ^= 0x55
    path.write_bytes(bytes(data))


@pytest.fixture
def flip_page() -> object:
    """:func:`flip_data_page_bytes`: corrupt a parquet file in the middle of a column's data page."""
    return flip_data_page_bytes


# ----------------------------------------------------------------------------------------------------------
# The authors' released weights and the T1 predictions of the reference frames
# ----------------------------------------------------------------------------------------------------------


def _digests(path: Path) -> dict[str, str]:
    """sha256 of every file under ``path`` (or of ``path``), by path."""
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def _check_unchanged(what: str, path: Path, before: dict[str, str]) -> None:
    after = _digests(path)
    changed = sorted(
        set(before) ^ set(after) | {f for f in before.keys() & after.keys() if before[f] != after[f]}
    )
    assert not changed, f"a test changed {what} (shared by the session: copy it first): {changed}"


@pytest.fixture(scope="session")
def released_checkpoint(
    pointgnn_reference: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[str], Path]]:
    """``name -> path``: the checkpoint ``pgnn import-weights`` writes from the authors'
    ``car_auto_{name}_train.npz`` (``name``: ``"T0"`` or ``"T1"``; the config beside the npz), imported on the
    first request; the file must stay as it is (checked at the end)."""
    out = tmp_path_factory.mktemp("released")
    made: dict[str, dict[str, str]] = {}

    def get(name: str) -> Path:
        path = out / f"car_auto_{name}.pt"
        if name not in made:
            rc, _ = cli(["import-weights", str(pointgnn_reference / f"car_auto_{name}_train.npz"), str(path)])
            assert rc == 0, f"pgnn import-weights car_auto_{name}_train.npz failed"
            made[name] = _digests(path)
        return path

    yield get
    for name, before in made.items():
        _check_unchanged(f"the {name} checkpoint", out / f"car_auto_{name}.pt", before)


@pytest.fixture(scope="session")
def t1_checkpoint(released_checkpoint: Callable[[str], Path]) -> Path:
    """The authors' Car T1 weights as a pgnn checkpoint (``pgnn import-weights car_auto_T1_train.npz``)."""
    return released_checkpoint("T1")


@pytest.fixture(scope="session")
def _t1_predictions(
    t1_checkpoint: Path, kitti_sample: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("t1_predictions")
    # One torch thread: on a 2-core machine shared with other processes, two spinning OpenMP threads were
    # about twice as slow as one. --threads sets it for the whole process: restored once the runs are done.
    common = ["--checkpoint", str(t1_checkpoint), "--device", "cpu", "--quiet", "--threads", "1"]
    training = kitti_sample / "training"
    threads = torch_threads()
    try:
        ids = ",".join(f for f in REFERENCE_FRAMES if f != BIN_FRAME)
        rc, table_root = cli(
            ["predict", "--root", str(kitti_sample), "--ids", ids, "--out", str(tmp / "root"), *common]
            + ["--timings-json", str(tmp / "root.json")]
        )
        assert rc == 0
        rc, table_bin = cli(
            [
                "predict",
                "--bin",
                str(training / "velodyne" / f"{BIN_FRAME}.bin"),
                "--calib",
                str(training / "calib" / f"{BIN_FRAME}.txt"),
                "--label",
                str(training / "label_2" / f"{BIN_FRAME}.txt"),
                "--out",
                str(tmp / "bin"),
                "--png",
                *common,
                "--timings-json",
                str(tmp / "bin.json"),
            ]
        )
        assert rc == 0
    finally:
        torch_threads(threads)
    files = {f: tmp / ("bin" if f == BIN_FRAME else "root") / f"{f}.txt" for f in REFERENCE_FRAMES}
    timings = tuple(json.loads((tmp / name).read_text()) for name in ("root.json", "bin.json"))
    run = {"dir": tmp, "files": files, "tables": (table_root, table_bin), "timings": timings}
    before = _digests(tmp)
    yield run
    _check_unchanged("the T1 predictions", tmp, before)


@pytest.fixture
def t1_predictions(_t1_predictions: dict[str, Any]) -> dict[str, Any]:
    """``pgnn predict`` with the T1 checkpoint (one thread, CPU) on the 7 reference frames, run once per
    worker: 000000-000005 through ``--root kitti_sample`` (with their images; ``--timings-json root.json``)
    into ``dir/root``, and 000114 through ``--bin`` with its calib and label but no image (``--png``,
    ``--timings-json bin.json``) into ``dir/bin``. 000114's image has the default size, so ``--bin`` keeps the
    same points in view as ``--root`` (its result file was byte-identical).

    A copy per test of ``{"dir": Path, "files": {frame: result .txt}, "tables": (root's printed table, bin's),
    "timings": (root.json, bin.json) as dicts}``; the files must stay as they are (checked at the end)."""
    return copy.deepcopy(_t1_predictions)


# ----------------------------------------------------------------------------------------------------------
# Real frames, tiny models, one torch thread
# ----------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def kitti_frame(kitti_sample: Path) -> Callable[..., Any]:
    """``(frame_id, painted=False) -> Frame``: ``load_frame(kitti_sample, frame_id, painted=painted)``, read
    once per worker; each call returns a deep copy (a test may change its arrays)."""
    from pgnn.data.frames import load_frame

    frames: dict[tuple[str, bool], Any] = {}

    def get(frame_id: str, painted: bool = False) -> Any:
        if (frame_id, painted) not in frames:
            frames[frame_id, painted] = load_frame(kitti_sample, frame_id, painted=painted)
        return copy.deepcopy(frames[frame_id, painted])

    return get


@pytest.fixture
def tiny_checkpoint(tmp_path: Path) -> Path:
    """``tmp_path / "tiny.pt"``: a randomly initialised (seed 0) :data:`helpers.TINY_MODEL` saved as a step-0
    checkpoint with :data:`helpers.TINY_CARD` and graph preset ``ped_cyc`` (small radii: a real frame's graph
    in well under a second)."""
    save_random_checkpoint(tmp_path / "tiny.pt", TINY_MODEL, graph_preset="ped_cyc")
    return tmp_path / "tiny.pt"


@pytest.fixture(scope="module")
def one_torch_thread_per_module() -> Iterator[None]:
    """One torch thread for a module (``pytestmark = pytest.mark.usefixtures(...)``): fastest on the shared
    2-core machines, where OpenMP threads that wait for each other lose time slices to the other worker."""
    before = torch_threads(1)
    yield
    torch_threads(before)


# ----------------------------------------------------------------------------------------------------------
# pytest-xdist: modules that share an expensive session fixture run on one worker
# ----------------------------------------------------------------------------------------------------------

# module -> scope name: ``--dist loadscope`` sends a scope to one worker, so the modules of one name build
# their shared session fixture once (t1_predictions: 7 T1 frames, 5-10 s each on one core).
SHARED_SCOPES = {
    "tests/commands/test_detect.py": "t1_predictions",
    "tests/inference/test_predict.py": "t1_predictions",
}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadscope``, with the modules of one :data:`SHARED_SCOPES` name in one scope."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedScopeScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return SHARED_SCOPES.get(nodeid.split("::", 1)[0]) or super()._split_scope(nodeid)

    return SharedScopeScheduling(config, log)


# The slowest scopes, slowest first (pytest's durations summed per module, from the JUnit XML of a clean-clone
# run of the suite at e14af55, 2026-12-07: 1,758 s over both workers). ``--no-loadscope-reorder``
# (pyproject.toml) has xdist hand the scopes out in collection order, one when a worker is nearly out of
# work, so these start first and the run does not end with one long module on one worker and the other core
# idle. (xdist's own order is by the number of tests in a scope, which put some of these late.)
SLOWEST_FIRST = (
    "tests/pipeline/test_dvc_pipeline.py",  # 227 s
    "tests/pipeline/test_drivers.py",  # 227 s
    "tests/docs/test_run_docs.py",  # 216 s
    "tests/pipeline/test_trajectory.py",  # 159 s
    "tests/nn/test_export.py",  # 143 s
    "tests/commands/test_detect.py",  # 119 s, with tests/inference/test_predict.py (SHARED_SCOPES)
    "tests/pipeline/test_train_command.py",  # 117 s
    "tests/training/test_train_step_reference.py",  # 85 s
    "tests/pipeline/test_flows.py",  # 59 s
    "tests/pipeline/test_deployment.py",  # 40 s
    "tests/training/test_multinode.py",  # 36 s
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Collection order with the modules of :data:`SLOWEST_FIRST` first, in its order (a stable sort)."""
    rank = {module: n for n, module in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
