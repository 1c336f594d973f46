"""Every command of README.md and docs/*.md runs as written, in the order a reader meets them.

Each ```bash block is cut into commands (a line, with its ``\\`` continuations and here-documents); each
```python block is one command. A page's commands run in one bash process (``set -euo pipefail``), in page
order, from where the page says a reader stands: the repository root (a temporary copy of this project's
tracked files, a git repository, ``.venv`` linked), a scratch folder (docs/own-data.md), or the tiny
experiments project of ``tests/pipeline/fakeexp.py`` (docs/experiments.md). So each command's inputs are
what the page's earlier commands made, as for a reader. Pages are read in the order the README links them.

What a user has and the tests do not get from the network is filled from the shared sample, in a
temporary ``HOME`` (:func:`home`): ``~/kitti`` (the docs' example ``$KITTI``, also set in the environment)
is a KITTI root whose ``training/`` is the shared sample frames and whose ``ImageSets/`` lists the sample's
frames of the standard split, and ``~/Point-GNN`` stands in for the clone of WeijingShi/Point-GNN (its
``checkpoints/car_auto_T{0,1}_train`` are the shared copies of those released checkpoints). KITTI data is
CC BY-NC-SA 3.0: non-commercial use only.

A command that cannot run here (the network, a GPU, a second machine, a long run) is never skipped
silently: it is listed in :data:`ELSEWHERE` with the test that runs the same command, or in
:data:`NOT_RUN` with the reason, and a listed command the pages no longer hold fails the test.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "pipeline"))
from dvcrepo import dvc_in, run_in, tool_env  # noqa: E402
from fakeexp import make_project  # noqa: E402

FENCE = re.compile(r"^([ \t]*)```([\w-]*)[^\n]*\n(.*?)^[ \t]*```", re.S | re.M)
LINK = re.compile(r"\]\((docs/[\w.-]+\.md)\)")
HEREDOC = re.compile(r"<<-?\s*'?(\w+)'?")
COMMENT = re.compile(r"(?:^|\s+)#\s.*$")


def reading_order() -> list[Path]:
    """README.md, then the docs pages in the order the README first links them, then the rest by name."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    linked = list(dict.fromkeys(REPO / m for m in LINK.findall(readme)))
    rest = [p for p in sorted((REPO / "docs").glob("*.md")) if p not in linked]
    return [REPO / "README.md", *[p for p in linked if p.exists()], *rest]


PAGES = reading_order()


@dataclass(frozen=True)
class Command:
    page: str
    line: int
    lang: str  # bash | python
    text: str  # as written (continuations and here-documents included)

    @property
    def same(self) -> str:
        """What makes two commands the same: the command without its comment, or a whole multi-line one."""
        return self.key if "\n" not in self.text else self.text

    @property
    def key(self) -> str:
        """The command without its trailing comment: what :data:`ELSEWHERE` and :data:`NOT_RUN` name."""
        first = self.text.splitlines()[0]
        return (COMMENT.sub("", first) if "<<" not in first else first).rstrip("\\").strip()


def commands(page: Path) -> list[Command]:
    text = page.read_text(encoding="utf-8")
    found = []
    for m in FENCE.finditer(text):
        indent, lang, body = m.group(1), m.group(2), m.group(3)
        start = text.count("\n", 0, m.start()) + 2
        lines = [line[len(indent) :] if line.startswith(indent) else line for line in body.splitlines()]
        if lang == "python":
            found.append(Command(page.name, start, "python", "\n".join(lines)))
        if lang != "bash":
            continue
        i = 0
        while i < len(lines):
            at, cmd = i, [lines[i]]
            i += 1
            if not cmd[0].strip() or cmd[0].lstrip().startswith("#"):
                continue
            while (cmd[-1].endswith("\\") or "\n".join(cmd).count('"') % 2) and i < len(lines):
                cmd.append(lines[i])
                i += 1
            heredoc = HEREDOC.search(cmd[0])
            if heredoc:
                while i < len(lines) and lines[i].strip() != heredoc.group(1):
                    cmd.append(lines[i])
                    i += 1
                cmd.append(lines[i])
                i += 1
            found.append(Command(page.name, start + at, "bash", "\n".join(cmd)))
    return found


ALL = [c for page in PAGES for c in commands(page)]

