"""KITTI scale: ``prepare`` and ``graphs`` of a 7,481-frame KITTI-size root, and DVC's no-op cost there.

    .venv/bin/python benchmarks/kitti_scale.py --work /tmp/pgnn-kitti-scale [--frames 7481] [--pool 100]
        [--source synthetic|kitti_sample] [--preset small] [--workers 2] [--json result.json] [--keep]

``run_benchmark(...)`` returns the figures as a dict. What it does, in a scratch folder ``--work``:

1. A pool of distinct frames: ``--pool`` synthetic frames (``pgnn synth``, seed 0; its time a frame:
   benchmarks/README.md, "Measurements behind the code"; kept in ``<work>/pool`` for the next run) or the 7
   real frames with scans of ``kitti_sample`` (copied).
2. A temporary git + DVC project ``<work>/project``: this repository's ``pgnn/``, ``stages/`` and
   ``params.yaml`` (``data.root: data/kitti``, ``--preset``, ``data.workers``), and a ``dvc.yaml`` of the
   repository's ``prepare`` and ``graphs`` stages. Its data root ``data/kitti`` holds ``--frames`` frames
   ``000000 ..``: frame ``i`` is a hard link to the files of pool frame ``i % pool`` (velodyne, calib,
   label_2, image_2), and ``ImageSets/{train,val}.txt`` is KITTI's 3DOP split (3,712 / 3,769) when the shared
   ``kitti_splits`` is there (else every other frame).
3. Times ``prepare@train``, ``prepare@val``, ``graphs@train``, ``graphs@val`` through the
   ``pgnn.pipeline.steps`` functions (``data.workers`` processes), sampling the resident memory of this
   process and its children every 0.1 s; then the shards' size on disk.
4. ``dvc commit`` of those outputs (hardlinks into the DVC cache), then times ``dvc status`` and a no-op
   ``dvc repro`` (twice each).

Caveat: the hard-linked frames share ``--pool`` inodes, so after the first pass the inputs come from the page
cache; on real KITTI (about 26 GB of scans and images) a cold read adds disk time. The shard keys still hash
every input file's bytes (sha256), as on real data.
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import yaml  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
KITTI_SAMPLE = Path("/work/shared/data/kitti_sample")
KITTI_SPLITS = Path("/work/shared/data/kitti_splits/ImageSets")
KITTI_FRAMES, KITTI_TRAIN, KITTI_VAL = 7481, 3712, 3769
SUBDIRS = {"velodyne": ".bin", "calib": ".txt", "label_2": ".txt", "image_2": ".png"}
STEPS = ("prepare@train", "prepare@val", "graphs@train", "graphs@val")
TARGETS = {"prepare_graphs_s": 180.0, "noop_repro_s": 5.0, "peak_rss_gb": 2.0}


# ------------------------------------------------------------------------------------------ the data root


def make_pool(work: Path, source: str, pool: int) -> tuple[Path, list[str]]:
    """A folder of distinct KITTI frames (``training/<subdir>/<id>``) and their ids."""
    if source == "synthetic":
        from pgnn.data.synthetic.dataset import generate_dataset

        root = work / f"pool-synthetic-{pool}"
        if not (root / "ImageSets" / "trainval.txt").is_file():  # written last: the pool is complete
            shutil.rmtree(root, ignore_errors=True)
            t = time.perf_counter()
            generate_dataset(root, pool, seed=0)
            print(f"pool: {pool} synthetic frames in {time.perf_counter() - t:.1f} s", flush=True)
        return root, [f"{i:06d}" for i in range(pool)]
    if source == "kitti_sample":
        root = work / "pool-kitti_sample"
        ids = sorted(p.stem for p in (KITTI_SAMPLE / "training" / "velodyne").glob("*.bin"))
        for sub, ext in SUBDIRS.items():
            (root / "training" / sub).mkdir(parents=True, exist_ok=True)
            for fid in ids:
                dst = root / "training" / sub / f"{fid}{ext}"
                if not dst.exists():
                    shutil.copyfile(KITTI_SAMPLE / "training" / sub / f"{fid}{ext}", dst)
        return root, ids
    raise ValueError(f"expected source synthetic or kitti_sample, got {source!r}")


def split_lists(frames: int) -> tuple[list[str], list[str]]:
    """KITTI's train / val ids when the shared split files are there (and ``frames`` is KITTI's count)."""
    if frames == KITTI_FRAMES and (KITTI_SPLITS / "train.txt").is_file():
        train = (KITTI_SPLITS / "train.txt").read_text().split()
        val = (KITTI_SPLITS / "val.txt").read_text().split()
        assert (len(train), len(val)) == (KITTI_TRAIN, KITTI_VAL)
        return train, val
    ids = [f"{i:06d}" for i in range(frames)]
    return ids[0::2], ids[1::2]


def make_root(root: Path, pool_root: Path, pool_ids: list[str], frames: int) -> dict[str, Any]:
    """``frames`` frames at ``root``, hard links to the pool's files (frame i -> pool frame i % len(pool))."""
    shutil.rmtree(root, ignore_errors=True)
    t = time.perf_counter()
    for sub, ext in SUBDIRS.items():
        (root / "training" / sub).mkdir(parents=True)
        for i in range(frames):
            src = pool_root / "training" / sub / f"{pool_ids[i % len(pool_ids)]}{ext}"
            os.link(src, root / "training" / sub / f"{i:06d}{ext}")
    train, val = split_lists(frames)
    (root / "ImageSets").mkdir()
    (root / "ImageSets" / "train.txt").write_text("".join(f"{i}\n" for i in train))
    (root / "ImageSets" / "val.txt").write_text("".join(f"{i}\n" for i in val))
    (root / "ImageSets" / "trainval.txt").write_text("".join(f"{i:06d}\n" for i in range(frames)))
    linked = [pool_root / "training" / s / f"{fid}{ext}" for s, ext in SUBDIRS.items() for fid in pool_ids]
    per_frame = sum(p.stat().st_size for p in linked) / len(pool_ids)
    return {
        "frames": frames,
        "train": len(train),
        "val": len(val),
        "files": frames * len(SUBDIRS),
        "apparent_gb": per_frame * frames / 1e9,
        "link_s": time.perf_counter() - t,
    }


