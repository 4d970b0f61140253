"""Algorithm name -> config section, overrides, presets, supported action kinds, agent builder."""

from __future__ import annotations

import copy
import importlib
from dataclasses import dataclass, field
from typing import Any

from offpolicy import config as C
from offpolicy.errors import OffpolicyError, did_you_mean


@dataclass(frozen=True)
class Algorithm:
    name: str
    section: str  # config section and CLI flag prefix, e.g. "ddpg" -> --ddpg.actor-lr
    config_cls: type
    builder: str  # "module:Class" of the agent, imported lazily
    action_kinds: tuple[str, ...]
    description: str
    overrides: dict[str, Any] = field(default_factory=dict)
    presets: dict[str, dict[str, Any]] = field(default_factory=dict)


_DDPG_PRESETS = {
    "paper": {},  # the ACE paper's DDPG: tanh, no L2
    "lillicrap": {"activation": "relu", "critic_l2": 1e-2},  # the original DDPG paper
}
_ACE_PRESETS = {"paper": {}, "n10-d1": {"num_actors": 10}, "n5-d2": {"plan_depth": 2}}
_CONT = ("continuous",)

ALGORITHMS: dict[str, Algorithm] = {a.name: a for a in [
    Algorithm("ddpg", "ddpg", C.DDPGConfig, "offpolicy.agents.ddpg:DDPG", _CONT,
              "DDPG, actor and critic 400-300 (ACE paper baseline)", presets=_DDPG_PRESETS),
    Algorithm("wide-ddpg", "ddpg", C.DDPGConfig, "offpolicy.agents.ddpg:DDPG", _CONT,
              "DDPG with 800-600 hidden units", overrides={"hidden": (800, 600)},
              presets=_DDPG_PRESETS),
    Algorithm("shared-ddpg", "ddpg", C.DDPGConfig, "offpolicy.agents.ddpg:DDPG", _CONT,
              "DDPG whose actor and critic share a 400-unit first layer",
              overrides={"shared_encoder": True}, presets=_DDPG_PRESETS),
    Algorithm("ensemble-ddpg", "ace", C.ACEConfig, "offpolicy.agents.ace:ACE", _CONT,
              "ACE without tree search (d=0): N actors, argmax over the critic",
              overrides={"plan_depth": 0}, presets={"paper": {}}),
    Algorithm("ace", "ace", C.ACEConfig, "offpolicy.agents.ace:ACE", _CONT,
              "actor ensemble + look-ahead tree search over a value-prediction model",
              presets=_ACE_PRESETS),
    Algorithm("ace-alt", "ace", C.ACEConfig, "offpolicy.agents.ace:ACE", _CONT,
              "ACE updating only the actor selected when acting",
              overrides={"actor_update": "selected"}, presets=_ACE_PRESETS),
    Algorithm("tm-ace", "ace", C.ACEConfig, "offpolicy.agents.ace:ACE", _CONT,
              "ACE with a latent transition model; tree search only when acting",
              overrides={"model": "transition"}, presets=_ACE_PRESETS),
]}


def get(name: str) -> Algorithm:
    if name not in ALGORITHMS:
        hint = did_you_mean(name, ALGORITHMS)
        raise OffpolicyError(
            f"unknown algorithm '{name}'{hint} (valid: {', '.join(ALGORITHMS)})")
    return ALGORITHMS[name]


