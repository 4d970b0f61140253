"""Our TD3's (or SAC's) initial networks against SB3's, as distributions over seeds.

    .venv-bench/bin/python benchmarks/init_law.py [--algo td3|sac] [--seeds 150] [--out-dir DIR]

Run in the bench venv (``make bench-venv``: SB3 and torch) with this checkout on the path (the
script puts it there). For each of ``--seeds`` seeds it draws our TD3's initial actor and twin
critics (``--preset sb3``: PyTorch's law, U(+-1/sqrt(fan_in)) for weights and biases) and SB3's
(``torch.manual_seed(seed)``, 400-300 relu as in the learning runs), evaluates both on the same
300 HalfCheetah-v5 states (a uniformly random rollout) and actions, and compares per draw:
the mean |action|, the action's spread over states, |mean action|, the mean and spread of
Q_1, and |Q_1 - Q_2|. A two-sample Kolmogorov-Smirnov test per statistic asks whether the two
initialisers' draws differ in law (results/init_law_td3.md).

``--algo sac``: our SAC's draw (``--preset sb3``) against SB3's SAC (256-256 relu); the action is
the deterministic one, tanh of the Gaussian's mean, and the mean log standard deviation joins
the statistics (results/init_law_sac.md).

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
ALGOS = ("td3", "sac")


def statistics(action: np.ndarray, q: np.ndarray, log_std: np.ndarray | None = None
               ) -> list[float]:
    """``action`` [N, m] of the actor, ``q`` [2, N] of the twin critics on N states; with
    ``log_std`` [N, m] (SAC), its mean too."""
    out = [float(np.abs(action).mean()), float(action.std(0).mean()),
           float(np.abs(action.mean(0)).mean()), float(q[0].mean()), float(q[0].std()),
           float(np.abs(q[0] - q[1]).mean())]
    return out if log_std is None else [*out, float(log_std.mean())]


def ours_draw(agent, algo: str):
    """seed -> (action, q, log_std or None) of our ``algo``'s initial networks."""
    import jax
    import jax.numpy as jnp

    def nets(prm, o, u):
        q = agent.q(prm.critic, o, u)
        if algo == "td3":
            return agent.pi(prm.actor, o), q, None
        st = agent.stats(prm.actor, o)
        return jnp.tanh(st["mean"]), q, jnp.log(st["std"])

    f = jax.jit(nets)
    return lambda seed, o, u: [None if x is None else np.asarray(x) for x in
                               f(agent.init(jax.random.PRNGKey(seed)).params, o, u)]


def sb3_draw(algo: str, env, seed: int, obs: np.ndarray, act: np.ndarray):
    """(action, q, log_std or None) of SB3's initial networks for ``seed``."""
    import stable_baselines3
    import torch
    from peer_baselines import BASELINES  # the learning runs' networks

    torch.manual_seed(seed)
    model = getattr(stable_baselines3, algo.upper())(
        "MlpPolicy", env, policy_kwargs=dict(net_arch=list(BASELINES[algo].hidden)), seed=seed,
        device="cpu")
    o, u = torch.as_tensor(obs), torch.as_tensor(act)
    with torch.no_grad():
        q = np.stack([x.numpy()[:, 0] for x in model.critic(o, u)])
        if algo == "td3":
            return model.actor(o).numpy(), q, None
        mean, log_std, _ = model.actor.get_action_dist_params(o)
        return torch.tanh(mean).numpy(), q, log_std.numpy()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algo", choices=ALGOS, default="td3")
    p.add_argument("--seeds", type=int, default=150)
    p.add_argument("--out-dir", type=Path, default=None)
    a = p.parse_args()

    import gymnasium as gym
    from peer_baselines import BASELINES
    from scipy import stats
    from update_parity import ours_agent

    env = gym.make("HalfCheetah-v5")
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    obs = np.array([env.step(rng.uniform(-1, 1, 6))[0] for _ in range(300)], np.float32)
    act = rng.uniform(-1, 1, (300, 6)).astype(np.float32)
    names = STATS if a.algo == "td3" else (*STATS, "mean_log_std")
    our_draw = ours_draw(ours_agent(algo=a.algo), a.algo)
    rows = []
    for seed in range(a.seeds):
        rows.append(["ours", seed, *statistics(*our_draw(seed, obs, act))])
        rows.append(["sb3", seed, *statistics(*sb3_draw(a.algo, env, seed, obs, act))])
    table = np.array([r[2:] for r in rows])
    ours, sb3 = table[0::2], table[1::2]
    lines = ["| statistic | ours (mean ± sd) | SB3 (mean ± sd) | KS p |", "|---|---:|---:|---:|"]
    for i, name in enumerate(names):
        ks = stats.ks_2samp(ours[:, i], sb3[:, i]).pvalue
        lines.append(f"| {name} | {ours[:, i].mean():.4f} ± {ours[:, i].std():.4f} | "
                     f"{sb3[:, i].mean():.4f} ± {sb3[:, i].std():.4f} | {ks:.3g} |")
    print("\n".join(lines))
    if a.out_dir is not None:
        a.out_dir.mkdir(parents=True, exist_ok=True)
        stem = f"init_law_{a.algo}"
        with open(a.out_dir / f"{stem}.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["lib", "seed", *names])
            w.writerows(rows)
        title, net = a.algo.upper(), "-".join(map(str, BASELINES[a.algo].hidden))
        algo_flag = "" if a.algo == "td3" else f" --algo {a.algo}"
        head = [
            f"# Initial draws: our {title} against SB3's",
            "",
            f"Command: `.venv-bench/bin/python benchmarks/init_law.py{algo_flag} --seeds "
            f"{a.seeds} --out-dir benchmarks/results`",
            "",
            f"{a.seeds} seeds each: our {title}'s initial actor and twin critics (`--preset "
            f"sb3`, PyTorch's law) and SB3's ({net} relu), on the same 300 HalfCheetah-v5 "
            "states of a random rollout and 300 uniform actions. Per draw: mean |action|, the "
            "action's spread over states, |mean action|, mean and spread of Q_1, mean |Q_1 - "
            "Q_2|" + ("" if a.algo == "td3" else "; the action is tanh of the Gaussian's mean, "
                      "and the mean log standard deviation") + ". KS p: two-sample "
            "Kolmogorov-Smirnov test of the two libraries' draws (per-draw values in "
            f"`{stem}.csv`).",
            "",
        ]
        (a.out_dir / f"{stem}.md").write_text("\n".join(head + lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