DVC_PIPE = "tests/pipeline/test_dvc_pipeline.py"
FLOWS_TEST = "tests/pipeline/test_drivers.py::test_dvc_repro_and_the_full_flow_give_the_same_bytes"
DEPLOY = "tests/pipeline/test_deployment.py::test_preprocess_deployment_runs_end_to_end_on_a_process_worker"
DASK = "tests/pipeline/test_dask_workers.py::test_preprocess_flow_on_dask_workers_survives_a_killed_worker"
QUEUE = "tests/pipeline/test_exp_queue.py::test_queued_experiments_run_with_their_own_params"
MULTINODE = (
    "tests/training/test_multinode.py::test_a_node_killed_mid_run_and_restarted_resumes_from_the_checkpoint"
)
REMOTE = "tests/pipeline/test_remote.py::test_push_in_one_clone_pull_in_another"
EXP = f"{DVC_PIPE}::test_experiment_shows_param_and_ap"
RESUME_EXP = "tests/pipeline/test_drivers.py::test_exp_run_with_fewer_or_more_steps_gives_a_fresh_runs_model"
PIPELINE_RUN = (
    "tests/pipeline/test_lockfile.py::test_make_pipeline_repairs_a_lock_truncated_by_a_killed_repro"
)

ELSEWHERE: dict[str, str] = {
    "README.md: make pipeline": f"{PIPELINE_RUN}: python -m pgnn.pipeline.run, on a tiny project",
    "README.md: dvc exp run -n short -S train.max_steps=400": f"{RESUME_EXP}: dvc exp run -S train.max_steps",
    "README.md: dvc exp run -n seed1 -S train.seed=1": f"{EXP}: dvc exp run -S KEY=VALUE on 4 frames",
    "README.md: python -m flows": f"{FLOWS_TEST}: python -m flows --flow full on 4 frames",
    "README.md: python -m flows --flow preprocess --runner processes": f"{DASK}: the preprocess flow",
    "README.md: python -m flows --flow train-evaluate": (
        "tests/pipeline/test_drivers.py::test_train_evaluate_refuses_stale_preprocessing_in_one_line"
    ),
    "experiment-log.md: dvc exp run -n thr05 -S postprocess.score_threshold=0.5": f"{EXP}: dvc exp run -S",
    "experiment-log.md: dvc exp run -n steps800 -S train.max_steps=800": f"{RESUME_EXP}: -S train.max_steps",
    "experiment-log.md: dvc exp show --only-changed --drop '.*/' --md": f"{EXP}: dvc exp show --only-changed",
    "experiments.md: dvc exp run --queue -n q-slow -S train.lr=0.02": QUEUE,
    "experiments.md: dvc exp run --queue -n q-long -S train.lr=0.03 -S train.max_steps=100": QUEUE,
    "experiments.md: dvc queue start -j 1": QUEUE,
    "experiments.md: dvc queue status": QUEUE,
    "experiments.md: dvc queue logs q-long": QUEUE,
    "pipeline.md: dvc push": REMOTE,
    "pipeline.md: git clone <repo> pgnn-2 && cd pgnn-2 && dvc pull": REMOTE,
    "pipeline.md: dvc status": REMOTE,
    "pipeline.md: .venv/bin/python -m flows": FLOWS_TEST,
    "pipeline.md: .venv/bin/python -m flows --flow preprocess --runner processes --max-workers 2": DASK,
    "pipeline.md: .venv/bin/python -m flows --flow train-evaluate": (
        "tests/pipeline/test_drivers.py::test_train_evaluate_refuses_stale_preprocessing_in_one_line"
    ),
    "pipeline.md: .venv/bin/python -m flows --stages graphs train": FLOWS_TEST,
    'pipeline.md: eval "$(.venv/bin/python -m flows.prefect_env)"': DEPLOY,
    "pipeline.md: export PREFECT_API_URL=http://127.0.0.1:4200/api": DEPLOY,
    "pipeline.md: prefect server start --host 127.0.0.1 &": DEPLOY,
    "pipeline.md: prefect work-pool create pgnn-cpu --type process": DEPLOY,
    "pipeline.md: prefect deploy --all": DEPLOY,
    "pipeline.md: prefect worker start --pool pgnn-cpu &": DEPLOY,
    "pipeline.md: prefect deployment run 'pgnn-preprocess/pgnn-preprocess' "
    "--param task_runner=threads --watch": DEPLOY,
    "pipeline.md: export PYTHONPATH=$PWD": DASK,
    "scale.md: export PYTHONPATH=$PWD OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1": DASK,
    "scale.md: dask scheduler --host 127.0.0.1 --port 0 --dashboard-address 127.0.0.1:0 "
    "--scheduler-file /tmp/sched.json &": DASK,
    "scale.md: dask worker --scheduler-file /tmp/sched.json --nthreads 1 --no-nanny --host 127.0.0.1 "
    "--name worker-a &": DASK,
    "scale.md: dask worker --scheduler-file /tmp/sched.json --nthreads 1 --no-nanny --host 127.0.0.1 "
    "--name worker-b &": DASK,
    'scale.md: ADDR=$(python -c \'import json; print(json.load(open("/tmp/sched.json"))["address"])\')': DASK,
    "scale.md: .venv/bin/python -m flows --flow preprocess --stages prepare gt_db graphs --runner dask "
    "--dask-address $ADDR": DASK,
    "scale.md: export GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1 "
    "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1": MULTINODE,
    'scale.md: opts="--nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:29400 '
    "--rdzv-id pgnn-test": MULTINODE,
    "scale.md: torchrun $opts --rdzv-conf is_host=1 stages/train.py &": MULTINODE,
    "scale.md: torchrun $opts --rdzv-conf is_host=0 stages/train.py &": MULTINODE,
    "scale.md: kill -9 -<pid of node 1's torchrun> <pid of its worker>": MULTINODE,
    "kitti.md: .venv/bin/python -m pgnn.pipeline.run evaluate": (
        f"{PIPELINE_RUN}: python -m pgnn.pipeline.run on a tiny project (every preset trains on real KITTI "
        "frames: tests/pipeline/test_train_command.py::test_pgnn_train_runs_every_preset_from_a_params_file)"
    ),
    "experiments.md: dvc exp run --queue -n seed -S 'train.seed=range(1,3)'": f"{QUEUE}: a seed sweep queued",
    "experiments.md: dvc exp run --queue -n resample -S train.resample_graph=true "
    "-S 'train.seed=range(0,3)'": (f"{QUEUE}: a seed sweep queued (the fake project has no resample_graph)"),
    "experiments.md: pgnn runs main seed-1 seed-2 resample-1 resample-2 resample-3": (
        "tests/pipeline/test_runs_view.py::test_seed_groups_show_mean_and_sd_and_which_gaps_are_noise"
    ),
    "reproducibility.md: pgnn check cpu": (
        "tests/pipeline/test_trajectory.py::test_this_machine_trains_the_reference_trajectory: pgnn check cpu"
    ),
    "view.md: unshare -n chromium --headless --no-sandbox --disable-gpu --window-size=1400,900 "
    "--virtual-time-budget=8000": "tests/viz/test_html.py::test_page_draws_in_headless_chromium_offline",
}
"""Commands another test runs (the same command, on a tiny project): too long here, or they need a server,
workers or a second node. Key: ``page: command``; value: ``path::test`` and what it runs."""