# ------------------------------------------------------------------------------------------ the project


def make_project(project: Path, preset: str, workers: int, frames_per_shard: int) -> None:
    """A git + DVC project with this repository's code, params and ``params`` / ``prepare`` / ``graphs``
    stages."""
    project.mkdir(parents=True, exist_ok=True)
    for folder in ("pgnn", "stages"):
        shutil.rmtree(project / folder, ignore_errors=True)
        shutil.copytree(REPO / folder, project / folder, ignore=shutil.ignore_patterns("__pycache__"))
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["preset"] = preset
    # unpainted (velodyne/ scans): the root links no painted_lidar/ (params.yaml's default preset is painted)
    params["data"] |= {
        "root": "data/kitti",
        "painted": False,
        "workers": workers,
        "frames_per_shard": frames_per_shard,
    }
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    dvc_yaml = {"stages": {k: stages[k] for k in ("params", "prepare", "graphs")}}
    (project / "dvc.yaml").write_text(yaml.safe_dump(dvc_yaml, sort_keys=False))
    (project / ".gitignore").write_text("__pycache__/\n/data/kitti/\n")
    if not (project / ".git").is_dir():
        run(["git", "init", "-q"], project)
    if not (project / ".dvc").is_dir():
        run(["dvc", "init", "-q"], project)
    run(["dvc", "config", "core.analytics", "false"], project)
    run(["dvc", "config", "cache.type", "hardlink,symlink,copy"], project)


