"""Export a trained policy (ONNX, NumPy) or a run's model card (the Hugging Face Hub layout).

    offpolicy export RUN_DIR --format onnx|numpy|card --out DIR [--checkpoint latest|best]
    offpolicy export RUN_DIR --hub DIR          the card with the checkpoint, for upload_folder

The exported policy is :meth:`offpolicy.api.Agent.act` over a batch, deterministic:
observations in env units [B, *obs] -> the run's observation normalisation with its
statistics frozen -> the greedy action of the agent (``policy(params, obs, key,
explore=False)``) -> the env's action (``ActionSpec.to_env``: [-1, 1] rescaled to the box and
clipped; a discrete action as its index).

* ``onnx``: ``policy.onnx`` (jax2onnx traces that function with the parameters as constants;
  input ``obs`` float32 [B, *obs], output ``action`` float32 [B, m] or int32 [B]). Every
  family whose greedy action is a function of the observation: the DDPG family, TD3, SAC, NAF,
  V-RACER, ACER, DQN, ACE and its variants (the tree search is in the graph) and exact-Q
  (every action's Q, the argmax).
* ``numpy``: ``policy.py`` (:mod:`offpolicy.numpy_policy`, NumPy only), ``policy.json`` (the
  layers) and ``policy.npz`` (weights, statistics, action bounds), for the MLP-shaped policies:
  the DDPG family, TD3, SAC, NAF, V-RACER, ACER and DQN.
* ``card``: ``README.md`` in the Hub's model-card layout (YAML front matter with
  ``model-index``), ``curve.png``, ``config.yaml`` and ``eval.csv``; ``--hub`` adds the
  checkpoint (``checkpoint/``, which ``offpolicy.load`` reads), ready for
  ``huggingface_hub.upload_folder``.

Refused, in one line each: recurrent cores (the action depends on the episode's memory),
AQL, Uniform-Q and QT-Opt (their greedy action is a search over freshly sampled candidates,
so no file reproduces it), hybrid action spaces (a tuple or dict of actions), and NumPy for
ACE (tree search), exact-Q and image observations (ONNX takes them).

The output is written into a temporary folder next to ``--out`` and renamed into place, so a
failure leaves nothing behind; an existing file or non-empty folder is replaced only with
``force``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from offpolicy import __version__, registry
from offpolicy.errors import OffpolicyError

FORMATS = ("onnx", "numpy", "card")
INSTALL_HINT = "pip install 'offpolicy[export]'"
SAMPLED_SEARCH = ("proposal", "uniform", "cem")  # AQL searches that draw their candidates
MLP_FAMILIES = ("ddpg", "td3", "sac", "naf", "vracer", "acer", "dqn")  # numpy: these sections
CHECKPOINT_FILES = ("state.msgpack", "meta.json", "checksums.json")  # --hub: no replay
EVAL_ROWS_SHOWN = 20  # a longer eval.csv shows this many rows in the card, evenly spaced


# ---------------------------------------------------------------------- what exports
def check(agent, fmt: str) -> None:
    """Refuse, in one line, an agent whose policy ``fmt`` cannot reproduce."""
    r = agent.run
    algo, section = r.run.algo, r.run.section
    if r.contract.core is not None:
        raise OffpolicyError(
            f"export: {algo} with a recurrent core (--{section}.core {r.run.agent.core}) acts "
            "on the memory of the episode so far, which an exported function of one "
            f"observation does not carry; export a run without --{section}.core")
    if section == "aql" and r.run.agent.search in SAMPLED_SEARCH:
        raise OffpolicyError(
            f"export: {algo}'s greedy action is the best of candidates sampled afresh on every "
            f"call (search '{r.run.agent.search}'), not a function of the observation, so no "
            "exported file reproduces it; exact-q (every action searched) exports to onnx")
    if r.spec.kind == "hybrid":
        raise OffpolicyError(f"export: {algo} on {r.run.train.env} has hybrid actions "
                             f"({r.spec.describe()}); an exported policy returns one array")
    if fmt != "numpy":
        return
    from offpolicy.networks import is_image

    if section not in MLP_FAMILIES:
        why = ("picks among its actors by their value (a tree search over its learned model "
               "at depth > 0)" if section == "ace" else "searches the Q value of every action")
        raise OffpolicyError(f"export --format numpy writes MLP-shaped policies; {algo} {why}: "
                             f"use --format onnx")
    if is_image(r.obs_shape):
        raise OffpolicyError(f"export --format numpy writes MLP-shaped policies; {algo} on "
                             f"{r.run.train.env} reads frames with the Nature CNN: use "
                             "--format onnx")


def _acting_params(agent) -> Any:
    import jax

    return jax.device_get(agent.run.learner.acting_params())


def _action_arrays(spec) -> dict[str, np.ndarray]:
    """What ``ActionSpec.to_env`` rescales a continuous action with, float32 as it does."""
    return {"action_scale": np.asarray(spec._scale, np.float32),
            "action_offset": np.asarray(spec._offset, np.float32),
            "action_low": np.asarray(spec.low, np.float32),
            "action_high": np.asarray(spec.high, np.float32)}


def _describe_io(agent) -> tuple[str, str]:
    r = agent.run
    obs = f"{np.dtype(r.obs_dtype).name} [B, {', '.join(map(str, r.obs_shape))}]"
    s = r.spec
    if s.kind == "continuous" or s.levels:
        act = f"float32 [B, {s.flat_dim}]"
    elif s.kind == "discrete":
        act = "int32 [B]"
    else:
        act = f"int32 [B, {', '.join(map(str, s.env_shape or s.shape))}]"
    return obs, act


# ---------------------------------------------------------------------- ONNX
def policy_function(agent):
    """The exported function as JAX: obs [B, *obs] in env units -> env actions [B, ...]."""
    import jax
    import jax.numpy as jnp

    r = agent.run
    params, net, spec, norm = _acting_params(agent), r.agent, r.spec, r.obs_norm
    if r.run.section == "aql":  # exact-Q: argmax over Q of every action, as its search does
        every = net.all_actions

        def greedy(x):
            q = net.q_values(params["q"], x, jnp.broadcast_to(every, x.shape[:-1] + every.shape))
            return every[jnp.argmax(q, axis=-1)]
    else:
        key = jax.random.PRNGKey(0)  # a greedy policy draws nothing

        def greedy(x):
            return net.policy(params, x, key, False)[0]

    mean = np.asarray(norm.rms.mean, np.float32)
    std = np.sqrt(np.asarray(norm.rms.var, np.float64) + 1e-8).astype(np.float32)

    def to_env(a):
        if spec.kind == "discrete":
            return a[..., 0].astype(jnp.int32)
        if spec.kind == "multi_discrete" and not spec.levels:
            return a.astype(jnp.int32).reshape((a.shape[0], *(spec.env_shape or spec.shape)))
        if spec.levels:  # discretized: level index -> its value in [-1, 1]
            i = jnp.clip(jnp.rint(a), 0, spec.levels - 1).astype(jnp.int32)
            a = jnp.asarray(spec.level_values)[i]
        a = jnp.clip(a, -1.0, 1.0)
        return jnp.clip(a * spec._scale + spec._offset, spec.low, spec.high)

    def fn(obs):
        x = obs
        if norm.enabled:
            x = jnp.clip((obs.astype(jnp.float32) - mean) / std, -norm.clip, norm.clip)
        return to_env(greedy(x))

    return fn


def _onnx_modules():
    try:
        import jax2onnx
        import onnx
    except ImportError as e:
        raise OffpolicyError(f"--format onnx needs jax2onnx and onnx ({e.name} is not "
                             f"installed): {INSTALL_HINT}") from None
    return jax2onnx, onnx


def write_onnx(agent, folder: Path) -> str:
    """``policy.onnx`` in ``folder``; returns what it maps."""
    import jax

    jax2onnx, onnx = _onnx_modules()
    r = agent.run
    batch = jax.export.symbolic_shape("B")[0]
    spec = jax.ShapeDtypeStruct((batch, *r.obs_shape), np.dtype(r.obs_dtype))
    quiet = logging.getLogger("onnx_ir")  # notes on shape values it need not serialise
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        model = jax2onnx.to_onnx(policy_function(agent), [spec], model_name=r.run.algo,
                                 input_names=["obs"], output_names=["action"])
    except Exception as e:  # an operation jax2onnx cannot convert: one line, no trace
        text = " ".join(str(e).split())[:300]
        raise OffpolicyError(f"export --format onnx: jax2onnx cannot convert {r.run.algo}'s "
                             f"policy ({type(e).__name__}: {text})") from e
    finally:
        quiet.setLevel(level)
    obs, act = _describe_io(agent)
    onnx.helper.set_model_props(model, {
        "offpolicy_version": __version__, "algo": r.run.algo, "env": r.run.train.env,
        "step": str(r.step), "input": f"obs {obs}, env units",
        "output": f"action {act}, env units", "obs_normalization":
        "included" if r.obs_norm.enabled else "none"})
    onnx.save(model, str(folder / "policy.onnx"))
    return f"policy.onnx: obs {obs} -> action {act}"


# ---------------------------------------------------------------------- NumPy
class _Program:
    """policy.json's "network" steps and the arrays they read (:mod:`numpy_policy`)."""

    def __init__(self):
        self.steps: list[dict] = []
        self.arrays: dict[str, np.ndarray] = {}

    def dense(self, layer: dict, activation: str, name: str | None = None) -> str:
        name = name or f"dense{sum(s['op'] == 'dense' for s in self.steps)}"
        self.arrays[f"{name}.kernel"] = np.asarray(layer["kernel"], np.float32)
        self.arrays[f"{name}.bias"] = np.asarray(layer["bias"], np.float32)
        self.steps.append({"op": "dense", "name": name, "activation": activation})
        return name

    def mlp(self, tree: dict, activation: str, output: bool) -> None:
        """A :class:`~offpolicy.networks.MLP`'s Dense_0..Dense_k; with ``output`` the last is
        its linear output layer."""
        names = sorted(tree, key=lambda k: int(k.rsplit("_", 1)[1]))
        for i, k in enumerate(names):
            self.dense(tree[k], "none" if output and i == len(names) - 1 else activation)

    def op(self, op: str, **kw) -> None:
        self.steps.append({"op": op, **kw})