@dataclass
class RunConfig:
    """Everything a run needs: the algorithm name, the loop config and the algorithm config."""

    algo: str
    train: C.TrainConfig
    agent: Any  # the section's dataclass
    preset: str | None = None

    @property
    def section(self) -> str:
        return get(self.algo).section

    def to_dict(self) -> dict[str, Any]:
        d = {"algo": self.algo, "preset": self.preset, "train": C.to_dict(self.train)}
        d[self.section] = C.to_dict(self.agent)
        return d

    # training fields a resumed run may change; every other field must match the saved run
    RESUME_CHANGEABLE = frozenset({"steps", "quiet", "checkpoint_every", "log_every"})

    def resumed_with(self, requested: RunConfig, train_fields: set[str] = frozenset(),
                     agent_fields: set[str] = frozenset(), where: str = "the run") -> RunConfig:
        """This (saved) run continued with what the user set now: ``requested`` holds the
        newly resolved config and ``train_fields`` / ``agent_fields`` the names set
        explicitly (by flag, file or preset). Changing an algorithm or any field outside
        :attr:`RESUME_CHANGEABLE` raises; the changeable ones are taken over."""
        if requested.algo != self.algo:
            raise OffpolicyError(f"cannot resume: {where} is a {self.algo} run, "
                                 f"not {requested.algo}")
        new_t, old_t = C.to_dict(requested.train), C.to_dict(self.train)
        new_a, old_a = C.to_dict(requested.agent), C.to_dict(self.agent)
        changed = [k for k in train_fields if k in new_t and new_t[k] != old_t[k]
                   and k not in self.RESUME_CHANGEABLE]
        changed += [f"{self.section}.{k}" for k in agent_fields
                    if k in new_a and new_a[k] != old_a[k]]
        if changed:
            raise OffpolicyError(
                f"cannot change {', '.join(sorted(changed))} when resuming {where} "
                f"(changeable: {', '.join(sorted(self.RESUME_CHANGEABLE))})")
        out = copy.deepcopy(self)
        for k in self.RESUME_CHANGEABLE & set(train_fields):
            setattr(out.train, k, getattr(requested.train, k))
        return out

    @staticmethod
    def from_dict(d: dict[str, Any], where: str = "config") -> RunConfig:
        if not isinstance(d, dict) or "algo" not in d:
            raise OffpolicyError(f"{where}: expected a mapping with an 'algo' key")
        return resolve(d["algo"], preset=d.get("preset"), file_dict=d, where=where)


def resolve(algo: str, preset: str | None = None, file_dict: dict[str, Any] | None = None,
            train_overrides: dict[str, Any] | None = None,
            agent_overrides: dict[str, Any] | None = None, where: str = "config") -> RunConfig:
    """Build and validate a RunConfig: defaults <- algorithm <- preset <- file <- overrides."""
    spec = get(algo)
    train = C.TrainConfig()
    agent = C.apply_overrides(spec.config_cls(), copy.deepcopy(spec.overrides), spec.section)
    if preset is not None:
        if not isinstance(preset, str) or preset not in spec.presets:
            raise OffpolicyError(
                f"unknown preset '{preset}' for {algo} (valid: {', '.join(spec.presets)})")
        C.apply_overrides(agent, spec.presets[preset], spec.section)
    if file_dict:
        extra = set(file_dict) - {"algo", "preset", "train", spec.section}
        if extra:
            raise OffpolicyError(
                f"{where}: unknown section(s) {', '.join(sorted(extra))} for {algo} "
                f"(valid: algo, preset, train, {spec.section})")
        if file_dict.get("algo", algo) != algo:
            raise OffpolicyError(
                f"{where}: is for algorithm '{file_dict['algo']}', not '{algo}'")
        C.apply_overrides(train, file_dict.get("train") or {}, f"{where}:train")
        C.apply_overrides(agent, file_dict.get(spec.section) or {}, f"{where}:{spec.section}")
    C.apply_overrides(train, train_overrides or {}, "train")
    C.apply_overrides(agent, agent_overrides or {}, spec.section)
    C.validate(train)
    C.validate(agent, spec.section)
    if train.batch_size > train.buffer_size:
        raise OffpolicyError(f"--batch-size ({train.batch_size}) must not exceed --buffer-size "
                             f"({train.buffer_size})")
    return RunConfig(algo, train, agent, preset)


def build_agent(run: RunConfig, obs_shape: tuple[int, ...], action_spec) -> Any:
    spec = get(run.algo)
    if action_spec.kind not in spec.action_kinds:
        raise OffpolicyError(
            f"{run.algo} does not support {action_spec.kind} actions ({run.train.env} has "
            f"{action_spec.describe()}); {run.algo} supports: {', '.join(spec.action_kinds)}")
    module, cls = spec.builder.split(":")
    return getattr(importlib.import_module(module), cls)(run.agent, obs_shape, action_spec)