def tool_env() -> dict[str, str]:
    """This interpreter's bin folder first on PATH (``dvc`` and the stages' ``python``)."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def run(cmd: list[str], cwd: Path) -> tuple[float, str]:
    """Run a command; return its wall seconds and output (raises with the output on failure)."""
    t = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=tool_env(), capture_output=True, text=True)
    seconds = time.perf_counter() - t
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return seconds, done.stdout + done.stderr


# ------------------------------------------------------------------------------------------ measuring


class MemorySampler:
    """Peak resident memory of this process and all its descendants (summed), sampled every ``period`` s."""

    def __init__(self, period: float = 0.1) -> None:
        import psutil

        self._me = psutil.Process()
        self._period = period
        self._stop = threading.Event()
        self.peak_total = 0
        self.peak_process = 0
        self._loads: list[float] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psutil

        while not self._stop.is_set():
            total = 0
            for proc in [self._me, *self._me.children(recursive=True)]:
                try:
                    rss = proc.memory_info().rss
                except psutil.Error:
                    continue
                total += rss
                self.peak_process = max(self.peak_process, rss)
            self.peak_total = max(self.peak_total, total)
            self._loads.append(os.getloadavg()[0])
            self._stop.wait(self._period)

    @property
    def mean_load(self) -> float:
        """The mean of the 1-minute load average over the samples (other work on the machine included)."""
        return sum(self._loads) / max(1, len(self._loads))

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its reaped children."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@contextlib.contextmanager
def timed(result: dict[str, float], cpu: dict[str, float], name: str) -> Iterator[None]:
    t, c = time.perf_counter(), cpu_seconds()
    yield
    result[name], cpu[name] = time.perf_counter() - t, cpu_seconds() - c
    print(f"{name}: {result[name]:.1f} s wall, {cpu[name]:.1f} s CPU", file=sys.stderr, flush=True)


def disk_usage(folder: Path) -> int:
    """Bytes allocated on disk to the files under ``folder``."""
    return sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file())


def run_steps(project: Path) -> tuple[dict[str, float], dict[str, float]]:
    """prepare@{train,val}, graphs@{train,val} through pgnn.pipeline.runner; wall and CPU seconds per step
    (the CPU seconds of the pool workers count when the step's pool has ended)."""
    from pgnn.pipeline.runner import driver_session, stage_items

    seconds: dict[str, float] = {}
    cpu: dict[str, float] = {}
    with (
        contextlib.redirect_stdout(io.StringIO()),  # run_plans prints a line per shard (936 a split)
        driver_session(project / "params.yaml", project, "kitti_scale", record=False) as session,
    ):
        session.run(["params"])  # params.resolved.yaml (untimed, ms)
        for it in stage_items(["prepare", "graphs"]):
            with timed(seconds, cpu, it.target):
                session.execute(it.stage, [it])
    return seconds, cpu


def run_benchmark(
    work: str = "/tmp/pgnn-kitti-scale",
    frames: int = KITTI_FRAMES,
    pool: int = 100,
    source: str = "synthetic",
    preset: str = "small",
    workers: int = 2,
    frames_per_shard: int = 8,
    keep: bool = False,
) -> dict[str, Any]:
    """Build the root and project under ``work``, time the steps and DVC; return the figures."""
    work_dir = Path(work).resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    pool_root, pool_ids = make_pool(work_dir, source, pool)
    project = work_dir / "project"
    shutil.rmtree(project, ignore_errors=True)
    make_project(project, preset, workers, frames_per_shard)
    root_info = make_root(project / "data" / "kitti", pool_root, pool_ids, frames)
    print(f"root: {root_info}", flush=True)

    t = time.perf_counter()
    with MemorySampler() as memory:
        seconds, cpu = run_steps(project)
    total = time.perf_counter() - t
    usage = {
        "prepared_gb": disk_usage(project / "data" / "prepared") / 1e9,
        "graphs_gb": disk_usage(project / "data" / "graphs") / 1e9,
    }
    maxrss = {  # Linux: KiB; RUSAGE_CHILDREN is the largest single child, not a sum
        "self_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9,
        "largest_child_gb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 / 1e9,
    }

    dvc: dict[str, Any] = {}
    dvc["commit_s"], _ = run(["dvc", "commit", "-f", "-q"], project)
    run(["git", "add", "-A"], project)
    run(
        ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-qm", "bench"],
        project,
    )
    for i in (1, 2):
        dvc[f"status_s_{i}"], out = run(["dvc", "status"], project)
        if "up to date" not in out.lower():
            raise RuntimeError(f"dvc status after commit is not clean:\n{out}")
    for i in (1, 2):
        dvc[f"noop_repro_s_{i}"], out = run(["dvc", "repro"], project)
        if "didn't change" not in out and "up to date" not in out.lower():
            raise RuntimeError(f"dvc repro was not a no-op:\n{out}")
        if "Running stage" in out:
            raise RuntimeError(f"dvc repro ran a stage:\n{out}")
    print(f"dvc: {dvc}", flush=True)

    result = {
        "source": source,
        "pool": len(pool_ids),
        "preset": preset,
        "workers": workers,
        "frames_per_shard": frames_per_shard,
        "cpus": os.cpu_count(),
        "root": root_info,
        "step_s": seconds,
        "step_cpu_s": cpu,
        "load_avg_during": memory.mean_load,
        "prepare_graphs_s": total,
        "peak_rss_gb": memory.peak_total / 1e9,
        "peak_rss_one_process_gb": memory.peak_process / 1e9,
        "maxrss": maxrss,
        "disk": usage,
        "dvc": dvc,
        "noop_repro_s": min(dvc["noop_repro_s_1"], dvc["noop_repro_s_2"]),
        "status_s": min(dvc["status_s_1"], dvc["status_s_2"]),
    }
    result["targets"] = {
        k: {"target": v, "measured": result[k], "met": result[k] <= v} for k, v in TARGETS.items()
    }
    if not keep:
        shutil.rmtree(project, ignore_errors=True)
    return result


def format_table(r: dict[str, Any]) -> str:
    root = r["root"]
    lines = [
        f"KITTI scale: {root['frames']} frames ({root['train']} train / {root['val']} val; hard links to "
        f"{r['pool']} {r['source']} frames, {root['apparent_gb']:.1f} GB apparent), preset {r['preset']}, "
        f"data.workers {r['workers']}, {r['frames_per_shard']} frames a shard, {r['cpus']} CPUs",
        "",
        f"mean load average during the steps: {r['load_avg_during']:.1f}",
        "",
        "| step | wall s | CPU s | CPU ms a frame |",
        "|---|---|---|---|",
    ]
    n = {"train": root["train"], "val": root["val"]}
    for name in STEPS:
        per_frame = 1000 * r["step_cpu_s"][name] / n[name.split("@")[1]]
        lines.append(f"| {name} | {r['step_s'][name]:.1f} | {r['step_cpu_s'][name]:.1f} | {per_frame:.0f} |")
    lines += [
        f"| **prepare + graphs** | **{r['prepare_graphs_s']:.1f}** | {sum(r['step_cpu_s'].values()):.1f} | |",
        "",
        "| measure | value | target | met |",
        "|---|---|---|---|",
    ]
    t = r["targets"]

    def target(key: str, unit: str) -> str:
        return f"<= {t[key]['target']:.0f} {unit} | {'yes' if t[key]['met'] else 'no'}"

    lines += [
        f"| prepare + graphs wall | {r['prepare_graphs_s']:.1f} s | {target('prepare_graphs_s', 's')} |",
        f"| peak RSS, process tree summed | {r['peak_rss_gb']:.2f} GB | {target('peak_rss_gb', 'GB')} |",
        f"| peak RSS, largest process | {r['peak_rss_one_process_gb']:.2f} GB | | |",
        f"| no-op `dvc repro` (best of 2) | {r['noop_repro_s']:.2f} s | {target('noop_repro_s', 's')} |",
        f"| `dvc status` (best of 2) | {r['status_s']:.2f} s | | |",
        f"| `dvc commit` of the outputs (first hashing) | {r['dvc']['commit_s']:.1f} s | | |",
        f"| data/prepared on disk | {r['disk']['prepared_gb']:.2f} GB | | |",
        f"| data/graphs on disk | {r['disk']['graphs_gb']:.2f} GB | | |",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="/tmp/pgnn-kitti-scale", help="scratch folder (pool, project)")
    parser.add_argument("--frames", type=int, default=KITTI_FRAMES)
    parser.add_argument("--pool", type=int, default=100, help="distinct synthetic frames")
    parser.add_argument("--source", choices=("synthetic", "kitti_sample"), default="synthetic")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--workers", type=int, default=2, help="data.workers")
    parser.add_argument("--frames-per-shard", type=int, default=8)
    parser.add_argument("--keep", action="store_true", help="keep the project (data root, shards)")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args()
    result = run_benchmark(
        args.work,
        args.frames,
        args.pool,
        args.source,
        args.preset,
        args.workers,
        args.frames_per_shard,
        args.keep,
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    print(format_table(result))


if __name__ == "__main__":
    main()