NOT_RUN: dict[str, str] = {
    "README.md: make test": "CI's own command (.ci/run): the suite this test is part of",
    "README.md: git clone --depth 1 https://github.com/WeijingShi/Point-GNN.git ~/Point-GNN": (
        "the network: ~/Point-GNN/checkpoints is the shared copy of the released checkpoints (home)"
    ),
    "kitti.md: git clone --depth 1 https://github.com/WeijingShi/Point-GNN.git ~/Point-GNN": "as README.md's",
    "kitti.md: curl -fsSL -o $KITTI/ImageSets/#1.txt "
    "'https://raw.githubusercontent.com/open-mmlab/OpenPCDet/master/data/kitti/ImageSets/"
    "{train,val,test}.txt'": (
        "the network: ~/kitti/ImageSets holds the standard split's ids of the sample frames (home)"
    ),
    "experiment-log.md: dvc metrics diff HEAD steps800 --md": "the log's 800-step experiment of the real run",
    "experiment-log.md: dvc params diff HEAD steps800 --md": "the log's 800-step experiment of the real run",
    "pipeline.md: prefect work-pool create pgnn-gpu --type process": "a GPU machine's pool",
    "pipeline.md: prefect worker start --pool pgnn-gpu &": "a worker on a GPU machine",
    "pipeline.md: prefect deployment run 'pgnn-train-evaluate/pgnn-train-evaluate' --watch": "the GPU pool's",
    "pipeline.md: prefect deployment run 'pgnn-full/pgnn-full' --watch": "a full run on the CPU pool",
    "pipeline.md: dask scheduler --host 10.0.0.5 &": "a cluster (scale.md's loopback version is tested)",
    "pipeline.md: dask worker tcp://10.0.0.5:8786 --nworkers 8 --nthreads 1 &": "a cluster's machines",
    "pipeline.md: .venv/bin/python -m flows --flow preprocess --runner dask "
    "--dask-address tcp://10.0.0.5:8786": ("a cluster's scheduler (scale.md's loopback version is tested)"),
    "scale.md: dvc repro graphs gt_db": "the GPU sequence the page says was not run",
    "scale.md: torchrun --standalone --nproc_per_node 2 stages/train.py": "2 GPUs (the page: not run)",
    "scale.md: dvc commit train": "the GPU sequence the page says was not run",
    "scale.md: .venv/bin/python -m pgnn.pipeline.run evaluate": "the GPU sequence the page says was not run",
    "scale.md: TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1": "two machines (the loopback version below is tested)",
}
"""Commands no test runs, and why (the network, a GPU, several machines, a long real run)."""