def numpy_program(agent) -> _Program:
    """The greedy action of an MLP-shaped agent as policy.json steps (before ``to_env``)."""
    r = agent.run
    section, c, m = r.run.section, r.run.agent, r.spec.dim
    p, prog = _acting_params(agent), _Program()
    if section == "ddpg":  # encoder g(W1 s), the actor's MLP, tanh (agents/ddpg.py)
        prog.dense(p["encoder" if c.shared_encoder else "actor_encoder"]["Dense_0"],
                   c.activation)
        prog.mlp(p["actor"]["MLP_0"], c.activation, output=True)
        prog.op("tanh")
    elif section == "td3":  # tanh(MLP(s))
        prog.mlp(p["MLP_0"], c.activation, output=True)
        prog.op("tanh")
    elif section == "sac":  # tanh(mean), the mean the first half of the output
        prog.mlp(p["MLP_0"], c.activation, output=True)
        prog.op("slice", start=0, stop=m)
        prog.op("tanh")
    elif section in ("naf", "vracer"):  # head [V, mean, ...]; NAF squashes its mean
        prog.mlp(p["MLP_0"], c.activation, output=False)
        prog.dense(p["Dense_0"], "none")
        prog.op("slice", start=1, stop=1 + m)
        if section == "naf":
            prog.op("tanh")
    elif section == "acer" and r.spec.kind == "discrete":  # argmax log softmax(logits)
        prog.mlp(p["Torso_0"]["MLP_0"], c.activation, output=False)
        prog.dense(p["Dense_0"], "none")
        prog.op("log_softmax")
        prog.op("argmax")
    elif section == "acer":  # the Gaussian's mean tanh(W z)
        prog.mlp(p["torso"]["MLP_0"], c.activation, output=False)
        prog.dense(p["mean_head"], "none")
        prog.op("tanh")
    elif section == "dqn":  # argmax Q, Q linear or dueling
        q = p["q"]
        prog.mlp(q["Torso_0"]["MLP_0"], c.activation, output=False)
        if c.dueling:
            for name, layer in (("value", q["Dense_0"]), ("advantage", q["Dense_1"])):
                for part in ("kernel", "bias"):
                    prog.arrays[f"{name}.{part}"] = np.asarray(layer[part], np.float32)
            prog.op("dueling", value="value", advantage="advantage")
        else:
            prog.dense(q["Dense_0"], "none")
        prog.op("argmax")
    else:  # check() refuses the rest first
        raise OffpolicyError(f"export --format numpy: no NumPy program for {r.run.algo}")
    return prog


