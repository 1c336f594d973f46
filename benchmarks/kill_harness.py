"""Kill harness: seeded random SIGKILLs of `dvc repro` inside prepare, graphs, train and predict, each
followed by a plain `dvc repro` (the resume), which must end with the same output hashes as an uninterrupted
run.

    .venv/bin/python benchmarks/kill_harness.py --trials 10 [--lock-kills 3] [--frames 24] [--steps 40]
                                                [--seed 0] [--work D] [--json F] [--keep]

It works in a temporary clone of this repository (``git clone`` of the committed HEAD, ``.venv`` symlinked to
this interpreter's environment) with a smaller synthetic config written to params.yaml and committed there
(``--frames`` 24, 2 frames a shard so prepare and graphs leave finished shards behind, ``--steps`` 40
training steps with a checkpoint every 10). It runs the pipeline once uninterrupted for the reference: the
``md5`` that ``dvc.lock`` records for the prepared and graph shards, the ground-truth database,
``models/model.pt``, the val predictions and ``metrics/eval.json``; it commits that run's ``dvc.lock`` in the
clone (as the README's workflow does) and keeps a copy of the workspace and the DVC cache, less the run
cache. A second,
uninterrupted run of every stage but ``synth`` from that copy must give the same hashes (run-to-run
determinism, without which the comparison means nothing) and gives each stage's duration with warm caches
(numba, page cache) and the time to its first output file. Then, per trial:

1. pick (seeded) a stage, an anchor and a delay: odd trials from the stage's start, uniform in [0, its
   duration in the second run] (which includes DVC's hashing of the outputs and its lock-file write after
   the command); even trials from its first output file, uniform in [0, the rest of its duration] (prepare
   and graphs spend most of their few seconds starting Python, so kills timed from the start mostly land
   before their first shard; the second run prints each stage's seconds),
2. restore the workspace copy and make the stage and everything downstream of it (the stage table's deps)
   never-run: their outputs deleted, their ``dvc.lock`` entries removed, no run cache, no ``.dvc/tmp``
   (upstream stages are up to date and skipped),
3. start ``dvc repro`` in a new process group, wait for its ``Running stage '<stage>'`` line (and for the
   first file in the stage's outputs), sleep the delay, ``os.killpg(pgid, SIGKILL)`` (DVC, the stage's
   python and its worker processes),
4. record what the kill left: ``dvc.lock`` state (:func:`pgnn.pipeline.lockfile.check_lock`), entries of the
   killed PID in ``.dvc/tmp/rwlock``, ``.dvc/tmp/lock``,
5. repair what needs it (:func:`pgnn.pipeline.lockfile.repair_lock`, what ``make pipeline`` does), run
   ``dvc repro`` and compare the hashes with the reference; "equal" also needs ``dvc status`` to find the
   workspace matching ``dvc.lock``.

``--lock-kills N`` adds N trials that kill ``predict``'s ``dvc repro`` the moment ``dvc.lock`` changes on disk
after the stage started (polled every 0.5 ms: DVC has just truncated it and is dumping the new one in
place): the kill that can leave a 0-byte or truncated lock, which step 5 then repairs.

It prints a markdown table (trial, stage, moment of the kill, what the kill left, the resume's result and
whether the hashes are equal) and exits 1 when a resume failed or a hash differed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from pgnn.pipeline.lockfile import check_lock, repair_lock  # noqa: E402
from pgnn.pipeline.stages import SPLITS, STAGES, artifact_path  # noqa: E402

GROUPS = ("prepare", "graphs", "train", "predict")
HASHED = (
    "data/prepared/train",
    "data/prepared/val",
    "data/graphs/train",
    "data/graphs/val",
    "data/gt_db/gt_db.parquet",
    "models/model.pt",
    "data/predictions/val",
    "metrics/eval.json",
)


def small_config(frames: int, steps: int) -> dict[str, dict[str, int]]:
    """The params.yaml sections the harness overrides."""
    return {
        "synthetic": {"frames": frames},
        "data": {"frames_per_shard": 2},
        "train": {
            "max_steps": steps,
            "checkpoint_every": max(1, steps // 4),
            "log_every": max(1, steps // 4),
        },
    }


RUNNING = re.compile(r"^Running stage '([^']+)'")
CACHED = re.compile(r"^Stage '([^']+)' is cached - skipping run", re.MULTILINE)


def _env(work: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PATH=str(work / ".venv" / "bin") + os.pathsep + env.get("PATH", ""),
        DVC_NO_ANALYTICS="1",
        DO_NOT_TRACK="1",
        OMP_NUM_THREADS="1",
        NUMBA_NUM_THREADS="1",
        OMP_WAIT_POLICY="PASSIVE",
        GIT_AUTHOR_NAME="kill-harness",
        GIT_AUTHOR_EMAIL="kill-harness@localhost",
        GIT_COMMITTER_NAME="kill-harness",
        GIT_COMMITTER_EMAIL="kill-harness@localhost",
    )
    return env


def _run(work: Path, *cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=work, env=_env(work), capture_output=True, text=True, check=False)


def _check(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    if proc.returncode != 0:
        raise SystemExit(
            f"{' '.join(map(str, proc.args))} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}"
        )
    return proc


def make_clone(work: Path, config: dict[str, dict[str, int]]) -> Path:
    """A clone of this repository's HEAD with the small config committed and ``.venv`` linked."""
    clone = work / "repo"
    _check(_run(work, "git", "clone", "-q", str(REPO), str(clone)))
    (clone / ".venv").symlink_to(Path(sys.prefix))
    with open(clone / ".git" / "info" / "exclude", "a") as f:
        f.write(".venv\n")
    params = yaml.safe_load((clone / "params.yaml").read_text())
    for section, values in config.items():
        params[section] = {**(params.get(section) or {}), **values}
    (clone / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    _check(_run(clone, "git", "commit", "-qam", "kill harness: small config"))
    return clone


def stage_graph() -> dict[str, tuple[list[str], list[str]]]:
    """DVC stage name (``graphs@val``) -> (deps, outs) artifact paths, from the stage table."""
    graph = {}
    for st in STAGES:
        for item in st.foreach or (None,):
            name = f"{st.name}@{item}" if item else st.name
            deps = ["data/synthetic" if d.startswith("${") else artifact_path(d, item) for d in st.deps]
            graph[name] = (deps, [artifact_path(o.artifact, item) for o in st.outs])
    return graph


def downstream(stage: str) -> list[str]:
    """``stage`` and every stage that depends on its outputs, directly or not."""
    graph = stage_graph()
    todo, seen = [stage], [stage]
    while todo:
        outs = graph[todo.pop()][1]
        for name, (deps, _) in graph.items():
            if name not in seen and any(d == o or d.startswith(o + "/") for d in deps for o in outs):
                seen.append(name)
                todo.append(name)
    return seen


def snapshot_of(clone: Path, dest: Path) -> None:
    """Copy the clone to ``dest``, less ``.dvc/tmp`` and the run cache (``.dvc/cache/runs``: with it DVC
    would restore a never-run stage's outputs instead of running it)."""
    skip = {clone / ".dvc": {"tmp"}, clone / ".dvc" / "cache": {"runs"}}
    shutil.copytree(clone, dest, symlinks=True, ignore=lambda d, names: skip.get(Path(d), set()) & set(names))


def restore(snapshot: Path, clone: Path, stages: Sequence[str]) -> None:
    """The snapshot's workspace, with ``stages`` and their downstream stages never run (outputs and lock
    entries gone)."""
    shutil.rmtree(clone)
    shutil.copytree(snapshot, clone, symlinks=True)
    graph = stage_graph()
    lock = yaml.safe_load((clone / "dvc.lock").read_text())
    for name in {n for st in stages for n in downstream(st)}:
        lock["stages"].pop(name, None)
        for out in graph[name][1]:
            path = clone / out
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
    (clone / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False))


