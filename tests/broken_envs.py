"""Gymnasium environments whose construction fails, registered when this module is imported.

They stand in for a broken install (e.g. dm-control built for another MuJoCo, which fails inside
``gym.make`` with ``AttributeError: 'MjModel' object has no attribute 'flex_vertedge'``). The CLI
reaches them as ``broken_envs:BrokenEnv-v0`` (the tests directory must be on ``PYTHONPATH``).
"""

from __future__ import annotations

import gymnasium as gym

FLEX_MESSAGE = "'MjModel' object has no attribute 'flex_vertedge'"


class BrokenEnv(gym.Env):
    """Raises ``error(message)`` from its constructor."""

    metadata = {"render_modes": []}

    def __init__(self, error: type[BaseException] = AttributeError, message: str = FLEX_MESSAGE):
        raise error(message)


def _register(name: str, **kwargs) -> None:
    if name not in gym.registry:
        gym.register(name, entry_point=BrokenEnv, kwargs=kwargs)


_register("BrokenEnv-v0")  # AttributeError, like dm-control 1.0.50 on MuJoCo 4
_register("BrokenRuntime-v0", error=RuntimeError,
          message="XML Error: Schema violation: unrecognized element\nElement 'flex', line 12")
_register("BrokenImport-v0", error=ImportError, message="cannot import name 'mjbindings'")
_register("BrokenType-v0", error=TypeError, message="unsupported operand type(s) for +")
