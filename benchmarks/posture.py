"""Which runs of a suite end with the body on its back (HalfCheetah's ~1200-1400 plateau).

    python benchmarks/posture.py RUNS_ROOT/SUITE [RUNS_ROOT/SUITE2 ...] [--entries E ...]
                                 [--results FILE.csv]

A HalfCheetah that flips early learns to run on its back: its return climbs to a plateau near
1200-1400 at 100k steps and stays there, while an upright one goes on to 3000-5000. The return
alone does not tell the two apart, the torso's pitch does. For each finished run
``DIR/<entry>/s<seed>`` on a planar MuJoCo body (``peer_common.PLANAR_ENVS``):

- ours (a run directory with a checkpoint): the latest actor (``offpolicy.load``) plays 5
  deterministic episodes, reset as its evaluations are (``seed + 10000 + i``);
- a peer's (SB3, SBX): ``DIR/posture.json``, which ``peers.py learn`` writes from its final
  model when the run ends (its model is not kept), the same 5 episodes.

Both go through ``peer_common.posture``: the fraction of steps after each episode's first 200
with the torso on its back (wrapped pitch beyond pi/2), and the mean wrapped pitch. A run
counts as on its back when that fraction is over one half. A run with neither (unfinished, or
restored from a CSV without its checkpoint) is left out with a note on stderr.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import peer_common as pc  # noqa: E402
from init_trap import budget, last_eval, write_rows  # noqa: E402

EPISODES = 5


def ours(run_dir: Path, env_id: str, seed: int) -> dict:
    """``peer_common.posture`` of the run's latest actor."""
    import offpolicy
    from offpolicy.envs.make import make_env

    agent = offpolicy.load(run_dir)
    env = make_env(env_id, 0)
    try:
        return pc.posture(env, EPISODES, seed + pc.EVAL_SEED_OFFSET,
                          lambda obs: agent.act(obs))
    finally:
        env.close()
        agent.close()


def env_of(run_dir: Path) -> str | None:
    """The run's env id: ``train.env`` of our config.yaml, ``settings.env`` of a peer's
    config.json."""
    from offpolicy.plotting import run_config

    if (run_dir / "config.json").is_file():
        return json.loads((run_dir / "config.json").read_text())["settings"].get("env")
    try:
        return run_config(run_dir).get("train.env")
    except Exception:  # noqa: BLE001 (an unreadable config: the run is left out)
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suite_dirs", type=Path, nargs="+",
                    help="RUNS_ROOT/SUITE folders (each holds <entry>/s<seed>/)")
    ap.add_argument("--entries", nargs="+", default=None, help="only these entries")
    ap.add_argument("--results", type=Path, default=None,
                    help="write the rows to this CSV (rows already there of runs not read "
                         "now are kept; a run read again replaces its row)")
    a = ap.parse_args(argv)
    found = {p.resolve(): p for d in a.suite_dirs for p in d.glob("*/s*")
             if p.is_dir() and p.name[1:].isdigit()
             and (a.entries is None or p.parent.name in a.entries)}  # a linked run once
    runs = sorted(found.values(), key=lambda p: (p.parent.name, int(p.name[1:])))
    if not runs:
        raise SystemExit(f"no runs under {' '.join(map(str, a.suite_dirs))} (expected "
                         "<entry>/s<seed>/)")
    rows = []
    for run in runs:
        entry, seed = run.parent.name, int(run.name[1:])
        env_id, last = env_of(run), last_eval(run)
        steps = budget(run)
        why = None
        if not any((run / c).is_file() for c in ("config.json", "config.yaml")):
            why = "only its eval.csv (restored from a CSV)"
        elif env_id is None or not env_id.startswith(pc.PLANAR_ENVS):
            why = f"env {env_id} is not a planar MuJoCo body"
        elif last is None or (steps is not None and last[0] < steps):
            why = "unfinished"
        elif (run / pc.POSTURE_FILE).is_file():
            pose = json.loads((run / pc.POSTURE_FILE).read_text())
        elif (run / "checkpoints" / "latest").is_file():
            pose = ours(run, env_id, seed)
        else:
            why = "no checkpoint to play and no posture.json (a peer run that finished " \
                  "before peers.py wrote it)"
        if why is not None:
            print(f"{entry} s{seed}: {why}; left out", file=sys.stderr)
            continue
        on_back = pose["on_back_fraction"] > 0.5
        rows.append({"env": env_id, "entry": entry, "seed": seed, "step": last[0],
                     "final_return": round(last[1], 1),
                     "posture_return": round(pose["return_mean"], 1),
                     "on_back_fraction": round(pose["on_back_fraction"], 3),
                     "mean_pitch": round(pose["mean_pitch"], 2), "on_back": int(on_back)})
        print(f"{env_id} {entry} s{seed}: final return {last[1]:.1f}; on its back "
              f"{pose['on_back_fraction']:.0%} of steps, mean pitch {pose['mean_pitch']:+.2f}"
              f"{'  ON ITS BACK' if on_back else ''}")
    if not rows:
        raise SystemExit("no finished run to read")
    if a.results is not None:
        write_rows(a.results, merged(a.results, rows))
    return 0


def merged(path: Path, rows: list[dict]) -> list[dict]:
    """``rows`` and the rows already in ``path`` of runs not read now (their checkpoints
    stayed on the machine that played them): a run read again replaces its row; sorted by
    env, entry and seed."""
    key = ("env", "entry", "seed")
    new = {tuple(str(r[k]) for k in key) for r in rows}
    kept = []
    if path.is_file():
        with open(path, newline="") as f:
            kept = [r for r in csv.DictReader(f) if tuple(r[k] for k in key) not in new]
    return sorted([*kept, *rows], key=lambda r: (r["env"], r["entry"], int(r["seed"])))


if __name__ == "__main__":
    raise SystemExit(main())
