"""Agents: one file per family. Each exposes init(key), a pure update(state, batch),
acting_params(state), policy(params, obs) and make_actor(seed); none touches an env."""
