"""offpolicy: off-policy deep RL with experience replay (ACE, AQL, ReF-ER, ACER, DDPG family).

    import offpolicy
    agent = offpolicy.make("ace", env="HalfCheetah-v5", seed=0, num_actors=5)
    agent.learn(100_000)
"""

__version__ = "0.1.0"

__all__ = ["__version__", "load", "make"]


def make(*args, **kwargs):
    from offpolicy.api import make as _make

    return _make(*args, **kwargs)


def load(*args, **kwargs):
    from offpolicy.api import load as _load

    return _load(*args, **kwargs)


make.__doc__ = "Create an agent; see offpolicy.api.make."
load.__doc__ = "Load an agent from a run or checkpoint directory; see offpolicy.api.load."
