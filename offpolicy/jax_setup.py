"""JAX set-up: persistent compilation cache, XLA:CPU defaults and where acting runs.

Not an environment concern, so it lives at the package root (envs/ holds environments only).
"""

from __future__ import annotations

import os
from pathlib import Path

_configured = False


def configure_jax() -> None:
    """Turn on JAX's persistent compilation cache (once per process).

    Compiles of the update take seconds; caching them on disk makes the second run of the same
    configuration (tests, resumed runs, benchmarks) start at once. Every compile is cached, the
    short ones too: building an agent runs its initializers eagerly, some forty small
    computations of 20-40 ms each, and reading them back instead of compiling them made a tiny
    400-step DDPG run start to end 2.2 s faster (6.1-6.9 s against 8.3-9.0 s with a 0.2 s
    threshold, on the project's 2-core CPU). ``OFFPOLICY_CACHE_DIR`` overrides the location;
    ``OFFPOLICY_CACHE_DIR=off`` disables it.
    """
    global _configured
    if _configured:
        return
    _configured = True
    apply_xla_cpu_defaults()
    import jax

    where = os.environ.get("OFFPOLICY_CACHE_DIR", str(Path.home() / ".cache" / "offpolicy" / "jax"))
    if where.lower() == "off":
        return
    try:
        jax.config.update("jax_compilation_cache_dir", where)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    except Exception:  # an older JAX without these options: run without the cache
        pass


# XLA:CPU flags that make our updates faster, with the jaxlib versions they were measured on.
# jaxlib 0.10 sends mid-size GEMMs to YNNPACK by default; with XLA's own (Eigen) GEMMs the
# update runs 1.08x (ACE(5,1), ACE(5,2)), 1.12x (ACE(10,1)) and 1.07x (DDPG) faster on the
# project's 2-core CPU (paired medians: benchmarks/results/throughput_xla.md). An unknown flag
# is fatal to XLA, so they are set only for the jaxlib versions they were measured on.
XLA_CPU_DEFAULTS = {"xla_cpu_experimental_ynn_fusion_type": ""}
XLA_CPU_DEFAULTS_JAXLIB = ("0.10.",)


def _jaxlib_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("jaxlib")
    except Exception:  # not installed as a distribution: no defaults
        return None


def _backends_started() -> bool:
    """Whether XLA already read ``XLA_FLAGS`` in this process (a backend was created)."""
    try:
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except Exception:  # a JAX without this private helper: assume not started
        return False


def _flag_names(flags: str) -> set[str]:
    return {f.split("=", 1)[0] for f in flags.split()}


def apply_xla_cpu_defaults() -> list[str]:
    """Add :data:`XLA_CPU_DEFAULTS` to ``XLA_FLAGS`` (once, before XLA's first use).

    A flag the user already sets in ``XLA_FLAGS`` is left as it is; ``OFFPOLICY_XLA_DEFAULTS=off``
    adds none. XLA reads ``XLA_FLAGS`` when its first backend starts, so this runs in
    :func:`configure_jax`, which ``build()`` calls first (every CLI command and ``offpolicy.make``
    / ``offpolicy.load`` build one). A program that ran JAX computations before that gets no
    defaults and a warning, and ``XLA_FLAGS`` is left alone (it also keys JAX's compilation
    cache, which must not claim flags that did not apply). Returns the flags added.
    """
    if os.environ.get("OFFPOLICY_XLA_DEFAULTS", "").lower() == "off":
        return []
    jaxlib_version = _jaxlib_version()
    if jaxlib_version is None or not jaxlib_version.startswith(XLA_CPU_DEFAULTS_JAXLIB):
        return []
    flags = os.environ.get("XLA_FLAGS", "")
    present = _flag_names(flags)
    added = [f"--{k}={v}" for k, v in XLA_CPU_DEFAULTS.items() if f"--{k}" not in present]
    if not added:
        return []
    if _backends_started():
        import warnings

        warnings.warn("JAX ran before offpolicy configured it: its XLA:CPU defaults "
                      f"({' '.join(added)}) are not applied in this process; set them in "
                      "XLA_FLAGS or import offpolicy before running JAX code for full speed",
                      stacklevel=3)
        return []
    os.environ["XLA_FLAGS"] = " ".join([flags, *added]).strip()
    return added


def host_device():
    """The CPU device that acting runs on, whatever the default backend is.

    A jitted act that round-trips a GPU costs ~0.7 ms per env step on an H100 against ~0.03 ms
    on a host CPU, so acting runs on the host and only parameters travel, except in the
    pipelined loop, whose parameters change every step (``HostPolicy(on_default_device=True)``).
    """
    import jax

    return jax.devices("cpu")[0]

