"""offpolicy: off-policy deep RL with experience replay (ACE, AQL, ReF-ER, ACER, DDPG family).

    import offpolicy
    agent = offpolicy.make("ace", env="HalfCheetah-v5", seed=0, num_actors=5)
    agent.learn(100_000)
"""

__version__ = "0.1.0"

__all__ = ["RunView", "__version__", "callbacks", "load", "make"]


def make(*args, **kwargs):
    from offpolicy.api import make as _make

    return _make(*args, **kwargs)


def load(*args, **kwargs):
    from offpolicy.api import load as _load

    return _load(*args, **kwargs)


def __getattr__(name: str):
    # on first use, so that `import offpolicy` stays light (no JAX)
    if name == "RunView":
        from offpolicy.training.callbacks import RunView

        return RunView
    if name == "callbacks":
        import importlib

        return importlib.import_module("offpolicy.callbacks")
    raise AttributeError(f"module 'offpolicy' has no attribute {name!r}")


make.__doc__ = "Create an agent; see offpolicy.api.make."
load.__doc__ = "Load an agent from a run or checkpoint directory; see offpolicy.api.load."
