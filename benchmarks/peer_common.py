"""Machinery shared by the peer scripts ``peers.py`` (SB3/SBX DDPG, TD3, SAC, DQN; SB3 PPO) and
``peers_pfrl.py`` (PFRL ACER): the JSON result line and stderr log, library versions, the
deterministic evaluation episodes, ``DIR/eval.csv`` (written row by row, read back, the skip of
a finished run), ``DIR/train.csv`` (PPO's training episodes) and ``DIR/config.json``, the
checkpoint of a peer run (``DIR/checkpoint.npz``, without pickle), PPO's annealed learning
rate, and the command-line options both ``learn`` / ``throughput`` subcommands take.

Imported by those scripts (their directory is on ``sys.path`` when run as
``python benchmarks/peers.py ...``).  It imports no RL library or torch at module level, so
``peers_pfrl.py`` can still alias ``gym`` to Gymnasium before PFRL is imported.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

EVAL_HEADER = ["step", "return_mean", "return_std", "return_se", "episodes", "wall_time"]
EVAL_SEED_OFFSET = 10_000
EVAL_CSV = "eval.csv"
# the training episodes' columns of our library's train.csv (offpolicy/training/logger.py):
# the running count of finished training episodes and the mean undiscounted return of those
# finished since the previous row (nan when none did)
TRAIN_HEADER = ["step", "wall_time", "episodes", "episode_return"]
TRAIN_CSV = "train.csv"


# --------------------------------------------------------------------------- output


def emit(obj: dict[str, Any]) -> None:
    """Print the result object as the last line of stdout."""
    sys.stdout.flush()
    print(json.dumps(obj), flush=True)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def versions(distributions: Iterable[str]) -> dict[str, str | None]:
    """Installed versions of ``distributions`` (no imports needed), after Python's."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for dist in distributions:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def runtime_info() -> dict[str, Any]:
    """Threading / platform facts that affect timings (both peers run torch)."""
    import torch

    return {
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
    }


# --------------------------------------------------------------------------- evaluation


def evaluate(
    env: Any,
    episodes: int,
    seed_base: int,
    act: Callable[[Any], Any],
    observe: Callable[[Any, float, bool, bool], Any] | None = None,
) -> np.ndarray:
    """Undiscounted returns of ``episodes`` episodes on ``env``, episode ``i`` reset with
    ``seed_base + i``; ``act(obs)`` gives the env action, ``observe(obs, reward, terminated,
    truncated)`` (if given) is called after every step."""
    returns = np.empty(episodes, dtype=np.float64)
    for i in range(episodes):
        obs, _ = env.reset(seed=seed_base + i)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(act(obs))
            if observe is not None:
                observe(obs, float(reward), bool(terminated), bool(truncated))
            total += float(reward)
            done = bool(terminated or truncated)
        returns[i] = total
    return returns


# MuJoCo's planar bodies (HalfCheetah, Hopper, Walker2d) hold the torso's pitch, a free hinge
# about the y axis, at qpos[2]; |pitch| > pi/2 (wrapped to [-pi, pi]) is a body on its back
PLANAR_ENVS = ("HalfCheetah", "Hopper", "Walker2d")
POSTURE_FILE = "posture.json"


def posture(env: Any, episodes: int, seed_base: int, act: Callable[[Any], Any],
            skip: int = 200) -> dict[str, Any]:
    """How a deterministic actor carries a planar MuJoCo body (``PLANAR_ENVS``): over
    ``episodes`` episodes reset as :func:`evaluate` resets them, the fraction of steps after
    the first ``skip`` of each episode with the torso on its back (HalfCheetah's ~1200-1400
    plateau is a cheetah running on its back) and the mean wrapped pitch. Episodes shorter
    than ``skip`` count from their first step."""
    per_episode: list[list[float]] = [[]]

    def observe(obs: Any, reward: float, terminated: bool, truncated: bool) -> None:
        per_episode[-1].append(float(env.unwrapped.data.qpos[2]))
        if terminated or truncated:
            per_episode.append([])

    returns = evaluate(env, episodes, seed_base, act, observe)
    pitches = [np.asarray(e[skip:] if len(e) > skip else e) for e in per_episode if e]
    wrapped = np.concatenate([(p + np.pi) % (2 * np.pi) - np.pi for p in pitches])
    return {"episodes": episodes, "skip": skip, "seed_base": seed_base,
            "return_mean": float(returns.mean()),
            "on_back_fraction": float(np.mean(np.abs(wrapped) > np.pi / 2)),
            "mean_pitch": float(wrapped.mean())}