WHERE = {"own-data.md": "scratch", "experiments.md": "experiments"}
"""Where a page's reader stands (default: the repository root)."""


@pytest.fixture(scope="session")
def home(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    """A user's home: ``~/kitti`` (the shared sample frames with the standard split's ids of those frames:
    train 000000, 000003, 000114; val 000001, 000008 of the sample's six val frames, to keep the run short)
    and ``~/Point-GNN/checkpoints`` (the shared copy of the authors' released T0/T1 checkpoints)."""
    sample = shared_data / "kitti_sample"
    checkpoints = shared_data / "pointgnn_reference" / "tf_checkpoints"
    home = tmp_path_factory.mktemp("home")
    kitti = home / "kitti"
    (kitti / "ImageSets").mkdir(parents=True)
    (kitti / "training").symlink_to(sample / "training")
    (kitti / "ImageSets" / "train.txt").write_text("000000\n000003\n000114\n")
    (kitti / "ImageSets" / "val.txt").write_text("000001\n000008\n")
    (home / "Point-GNN").mkdir()
    (home / "Point-GNN" / "checkpoints").symlink_to(checkpoints)
    return home


def project_copy(dest: Path) -> Path:
    """This project's tracked files (the working tree's bytes) as a fresh git repository with ``.venv``."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in files.decode().split("\0"):
        src = REPO / name
        if name and src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    (dest / ".venv").symlink_to(Path(sys.executable).parent.parent)
    run_in(dest, "git", "init", "-q", "-b", "main")
    run_in(dest, "git", "add", "-A")
    run_in(dest, "git", "commit", "-qm", "copy")
    return dest


def workdir(page: str, tmp: Path, kitti: Path) -> Path:
    """Where the reader of ``page`` stands: the one repository copy every repository page shares (made, with
    the README reader's own data, on first use), a scratch folder, or the experiments project."""
    where = WHERE.get(page, "repo")
    if where == "scratch":
        (tmp / "scratch").mkdir()
        return tmp / "scratch"
    if where == "experiments":
        root = make_project(tmp / "proj")
        for name, lr in EXPERIMENTS.items():
            dvc_in(root, "exp", "run", "-q", "-n", name, "-S", f"train.lr={lr}")
        return root
    if not (tmp / "repo").exists():
        your_data(project_copy(tmp / "repo"), kitti)
    return tmp / "repo"


EXPERIMENTS = {"fast": 0.05, "q-slow": 0.02, "q-long": 0.03}
"""The experiments docs/experiments.md's "Compare" and "Clean up" name (its prose runs ``fast``, its queue the
other two; the queue is :data:`QUEUE`'s): run directly with ``dvc exp run -n NAME -S train.lr=LR``."""


def your_data(root: Path, kitti: Path) -> None:
    """What the README's reader brings of their own: scans in ``scans/`` and a dataset in ``own/`` (two KITTI
    frames as docs/own-data.md writes them)."""
    from pgnn.data.own_format import export_kitti_to_own
    from pgnn.data.pointcloud import write_point_cloud

    scan = np.fromfile(kitti / "training" / "velodyne" / "000003.bin", dtype="<f4").reshape(-1, 4)
    write_point_cloud(root / "scans" / "000003.pcd", scan, "binary_compressed")
    export_kitti_to_own(
        kitti, ["000001", "000003"], root / "own", {"train": ["000003"], "val": ["000001"]}, suffix=".pcd"
    )


def script(cmds: list[Command]) -> str:
    lines = ["set -euo pipefail"]
    for n, c in enumerate(cmds, 1):
        mark = shlex.quote(f"[{n}/{len(cmds)}] {c.page}:{c.line}: {c.key}")
        lines.append(f"printf '>>> %s %s\\n' \"$(date +%s.%N)\" {mark} >&2")
        if c.lang == "python":
            lines.append(f"python - <<'PGNN_DOCS_PYTHON'\n{c.text}\nPGNN_DOCS_PYTHON")
        else:
            lines.append(c.text)
    lines.append("printf '>>> %s end\\n' \"$(date +%s.%N)\" >&2")
    return "\n".join(lines) + "\n"


def listed(c: Command) -> bool:
    return f"{c.page}: {c.key}" in ELSEWHERE or f"{c.page}: {c.key}" in NOT_RUN


def to_run(page: str) -> list[Command]:
    return [c for c in ALL if c.page == page and not listed(c)]


def timings(stderr: str) -> list[str]:
    """``seconds  command`` for each command a page's script started (from its ``>>>`` lines)."""
    marks = [line.split(" ", 2) for line in stderr.splitlines() if line.startswith(">>> ")]
    return [f"{float(b[1]) - float(a[1]):6.1f} s  {a[2]}" for a, b in zip(marks, marks[1:], strict=False)]


@pytest.mark.slow
def test_every_page_runs_as_written(home: Path, tmp_path: Path) -> None:
    """Every page, in reading order, one bash process each. A command a reader of the repository pages
    already ran there, word for word (comments aside), is not run twice (its outputs are in place); the
    count says how many."""
    env = tool_env() | {
        "HOME": str(home),
        "KITTI": str(home / "kitti"),
        "PYTHONPATH": str(REPO),
        "PGNN_PROGRESS": "0",
    }
    done: set[str] = set()
    report, again = [], 0
    t_all = time.perf_counter()
    for page in [p.name for p in PAGES]:
        cmds = to_run(page)
        if WHERE.get(page, "repo") == "repo":
            again += sum(c.same in done for c in cmds)
            cmds = [c for c in cmds if c.same not in done]
            done |= {c.same for c in cmds}
        if not cmds:
            continue
        cwd = workdir(page, tmp_path, home / "kitti")
        t0 = time.perf_counter()
        proc = subprocess.run(
            ["bash", "-c", script(cmds)], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
        )
        report.append(f"{page}: {len(cmds)} commands, {time.perf_counter() - t0:.1f} s")
        report += ["    " + t for t in timings(proc.stderr)]
        if proc.returncode != 0:
            started = [line for line in proc.stderr.splitlines() if line.startswith(">>> ")]
            pytest.fail(
                f"{page}: exit {proc.returncode} at {started[-1] if started else '?'}\n"
                f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-4000:]}\ntimes:\n"
                + "\n".join(report)
            )
    ran = sum(len(to_run(p.name)) for p in PAGES) - again
    print(f"\n{ran} commands run ({again} again-skipped) in {time.perf_counter() - t_all:.1f} s")
    print("\n".join(report))


def test_the_pages_hold_commands_to_run() -> None:
    """The extraction finds the commands (an empty list cannot pass), and prints the count that runs."""
    ran = [c for c in ALL if not listed(c)]
    print(f"\n{len(ALL)} commands in the docs: {len(ran)} run here, {len(ALL) - len(ran)} listed elsewhere")
    assert {"README.md", "kitti.md", "export.md", "view.md", "own-data.md"} <= {c.page for c in ran}
    assert len(ran) >= 40


def test_every_listed_command_is_in_the_docs_and_its_test_exists() -> None:
    keys = {f"{c.page}: {c.key}" for c in ALL}
    stale = [k for k in [*ELSEWHERE, *NOT_RUN] if k not in keys]
    assert not stale, f"listed but no page holds them any more: {stale}"
    for key, where in ELSEWHERE.items():
        path, _, name = where.split(": ", 1)[0].partition("::")
        assert (REPO / path).is_file() and f"def {name}(" in (REPO / path).read_text(), f"{key}: {where}"
