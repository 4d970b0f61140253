"""make_env(): any Gymnasium id, MuJoCo v5, DM Control through shimmy, and Atari through ale-py.

Observations are flat float32 vectors, except images: a 3-D uint8 Box (Atari's stacked frames,
[84, 84, 4]) passes through as it is, channels last, and replay stores it as uint8
(:func:`observation_dtype`); the network scales it by 1/255 (``networks.NatureCNN``).
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings

import gymnasium as gym
import numpy as np

from offpolicy.envs.spaces import ActionSpec
from offpolicy.errors import OffpolicyError, did_you_mean

DMC_PREFIX = "dm_control/"
ATARI_PREFIX = "ALE/"
OFFPOLICY_PREFIX = "offpolicy/"  # the library's own envs (offpolicy/Platform-v0)
# DQN / A3C / ACER preprocessing (Mnih et al. 2015, Methods; Wang et al. 2017, Sec. 4)
ATARI_NOOP_MAX = 30
ATARI_FRAME_SKIP = 4
ATARI_SCREEN = 84
ATARI_FRAMES = 4


def _registered_ids() -> list[str]:
    return sorted(gym.registry.keys())


def _unknown_env(env_id: str) -> OffpolicyError:
    hint = did_you_mean(env_id, _registered_ids(), n=5)
    return OffpolicyError(
        f"unknown environment id '{env_id}'{hint} "
        "(any registered Gymnasium id is valid, e.g. Pendulum-v1, HalfCheetah-v5, "
        "dm_control/cheetah-run-v0)"
    )


def _one_line(e: BaseException, limit: int = 400) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _construction_error(env_id: str, e: BaseException) -> OffpolicyError:
    """``gym.make`` (or the import that registers the id) failed inside the environment's code:
    name the env and the exception, and the usual cause."""
    detail = _one_line(e)
    msg = f"cannot create environment {env_id}: {type(e).__name__}" + (
        f": {detail}" if detail else "")
    name = env_id.partition(":")[2] or env_id
    entry = str(getattr(gym.registry.get(name), "entry_point", ""))
    if name.startswith(DMC_PREFIX) or "dm_control" in entry or "shimmy" in entry:
        msg += " (check that mujoco and dm-control versions match: pip install 'offpolicy[dmc]')"
    elif name.startswith(ATARI_PREFIX) or "ale_py" in entry:
        msg += " (check the Atari install: pip install 'offpolicy[atari]')"
    elif "mujoco" in entry:
        msg += " (check the MuJoCo install: pip install 'offpolicy[mujoco]')"
    return OffpolicyError(msg)


_mujoco_hooked = False
# Gymnasium's v5 model files set compiler/settotalmass, which MuJoCo 3.17 deprecates, so every
# MuJoCo env construction warns about Gymnasium's files, not about anything a user can change
_MUJOCO_MODEL_DEPRECATION = "compiler attribute 'settotalmass' is deprecated"


def mujoco_warning(msg: str) -> None:
    """MuJoCo's warning callback: Python's ``warnings`` (shown once, filterable), except the
    deprecation Gymnasium's own model files raise on every env construction."""
    if _MUJOCO_MODEL_DEPRECATION in msg:
        return
    warnings.warn(f"MuJoCo: {msg}", stacklevel=2)


def _route_mujoco_warnings() -> None:
    """MuJoCo prints its warnings to stderr and appends them to MUJOCO_LOG.TXT in the working
    directory. Route them to :func:`mujoco_warning` instead."""
    global _mujoco_hooked
    if _mujoco_hooked:
        return
    _mujoco_hooked = True
    try:
        import mujoco
    except ImportError:
        return
    mujoco.set_mju_user_warning(mujoco_warning)


def is_image_space(space: gym.Space) -> bool:
    """A 3-D uint8 Box: frames [H, W, C], kept as they are (not flattened, stored as uint8)."""
    return (isinstance(space, gym.spaces.Box) and len(space.shape) == 3
            and space.dtype == np.uint8)