def write_numpy(agent, folder: Path) -> str:
    """``policy.py``, ``policy.json`` and ``policy.npz`` in ``folder``."""
    r = agent.run
    prog = numpy_program(agent)
    arrays = dict(prog.arrays)
    norm = r.obs_norm
    if norm.enabled:
        arrays["obs_mean"] = np.asarray(norm.rms.mean, np.float64)
        arrays["obs_var"] = np.asarray(norm.rms.var, np.float64)
    if r.spec.kind == "continuous":
        arrays.update(_action_arrays(r.spec))
        action = {"kind": "continuous", "shape": [r.spec.dim],
                  "low": r.spec.low.tolist(), "high": r.spec.high.tolist()}
    else:
        action = {"kind": "discrete", "n": r.spec.n}
    spec = {"format": "offpolicy-numpy-policy", "format_version": 1,
            "offpolicy_version": __version__, "algo": r.run.algo, "env": r.run.train.env,
            "step": r.step,
            "observation": {"shape": list(r.obs_shape),
                            "normalize": {"clip": float(norm.clip)} if norm.enabled else None},
            "network": prog.steps, "action": action}
    (folder / "policy.json").write_text(json.dumps(spec, indent=1) + "\n")
    np.savez(folder / "policy.npz", **arrays)
    source = Path(__file__).with_name("numpy_policy.py")
    shutil.copyfile(source, folder / "policy.py")
    obs, act = _describe_io(agent)
    act = act.replace("int32", "int64")  # numpy_policy returns int64 indices
    return f"policy.py + policy.json + policy.npz: obs {obs} -> action {act}"


