"""benchmarks/hybrid.py, issue 33's ablations: SB3's TD3 and SAC started from our initial draw
(``--init ours``) and SB3's TD3 loop driving our update (``--update ours``).

The peers live in the bench venv (``make bench-venv``: torch, SB3, SBX), never in ours, so these
tests run the bench venv's interpreter and are skipped where it is absent (as in CI).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH_PYTHON = ROOT / ".venv-bench" / "bin" / "python"

pytestmark = pytest.mark.skipif(not BENCH_PYTHON.exists(),
                                reason="no bench venv (make bench-venv)")

# SB3's networks after our_initial_draw compute what ours compute from our draw: the actor's
# deterministic action and both critics' values on random inputs (not just the parameters'
# round trip, which our_initial_draw checks itself); the targets start equal to the online
# networks; before the copy SB3's own draw acts otherwise.
INIT_OURS = r'''
import sys
import gymnasium as gym
import jax
import numpy as np
import torch
sys.path.insert(0, sys.argv[3])
import hybrid
import peers
from update_parity import ours_agent

algo, env_id, seed = sys.argv[1], sys.argv[2], 3
model = peers.make_baseline("sb3", algo, gym.make(env_id), peers.BASELINES[algo], 100, 0)
agent = ours_agent(env_id, algo)
params = agent.init(jax.random.PRNGKey(seed))["params"]
rng = np.random.default_rng(0)
obs = rng.uniform(-1, 1, (8, *model.observation_space.shape)).astype(np.float32)
act = rng.uniform(-1, 1, (8, *model.action_space.shape)).astype(np.float32)

def sb3_actions():
    with torch.no_grad():
        o = torch.as_tensor(obs)
        return (model.actor(o, deterministic=True) if algo == "sac" else model.actor(o)).numpy()

ours = np.asarray(agent.policy(params["actor"], obs, jax.random.PRNGKey(0), False)[0])
assert not np.allclose(sb3_actions(), ours, atol=1e-3)
hybrid.our_initial_draw(model, env_id, seed, algo)
np.testing.assert_allclose(sb3_actions(), ours, atol=2e-6)
with torch.no_grad():
    theirs = np.stack([q.numpy()[:, 0] for q in model.critic(torch.as_tensor(obs),
                                                               torch.as_tensor(act))])
np.testing.assert_allclose(theirs, np.asarray(agent.q(params["critic"], obs, act)).reshape(2, -1),
                           rtol=1e-5, atol=1e-5)
pairs = [(model.critic, model.critic_target)]
if algo == "td3":
    pairs.append((model.actor, model.actor_target))
for online, target in pairs:
    for a, b in zip(online.parameters(), target.parameters(), strict=True):
        assert torch.equal(a, b)
print("ok")
'''

# SB3's TD3 loop with our update: it trains, and its state (our trees, optimiser and key)
# restores into a fresh hybrid whose SB3 actor then acts as the trained one's.
UPDATE_OURS = r'''
import sys
import gymnasium as gym
import jax
import numpy as np
import torch
sys.path.insert(0, sys.argv[1])
import hybrid
import peers

cfg = peers.BaselineConfig((400, 300), 256, 1e-3, buffer_size=5000)  # our preset sb3's

def built():
    model = peers.make_baseline("sb3", "td3", gym.make("Pendulum-v1"), cfg, 100, 0)
    return model, hybrid.OurUpdate(model, "Pendulum-v1", 0, "own")

model, ours = built()
before = [np.asarray(x) for x in jax.tree_util.tree_leaves(ours.state["params"])]
model.learn(300)
assert model._n_updates == 200
after = jax.tree_util.tree_leaves(ours.state["params"])
assert not all(np.array_equal(a, np.asarray(b)) for a, b in zip(before, after))
fresh_model, fresh = built()
fresh.restore(ours.state_tree())
for a, b in zip(after, jax.tree_util.tree_leaves(fresh.state["params"]), strict=True):
    assert np.array_equal(np.asarray(a), np.asarray(b))
obs = torch.as_tensor(np.random.default_rng(1).uniform(-1, 1, (8, 3)).astype(np.float32))
with torch.no_grad():
    assert torch.equal(model.actor(obs), fresh_model.actor(obs))
print("ok")
'''


def _run(script: str, *args: str) -> None:
    r = subprocess.run([str(BENCH_PYTHON), "-c", script, *args], capture_output=True,
                       text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]


@pytest.mark.parametrize("algo", ["td3", "sac"])
def test_sb3_from_our_initial_draw_computes_what_ours_computes(algo):
    _run(INIT_OURS, algo, "Pendulum-v1", str(ROOT / "benchmarks"))


def test_our_update_in_sb3s_loop_trains_and_restores():
    _run(UPDATE_OURS, str(ROOT / "benchmarks"))
