"""Remember and Forget Experience Replay (ReF-ER; Novati & Koumoutsakos 2019, Sec. 3).

The rules, as pure JAX functions an agent's jitted update calls, and the settings that say which
replay a run uses (``--replay er|per|refer|refer1|refer2``):

* importance weight (Sec. 2): rho_t = pi(a_t|s_t) / mu_t(a_t|s_t), computed from the log-ratio
  clipped to [-log rho_max, log rho_max] (rho_max = 1e3, the clip the paper applies to ReF-ER-2's
  weights in Sec. 5.3), refreshed with the pre-update network each time a step is sampled and
  written back to replay with its far-policy flag;
* Rule 1 (Sec. 3): a sample is near-policy iff 1/c_max < rho_t < c_max; far-policy samples
  contribute no gradient of the algorithm's own losses (which terms: each agent's docstring);
* Rule 2 (Eq. 10-11): g = beta g_hat - (1 - beta) grad E[KL(mu_t || pi)], i.e. the agent
  minimises beta * L_policy + (1 - beta) * mean KL(mu_t || pi(.|s_t)), where L_policy is its
  policy-gradient term (masked by Rule 1). KL(mu || pi) is differentiated in this direction,
  through pi's statistics only (mu is stored data);
* Eq. 12: beta <- (1 - eta_beta) beta + eta_beta [n_far / N <= D], with n_far the number of
  far-policy steps in the whole memory, kept as a running count by replay from the stored
  flags (``offpolicy.replay.extensions.FarCount``), not scanned per step;
* Eq. 13: c_max(k) = 1 + C / (1 + A k) and learning rate eta / (1 + A k), k the gradient step.

Rule 1 alone (``refer1``) keeps beta = 1 (no penalty); Rule 2 alone (``refer2``) never masks.
Plain ER and PER neither mask nor penalise; their KL and far-policy fraction are still measured
(diagnostics) whenever the agent stores its behaviour policy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from offpolicy.replay.keys import FAR, FAR_FRACTION, PRIORITY, RHO, WEIGHT

REPLAYS = ("er", "per", "refer", "refer1", "refer2")


@dataclass(frozen=True)
class ReplaySettings:
    """Which replay a run uses and the ReF-ER / PER constants (from ``TrainConfig``)."""

    kind: str = "er"
    c: float = 4.0  # C of Eq. 13
    anneal: float = 5e-7  # A of Eq. 13
    far_fraction: float = 0.1  # D of Eq. 12
    beta0: float = 1.0
    beta_step: float = 1e-3  # eta of Eq. 12
    rho_max: float = 1e3
    per_alpha: float = 0.7
    per_beta0: float = 0.5
    diagnostics: bool = False  # er / per: measure rho, KL and far flags all the same

    def __post_init__(self):
        if self.kind not in REPLAYS:
            raise ValueError(f"unknown replay {self.kind!r} (valid: {', '.join(REPLAYS)})")

    @property
    def rule1(self) -> bool:
        """Far-policy samples' gradients are zeroed."""
        return self.kind in ("refer", "refer1")

    @property
    def rule2(self) -> bool:
        """The KL penalty with the adaptive beta."""
        return self.kind in ("refer", "refer2")

    @property
    def refer(self) -> bool:
        return self.kind.startswith("refer")

    @property
    def prioritized(self) -> bool:
        return self.kind == "per"

    @property
    def tracks_behaviour(self) -> bool:
        """Store the behaviour policy and refresh rho per sampled step (ReF-ER, or its
        diagnostics under ER/PER)."""
        return self.refer or self.diagnostics


ER = ReplaySettings()  # plain uniform replay: the default of agents that take a replay choice
REFER = ReplaySettings("refer")


def importance_weight(log_pi: jax.Array, log_mu: jax.Array, rho_max: float) -> jax.Array:
    """rho = exp(clip(log pi - log mu, -log rho_max, log rho_max)) (Sec. 2), no gradient."""
    bound = math.log(rho_max)
    return jnp.exp(jnp.clip(jax.lax.stop_gradient(log_pi - log_mu), -bound, bound))


def fixed_std_log_ratio(action: jax.Array, behaviour_mean: jax.Array, mean: jax.Array,
                        sigma: float) -> jax.Array:
    """log pi(a|s) - log mu_t(a|s) [B] for pi = N(mean, sigma^2 I), mu_t = N(behaviour_mean,
    sigma^2 I): DDPG's and NAF's Gaussian exploration (Sec. 2)."""
    return jnp.sum((action - behaviour_mean) ** 2 - (action - mean) ** 2,
                   axis=-1) / (2.0 * sigma**2)


def fixed_std_kl(behaviour_mean: jax.Array, mean: jax.Array, sigma: float) -> jax.Array:
    """KL(mu_t || pi) [B] for two Gaussians of std sigma (symmetric in the means)."""
    return jnp.sum((behaviour_mean - mean) ** 2, axis=-1) / (2.0 * sigma**2)


def c_max(step: jax.Array, c: float, anneal: float) -> jax.Array:
    """Eq. 13: c_max(k) = 1 + C / (1 + A k)."""
    return 1.0 + c / (1.0 + anneal * step.astype(jnp.float32))


