"""make_env(): any Gymnasium id, MuJoCo v5, and DM Control through shimmy."""

from __future__ import annotations

import importlib
import warnings

import gymnasium as gym

from offpolicy.envs.spaces import ActionSpec
from offpolicy.errors import OffpolicyError, did_you_mean

DMC_PREFIX = "dm_control/"


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
    elif "mujoco" in entry:
        msg += " (check the MuJoCo install: pip install 'offpolicy[mujoco]')"
    return OffpolicyError(msg)


_mujoco_hooked = False


def _route_mujoco_warnings() -> None:
    """MuJoCo prints its warnings (e.g. MuJoCo 4's 'settotalmass' deprecation, raised by
    Gymnasium's v5 model files on every env creation) to stderr and appends them to
    MUJOCO_LOG.TXT in the working directory. Route them to Python's ``warnings`` instead, where
    they show once and can be filtered."""
    global _mujoco_hooked
    if _mujoco_hooked:
        return
    _mujoco_hooked = True
    try:
        import mujoco
    except ImportError:
        return
    mujoco.set_mju_user_warning(lambda msg: warnings.warn(f"MuJoCo: {msg}", stacklevel=2))


def make_env(env_id: str, seed: int | None = None, **kwargs) -> gym.Env:
    """Create a Gymnasium env with a flat float32 observation vector.

    ``dm_control/<domain>-<task>-v0`` ids need the ``dmc`` extra (dm-control + shimmy); their
    dict observations are flattened. MuJoCo ids need the ``mujoco`` extra. The env checker is
    disabled: it costs time on every step and the library validates spaces itself.
    """
    given = env_id
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
            importlib.import_module(module)
        except ImportError as e:
            raise OffpolicyError(f"cannot import module '{module}' for env '{env_id}': "
                                 f"{_one_line(e)}") from e
        except Exception as e:  # the module itself is broken
            raise _construction_error(given, e) from e
        env_id = name
    if env_id not in gym.registry:
        raise _unknown_env(env_id)
    _route_mujoco_warnings()
    try:
        env = gym.make(env_id, disable_env_checker=True, **kwargs)
    except OffpolicyError:
        raise
    except gym.error.DependencyNotInstalled as e:
        extra = "dmc" if env_id.startswith(DMC_PREFIX) else "mujoco"
        raise OffpolicyError(
            f"{env_id} needs a missing dependency ({_one_line(e)}); "
            f"pip install 'offpolicy[{extra}]'") from e
    except TypeError as e:
        if kwargs and "argument" in str(e):
            raise OffpolicyError(f"invalid keyword arguments for {env_id}: {e}") from e
        raise _construction_error(given, e) from e
    except Exception as e:  # a broken install or env: one line, never a traceback
        raise _construction_error(given, e) from e
    if not isinstance(env.observation_space, gym.spaces.Box) or len(
            env.observation_space.shape) != 1:
        if isinstance(env.observation_space, (gym.spaces.Dict, gym.spaces.Tuple)) or (
                isinstance(env.observation_space, gym.spaces.Box)):
            env = gym.wrappers.FlattenObservation(env)
        else:
            raise OffpolicyError(
                f"{env_id} has a {type(env.observation_space).__name__} observation space; "
                "valid: Box or Dict/Tuple of Boxes (flattened)"
            )
    if seed is not None:
        env.action_space.seed(seed)
    return env


def action_spec(env: gym.Env) -> ActionSpec:
    return ActionSpec.from_gym(env.action_space)


def observation_shape(env: gym.Env) -> tuple[int, ...]:
    return tuple(int(d) for d in env.observation_space.shape)