def lock_hashes(clone: Path) -> dict[str, str | None]:
    """The md5 that dvc.lock records for each of :data:`HASHED` (None: not recorded)."""
    lock = yaml.safe_load((clone / "dvc.lock").read_text()) or {}
    outs = {o["path"]: o.get("md5") for st in lock.get("stages", {}).values() for o in st.get("outs", [])}
    return {path: outs.get(path) for path in HASHED}


@dataclass
class Repro:
    """One streamed `dvc repro`: its lines with times, stage start times, and the kill, if any."""

    lines: list[tuple[float, str]] = field(default_factory=list)
    starts: dict[str, float] = field(default_factory=dict)
    rc: int | None = None
    pid: int = 0
    t0: float = 0.0
    end: float = 0.0
    first_output: dict[str, float] = field(default_factory=dict)
    """When a file first appeared in each stage's outputs (``watch`` runs and the killed stage)."""


def has_output(clone: Path, stage: str) -> bool:
    """Whether any file exists in ``stage``'s outputs."""
    for out in stage_graph()[stage][1]:
        path = clone / out
        if path.is_file() or (path.is_dir() and any(f.is_file() for f in path.rglob("*"))):
            return True
    return False


def repro(
    clone: Path, kill_stage: str | None = None, delay: float = 0.0, anchor: str = "start", watch: bool = False
) -> Repro:
    """Run ``dvc repro`` in its own process group. With ``kill_stage``, SIGKILL the whole group ``delay``
    seconds after the ``anchor`` of that stage: ``start`` (its ``Running stage`` line), ``first output`` (the
    first file in its outputs) or ``lock write`` (``dvc.lock`` changing on disk after the stage started: DVC
    truncates it, then dumps the new content in place; polled every 0.5 ms, ``delay`` unused). ``watch``:
    record every stage's first output time."""
    r = Repro(t0=time.monotonic())
    proc = subprocess.Popen(
        [str(clone / ".venv" / "bin" / "python"), "-m", "dvc", "repro"],
        cwd=clone,
        env=_env(clone),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    r.pid = proc.pid
    started = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            now = time.monotonic()
            r.lines.append((now, line.rstrip("\n")))
            m = RUNNING.match(line)
            if m:
                r.starts.setdefault(m.group(1), now)
                if m.group(1) == kill_stage:
                    started.set()

    def poll() -> None:
        while proc.poll() is None:
            for name in list(r.starts):
                if name not in r.first_output and has_output(clone, name):
                    r.first_output[name] = time.monotonic()
            time.sleep(0.02)

    threads = [threading.Thread(target=read, daemon=True)]
    if watch:
        threads.append(threading.Thread(target=poll, daemon=True))
    for th in threads:
        th.start()
    lock = clone / "dvc.lock"

    def stamp() -> tuple[int, int] | None:
        with contextlib.suppress(FileNotFoundError):
            st = lock.stat()
            return st.st_mtime_ns, st.st_size
        return None

    def kill() -> None:
        r.end = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)

    if kill_stage is not None:
        while not started.wait(0.05) and proc.poll() is None:
            pass
        if started.is_set() and anchor == "lock write":
            before = stamp()
            while proc.poll() is None:
                if stamp() != before:
                    kill()
                    break
                time.sleep(0.0005)
        elif started.is_set():
            at = r.starts[kill_stage]
            if anchor == "first output":
                while proc.poll() is None and not has_output(clone, kill_stage):
                    time.sleep(0.01)
                at = r.first_output[kill_stage] = time.monotonic()
            time.sleep(max(0.0, at + delay - time.monotonic()))
            kill()
    r.rc = proc.wait()
    for th in threads:
        th.join(timeout=30)
    if not r.end:
        r.end = time.monotonic()
    return r