# ---------------------------------------------------------------------- the model card
# where a run logs, not what it learns: left out of the card's command (a reader reproducing the
# run needs neither the 'wandb' extra nor the author's W&B project and team, which a card
# published on the Hub would otherwise show)
LOGGING_ONLY = ("wandb_project", "wandb_entity", "wandb_mode")


def train_command(run: registry.RunConfig) -> list[str]:
    """``offpolicy train`` arguments that resolve to ``run``: the env, length and seed, the
    preset where it is not the default, the replay, then every field that differs from what
    those give (but :data:`LOGGING_ONLY`'s: the command trains the same agent, logging to the
    run directory only)."""
    from offpolicy import config as C

    tc, spec = run.train, registry.get(run.algo)
    cmd = ["offpolicy", "train", run.algo, "--env", tc.env, "--steps", str(tc.steps),
           "--seed", str(tc.seed)]
    default = registry.resolve(run.algo, train_overrides={"env": tc.env})
    preset = run.preset if run.preset != default.preset else None
    if preset or (run.preset is None and default.preset is not None):
        cmd += ["--preset", preset or registry.NO_PRESET]
    given = {"env": tc.env, "steps": tc.steps, "seed": tc.seed, "replay": tc.replay,
             "num_envs": tc.num_envs}
    base = registry.resolve(run.algo, preset=run.preset or registry.NO_PRESET,
                            train_overrides=given, env_default=False)
    for name in ("replay", "num_envs"):
        if getattr(tc, name) != getattr(default.train, name):
            cmd += [f"--{name.replace('_', '-')}", str(getattr(tc, name))]
    for cfg, ref, prefix in ((tc, base.train, ""), (run.agent, base.agent, spec.section + ".")):
        for f in C.fields_of(type(cfg)):
            value = getattr(cfg, f.name)
            if (f.name in given or f.name in LOGGING_ONLY or value == getattr(ref, f.name)
                    or value is None):
                continue
            flag = "--" + prefix + f.name.replace("_", "-")
            if isinstance(value, bool):
                cmd.append(flag if value else "--no-" + flag[2:])
            elif isinstance(value, (tuple, list)):
                cmd += [flag, *map(str, value)]
            elif str(value).startswith("-"):  # a negative number: argparse takes flag=value
                cmd.append(f"{flag}={value}")
            else:
                cmd += [flag, str(value)]
    return cmd