def near_policy(rho: jax.Array, cmax: jax.Array) -> jax.Array:
    """Rule 1: 1.0 where 1/c_max < rho < c_max, else 0.0."""
    return ((rho > 1.0 / cmax) & (rho < cmax)).astype(jnp.float32)


def update_beta(beta: jax.Array, far_fraction: jax.Array, target: float, step: float
                ) -> jax.Array:
    """Eq. 12: beta <- (1 - eta) beta + eta [n_far / N <= D]. Fixed points: 0 while the far
    fraction stays above D, 1 while it stays at or below D."""
    # beta + eta (1[...] - beta), the same affine step written so that float32 tracks the
    # float64 recursion (within 5e-7 over 10^4 steps of eta 1e-4; (1 - eta) beta drifts 3e-5:
    # 1 - 1e-4 is not a float32)
    return beta + step * ((far_fraction <= target).astype(jnp.float32) - beta)


def annealed_lr(lr: float, anneal: float):
    """Eq. 13's learning rate eta / (1 + A k) as an optax schedule of the optimiser's count k
    (from 0; the authors' smarties divides by 1 + A (k + 1), a relative difference of A)."""
    return lambda k: lr / (1.0 + anneal * k)


def annealed_adam(lr: float, anneal: float) -> optax.GradientTransformation:
    """Adam with Eq. 13's learning rate eta / (1 + A k), k counted by the optimiser."""
    return optax.adam(annealed_lr(lr, anneal))


def init_state(settings: ReplaySettings) -> dict[str, jax.Array]:
    """The ReF-ER part of an agent's state: beta and the gradient-step counter k."""
    beta0 = settings.beta0 if settings.rule2 else 1.0
    return {"beta": jnp.asarray(beta0, jnp.float32), "step": jnp.zeros((), jnp.int32)}


def rules(settings: ReplaySettings, state: dict, rho: jax.Array, far_fraction: jax.Array):
    """One update's rule quantities: (weights, beta, new_state, cmax, far).

    ``weights`` [B] multiplies each sample's algorithm loss: 1 everywhere, except with Rule 1,
    where far-policy samples get 0. ``beta`` is the penalty coefficient this update uses (1
    without Rule 2). ``far`` [B] is the far-policy flag to write back (measured with every
    replay, so ER's far fraction is a diagnostic too).
    """
    cmax = c_max(state["step"], settings.c, settings.anneal)
    near = near_policy(rho, cmax)
    weights = near if settings.rule1 else jnp.ones_like(near)
    beta = state["beta"]
    new_beta = (update_beta(beta, far_fraction, settings.far_fraction, settings.beta_step)
                if settings.rule2 else beta)
    new_state = {"beta": new_beta, "step": state["step"] + 1}
    return weights, beta, new_state, cmax, 1.0 - near


def diagnostics(rho: jax.Array, kl: jax.Array, far: jax.Array, beta: jax.Array,
                cmax: jax.Array, far_fraction: jax.Array) -> dict[str, jax.Array]:
    """The logged ReF-ER quantities (train.csv / TensorBoard; `offpolicy plot --metric`)."""
    return {"kl_mu_pi": jnp.mean(kl), "far_policy_fraction": far_fraction,
            "batch_far_fraction": jnp.mean(far), "beta": beta, "c_max": cmax,
            "rho_mean": jnp.mean(rho)}


class Weighting(NamedTuple):
    """What the replay choice contributes to one update (:func:`weighting`)."""

    weights: Any  # [B] Rule 1's near-policy mask times PER's importance weights
    rule_weights: Any  # [B] Rule 1's mask alone (a term PER does not weight)
    beta: jax.Array  # Rule 2's penalty coefficient this update uses (1 without Rule 2)
    state: dict  # the agent's new ReF-ER state (beta, step)
    writeback: dict  # the refreshed importance weight and far-policy flag of each step
    rho: jax.Array
    far: jax.Array
    cmax: jax.Array
    far_fraction: jax.Array

    def metrics(self, kl: jax.Array) -> dict[str, jax.Array]:
        """ReF-ER's diagnostics, with the batch's KL(mu_t || pi) ``kl`` [B]."""
        return diagnostics(self.rho, kl, self.far, self.beta, self.cmax, self.far_fraction)


def per_weights(settings: ReplaySettings, batch: dict) -> Any:
    """PER's importance-sampling weights of a batch (1 for every other replay)."""
    return batch[WEIGHT] if settings.prioritized else 1.0


def weighting(settings: ReplaySettings, state: dict, rho: jax.Array, batch: dict
              ) -> Weighting:
    """The ReF-ER / PER weighting of one update of an agent that stores its behaviour policy:
    Rule 1's mask, Rule 2's beta and its state (:func:`rules`) from the refreshed weights
    ``rho`` [B], PER's weights, and the write-back of rho and the far flags."""
    far_fraction = batch[FAR_FRACTION]
    weights, beta, new_state, cmax, far = rules(settings, state, rho, far_fraction)
    return Weighting(weights * per_weights(settings, batch), weights, beta, new_state,
                     {RHO: rho, FAR: far}, rho, far, cmax, far_fraction)


def priority(settings: ReplaySettings, td_abs: jax.Array) -> dict:
    """The write-back entry of PER's new priorities (none for other replays)."""
    return {PRIORITY: td_abs} if settings.prioritized else {}
