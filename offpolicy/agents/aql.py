"""Amortized Q-learning (Van de Wiele, Warde-Farley, Mnih & Mnih 2020, "Q-Learning in
enormous action spaces via amortized approximate maximization", Sec. 4, Algorithms 1-2,
App. A1-A2) and its baselines Uniform-Q, QT-Opt (CEM) and exact Q, over any action space the
library describes: discrete, multi-discrete, continuous, discretized continuous
(``--discretize K``) and hybrid.

Search (one batched Q evaluation per state):
  A_U = {a^U_j}_{j=1..M} ~ Uniform(A_1 x ... x A_D),  A_mu = {a^mu_i}_{i=1..N} ~ mu(a|s)
  a*(s) = argmax_{a in A_U u A_mu} Q(s, a)                                    (Algorithm 1)
Uniform-Q searches A_U only; QT-Opt runs CEM (uniform samples, then independent Gaussians per
sub-action fit to the elites, a few iterations); exact Q takes every action.

Acting: a*(s), or with probability epsilon the first uniform sample a^U_1 (Algorithm 1); under
``--num-envs K`` the first floor(explore_fraction K) copies use explore_epsilon (App. A2).

Learning from unrolls of T steps (``sequences(T)``), a* recomputed with the current networks:
  G_t = r_t + gamma [(1 - lambda) Q'(s_{t+1}, a*(s_{t+1})) + lambda G_{t+1}]
        (Peng's Q(lambda), App. A2; returns.lambda_returns with the sampled argmax's value)
  L_Q  = mean_t 1/2 (sg(G_t) - Q(s_t, a_t))^2                                  (Eq. 4)
  L_mu = mean_t [-log mu(a*(s_t)|s_t) - lambda_H H(mu(.|s_t))]                 (Eq. 3)
Q' is Q itself (no target network, as in the paper) or a periodically copied target. For an
autoregressive proposal the entropy is the sum of the conditional entropies along the prefix
of one fresh proposal sample (the exact entropy of the joint has no closed form). Two Adam
optimisers (App. A1-A2), the proposal's features are its own (the Control Suite's shared state
embedding is the identity, so the proposal loss never moves the Q network).

Why a* is recomputed at learning time instead of stored when acting: the unrolls are replayed
many times, and an a* found with old parameters is an argmax of an old Q; the search at
learning time uses the Q being trained (Algorithm 2's learner gets a* from the actor because
its actors are fresh; with replay ratios of 8+ here they are not).

Recurrent core (``--aql.core lstm``, App. A1: on DeepMind Lab "a recurrent LSTM core with 256
cells" ends the shared state embedding): the Q network and the proposal read the core's
features of the unroll's history instead of the observations (``agents/recurrent.py``); as
the paper holds the shared embedding constant in the proposal loss, only the Q loss trains
the core (with the Q network's optimiser; a target network copies it with Q).

Network: the action embedding e(a) (one-hots, values, Platform's chosen parameter) joins the
Q network at hidden layer ``action_layer``, z = act(W_s h(s) + W_a e(a) + b), with the layers
before it (h) and the state's product W_s h(s) computed once per state, and the layers after
it per candidate. The default, 1, concatenates the action with the observation, as the paper
does on the Control Suite (its state embedding is the identity, Fig. 1).
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from offpolicy import returns
from offpolicy.agents.aql_proposal import Proposal
from offpolicy.agents.base import DEFAULT_CONTEXT, AgentContext, sequences
from offpolicy.agents.recurrent import Recurrence
from offpolicy.agents.types import AQLState
from offpolicy.config import AQLConfig
from offpolicy.envs import action_embedding as emb
from offpolicy.envs.spaces import ActionSpec
from offpolicy.errors import OffpolicyError
from offpolicy.networks import ACTIVATIONS, MLP, Dense
from offpolicy.replay.keys import ACTION, DISCOUNT, MASK, OBS, REWARD


class QNetwork(nn.Module):
    """Q(s, a) over C candidate actions per state. The action embedding joins at hidden layer
    ``action_layer`` (1: with the observation, as in the paper's Fig. 1, where the state
    embedding is the identity on the Control Suite). Layers before it run once per state; at
    the joining layer the state's part of the product, W_s h(s), is also computed once per
    state and only W_a e(a) and the later layers run per candidate."""

    hidden: tuple[int, ...]
    activation: str
    action_layer: int = 1

    @nn.compact
    def __call__(self, obs, action_embedding):
        """obs [..., d], action_embedding [..., C, E] -> Q [..., C]."""
        act = ACTIVATIONS[self.activation]
        j = min(self.action_layer, len(self.hidden)) - 1
        h = MLP(self.hidden[:j], self.activation)(obs) if j else obs
        state_part = Dense(self.hidden[j], name="merge_state")(h)[..., None, :]
        action_part = Dense(self.hidden[j], name="merge_action")(action_embedding)
        z = act(state_part + action_part)
        if j + 1 < len(self.hidden):
            z = MLP(self.hidden[j + 1:], self.activation, name="after")(z)
        return Dense(1, output=True, out_scale=1.0, name="out")(z)[..., 0]


class AQL:
    """AQL and its baselines (``search``), over sequences of T steps."""

    exploration_noise = None
    writeback_fields: dict = {}

    def __init__(self, config: AQLConfig, obs_shape: tuple[int, ...], spec: ActionSpec,
                 context: AgentContext = DEFAULT_CONTEXT):
        if len(obs_shape) != 1:
            raise OffpolicyError(f"aql takes flat observations, got shape {tuple(obs_shape)}")
        self.config, self.obs_shape, self.spec = config, tuple(obs_shape), spec
        self.context = context
        self.rec = Recurrence(config, ("embedding",), "orthogonal", "aql")
        self.data, self.core = self.rec.data(sequences(config.unroll_length)), self.rec.spec
        self.behaviour_fields = self.rec.behaviour_fields
        self.embedding = self.rec.core("embedding").module(None) if self.rec.enabled else None
        self.sub_actions = tuple(tuple(s) for s in spec.sub_actions())
        self.embed_dim = emb.embed_dim(spec, config.hybrid_embedding)
        self.q_net = QNetwork(tuple(config.hidden), config.activation, config.action_layer)
        self.features = MLP(tuple(config.proposal_hidden), config.activation)
        self.proposal = Proposal(self.sub_actions, config.autoregressive, config.proposal_std)
        self.search = config.search
        if self.search == "exact":
            self.all_actions = jnp.asarray(emb.enumerate_actions(spec, config.exact_limit))
        # Q of every action as a table when that costs no more than the candidates: a
        # candidate's Q is then looked up, not recomputed (the same argmax, at K/(N + M) of
        # the cost when N + M samples repeat K actions, e.g. CartPole's 2)
        self.table, self.strides = None, None
        sizes = emb.sub_action_sizes(spec)
        searched = {"proposal": config.proposal_samples + config.uniform_samples,
                    "uniform": config.uniform_samples}.get(self.search, 0)
        if config.lookup and np.all(sizes > 0) and 0 < math.prod(sizes.tolist()) <= searched:
            self.table = jnp.asarray(emb.enumerate_actions(spec, searched))
            # index of a flat action in the table (lexicographic, the last sub-action fastest)
            self.strides = jnp.asarray(np.cumprod(np.r_[sizes[1:], 1][::-1])[::-1], jnp.int32)
        if self.search == "cem" and config.cem_elites > config.cem_samples:
            raise OffpolicyError("--aql.cem-elites must not exceed --aql.cem-samples")
        self.q_opt = optax.adam(config.q_lr)
        self.proposal_opt = optax.adam(config.proposal_lr)
        self.uses_proposal = self.search == "proposal"

    # ------------------------------------------------------------------ state
    def init(self, key: jax.Array) -> AQLState:
        kq, kf, kp = jax.random.split(key, 3)
        kc = jax.random.fold_in(key, 3)  # the core's (feed-forward keys stay as they were)
        obs = jnp.zeros((1, *self.obs_shape), jnp.float32)
        params = {}
        if self.embedding is not None:
            params["core"] = self.embedding.init(kc, obs)["params"]
            obs = self.embed(params["core"], obs)
        q = self.q_net.init(kq, obs, jnp.zeros((1, 1, self.embed_dim), jnp.float32))["params"]
        params["q"] = q
        proposal_opt = None
        if self.uses_proposal:
            feats = self.features.init(kf, obs)["params"]
            width = self.config.proposal_hidden[-1]  # config sizes are never empty
            params["proposal"] = {"features": feats, "heads": self.proposal.init(kp, width)}
            proposal_opt = self.proposal_opt.init(params["proposal"])
        targets = self.config.target_update_every > 0
        return AQLState(params=params, proposal_opt=proposal_opt,
                        q_opt=self.q_opt.init(self._q_part(params)),
                        updates=jnp.zeros((), jnp.int32),
                        target_q=q if targets else None,
                        target_core=params.get("core") if targets else None)

    def embed(self, core_params, obs):
        """The shared state embedding: the core's features of ``obs`` (a context), or the
        observations themselves (the identity, as on the Control Suite)."""
        if self.embedding is None:
            return obs
        return self.embedding.apply({"params": core_params}, obs)

    def _q_part(self, params: dict) -> Any:
        """What the Q loss trains: Q, and the core in front of it."""
        return (params["q"], params["core"]) if self.embedding is not None else params["q"]

    def acting_params(self, state: AQLState) -> dict:
        return state.params

    # ------------------------------------------------------------------ search
    def q_values(self, q_params, obs, actions):
        """Q(s, a) [..., C] of flat candidate actions [..., C, D] at obs [..., d]."""
        return self.q_net.apply({"params": q_params}, obs,
                                emb.embed(self.spec, actions, self.config.hybrid_embedding))

    def candidate_q_values(self, q_params, obs, actions):
        """:meth:`q_values` of the searched candidates [..., C, D]; with a table (every action
        of a small discrete space), Q of each of the K actions once per state and the C
        candidates' values looked up in it (the same numbers, K rows instead of C)."""
        if self.table is None:
            return self.q_values(q_params, obs, actions)
        batch = obs.shape[:-1]
        q_all = self.q_values(q_params, obs, jnp.broadcast_to(self.table,
                                                              batch + self.table.shape))
        index = jnp.sum(jnp.round(actions).astype(jnp.int32) * self.strides, -1)  # [..., C]
        return jnp.take_along_axis(q_all, index, axis=-1)

    def _exact(self, q_params, obs):
        """argmax over every action, in chunks of actions so that one chunk evaluates about
        2^18 (state, action) rows (15 625 actions at 992 learning states would otherwise hold
        15.5M rows of activations at once); a running max over the chunks, ties to the first."""
        every = self.all_actions
        count = every.shape[0]
        batch = obs.shape[:-1]
        rows = max(int(np.prod(batch)), 1)
        chunk = int(np.clip(self.config.exact_rows // rows, 1, count))
        chunks = -(-count // chunk)
        # padding repeats the last action: its duplicate never wins a tie against it
        padded = jnp.concatenate([every, jnp.repeat(every[-1:], chunks * chunk - count, 0)])
        padded = padded.reshape(chunks, chunk, every.shape[-1])

        def body(carry, xs):
            best_q, best_i = carry
            acts, offset = xs
            q = self.q_values(q_params, obs, jnp.broadcast_to(acts, batch + acts.shape))
            i = jnp.argmax(q, axis=-1)
            m = jnp.max(q, axis=-1)
            better = m > best_q
            return (jnp.where(better, m, best_q), jnp.where(better, i + offset, best_i)), None

        init = (jnp.full(batch, -jnp.inf, jnp.float32), jnp.zeros(batch, jnp.int32))
        offsets = jnp.arange(chunks, dtype=jnp.int32) * chunk
        (best_q, best_i), _ = jax.lax.scan(body, init, (padded, offsets))
        return every[best_i], best_q

    def _proposal_features(self, params, obs):
        return self.features.apply({"params": params["proposal"]["features"]}, obs)

    def candidates(self, params, obs, key):
        """The sampled actions [..., C, D] of AQL and Uniform-Q (exact Q and CEM search on
        their own) and how many of them (last) are proposals."""
        c = self.config
        batch = obs.shape[:-1]
        k_u, k_p = jax.random.split(key)
        uniform = emb.uniform_actions(k_u, self.spec, batch + (c.uniform_samples,))
        if self.search != "proposal":
            return uniform, 0
        proposed, _ = self.proposal.sample(params["proposal"]["heads"],
                                           self._proposal_features(params, obs), k_p,
                                           c.proposal_samples)
        # uniform samples first: a^U_1 is the epsilon-greedy action of Algorithm 1
        return jnp.concatenate([uniform, proposed], axis=-2), c.proposal_samples

    def argmax(self, params, q_params, obs, key):
        """(a* [..., D], Q(s, a*) [...], diagnostics) by the configured search."""
        if self.search == "cem":
            return self._cem(q_params, obs, key)
        if self.search == "exact":  # epsilon-greedy still needs a uniformly random action
            a_star, q_star = self._exact(q_params, obs)
            first = emb.uniform_actions(jax.random.split(key)[0], self.spec, obs.shape[:-1])
            return a_star, q_star, {"first_uniform": first}
        acts, num_proposed, q, best, a_star = self._sampled_argmax(params, q_params, obs, key)
        q_star = jnp.max(q, axis=-1)
        info = {"first_uniform": acts[..., 0, :]}
        if num_proposed:
            m = acts.shape[-2] - num_proposed
            info["from_proposal"] = (best >= m).astype(jnp.float32)
            info["q_gap"] = jnp.max(q[..., m:], -1) - jnp.max(q[..., :m], -1)
            info["proposal_sample"] = acts[..., m, :]
        return a_star, q_star, info

    def _sampled_argmax(self, params, q_params, obs, key):
        """The candidates, how many are proposals, their Q [..., C], the argmax's index and
        the action a* it picks."""
        acts, num_proposed = self.candidates(params, obs, key)
        q = self.candidate_q_values(q_params, obs, acts)
        best = jnp.argmax(q, axis=-1)
        a_star = jnp.take_along_axis(acts, best[..., None, None], axis=-2)[..., 0, :]
        return acts, num_proposed, q, best, a_star

    def _cem(self, q_params, obs, key):
        """QT-Opt's CEM (Kalashnikov et al. 2018; AQL Sec. 5): uniform samples, then
        independent Gaussians per sub-action fit to the elites; a discrete sub-action's sample
        is its Gaussian's value rounded to the nearest index and clipped to [0, n - 1]."""
        c = self.config
        batch = obs.shape[:-1]
        sizes = emb.sub_action_sizes(self.spec)
        low = np.where(sizes > 0, 0.0, -1.0).astype(np.float32)
        high = np.where(sizes > 0, sizes - 1.0, 1.0).astype(np.float32)
        keys = jax.random.split(key, c.cem_iterations)
        acts = emb.uniform_actions(keys[0], self.spec, batch + (c.cem_samples,))
        info = {"first_uniform": acts[..., 0, :]}  # epsilon-greedy's a^U_1, as for AQL
        best_a = best_q = None
        for i in range(c.cem_iterations):
            q = self.q_values(q_params, obs, acts)
            top_q, top = jax.lax.top_k(q, c.cem_elites)
            elites = jnp.take_along_axis(acts, top[..., None], axis=-2)
            if best_a is None:
                best_a, best_q = elites[..., 0, :], top_q[..., 0]
            else:
                better = top_q[..., 0] > best_q
                best_a = jnp.where(better[..., None], elites[..., 0, :], best_a)
                best_q = jnp.maximum(best_q, top_q[..., 0])
            if i + 1 < c.cem_iterations:  # the next samples from the elites' Gaussians
                mu, sigma = jnp.mean(elites, -2), jnp.std(elites, -2) + 1e-3
                noise = jax.random.normal(keys[i + 1], batch + (c.cem_samples, len(sizes)))
                raw = mu[..., None, :] + sigma[..., None, :] * noise
                acts = jnp.where(sizes > 0, jnp.clip(jnp.round(raw), low, high),
                                 jnp.clip(raw, -1.0, 1.0))
        return best_a, best_q, info

    # ------------------------------------------------------------------ acting
    def epsilons(self, num_envs: int) -> np.ndarray:
        """Per env copy: explore_epsilon for the first floor(explore_fraction K), else
        epsilon. Under remote collectors the K copies are all collectors' (App. A2: "the
        first 10 actors use 0.5"): this process's copies are K's ``acting_offset`` onwards."""
        c, ctx = self.config, self.context
        total = ctx.acting_total or num_envs
        first = ctx.acting_offset + np.arange(num_envs)
        explore = first < int(np.floor(c.explore_fraction * total))
        return np.where(explore, c.explore_epsilon, c.epsilon).astype(np.float32)

    def policy(self, params: dict, obs: jax.Array, key: jax.Array, explore: bool):
        k_search, k_eps = jax.random.split(key)
        h = self.embed(params.get("core"), obs)
        a_star, _, info = self.argmax(params, params["q"], h, k_search)
        acting = self.rec.acting_info(lambda: {"embedding": params["core"]}, obs, {})
        if not explore:
            return a_star, acting
        eps = self.epsilons(h.shape[0])
        random = jax.random.uniform(k_eps, (h.shape[0],)) < eps
        return jnp.where(random[:, None], info["first_uniform"], a_star), acting

    def inspect(self, params: dict, obs: jax.Array, key: jax.Array) -> dict[str, Any]:
        """What the proposal figure draws for states obs [B, d] (AQL Fig. 4): the greedy
        action a* [B, D], the Q values of the N proposal samples [B, N], and per sub-action d
        the proposal's distribution given a*'s prefix: probabilities [B, n_d] (discrete) or
        the Gaussian's mean [B, 1] (continuous)."""
        if not self.uses_proposal:
            raise OffpolicyError(f"--proposal needs a learned proposal (search 'proposal'), "
                                 f"this agent searches by '{self.search}'")
        if self.embedding is not None:
            raise OffpolicyError("--proposal draws single states; it does not take an agent "
                                 "with a recurrent core (--aql.core)")
        _, num_proposed, q, _, a_star = self._sampled_argmax(params, params["q"], obs, key)
        feats = self._proposal_features(params, obs)
        dists = self.proposal.probabilities(params["proposal"]["heads"], feats,
                                            a_star[..., None, :])
        return {"action": a_star, "q_proposal": q[..., -num_proposed:],
                "q_uniform_max": jnp.max(q[..., :-num_proposed], -1),
                "distributions": [d[..., 0, :] for d in dists]}

    # ------------------------------------------------------------------ learning
    def update(self, state: AQLState, batch: dict, key: jax.Array
               ) -> tuple[AQLState, dict, dict]:
        c = self.config
        params = state.params
        if self.embedding is not None:  # obs: a view of the unroll's history
            batch = self.rec.sequence_view(batch)
        obs, mask = batch[OBS], batch[MASK]  # [T+1, B, d], [T, B]
        denom = jnp.maximum(jnp.sum(mask), 1.0)
        # the shared state embedding [T+1, B, E], run once: the Q loss's gradient reaches the
        # core through its pull-back
        if self.embedding is not None:
            h, embed_vjp = jax.vjp(lambda cp: self.embed(cp, obs), params["core"])
        else:
            h, embed_vjp = obs, None
        target_q = params["q"] if state.target_q is None else state.target_q
        h_target = h if state.target_core is None else self.embed(state.target_core, obs)
        # a*(s) at every state of the unroll with the current networks (recomputed, see doc)
        a_star, _, info = self.argmax(params, params["q"], h, key)
        a_star = jax.lax.stop_gradient(a_star)
        next_q = self.q_values(target_q, h_target[1:], a_star[1:, :, None, :])[..., 0]
        g = returns.lambda_returns(batch[REWARD], c.gamma * batch[DISCOUNT],
                                   jax.lax.stop_gradient(next_q), c.lambda_, mask=mask)

        def q_loss(q_params, hh):
            q = self.q_values(q_params, hh[:-1], batch[ACTION][:, :, None, :])[..., 0]
            return 0.5 * jnp.sum(jnp.where(mask > 0, (g - q) ** 2, 0.0)) / denom, q

        trained = self._q_part(params)
        if self.embedding is not None:
            (loss_q, q_taken), (g_q, g_h) = jax.value_and_grad(
                q_loss, argnums=(0, 1), has_aux=True)(params["q"], h)
            grads = (g_q, embed_vjp(g_h)[0])
        else:
            (loss_q, q_taken), grads = jax.value_and_grad(q_loss, has_aux=True)(params["q"], h)
        upd, q_opt = self.q_opt.update(grads, state.q_opt, trained)
        trained = optax.apply_updates(trained, upd)
        new_params = {**params, **({"q": trained[0], "core": trained[1]}
                                   if self.embedding is not None else {"q": trained})}
        updates = state.updates + 1
        copy = (updates % c.target_update_every) == 0 if c.target_update_every else False

        def copied(target, online):
            """The target network, the online one's copy every target_update_every updates."""
            return None if target is None else jax.tree_util.tree_map(
                lambda t, q: jnp.where(copy, q, t), target, online)

        target_q = copied(state.target_q, new_params["q"])
        target_core = copied(state.target_core, new_params.get("core"))
        proposal_opt = state.proposal_opt

        def mean(x):
            return jnp.sum(jnp.where(mask > 0, x, 0.0)) / denom

        metrics = {"q_loss": loss_q, "q_mean": mean(q_taken), "return_target": mean(g)}
        if self.uses_proposal:
            targets = a_star[:-1][:, :, None, :]
            samples = jax.lax.stop_gradient(info["proposal_sample"][:-1])[:, :, None, :]

            h_const = jax.lax.stop_gradient(h)  # the shared embedding is constant here

            def proposal_loss(p):
                feats = self.features.apply({"params": p["features"]}, h_const[:-1])
                nll = -self.proposal.log_prob(p["heads"], feats, targets)[..., 0]
                ent = self.proposal.entropies(p["heads"], feats, samples)[..., 0, :]
                loss = mean(nll) - c.entropy_weight * mean(jnp.sum(ent, -1))
                return loss, (nll, ent)

            (loss_p, (nll, ent)), pgrads = jax.value_and_grad(proposal_loss, has_aux=True)(
                params["proposal"])
            pupd, proposal_opt = self.proposal_opt.update(pgrads, state.proposal_opt,
                                                          params["proposal"])
            new_params["proposal"] = optax.apply_updates(params["proposal"], pupd)
            ent_per = jnp.sum(jnp.where(mask[..., None] > 0, ent, 0.0), (0, 1)) / denom
            metrics |= {"proposal_loss": loss_p, "proposal_nll": mean(nll),
                        "proposal_entropy": ent_per,
                        "argmax_from_proposal": mean(info["from_proposal"][:-1]),
                        "q_gap_proposal_uniform": mean(info["q_gap"][:-1])}
        new_state = AQLState(params=new_params, proposal_opt=proposal_opt, q_opt=q_opt,
                             updates=updates, target_q=target_q, target_core=target_core)
        return new_state, metrics, {}