def durations(r: Repro) -> dict[str, float]:
    """Each stage's time from its ``Running stage`` line to the next stage's (or the end)."""
    order = sorted(r.starts.items(), key=lambda kv: kv[1])
    ends = [t for _, t in order[1:]] + [r.end]
    return {name: end - t for (name, t), end in zip(order, ends, strict=True)}


def running_at(r: Repro, t: float) -> str:
    """The stage DVC was running at time ``t``."""
    before = [(start, name) for name, start in r.starts.items() if start <= t]
    return max(before)[1] if before else "-"


def rwlock_entries(clone: Path, pid: int) -> int | str:
    """How many paths ``.dvc/tmp/rwlock`` holds for ``pid`` (``"corrupt"`` when it is unreadable)."""
    path = clone / ".dvc" / "tmp" / "rwlock"
    if not path.exists():
        return 0
    try:
        lock = json.loads(path.read_text())
    except json.JSONDecodeError:
        return "corrupt"
    n = sum(1 for info in lock.get("write", {}).values() if info.get("pid") == pid)
    n += sum(1 for infos in lock.get("read", {}).values() for info in infos if info.get("pid") == pid)
    return n


@dataclass
class Trial:
    trial: int
    stage: str
    anchor: str
    """What the delay counts from: ``start``, ``first output`` or ``lock write`` (see :func:`repro`)."""
    delay: float
    moment: float | None = None
    after_output: float | None = None
    running: str = "-"
    killed_ran: list[str] = field(default_factory=list)
    exited_before_kill: int | None = None
    lock: str = "ok"
    rwlock: int | str = 0
    lock_file: bool = False
    partial: dict[str, int] = field(default_factory=dict)
    """Files the kill left in the outputs of the stage it hit (what the resume starts from)."""
    repaired: list[str] = field(default_factory=list)
    resume_rc: int | None = None
    resume_ran: list[str] = field(default_factory=list)
    resume_checked_out: list[str] = field(default_factory=list)
    """Stages whose outputs the resume took from the DVC cache (``Stage 'x' is cached``): their lock entry
    matched deps and params (after a lock restored from git)."""
    stale_cleared: bool = False
    status: str = ""
    """``dvc status`` after the resume: "clean" when the workspace matches dvc.lock."""
    equal: bool = False
    diff: list[str] = field(default_factory=list)
    resume_s: float = 0.0
    tail: str = ""