class FramesLast(gym.ObservationWrapper):
    """Stacked frames [frames, H, W] -> [H, W, frames]: channels last, as Flax convolutions
    take them."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        n, h, w = env.observation_space.shape
        self.frames = n
        self.observation_space = gym.spaces.Box(0, 255, (h, w, n), np.uint8)

    def observation(self, obs: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.moveaxis(obs, 0, -1))


def _is_atari(env_id: str) -> bool:
    return "ale_py" in str(getattr(gym.registry.get(env_id), "entry_point", ""))


def _atari_preprocessing(env: gym.Env) -> gym.Env:
    """The DQN / A3C preprocessing the ACER paper uses (Wang et al. 2017, Sec. 4): up to 30
    no-op actions at reset, each action repeated for 4 frames with the max over the last two,
    84x84 grayscale, the last 4 frames stacked (channels last, uint8). An episode is the whole
    game (no terminal on life loss); rewards are left unclipped (clipping belongs to the
    agent, if any)."""
    env = gym.wrappers.AtariPreprocessing(
        env, noop_max=ATARI_NOOP_MAX, frame_skip=ATARI_FRAME_SKIP, screen_size=ATARI_SCREEN,
        terminal_on_life_loss=False, grayscale_obs=True, scale_obs=False)
    return FramesLast(gym.wrappers.FrameStackObservation(env, ATARI_FRAMES))


def _import_env_module(module: str) -> None:
    """Import the module of a ``module:EnvId`` id. Not found on the import path, it is looked
    for in the working directory, as ``python -m offpolicy`` would find it (the console script
    does not put the working directory on the path): the folder then stays on the path, for the
    env copies' subprocesses too."""
    try:
        importlib.import_module(module)
        return
    except ModuleNotFoundError as e:
        top = module.split(".")[0]
        cwd = os.getcwd()
        if e.name not in (top, module) or cwd in sys.path or "" in sys.path:
            raise
    sys.path.insert(0, cwd)
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name in (top, module):
            sys.path.remove(cwd)
        raise