def _card_sources(path: Path, which: str) -> tuple[Path, Path]:
    """(the run directory, its ``which`` checkpoint) of a model card."""
    from offpolicy.training import checkpoint

    if not path.is_dir():
        raise OffpolicyError(f"no such run directory: {path}")
    if not (path / "config.yaml").exists() or not (path / "eval.csv").exists():
        raise OffpolicyError(f"{path} is not a run directory (a model card reports its "
                             "config.yaml and eval.csv, which offpolicy train writes)")
    return path, checkpoint.locate(path, which)


def _eval_table(rows: list[dict]) -> str:
    shown = rows
    if len(rows) > EVAL_ROWS_SHOWN:  # evenly spaced, the last one always
        idx = np.unique(np.linspace(0, len(rows) - 1, EVAL_ROWS_SHOWN).round().astype(int))
        shown = [rows[i] for i in idx]
    lines = ["| step | return mean | return std | s.e. | episodes |",
             "|---:|---:|---:|---:|---:|"]
    lines += [f"| {int(r['step'])} | {r['return_mean']:.2f} | {r['return_std']:.2f} | "
              f"{r['return_se']:.2f} | {int(r['episodes'])} |" for r in shown]
    if shown is not rows:
        lines.append(f"\n{len(shown)} of {len(rows)} evaluations shown; every one is in "
                     "eval.csv.")
    return "\n".join(lines)


def card_text(run: registry.RunConfig, rows: list[dict], config_yaml: str, hub: bool) -> str:
    """README.md: the Hub's model-card layout (YAML front matter with ``model-index``, then
    the card), for the run of config ``run`` and eval.csv ``rows``."""
    import yaml

    tc, algo = run.train, run.algo
    final = rows[-1]
    best = max(rows, key=lambda r: r["return_mean"])

    def metric(row: dict, which: str) -> dict:
        n = int(row["episodes"])
        return {"type": "mean_reward",
                "value": f"{row['return_mean']:.2f} +/- {row['return_std']:.2f}",
                "name": f"mean_reward ({which} evaluation, step {int(row['step'])}, {n} "
                        f"episode{'s' if n != 1 else ''})", "verified": False}

    front = {
        "library_name": "offpolicy",
        "tags": ["reinforcement-learning", "deep-reinforcement-learning", algo, tc.env,
                 "offpolicy"],
        "model-index": [{"name": f"{algo}-{tc.env}", "results": [{
            "task": {"type": "reinforcement-learning", "name": "reinforcement-learning"},
            "dataset": {"name": tc.env, "type": tc.env},
            "metrics": [metric(final, "final"), metric(best, "best")]}]}],
    }
    command = shlex.join(train_command(run))
    summary = "\n".join(f"| {which} evaluation | {r['return_mean']:.2f} +- "
                        f"{r['return_std']:.2f} | {int(r['step'])} |"
                        for which, r in (("final", final), ("best", best)))
    n = int(final["episodes"])
    episodes = f"{n} deterministic episode{'s' if n != 1 else ''}"
    preset = f" (preset `{run.preset}`)" if run.preset else ""
    load = ("```python\nimport offpolicy\n\nagent = offpolicy.load(\"checkpoint\")  # this "
            "folder's checkpoint/\naction = agent.act(obs)  # one observation in env units\n"
            "```" if hub else
            "The checkpoint is the run's (`offpolicy export RUN_DIR --hub DIR` writes this card "
            "with it); `offpolicy.load(RUN_DIR).act(obs)` acts with it.")
    return f"""---
{yaml.safe_dump(front, sort_keys=False).strip()}
---

# {algo} on {tc.env}

A **{algo}** agent{preset} trained on **{tc.env}** for {tc.steps} environment steps (seed
{tc.seed}) with offpolicy {__version__}.

| | return (mean +- std over episodes) | step |
|---|---:|---:|
{summary}

Each evaluation runs {episodes} without exploration noise on an
environment seeded apart from training.

## Usage

```bash
pip install offpolicy
```

{load}

## Training

```bash
{command}
```

or, from this folder's resolved configuration:

```bash
offpolicy train {algo} --config config.yaml
```

## Evaluation

{_eval_table(rows)}

![learning curve](curve.png)

## Configuration

The resolved configuration of the run (`config.yaml`):

```yaml
{config_yaml.strip()}
```

Library: offpolicy {__version__}.
"""