def schedule(
    n: int, seed: int, dur: dict[str, float], first: dict[str, float]
) -> list[tuple[str, str, float]]:
    """``n`` (stage, anchor, delay) trials: every group of :data:`GROUPS` ``n // 4`` times plus a seeded
    draw of the rest, shuffled; the split of prepare/graphs from the same seeded RNG. Odd trials count the
    delay from the stage's start (uniform in [0, its duration ``dur``]), even ones from its first output
    file (uniform in [0, its duration after ``first``, the seconds from its start to that file]): on a
    quiet machine prepare and graphs spend most of their few seconds starting the interpreter, so kills
    timed from the start mostly land before the first shard."""
    rng = random.Random(seed)
    groups = list(GROUPS) * (n // len(GROUPS)) + rng.sample(GROUPS, n % len(GROUPS))
    rng.shuffle(groups)
    out = []
    for i, g in enumerate(groups, start=1):
        name = f"{g}@{rng.choice(SPLITS)}" if g in ("prepare", "graphs") else g
        if i % 2 or name not in first:
            out.append((name, "start", round(rng.uniform(0.0, dur[name]), 2)))
        else:
            out.append((name, "first output", round(rng.uniform(0.0, max(0.05, dur[name] - first[name])), 2)))
    return out


def run_trial(
    snapshot: Path,
    clone: Path,
    i: int,
    stage: str,
    anchor: str,
    delay: float,
    reference: dict[str, str | None],
) -> Trial:
    restore(snapshot, clone, [stage])
    t = Trial(i, stage, anchor, delay)
    killed = repro(clone, stage, delay, anchor)
    t.killed_ran = sorted(killed.starts, key=killed.starts.__getitem__)
    if stage not in killed.starts:
        t.tail = "\n".join(line for _, line in killed.lines[-15:])
        return t
    t.moment = round(killed.end - killed.starts[stage], 2)
    if stage in killed.first_output:
        t.after_output = round(killed.end - killed.first_output[stage], 2)
    t.running = running_at(killed, killed.end)
    if killed.rc != -signal.SIGKILL:
        t.exited_before_kill = killed.rc
    t.lock = check_lock(clone) or "ok"
    t.rwlock = rwlock_entries(clone, killed.pid)
    t.lock_file = (clone / ".dvc" / "tmp" / "lock").exists()
    if t.running in stage_graph():
        for out in stage_graph()[t.running][1]:
            path = clone / out
            files = [f for f in path.rglob("*") if f.is_file()] if path.is_dir() else [path] * path.exists()
            t.partial[out] = len(files)
    t.repaired = repair_lock(clone)
    t0 = time.monotonic()
    resumed = repro(clone)
    t.resume_s = round(time.monotonic() - t0, 1)
    t.resume_rc = resumed.rc
    t.resume_ran = sorted(resumed.starts, key=resumed.starts.__getitem__)
    out = "\n".join(line for _, line in resumed.lines)
    t.stale_cleared = "had been killed. Auto removed it" in out
    t.resume_checked_out = CACHED.findall(out)
    if resumed.rc != 0:
        t.tail = "\n".join(line for _, line in resumed.lines[-25:])
        return t
    got = lock_hashes(clone)
    t.diff = [p for p in HASHED if got[p] != reference[p]]
    status = _run(clone, str(clone / ".venv" / "bin" / "python"), "-m", "dvc", "status", "--json")
    t.status = "clean" if status.returncode == 0 and json.loads(status.stdout or "null") == {} else "changed"
    if t.status != "clean":
        t.tail = status.stdout + status.stderr
    t.equal = not t.diff and t.status == "clean"
    return t


def table(trials: list[Trial]) -> str:
    rows = [
        "| trial | stage | moment (s after it started) | running at the kill | files in its outputs "
        "| dvc.lock after the kill | stale rwlock entries | resume | resume reran (s) | hashes equal |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in trials:
        moment = "-" if t.moment is None else f"{t.moment:.1f}"
        if t.anchor == "lock write":
            moment += " (its lock write)"
        elif t.after_output is not None:
            moment += f" ({t.after_output:.1f} after its first output)"
        if t.exited_before_kill is not None:
            moment += f" (dvc had exited, {t.exited_before_kill})"
        lock = t.lock
        for line in t.repaired:
            what = line.split("; ")[1] if "; " in line else line
            lock += f"; repaired: {what}" if "dvc.lock" in line.split(":")[0] else f"; rwlock {what}"
        partial = ", ".join(f"{k}: {v}" for k, v in t.partial.items() if v) or "none"
        rw = f"{t.rwlock}" + (", cleared by DVC" if t.stale_cleared else "")
        resume = "ok" if t.resume_rc == 0 else f"error ({t.resume_rc})"
        ran = ", ".join(t.resume_ran) or "nothing"
        if t.resume_checked_out:
            ran += "; from the cache: " + ", ".join(t.resume_checked_out)
        equal = "yes" if t.equal else "no: " + (", ".join(t.diff) or f"dvc status {t.status}")
        rows.append(
            f"| {t.trial} | {t.stage} | {moment} | {t.running} | {partial} | {lock} | {rw} | {resume} "
            f"| {ran} ({t.resume_s:.0f}) | {equal} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument(
        "--lock-kills",
        type=int,
        default=0,
        help="extra trials that kill predict at its dvc.lock write (the moment dvc.lock changes on disk)",
    )
    ap.add_argument("--frames", type=int, default=24, help="synthetic frames (half train, half val)")
    ap.add_argument("--steps", type=int, default=40, help="training steps")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", type=Path, default=None, help="folder for the clone (default: a temporary one)")
    ap.add_argument("--json", type=Path, default=None, help="write the reference and the trials as JSON")
    ap.add_argument("--keep", action="store_true", help="keep the clone")
    args = ap.parse_args(argv)

    work = args.work or Path(tempfile.mkdtemp(prefix="pgnn-kill-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        clone = make_clone(work, small_config(args.frames, args.steps))
        t0 = time.monotonic()
        ref_run = repro(clone)
        if ref_run.rc != 0:
            print("\n".join(line for _, line in ref_run.lines[-30:]))
            raise SystemExit(f"the uninterrupted reference run failed ({ref_run.rc})")
        ref_s = time.monotonic() - t0
        reference = lock_hashes(clone)
        missing = [p for p, h in reference.items() if h is None]
        if missing:
            raise SystemExit(f"the reference dvc.lock records no md5 for {missing}")
        _check(_run(clone, "git", "add", "-A"))
        _check(_run(clone, "git", "commit", "-qm", "kill harness: the reference run"))
        snapshot = work / "reference"
        snapshot_of(clone, snapshot)
        print(f"reference run: {ref_s:.0f} s", flush=True)
        restore(snapshot, clone, [f"prepare@{split}" for split in SPLITS])
        calib = repro(clone, watch=True)
        if calib.rc != 0 or lock_hashes(clone) != reference:
            print("\n".join(line for _, line in calib.lines[-30:]))
            raise SystemExit(
                f"a second uninterrupted run (exit {calib.rc}) did not give the reference hashes"
            )
        stage_s = durations(calib)
        first_s = {k: v - calib.starts[k] for k, v in calib.first_output.items()}
        print(
            f"second run (all but synth, warm): {calib.end - calib.t0:.0f} s, same hashes; stage seconds: "
            + ", ".join(f"{k} {v:.1f} (first output {first_s.get(k, -1):.1f})" for k, v in stage_s.items()),
            flush=True,
        )
        trials = []
        plan = schedule(args.trials, args.seed, stage_s, first_s)
        plan += [("predict", "lock write", 0.0)] * args.lock_kills
        for i, (stage, anchor, delay) in enumerate(plan, start=1):
            t = run_trial(snapshot, clone, i, stage, anchor, delay, reference)
            trials.append(t)
            status = "ok" if t.resume_rc == 0 and t.equal else "FAILED"
            when = "at its lock write" if anchor == "lock write" else f"{delay:.2f} s after its {anchor}"
            print(f"trial {i}: {stage} {when}: {status}", flush=True)
            if t.tail:
                print(t.tail)
        print()
        print(table(trials))
        if args.json:
            args.json.write_text(
                json.dumps(
                    {
                        "reference": reference,
                        "reference_s": ref_s,
                        "stage_s": stage_s,
                        "first_output_s": first_s,
                        "trials": [asdict(t) for t in trials],
                    },
                    indent=2,
                )
            )
        return 0 if all(t.resume_rc == 0 and t.equal for t in trials) else 1
    finally:
        if not args.keep and args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
