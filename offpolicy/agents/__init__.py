"""Agents: one file per family, each implementing the protocol of ``agents/base.py``
(data spec, behaviour and write-back fields, init, policy, update, acting_params); none
touches an environment."""