def write_card(run_dir: Path, ckpt: Path, folder: Path, hub: bool) -> str:
    """README.md, curve.png, config.yaml and eval.csv in ``folder`` (``hub``: and the
    checkpoint, as ``checkpoint/``)."""
    from offpolicy.plotting import plot_run, read_eval_csv

    rows = read_eval_csv(run_dir / "eval.csv")
    if not rows:
        raise OffpolicyError(f"{run_dir / 'eval.csv'} has no evaluations yet: a model card "
                             "reports them")
    config_yaml = (run_dir / "config.yaml").read_text()
    run = registry.RunConfig.from_dict(registry.load_yaml(run_dir / "config.yaml"),
                                       where=str(run_dir / "config.yaml"))
    shutil.copyfile(run_dir / "config.yaml", folder / "config.yaml")
    shutil.copyfile(run_dir / "eval.csv", folder / "eval.csv")
    if (run_dir / "curve.png").exists():
        shutil.copyfile(run_dir / "curve.png", folder / "curve.png")
    else:
        plot_run(run_dir, folder / "curve.png")
    written = ["README.md", "curve.png", "config.yaml", "eval.csv"]
    if hub:
        (folder / "checkpoint").mkdir()
        for name in CHECKPOINT_FILES:
            if (ckpt / name).exists():
                shutil.copyfile(ckpt / name, folder / "checkpoint" / name)
        written.append(f"checkpoint/ ({ckpt.name})")
    (folder / "README.md").write_text(card_text(run, rows, config_yaml, hub))
    return " + ".join(written)


# ---------------------------------------------------------------------- writing
def _check_out(out: Path, source: Path, force: bool) -> None:
    try:
        src, dst = source.resolve(), out.resolve()
    except OSError as e:
        raise OffpolicyError(f"cannot resolve {out}: {e}") from e
    if dst == src or dst in src.parents:
        raise OffpolicyError(f"--out {out} holds the run being exported: name another folder")
    if out.exists() or out.is_symlink():
        if out.is_dir() and not out.is_symlink() and not any(out.iterdir()):
            return
        if not force:
            what = "is a file" if not out.is_dir() else "is not empty"
            raise OffpolicyError(f"--out {out} {what} (--force replaces it)")


@contextlib.contextmanager
def staged(out: Path, source: Path, force: bool = False):
    """A temporary folder next to ``out`` to write into; renamed to ``out`` when the block
    succeeds (an existing ``out`` is replaced only with ``force``), removed when it fails."""
    _check_out(out, source, force)
    made = [d for d in [out.parent, *out.parent.parents] if not d.exists()]
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    except OSError as e:
        raise OffpolicyError(f"cannot write {out}: {e}") from e
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0700 is for secrets, not for exports
        yield tmp
        if out.exists() or out.is_symlink():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
            os.replace(out, old / out.name)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        for d in made:  # deepest first
            with contextlib.suppress(OSError):
                d.rmdir()
        if isinstance(e, OSError):
            raise OffpolicyError(f"cannot write {out}: {e}") from e
        raise


def export(path: str | Path, fmt: str, out: str | Path, which: str = "latest",
           force: bool = False, hub: bool = False) -> str:
    """Write ``fmt`` (onnx, numpy, card) of the run or checkpoint in ``path`` into the
    folder ``out``; ``hub``: the card with the checkpoint. Returns what was written."""
    path, out = Path(path), Path(out)
    if fmt not in FORMATS:
        raise OffpolicyError(f"invalid format '{fmt}' (valid: {', '.join(FORMATS)})")
    if fmt == "card":
        run_dir, ckpt = _card_sources(path, which)
        with staged(out, path, force) as tmp:
            return write_card(run_dir, ckpt, tmp, hub)
    if fmt == "onnx":
        _onnx_modules()  # a missing extra is refused before the agent is built
    _check_out(out, path, force)
    from offpolicy.api import load

    agent = load(path, which)
    try:
        check(agent, fmt)
        with staged(out, path, force) as tmp:
            return (write_onnx if fmt == "onnx" else write_numpy)(agent, tmp)
    finally:
        agent.close()
