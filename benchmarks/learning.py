"""Learning benchmarks with the ACE paper's protocol, on the package's suite engine.

    python benchmarks/learning.py --suite ddpg-peers --steps 100000 --seeds 0 1 2
    python benchmarks/learning.py --suite ace-family --steps 100000 --seeds 0 1 2

The grids are suites in the package's YAML form (``offpolicy/suites/spec.py``; docs/suites.md):
``benchmarks/suites/<grid>.yaml``, and the package's shipped suites (``ddpg-parity``'s SB3 and
SBX entries run only here). What this driver adds is what needs the peers' bench venv
(``make bench-venv``): the entries with ``peer: sb3|sbx|pfrl``, run by Stable-Baselines3, SBX
and PFRL (``benchmarks/peers.py``, ``benchmarks/peers_pfrl.py``). Running, resuming and
reporting are ``offpolicy.suites`` (the engine of ``offpolicy suite run``): each grid on one
env (``--env``, any env) becomes a suite of that env, run by ``runner.run_local`` and reported
by ``report.write_report``. The budget is the command line's (``--steps``, ``--seeds``,
``--eval-every``: the ACE protocol's by default); the grid gives its entries, flags,
comparisons, metrics, each env's threshold, the evaluation's episodes, and a pre-registration
and decision where it has them.

Protocol (ACE paper, "Experiments"): evaluate every 10 000 steps with 20 deterministic
episodes (no exploration noise) on a separate environment; report the best and the final
evaluation per run, mean +- standard error over seeds, and the learning curves.

Each run lives in ``benchmarks/runs/<suite>/<entry>/s<seed>`` (its output in ``s<seed>.log``
beside it). Several drivers may work on the same grid at once (one per core): each takes a run
with a lock file. A finished run is skipped, an unfinished one of ours continues with
``--resume`` from its latest checkpoint, an SB3/SBX one from the checkpoint ``peers.py`` writes
after each evaluation (a PFRL one restarts). Runs go seed-major, so a stopped benchmark has
balanced partial results. After every run the table (``learning_<suite>.md``), the curves
(``learning_<suite>.png``) and a CSV of all evaluations (``learning_<suite>.csv``) are
rewritten under ``benchmarks/results/``; the commands run are appended to
``learning_<suite>.log``. A grid with a decision (``refer-1m``, ``acer-1m``, ``aql-fig2-500k``,
``ace-1m``) also gets ``learning_<suite>_verdicts.md``, over the finished runs of every env of
its YAML.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from offpolicy.errors import OffpolicyError  # noqa: E402
from offpolicy.suites import runner, spec  # noqa: E402
from offpolicy.suites.report import restore_finished, write_report  # noqa: E402
from offpolicy.suites.spec import Entry, EnvPlan, Suite  # noqa: E402

SUITES_DIR = HERE / "suites"
PEERS = ("sb3", "sbx", "pfrl")  # an entry's ``peer``: the library whose script runs it


def grids() -> dict[str, Path]:
    """Every grid by name: ``benchmarks/suites/*.yaml`` and the package's shipped suites."""
    own = {p.stem: p for p in sorted(SUITES_DIR.glob("*.yaml"))}
    shipped = spec.available()
    clash = sorted(set(own) & set(shipped))
    if clash:
        raise OffpolicyError(f"benchmarks/suites: {', '.join(clash)} would hide the package's "
                             "suite of that name")
    return {**own, **shipped}


def peer_note(entry: Entry) -> str:
    """What a peer entry runs, for the report's legend."""
    if entry.peer == "pfrl":
        return "benchmarks/peers_pfrl.py (PFRL 0.4.0)"
    return " ".join(["benchmarks/peers.py --lib", entry.peer, "--algo", entry.algo, *entry.flags])


def grid(name: str) -> Suite:
    """The grid ``name`` as its YAML has it, its peer entries included (each named in the
    report by the script that runs it)."""
    path = grids()[name]
    suite = spec.load(path, allow_peers=True)
    entries = {}
    for n, e in suite.entries.items():
        if e.peer is not None:
            if e.peer not in PEERS:
                raise OffpolicyError(f"suite {path}: entries.{n}.peer: expected one of "
                                     f"{', '.join(PEERS)}, got {e.peer!r}")
            e = replace(e, note=e.note or peer_note(e))
        entries[n] = e
    return replace(suite, entries=entries)


def bench_suite(suite: str, env: str, steps: int, seeds, entries=None,
                eval_every: int = 10_000) -> Suite:
    """The grid ``suite`` on ``env`` (one of its YAML's envs, with that env's entries and
    threshold, or any other) with this budget, as this driver runs and reports it: the report
    opens with the title, the grid's pre-registration and the command (the YAML's
    description, reference and cost are what ``offpolicy suite list`` shows)."""
    g = grid(suite)
    plan = next((p for p in g.envs if p.env == env), None)
    names = tuple(entries or (plan.entries if plan else g.entries))
    return replace(g, description="", reference="", cost="", seeds=tuple(seeds),
                   envs=(EnvPlan(env, steps, eval_every, names,
                                 plan.threshold if plan else None),))


def peer_command(peers_python: str):
    """The command of a peer run (an SB3/SBX or PFRL script in the bench venv)."""

    def command(run: runner.RunSpec) -> list[str]:
        common = ["--env", run.env, "--steps", str(run.steps), "--seed", str(run.seed),
                  "--run-dir", str(run.run_dir), "--eval-every", str(run.eval_every),
                  "--eval-episodes", str(run.eval_episodes)]
        if run.entry.peer == "pfrl":
            return [peers_python, str(HERE / "peers_pfrl.py"), "learn", *common]
        # DDPG: the ACE protocol's one batch of random steps; TD3 and SAC: SB3's 100; PPO has
        # no warm-up (peers.py refuses one)
        warmup = {"ddpg": ["--warmup", "64"], "ppo": []}.get(run.entry.algo,
                                                            ["--warmup", "100"])
        return [peers_python, str(HERE / "peers.py"), "learn", "--lib", run.entry.peer,
                "--algo", run.entry.algo, *run.entry.flags, *common, *warmup]

    return command


# flags with values that say what one driver does or where this machine keeps files, not what
# the grid is: a report's command leaves them out, so that it reruns on any clone (the runs in
# benchmarks/runs, the finished ones restored from the committed CSVs in benchmarks/results)
LOCAL_FLAGS = ("--entries", "--runs-root", "--out-dir", "--peers-python")


def canonical_args(argv: list[str]) -> list[str]:
    """``argv`` without the flags that choose what one driver does rather than the grid:
    --report-only, --include-running, and :data:`LOCAL_FLAGS` with their values."""
    out, skipping = [], False
    for x in argv:
        if x.startswith(tuple(f + "=" for f in LOCAL_FLAGS)):
            continue
        if x.startswith("--"):
            skipping = x in LOCAL_FLAGS
            if skipping or x in ("--report-only", "--include-running"):
                continue
        elif skipping:
            continue
        out.append(x)
    return out


def report_seeds(seeds, out_dir: Path, stem: str) -> list[int]:
    """The seeds a report covers: this driver's and every seed of the committed
    ``<stem>.csv``. A driver that runs one seed (``--seeds 1``, a lane of its own) rewrites the
    report and the verdicts with the other seeds' finished runs in them, not without."""
    out = set(seeds)
    path = out_dir / f"{stem}.csv"
    if path.exists():
        with open(path, newline="") as f:
            out |= {int(r["seed"]) for r in csv.DictReader(f) if r.get("seed", "").isdigit()}
    return sorted(out)


def with_seeds(args: list[str], seeds) -> list[str]:
    """``args`` with ``--seeds`` naming ``seeds`` (a report's command reruns what it shows),
    appended where ``args`` had none (the driver ran the default seeds, the report shows more)."""
    out, skipping, named = [], False, False
    for x in args:
        if x == "--seeds" or x.startswith("--seeds="):
            out += ["--seeds", *map(str, seeds)]
            skipping, named = x == "--seeds", True
        elif skipping and not x.startswith("--"):
            continue
        else:
            skipping = False
            out.append(x)
    return out if named else [*out, "--seeds", *map(str, seeds)]


def grid_name(suite: str, env: str) -> str:
    """One grid per (suite, env): HalfCheetah-v5 keeps the suite's plain name."""
    return suite if env == "HalfCheetah-v5" else f"{suite}_{env.replace('/', '_')}"


def finished_groups(suite: str, env: str, steps: int, seeds, eval_every: int,
                    runs_root: Path, out_dir: Path) -> dict[str, list[Path]]:
    """The finished runs of grid ``suite`` on ``env`` by entry (runs here, or restored from the
    committed CSVs), over ``seeds`` and every seed its committed CSV holds."""
    from offpolicy.suites.report import collect

    name = grid_name(suite, env)
    env_seeds = report_seeds(seeds, out_dir, f"learning_{name}")
    runs = runner.plan(bench_suite(suite, env, steps, env_seeds, None, eval_every),
                       lambda e, entry, seed: runs_root / name / entry / f"s{seed}")
    restore_finished(runs, out_dir, f"learning_{name}")
    done = {r.run_dir for r in runs if runner.finished(r.run_dir, r.steps)}
    return {entry: [d for d in dirs if d in done]
            for entry, dirs in collect(runs).get(env, {}).items()}


def write_verdicts(suite: str, steps: int, seeds, eval_every: int, runs_root: Path,
                   out_dir: Path, command: str) -> Path | None:
    """``learning_<suite>_verdicts.md``: the grid's pre-registration, then the verdicts of its
    claims over the finished runs of every env of its YAML, its tasks (runs here, or restored
    from the committed CSVs); None for a grid without a decision (Holm's adjustment runs over
    all tasks' primary comparisons, so the tasks' grids are read together). A decision with
    ``beside`` adds its table: each arm beside its twin in the other grid, at the same budget."""
    g = grid(suite)
    if g.decision is None:
        return None
    from offpolicy.suites.verdict import beside_section, decision_section

    tasks = tuple(e.env for e in g.envs)
    # a verdict waits for the pre-registered seeds (the YAML's), whichever a driver ran
    pre = tuple(g.seeds)
    every = sorted(set(seeds) | set(pre))
    groups_by_env = {env: finished_groups(suite, env, steps, every, eval_every, runs_root,
                                          out_dir) for env in tasks}
    steps_by_env = dict.fromkeys(tasks, steps)
    text = "\n".join([f"# Verdicts: {suite} ({', '.join(tasks)})", "",
                      f"Command (each task's grid, `--env` one of {', '.join(tasks)}): "
                      f"`{command}`", "", g.preregistration])
    text += "\n" + decision_section(g.decision, groups_by_env, steps_by_env, pre)
    beside = g.decision.beside
    if beside is not None:
        if beside.suite not in grids():
            raise OffpolicyError(f"suite {suite}: decision.beside.suite: unknown grid "
                                 f"{beside.suite!r}")
        twin = grid(beside.suite)
        unknown = [t for _, t in beside.pairs if t not in twin.entries]
        if unknown:
            raise OffpolicyError(f"suite {suite}: decision.beside.entries: not in "
                                 f"{beside.suite}: {', '.join(unknown)}")
        twin_groups = {env: finished_groups(beside.suite, env, steps, twin.seeds, eval_every,
                                            runs_root, out_dir) for env in tasks}
        text += beside_section(g.decision, groups_by_env, twin_groups, steps_by_env)
    path = out_dir / f"learning_{suite}_verdicts.md"
    path.write_text(text)
    return path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", choices=list(grids()), required=True)
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--env", default="HalfCheetah-v5")
    p.add_argument("--entries", nargs="+", help="a subset of the suite's entries")
    p.add_argument("--eval-every", type=int, default=10_000,
                   help="env steps between evaluations (the ACE protocol: 10 000)")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (default 1)")
    p.add_argument("--runs-root", type=Path, default=HERE / "runs")
    p.add_argument("--out-dir", type=Path, default=HERE / "results")
    p.add_argument("--peers-python", default=os.environ.get(
        "OFFPOLICY_BENCH_PYTHON", str(HERE.parent / ".venv-bench" / "bin" / "python")))
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--include-running", action="store_true",
                   help="with --report-only: runs in progress join the tables, tests and curves "
                        "(written as learning_<suite>_partial.*)")
    a = p.parse_args()
    the_grid = grid(a.suite)
    known = list(the_grid.entries)
    unknown = [e for e in a.entries or [] if e not in known]
    if unknown:
        p.error(f"not in suite {a.suite}: {', '.join(unknown)} (its entries: {', '.join(known)})")
    suite = bench_suite(a.suite, a.env, a.steps, a.seeds, a.entries, a.eval_every)
    name = grid_name(a.suite, a.env)
    root = a.runs_root / name

    def layout(env, entry, seed):
        return root / entry / f"s{seed}"

    runs = runner.plan(suite, layout)
    stem, title = f"learning_{name}", f"Learning benchmark: {a.suite} on {a.env}"
    # the report covers the whole grid: with --entries (or --seeds) a subset, the other entries'
    # and seeds' finished runs (another driver's, or restored from the committed CSVs) keep
    # their rows
    seeds = report_seeds(a.seeds, a.out_dir, stem)
    full = bench_suite(a.suite, a.env, a.steps, seeds, None, a.eval_every)
    whole = runner.plan(full, layout) if a.entries or seeds != sorted(a.seeds) else runs
    a.out_dir.mkdir(parents=True, exist_ok=True)
    # the command that runs the grid (without --entries, which picks what this driver runs,
    # and with every seed the report shows): --report-only redraws a report under its
    # canonical command after several drivers shared the runs
    command = "python benchmarks/learning.py " + " ".join(
        with_seeds(canonical_args(sys.argv[1:]), seeds))
    restored = restore_finished(whole, a.out_dir, stem)
    if restored:
        print(f"restored from {a.out_dir}: {', '.join(restored)}", file=sys.stderr)

    def after_each(run: runner.RunSpec) -> None:
        lines = runner.start_lines(run.log_path)  # "[date time] command", one per start
        with open(a.out_dir / f"{stem}.log", "a") as log:
            print(lines[-1] if lines else f"[{time.strftime('%H:%M:%S')}] {run.label}",
                  file=log)
        write_report(full, whole, a.out_dir, stem, command, title=title, verdicts=False)
        write_verdicts(a.suite, a.steps, seeds, a.eval_every, a.runs_root, a.out_dir,
                       verdicts_command)

    # the verdicts' command names no --env: each task's grid runs with its own
    # and every seed of the grid's pre-registration
    verdicts_command = "python benchmarks/learning.py " + " ".join(with_seeds(
        [x for x in canonical_args(sys.argv[1:]) if x not in ("--env", a.env)],
        sorted(set(seeds) | set(the_grid.seeds))))
    if not a.report_only:
        outcome = runner.run_local(runs, a.jobs, peer_command(a.peers_python),
                                   after_each=after_each)
        for run, why in outcome.failed:
            print(f"failed: {run.label}: {why}", file=sys.stderr)
        if outcome.stopped or outcome.failed:
            if not outcome.stopped:
                write_report(full, whole, a.out_dir, stem, command, title=title, verdicts=False)
            return outcome.exit_code()
    if a.include_running:
        stem, title = stem + "_partial", title + " (runs in progress included)"
    print(write_report(full, whole, a.out_dir, stem, command, title=title,
                       include_running=a.include_running, verdicts=False))
    if not a.include_running:
        verdicts = write_verdicts(a.suite, a.steps, seeds, a.eval_every, a.runs_root,
                                  a.out_dir, verdicts_command)
        if verdicts:
            print(f"verdicts: {verdicts}", file=sys.stderr)
    print(json.dumps({"runs_root": str(root)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
