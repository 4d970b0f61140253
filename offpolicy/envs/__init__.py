"""Environments: make_env(), ActionSpec, normalisation."""

from offpolicy.envs.make import action_spec, make_env, observation_shape
from offpolicy.envs.spaces import KINDS, ActionSpec

__all__ = ["ActionSpec", "KINDS", "action_spec", "make_env", "observation_shape"]