def record_eval(csv_path: Path, step: int, returns: np.ndarray,
                wall: float) -> tuple[float, float]:
    """Append the row of one evaluation to ``eval.csv`` (flushed and synced, so a killed run
    keeps its partial curve); returns the mean and (population) std of ``returns``."""
    episodes = len(returns)
    mean, std = float(returns.mean()), float(returns.std(ddof=0))
    append_row(csv_path, [step, mean, std, std / math.sqrt(episodes), episodes, wall])
    return mean, std


def append_row(csv_path: Path, row: list[Any]) -> None:
    """Append ``row`` to ``csv_path``, flushed and synced (a killed run keeps what it wrote)."""
    with csv_path.open("a", newline="") as f:
        csv.writer(f).writerow(row)
        f.flush()
        os.fsync(f.fileno())


def record_train(csv_path: Path, step: int, wall: float, episodes: int,
                 returns: list[float]) -> None:
    """Append one row of ``train.csv`` (:data:`TRAIN_HEADER`): ``episodes`` finished so far,
    ``returns`` those finished since the previous row (their mean; nan when empty)."""
    mean = float(np.mean(returns)) if returns else math.nan
    append_row(csv_path, [step, round(wall, 3), episodes, mean])


def start_train_csv(run_dir: Path) -> Path:
    """A fresh ``train.csv`` with its header (a killed run's rows without a usable checkpoint
    are discarded); returns its path."""
    path = run_dir / TRAIN_CSV
    with path.open("w", newline="") as f:
        csv.writer(f).writerow(TRAIN_HEADER)
    return path


class AnnealedRate:
    """The learning rate ``eta / (1 + anneal * t)`` at ``t`` env steps, as SB3 schedules
    rates: called with ``progress_remaining`` = 1 - t / T, where T is the ``total_timesteps``
    of ``learn()`` (plus the step a run resumed at: SB3 adds ``num_timesteps`` to it when
    ``reset_num_timesteps=False``), so ``t = (1 - progress_remaining) * total_steps`` with
    ``total_steps`` the run's whole length in both a fresh and a resumed run."""

    def __init__(self, eta: float, anneal: float, total_steps: int) -> None:
        self.eta, self.anneal, self.total_steps = eta, anneal, total_steps

    def at_step(self, t: float) -> float:
        return self.eta / (1.0 + self.anneal * t)

    def __call__(self, progress_remaining: float) -> float:
        return self.at_step((1.0 - progress_remaining) * self.total_steps)


def read_eval_csv(path: Path) -> list[dict[str, float]]:
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


# --------------------------------------------------------------------------- learn runs


def learn_settings(lib: str, algo: str, args: argparse.Namespace,
                   hyper: dict[str, Any]) -> dict[str, Any]:
    """The run's settings as stored in ``config.json`` (and compared there on a skip), the
    hyper-parameters ``hyper`` under the key ``algo``."""
    settings: dict[str, Any] = {
        "lib": lib,
        "algo": algo,
        "env": args.env,
        "seed": args.seed,
        "steps": args.steps,
        "warmup": args.warmup,
        "eval_every": args.eval_every,
        "eval_episodes": args.eval_episodes,
        "eval_seed_base": args.seed + EVAL_SEED_OFFSET,
        algo: hyper,
    }
    return json.loads(json.dumps(settings))  # tuples -> lists, as stored in config.json


def learn_summary(lib: str, seed: int, means: list[float], run_dir: Path,
                  seconds: float) -> dict[str, Any]:
    """The leading keys of ``learn``'s result object (the caller adds ``skipped`` etc.)."""
    return {
        "lib": lib,
        "seed": seed,
        "final_return": means[-1] if means else None,
        "best_return": max(means) if means else None,
        "run_dir": str(run_dir),
        "seconds": seconds,
    }


def skip_finished(run_dir: Path, settings: dict[str, Any], steps: int, lib: str,
                  seed: int) -> bool:
    """If ``run_dir/eval.csv`` already holds the final step, emit the skipped run's result
    and return True (exit if its ``config.json`` records other settings)."""
    rows = read_eval_csv(run_dir / EVAL_CSV)
    if not rows or int(rows[-1]["step"]) != steps:
        return False
    old = run_dir / "config.json"
    if old.exists():
        prev = json.loads(old.read_text()).get("settings", {})
        diff = {k: (prev.get(k), v) for k, v in settings.items() if prev.get(k) != v}
        if diff:
            raise SystemExit(f"{run_dir} holds a finished run with other settings: {diff}")
    means = [r["return_mean"] for r in rows]
    emit({**learn_summary(lib, seed, means, run_dir, rows[-1]["wall_time"]), "skipped": True})
    return True