def make_env(env_id: str, seed: int | None = None, observe_action_reward: bool = False,
             **kwargs) -> gym.Env:
    """Create a Gymnasium env with a flat float32 observation vector, or uint8 frames.

    ``dm_control/<domain>-<task>-v0`` ids need the ``dmc`` extra (dm-control + shimmy); their
    dict observations are flattened. MuJoCo ids need the ``mujoco`` extra. ``ALE/<Game>-v5``
    ids need the ``atari`` extra (ale-py + OpenCV) and get the standard preprocessing
    (:func:`_atari_preprocessing`): uint8 observations [84, 84, 4], a Discrete action space.
    They are built with ``frameskip=1`` (the preprocessing skips frames) and
    ``repeat_action_probability=0.0``: no sticky actions, as in the DQN / A3C / ACER papers
    (v5's default is 0.25, Machado et al. 2018; pass ``repeat_action_probability=0.25`` to
    get it). Any other 3-D uint8 Box observation is kept as frames too; every other Box, Dict
    or Tuple observation is flattened. The env checker is disabled: it costs time on every
    step and the library validates spaces itself. ``offpolicy/`` ids are the library's own envs
    (``offpolicy/Platform-v0``: :mod:`offpolicy.envs.platform`; the partially observed
    ``offpolicy/Pendulum-P-v0``, ``offpolicy/HalfCheetah-V-v0``, ...:
    :mod:`offpolicy.envs.partial`), registered on first use. ``observe_action_reward``
    (``--observe-action-reward``): every observation ends with the previous action and reward
    (:class:`~offpolicy.envs.partial.ActionRewardObservation`).
    """
    given = env_id
    if env_id.startswith(OFFPOLICY_PREFIX):
        import offpolicy.envs.partial  # noqa: F401  (registers offpolicy/Pendulum-P-v0, ...)
        import offpolicy.envs.platform  # noqa: F401  (registers offpolicy/Platform-v0)
    if env_id.startswith(ATARI_PREFIX):
        try:
            import ale_py  # registers the ALE/ ids; ships the ROMs

            # warnings only: no two-line banner on stderr from every emulator created
            ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Warning)
        except ImportError as e:
            raise OffpolicyError(
                f"{env_id} needs the Arcade Learning Environment ({type(e).__name__}: "
                f"{_one_line(e)}): pip install 'offpolicy[atari]'") from e
        except Exception as e:  # a broken ale-py install
            raise _construction_error(given, e) from e
    if env_id.startswith(DMC_PREFIX):
        # dm_control tries the GLFW renderer first; on a machine without a display glfw warns
        # (two lines on stderr) on every run, though nothing here renders
        warnings.filterwarnings("ignore", message=r".*DISPLAY environment variable is missing",
                                module="glfw")
        try:
            import shimmy  # noqa: F401  (registers the dm_control/ ids)
        except ImportError as e:
            raise OffpolicyError(
                f"{env_id} needs DM Control ({type(e).__name__}: {_one_line(e)}): "
                "pip install 'offpolicy[dmc]'") from e
        except Exception as e:  # e.g. dm_control built for another MuJoCo
            raise _construction_error(given, e) from e
    if ":" in env_id:  # "package.module:EnvName-v0" imports the module that registers it
        module, _, name = env_id.partition(":")
        try:
            _import_env_module(module)
        except ImportError as e:
            raise OffpolicyError(f"cannot import module '{module}' for env '{env_id}': "
                                 f"{_one_line(e)} (looked on the import path and in the "
                                 f"working directory {os.getcwd()}: run from the folder that "
                                 f"holds {module.split('.')[0]}.py, install it, or add its "
                                 "folder to PYTHONPATH)") from e
        except Exception as e:  # the module itself is broken
            raise _construction_error(given, e) from e
        env_id = name
    if env_id not in gym.registry:
        raise _unknown_env(env_id)
    _route_mujoco_warnings()
    atari = _is_atari(env_id)
    if atari:
        kwargs = {"frameskip": 1, "repeat_action_probability": 0.0} | kwargs
    try:
        env = gym.make(env_id, disable_env_checker=True, **kwargs)
        if atari:
            env = _atari_preprocessing(env)
    except OffpolicyError:
        raise
    except gym.error.DependencyNotInstalled as e:  # e.g. OpenCV, which the Atari resize uses
        entry = str(getattr(gym.registry.get(env_id), "entry_point", ""))
        extra = ("atari" if atari else "dmc" if env_id.startswith(DMC_PREFIX)
                 else "box2d" if "box2d" in entry or "Box2D" in str(e) else "mujoco")
        raise OffpolicyError(
            f"{env_id} needs a missing dependency ({_one_line(e)}); "
            f"pip install 'offpolicy[{extra}]'") from e
    except TypeError as e:
        if kwargs and "argument" in str(e):
            raise OffpolicyError(f"invalid keyword arguments for {env_id}: {e}") from e
        raise _construction_error(given, e) from e
    except Exception as e:  # a broken install or env: one line, never a traceback
        raise _construction_error(given, e) from e
    space = env.observation_space
    flat = isinstance(space, gym.spaces.Box) and len(space.shape) == 1
    if not flat and not is_image_space(space):
        if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple, gym.spaces.Box)):
            env = gym.wrappers.FlattenObservation(env)
        else:
            raise OffpolicyError(
                f"{env_id} has a {type(space).__name__} observation space; "
                "valid: Box (3-D uint8 frames kept as they are) or Dict/Tuple of Boxes "
                "(flattened)"
            )
    if observe_action_reward:
        from offpolicy.envs.partial import ActionRewardObservation

        env = ActionRewardObservation(env)
    if seed is not None:
        env.action_space.seed(seed)
    return env


def action_spec(env: gym.Env, discretize: int = 0) -> ActionSpec:
    """The env's action spec; ``discretize`` K >= 2 turns every continuous dimension into K
    levels (:meth:`ActionSpec.discretized`: the env itself is left as it is)."""
    return ActionSpec.from_gym(env.action_space).discretized(discretize)


def frame_stack(env: gym.Env) -> int:
    """F when the env's observations are its last F frames stacked on the last axis (the
    Atari preprocessing of :func:`make_env`), which replay stores one frame per step; else 0
    (any other image, e.g. an RGB frame, is stored whole)."""
    return env.frames if isinstance(env, FramesLast) else 0


def observation_shape(env: gym.Env) -> tuple[int, ...]:
    return tuple(int(d) for d in env.observation_space.shape)


def observation_dtype(env: gym.Env) -> np.dtype:
    """What the collector, replay and the policy carry observations as: uint8 for frames (4x
    less memory than float32; the network scales them), float32 for everything else."""
    return np.dtype(np.uint8 if is_image_space(env.observation_space) else np.float32)

