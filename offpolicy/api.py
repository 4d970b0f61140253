"""The Python API: ``offpolicy.make`` and ``offpolicy.load``.

    agent = offpolicy.make("ddpg", env="Pendulum-v1", seed=0, actor_lr=1e-4)
    agent.learn(20_000)
    agent.save("ddpg-pendulum")
    agent = offpolicy.load("ddpg-pendulum")
    action = agent.act(obs)          # env observation in, env action out
    actions, _ = agent.predict(batch_of_obs, deterministic=True)   # as SB3's predict

``env`` is an id, a ``gymnasium.Env`` or a callable that returns a new one (a factory).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from offpolicy import config as C
from offpolicy import registry
from offpolicy.agents.acting import HostMemory
from offpolicy.errors import OffpolicyError
from offpolicy.training import checkpoint
from offpolicy.training.callbacks import Callback, Callbacks, callback_list
from offpolicy.training.run import Run
from offpolicy.training.rundir import resumed_config


def _split_overrides(algo: str, overrides: dict[str, Any]) -> tuple[dict, dict]:
    section = registry.get(algo).config_cls
    train_names = {f.name for f in C.fields_of(C.TrainConfig)}
    agent_names = {f.name for f in C.fields_of(section)}
    train, agent = {}, {}
    for k, v in overrides.items():
        if k in agent_names:
            agent[k] = v
        elif k in train_names:
            train[k] = v
        else:
            raise OffpolicyError(
                f"unknown option '{k}' for {algo} (valid: "
                f"{', '.join(sorted(train_names | agent_names))})")
    return train, agent


_USER_ENVS: dict[int, str] = {}  # id(env object or factory) -> the id it was registered as


def env_id(env: Any) -> str | None:
    """An id for ``make``'s ``env``: an id as it is; a ``gymnasium.Env`` or a callable that
    returns one is registered in this process as ``offpolicy-user/<Name>-v<n>``, so that the
    run builds its training and evaluation copies from it (an Env made by ``gymnasium.make``
    is remade from its spec; another is deep-copied; a factory is called). The run's
    config.yaml names that id: to load the run in another process, register it there again
    (``gymnasium.register``), or use an id from the start."""
    import copy

    import gymnasium as gym

    if env is None or isinstance(env, str):
        return env
    if id(env) in _USER_ENVS:
        return _USER_ENVS[id(env)]
    if isinstance(env, gym.Env):
        name = type(env.unwrapped).__name__
        if env.spec is not None:
            spec = env.spec

            def factory(**_):
                return gym.make(spec, disable_env_checker=True)
        else:
            try:
                copy.deepcopy(env)
            except Exception as e:
                raise OffpolicyError(
                    f"env {name} cannot be copied ({type(e).__name__}: {e}), and the run needs "
                    "a training and an evaluation copy: pass a callable that returns a new "
                    f"env (env=lambda: {name}(...)) or a registered id") from None

            def factory(**_):
                return copy.deepcopy(env)
    elif callable(env):
        name = getattr(env, "__name__", type(env).__name__).strip("<>") or "env"
        made = env()
        if not isinstance(made, gym.Env):
            raise OffpolicyError(f"env: the callable {name} returned {type(made).__name__}, "
                                 "not a gymnasium.Env")
        made.close()
        factory = env
    else:
        raise OffpolicyError(f"env must be an id, a gymnasium.Env or a callable that returns "
                             f"one, got {type(env).__name__}")
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in name) or "env"
    n = sum(1 for k in gym.registry if k.startswith(f"offpolicy-user/{safe}-v"))
    new_id = f"offpolicy-user/{safe}-v{n}"
    gym.register(new_id, entry_point=factory, disable_env_checker=True)
    _USER_ENVS[id(env)] = new_id
    return new_id


def make(algo: str, env: Any = None, seed: int | None = None,
         run_dir: str | Path | None = None, preset: str | None = None, resume: bool = False,
         **overrides: Any) -> Agent:
    """Create an agent for ``env`` (default Pendulum-v1: an id, a ``gymnasium.Env`` or a
    callable returning a new one, :func:`env_id`) with ``seed`` (default 0). Overrides name
    any training or algorithm config field.

    With ``resume=True`` the run in ``run_dir`` continues from its latest checkpoint (replay
    included); what you pass must agree with the saved run except for the fields a resumed
    run may change (``RunConfig.RESUME_CHANGEABLE``), as on the command line.

    For DDPG and NAF under ``replay="refer*"`` the default memory is half of ``steps=``
    (100 000 unless given), fixed here: pass ``steps=`` (or ``buffer_size=``) when
    ``learn(n)`` runs for another n."""
    train, agent = _split_overrides(algo, overrides)
    if env is not None:
        train["env"] = env_id(env)
        if not isinstance(env, str) and (train.get("async_envs") or train.get("num_collectors")):
            raise OffpolicyError("an env object or factory lives in this process: async_envs "
                                 "and num_collectors need a registered id (gymnasium.register "
                                 "in an importable module, named as module:EnvId)")
    if seed is not None:
        train["seed"] = seed
    # a new run on an env with a default preset gets it (AQL on Platform: small); a resumed
    # run keeps its saved one
    run = registry.resolve(algo, preset=preset, train_overrides=train, agent_overrides=agent,
                           env_default=not resume)
    if resume:
        if run_dir is None:
            raise OffpolicyError("resume=True needs a run_dir")
        preset_train, preset_agent = registry.get(algo).preset_fields(preset)
        run = resumed_config(run_dir, run, set(train) | preset_train, set(agent) | preset_agent)
    return Agent(Run(run, run_dir, resume=resume))


def load(path: str | Path, which: str = "latest") -> Agent:
    """Load an agent from a run directory (its ``latest`` or ``best`` checkpoint) or from a
    checkpoint directory written by ``Agent.save``."""
    path = Path(path)
    if not path.exists():
        raise OffpolicyError(f"no such run or checkpoint directory: {path}")
    if which not in ("latest", "best"):
        raise OffpolicyError(f"invalid checkpoint '{which}' (valid: latest, best)")
    ckpt = checkpoint.locate(path, which)
    meta = checkpoint.load_meta(ckpt)
    if "config" not in meta:
        raise OffpolicyError(f"corrupt checkpoint {ckpt}: meta.json has no config")
    run = registry.RunConfig.from_dict(meta["config"], where=str(ckpt / "meta.json"))
    run.train.quiet = True
    run.train.wandb_project = ""  # an agent loaded to act (or learn afresh) logs nowhere
    # evaluation and acting need parameters only: replay is neither allocated nor read, so a
    # damaged replay.npz never blocks evaluating intact parameters
    r = Run(run, None, with_replay=False)
    r.restore(ckpt, with_replay=False)
    return Agent(r, checkpoint=ckpt)


class Agent:
    """A trained or training agent. ``learn`` continues from where it stopped."""

    def __init__(self, run: Run, checkpoint: Path | None = None):
        self.run = run
        self._checkpoint = checkpoint  # loaded for acting: no replay allocated yet
        self._memory: HostMemory | None = None  # a recurrent core's memory of the episode

    @property
    def config(self) -> registry.RunConfig:
        return self.run.run

    @property
    def step(self) -> int:
        return self.run.step

    def learn(self, steps: int, callback: Callback | Iterable[Callback] | None = None,
              callback_every: int | None = None) -> dict[str, Any]:
        """Train for ``steps`` more env steps, evaluating on the configured schedule
        (``eval_every``). Successive calls continue the same episodes, replay and noise. An
        agent from ``offpolicy.load`` learns with an empty replay (loading reads parameters
        only; resume a run directory with the CLI's ``--resume`` to continue with its
        replay). With remote collectors (``num_collectors``) the last chunks are cut to end
        on the step asked for, except where a chunk is one segment or one unroll
        (``segment_length``, ``collector_replay``): ``steps`` is then whole chunks.

        ``callback`` (one callable or a list) is called with a
        :class:`~offpolicy.callbacks.RunView` after each evaluation and every
        ``callback_every`` env steps (default: ``log_every``), never per step; returning
        False stops training as Ctrl-C would: the checkpoint is written, the summary's
        ``status`` is 'stopped', and the next ``learn`` (or ``make(..., resume=True)``)
        continues. An exception a callback raises stops the run and propagates unchanged
        (docs/guides/callbacks.md).

        Returns the summary of :meth:`offpolicy.training.run.Run.train`: ``status``,
        ``step``, ``final_return``, ``best_return``, ``run_dir``, the newest evaluation row
        (``eval``) and train.csv row (``train``)."""
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
            raise OffpolicyError(f"steps must be a positive integer, got {steps!r}")
        callbacks = callback_list(callback)
        every = self.run.train_cfg.log_every if callback_every is None else callback_every
        if isinstance(every, bool) or not isinstance(every, (int, np.integer)) or every < 1:
            raise OffpolicyError(f"callback_every must be a positive integer, got {every!r}")
        tc = self.run.train_cfg
        k, what = tc.num_envs, f"num_envs {tc.num_envs} (the env copies step together)"
        if tc.num_collectors and (tc.segment_length or tc.collector_replay):
            # a chunk is one segment or one unroll: a cut one would be neither
            k *= registry.chunk_steps(tc)
            flag, one = (("--collector-replay", "unroll") if tc.collector_replay
                         else ("--segment-length", "segment"))
            what = (f"num_envs {tc.num_envs} x {registry.chunk_steps(tc)} steps per collector "
                    f"chunk (with {flag} a chunk is one whole {one})")
        if steps % k:
            raise OffpolicyError(f"steps {steps} is not a multiple of {what}: use "
                                 f"{steps - steps % k or k} or {steps - steps % k + k}")
        if self._checkpoint is not None:  # everything but the replay, into a full-size run
            fresh = Run(self.run.run, None)
            fresh.restore(self._checkpoint, with_replay=False)
            self.run.close()
            self.run, self._checkpoint = fresh, None
        return self.run.train(until=self.run.step + int(steps), final_eval=False,
                              callbacks=Callbacks(callbacks, int(every)))

    def act(self, obs: np.ndarray, first: bool = False) -> Any:
        """The deterministic (evaluation) action for one env observation, in env units (with
        ``--observe-action-reward``: the observation of an env from ``make_env(env_id,
        observe_action_reward=True)``, which ends with the previous action and reward). An
        agent with a recurrent core (``--<algo>.core``) remembers the episode across calls:
        pass ``first=True`` with each episode's first observation (the first call starts
        one either way)."""
        r = self.run
        try:
            obs = np.asarray(obs, r.obs_dtype)  # frames stay uint8: the network scales them
        except (ValueError, TypeError) as e:  # a string, a ragged list, a dict...
            text = " ".join(repr(obs).split())
            raise OffpolicyError(
                f"observation must be an array of numbers of shape {r.obs_shape}, got "
                f"{type(obs).__name__} {text[:60] + '...' if len(text) > 60 else text}") from e
        if obs.shape != r.obs_shape:
            hint = ("; this agent observes the previous action and reward too "
                    "(--observe-action-reward): step an env from offpolicy.envs.make_env(id, "
                    "observe_action_reward=True)" if r.train_cfg.observe_action_reward else "")
            raise OffpolicyError(f"observation shape {obs.shape} != {r.obs_shape}{hint}")
        if not np.isfinite(obs).all():
            raise OffpolicyError("observation contains NaN or inf")
        x = r.obs_norm(obs[None])
        core = r.contract.core
        if core is not None:
            if first or self._memory is None:
                self._memory = HostMemory(core, 1)
            x = self._memory.observe(x)
        action, info = r.act(x, explore=False)
        if self._memory is not None:
            self._memory.advance(info)
        return r.spec.to_env(action[0])

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = True) -> tuple[np.ndarray, Any]:
        """(actions, state) for one observation or a batch [B, ...], in env units, as
        Stable-Baselines3's ``predict``: ``deterministic`` the evaluation action (equal to
        :meth:`act` row by row), else the exploring one where the policy samples in itself
        (SAC, V-RACER, ACER, DQN's epsilon, DDPG under ReF-ER; host noise, as OU, is not
        added: SB3's DDPG and TD3 do not add theirs either). An agent with a recurrent core
        returns its memory of each row's episode as ``state``: pass it back with the next
        observations and ``episode_start`` (a bool per row) where an episode begins; others
        return None."""
        r = self.run
        try:
            obs = np.asarray(observation, r.obs_dtype)
        except (ValueError, TypeError) as e:
            raise OffpolicyError(f"observation must be an array of numbers of shape "
                                 f"{r.obs_shape} or [B, *{r.obs_shape}], got "
                                 f"{type(observation).__name__}") from e
        single = obs.shape == r.obs_shape
        batch = obs[None] if single else obs
        if batch.shape[1:] != r.obs_shape or len(batch) == 0:
            raise OffpolicyError(f"observation shape {obs.shape}: expected {r.obs_shape} or "
                                 f"[B, *{r.obs_shape}]")
        if not np.isfinite(batch).all():
            raise OffpolicyError("observation contains NaN or inf")
        x = r.obs_norm(batch)
        core = r.contract.core
        if core is not None:
            if not isinstance(state, HostMemory) or state.num_envs != len(batch):
                state = HostMemory(core, len(batch))
            starts = np.zeros(len(batch), bool) if episode_start is None else \
                np.broadcast_to(np.asarray(episode_start, bool), (len(batch),))
            for i in np.flatnonzero(starts):
                state.reset(int(i))
            x = state.observe(x)
        action, info = r.act(x, explore=not deterministic)
        if core is not None:
            state.advance(info)
        actions = np.stack([r.spec.to_env(a) for a in action])
        return (actions[0] if single else actions), state

    def evaluate(self, episodes: int = 10) -> np.ndarray:
        """Returns of ``episodes`` (>= 1) deterministic evaluation episodes."""
        return self.run.evaluate(episodes)

    def close(self) -> None:
        """Close the agent's envs and release its run directory (another run may then
        resume it); ``learn`` cannot be called after this."""
        self.run.close()

    def save(self, path: str | Path) -> Path:
        """Write a self-contained checkpoint directory (parameters, optimiser, config): a new
        or empty directory. A failed write (a full disk) leaves no folder it made."""
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise OffpolicyError(f"cannot save to {path}: it is a file (give a directory)")
        if path.exists() and any(path.iterdir()):
            raise OffpolicyError(f"{path} exists and is not empty")
        made = [d for d in [path, *path.parents] if not d.exists()]
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise OffpolicyError(f"cannot create {path}: {e}") from e
        r = self.run
        try:
            return checkpoint.save(path, "latest", r.step, r.state, r.checkpoint_meta(), None)
        except BaseException:
            for d in made:  # deepest first; checkpoint.save left nothing in them
                with contextlib.suppress(OSError):
                    d.rmdir()
            raise