def start_run(run_dir: Path, settings: dict[str, Any], lib_versions: dict[str, str | None],
              runtime: dict[str, Any]) -> Path:
    """Fresh start: write ``config.json`` and the header of ``eval.csv`` (a partial one from a
    killed run without a usable checkpoint is discarded, and so is that checkpoint); returns
    the path of ``eval.csv``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / CHECKPOINT).unlink(missing_ok=True)
    (run_dir / TRAIN_CSV).unlink(missing_ok=True)  # a killed run's: the peer starts its own
    config = {
        "settings": settings,
        "versions": lib_versions,
        **runtime,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "argv": sys.argv,
    }
    (run_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    csv_path = run_dir / EVAL_CSV
    with csv_path.open("w", newline="") as f:
        csv.writer(f).writerow(EVAL_HEADER)
    return csv_path


# --------------------------------------------------------------------------- checkpoints
#
# A peer run keeps one checkpoint, DIR/checkpoint.npz, written (atomically) after each
# evaluation and deleted when the run ends, so that a killed run continues from its last
# evaluation instead of from zero. No pickle: every array of the state (parameters, optimizer
# moments, replay, RNG states) is an entry of the .npz, and the rest of the state (the nesting,
# counters, dict keys) is a JSON skeleton stored in it as a string.

CHECKPOINT = "checkpoint.npz"


def encode_tree(tree: Any, arrays: list[np.ndarray]) -> Any:
    """The JSON skeleton of ``tree`` (dicts with any keys, lists, tuples, scalars and arrays);
    each array (a NumPy or JAX array, or a torch tensor, marked as such) is appended to
    ``arrays`` and stands in the skeleton as its index."""
    if isinstance(tree, dict):
        return {"dict": [[encode_tree(k, arrays), encode_tree(v, arrays)] for k, v in tree.items()]}
    if isinstance(tree, (list, tuple)):
        kind = "list" if isinstance(tree, list) else "tuple"
        return {kind: [encode_tree(v, arrays) for v in tree]}
    if tree is None or isinstance(tree, (bool, int, float, str)):
        return tree
    if hasattr(tree, "detach"):  # a torch tensor (this module does not import torch)
        arrays.append(tree.detach().cpu().numpy().copy())  # not a view of a live tensor
        return {"array": len(arrays) - 1, "torch": True}
    if isinstance(tree, np.generic) or hasattr(tree, "__array__"):
        arrays.append(np.asarray(tree))
        return {"array": len(arrays) - 1}
    raise TypeError(f"cannot checkpoint a {type(tree).__name__}")


def decode_tree(skeleton: Any, arrays: list[np.ndarray],
                as_tensor: Callable[[np.ndarray], Any] | None = None) -> Any:
    """The tree that :func:`encode_tree` encoded; arrays marked torch go through
    ``as_tensor``."""
    if isinstance(skeleton, dict):
        if "dict" in skeleton:
            return {decode_tree(k, arrays, as_tensor): decode_tree(v, arrays, as_tensor)
                    for k, v in skeleton["dict"]}
        if "list" in skeleton:
            return [decode_tree(v, arrays, as_tensor) for v in skeleton["list"]]
        if "tuple" in skeleton:
            return tuple(decode_tree(v, arrays, as_tensor) for v in skeleton["tuple"])
        array = arrays[skeleton["array"]]
        if skeleton.get("torch"):
            if as_tensor is None:
                raise ValueError("the checkpoint holds torch tensors: pass as_tensor")
            return as_tensor(array)
        return array
    return skeleton


def save_checkpoint(run_dir: Path, step: int, wall: float, settings: dict[str, Any],
                    state: dict[str, Any]) -> None:
    """Write ``state`` (see :func:`encode_tree`) as ``DIR/checkpoint.npz``, atomically: a
    temporary file renamed over the old one."""
    arrays: list[np.ndarray] = []
    skeleton = encode_tree(state, arrays)
    meta = {"step": step, "wall_time": wall, "settings": settings, "skeleton": skeleton}
    tmp = run_dir / (CHECKPOINT + ".tmp")
    with tmp.open("wb") as f:
        np.savez(f, meta=np.array(json.dumps(meta)),
                 **{f"a{i}": a for i, a in enumerate(arrays)})
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, run_dir / CHECKPOINT)


def load_checkpoint(run_dir: Path, settings: dict[str, Any],
                    as_tensor: Callable[[np.ndarray], Any] | None = None
                    ) -> tuple[dict[str, Any], Any] | None:
    """``(meta, state)`` of the run's checkpoint, or None when there is none or it was written
    with other settings (then the run starts afresh)."""
    path = run_dir / CHECKPOINT
    if not path.exists():
        return None
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(str(z["meta"]))
        if meta["settings"] != settings:
            return None
        arrays = [z[f"a{i}"] for i in range(len(z.files) - 1)]
    return meta, decode_tree(meta["skeleton"], arrays, as_tensor)


def keep_rows_to(csv_path: Path, step: int) -> None:
    """Drop the rows of ``csv_path`` after ``step`` (the kept rows stay as written; only their
    step is read: a row cut short by the kill comes after the checkpoint's, which is written
    after its own rows)."""
    header, *lines = csv_path.read_text().splitlines()
    kept = [ln for ln in lines if ln and int(ln.split(",", 1)[0]) <= step]
    csv_path.write_text("\n".join([header, *kept]) + "\n")


def continue_run(run_dir: Path, step: int) -> tuple[Path, list[float]]:
    """Resume at the checkpoint's ``step``: ``eval.csv`` (and ``train.csv``, where the peer
    writes one) keeps its rows up to that step (the later ones, from after the checkpoint, are
    dropped: the run redoes them) and ``config.json`` records the resumption. Returns the path
    of ``eval.csv`` and the kept evaluations' means."""
    csv_path = run_dir / EVAL_CSV
    keep_rows_to(csv_path, step)
    if (run_dir / TRAIN_CSV).exists():
        keep_rows_to(run_dir / TRAIN_CSV, step)
    rows = read_eval_csv(csv_path)
    config_path = run_dir / "config.json"
    config = json.loads(config_path.read_text())
    config.setdefault("resumed", []).append(
        {"at_step": step, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "argv": sys.argv})
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    return csv_path, [r["return_mean"] for r in rows]


