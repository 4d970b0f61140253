"""Our TD3's initial networks against SB3's, as distributions over seeds.

    .venv-bench/bin/python benchmarks/init_law.py [--seeds 150] [--out-dir DIR]

Run in the bench venv (``make bench-venv``: SB3 and torch) with this checkout on the path (the
script puts it there). For each of ``--seeds`` seeds it draws our TD3's initial actor and twin
critics (``--preset sb3``: PyTorch's law, U(+-1/sqrt(fan_in)) for weights and biases) and SB3's
(``torch.manual_seed(seed)``, 400-300 relu as in the learning runs), evaluates both on the same
300 HalfCheetah-v5 states (a uniformly random rollout) and actions, and compares per draw:
the mean |action|, the action's spread over states, |mean action|, the mean and spread of
Q_1, and |Q_1 - Q_2|. A two-sample Kolmogorov-Smirnov test per statistic asks whether the two
initialisers' draws differ in law (results/init_law_td3.md).

Issue 33's ablation (results/learning_td3-loop-ablation.md) found the 40k-step outcome on
HalfCheetah-v5 to follow the initial draw; this checks that the two libraries' draws come from
the same law, so that a difference over five seeds reads as which five draws each got.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

STATS = ("mean_abs_action", "action_spread", "abs_mean_action", "q_mean", "q_spread",
         "twin_gap")


def statistics(action: np.ndarray, q: np.ndarray) -> list[float]:
    """``action`` [N, m] of the actor, ``q`` [2, N] of the twin critics on N states."""
    return [float(np.abs(action).mean()), float(action.std(0).mean()),
            float(np.abs(action.mean(0)).mean()), float(q[0].mean()), float(q[0].std()),
            float(np.abs(q[0] - q[1]).mean())]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=150)
    p.add_argument("--out-dir", type=Path, default=None)
    a = p.parse_args()

    import gymnasium as gym
    import jax
    import torch
    from scipy import stats
    from stable_baselines3 import TD3
    from update_parity import ours_agent

    env = gym.make("HalfCheetah-v5")
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    obs = np.array([env.step(rng.uniform(-1, 1, 6))[0] for _ in range(300)], np.float32)
    act = rng.uniform(-1, 1, (300, 6)).astype(np.float32)
    agent = ours_agent()
    pi = jax.jit(lambda prm, o: agent.pi(prm["actor"], o))
    qf = jax.jit(lambda prm, o, u: agent.q(prm["critic"], o, u))
    rows = []
    for seed in range(a.seeds):
        prm = agent.init(jax.random.PRNGKey(seed))["params"]
        rows.append(["ours", seed, *statistics(np.asarray(pi(prm, obs)),
                                               np.asarray(qf(prm, obs, act)))])
        torch.manual_seed(seed)
        model = TD3("MlpPolicy", env, policy_kwargs=dict(net_arch=[400, 300]), seed=seed,
                    device="cpu")
        with torch.no_grad():
            action = model.actor(torch.as_tensor(obs)).numpy()
            q = np.stack([x.numpy()[:, 0] for x in model.critic(torch.as_tensor(obs),
                                                                 torch.as_tensor(act))])
        rows.append(["sb3", seed, *statistics(action, q)])
    table = np.array([r[2:] for r in rows])
    ours, sb3 = table[0::2], table[1::2]
    lines = ["| statistic | ours (mean ± sd) | SB3 (mean ± sd) | KS p |", "|---|---:|---:|---:|"]
    for i, name in enumerate(STATS):
        ks = stats.ks_2samp(ours[:, i], sb3[:, i]).pvalue
        lines.append(f"| {name} | {ours[:, i].mean():.4f} ± {ours[:, i].std():.4f} | "
                     f"{sb3[:, i].mean():.4f} ± {sb3[:, i].std():.4f} | {ks:.3g} |")
    print("\n".join(lines))
    if a.out_dir is not None:
        a.out_dir.mkdir(parents=True, exist_ok=True)
        with open(a.out_dir / "init_law_td3.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["lib", "seed", *STATS])
            w.writerows(rows)
        head = [
            "# Initial draws: our TD3 against SB3's",
            "",
            f"Command: `.venv-bench/bin/python benchmarks/init_law.py --seeds {a.seeds} "
            "--out-dir benchmarks/results`",
            "",
            f"{a.seeds} seeds each: our TD3's initial actor and twin critics (`--preset sb3`, "
            "PyTorch's law) and SB3's (400-300 relu), on the same 300 HalfCheetah-v5 states of "
            "a random rollout and 300 uniform actions. Per draw: mean |action|, the action's "
            "spread over states, |mean action|, mean and spread of Q_1, mean |Q_1 - Q_2|. KS p: "
            "two-sample Kolmogorov-Smirnov test of the two libraries' draws (per-draw values in "
            "`init_law_td3.csv`).",
            "",
        ]
        (a.out_dir / "init_law_td3.md").write_text("\n".join(head + lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