def end_run(run_dir: Path) -> None:
    """The run is finished: its checkpoint is no longer needed (eval.csv says it is done)."""
    (run_dir / CHECKPOINT).unlink(missing_ok=True)


# --------------------------------------------------------------------------- CLI


def build_parser(
    doc: str | None,
    add_common: Callable[[argparse.ArgumentParser], None],
    *,
    cmd_throughput: Callable[[argparse.Namespace], None],
    throughput_help: str,
    throughput_warmup_help: str,
    cmd_learn: Callable[[argparse.Namespace], None],
    learn_help: str,
    learn_warmup: dict[str, Any],
) -> argparse.ArgumentParser:
    """The ``throughput`` / ``learn`` command line: ``add_common`` adds each peer's own
    options to both subcommands, ``learn_warmup`` holds the keywords of ``learn --warmup``
    (its default and meaning differ per peer)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0] if doc else None)
    sub = parser.add_subparsers(dest="command", required=True)

    tp = sub.add_parser("throughput", help=throughput_help)
    add_common(tp)
    tp.add_argument("--steps", type=int, required=True, help="timed post-warm-up steps")
    tp.add_argument("--warmup", type=int, default=1000, help=throughput_warmup_help)
    tp.set_defaults(func=cmd_throughput, subparser=tp)

    lp = sub.add_parser("learn", help=learn_help)
    add_common(lp)
    lp.add_argument("--steps", type=int, default=100_000)
    lp.add_argument("--run-dir", required=True)
    lp.add_argument("--eval-every", type=int, default=10_000)
    lp.add_argument("--eval-episodes", type=int, default=20)
    lp.add_argument("--warmup", type=int, **learn_warmup)
    lp.set_defaults(func=cmd_learn, subparser=lp)
    return parser


class UsageError(ValueError):
    """Options that parse but do not go together: reported as argparse reports its own errors
    (the subcommand's usage line, exit status 2)."""


def run_cli(parser: argparse.ArgumentParser, argv: list[str] | None) -> None:
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except UsageError as exc:
        args.subparser.error(str(exc))
