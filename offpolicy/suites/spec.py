"""A suite: an experiment grid (entries x envs x seeds) read from YAML, checked before any run.

The YAML keys (``offpolicy/suites/*.yaml`` are the examples; docs/suites.md the reference)::

    name: refer-mujoco                 # default: the file's stem
    description: one line              # what ``offpolicy suite list`` shows
    reference: the paper, figure or table this reproduces
    cost: how long the default budget takes here, and the paper's
    envs: [HalfCheetah-v5, Hopper-v5]  # or a mapping env -> {steps, eval_every, entries,
                                       #   threshold} overriding the suite's for that env
    seeds: [0, 1, 2]
    steps: 100000
    eval: {every: 10000, episodes: 20}
    flags: --buffer-size 262144        # every entry's, before its own (its own win)
    paper: {steps: 1000000, seeds: [0, 1, 2, 3, 4]}   # what ``--paper`` selects
    entries:
      ddpg-er: {algo: ddpg, flags: --replay er --replay-diagnostics}
      ddpg: {}                         # algo defaults to the entry's name
    compare: [[ddpg-refer, ddpg-er]]   # Welch tests of final returns, (entry, against);
                                       #   [a, b, paired]: also paired by seed (a run of a
                                       #   seed shares its draw or streams with b's)
    metrics: [kl_mu_pi]                # train.csv columns drawn and averaged per entry
    threshold: 1000                    # sample efficiency: first evaluation at or above it
    scores: {Pendulum-v1: [-1200, -150]}   # per env [random, reference] returns: the
                                       #   aggregates across tasks normalise by them
    preregistration: grid.preregistration.md   # a file beside this one: opens the report
    decision:                          # pre-registered claims (offpolicy.suites.verdict)
      window: 200000
      statistic: window                # S per run: window (the mean evaluation return over
                                       #   the last window steps) or best (the best
                                       #   evaluation of the run; the window mean beside it)
      claims: [{label: C1, a: ddpg-refer, b: ddpg-er}]   # envs: default the suite's; rule:
                                       #   superior (default) or non-inferior

An entry with ``peer: LIB`` runs a peer library's script (benchmarks/learning.py, in the peers'
bench venv): :func:`parse` leaves it out, with the comparisons and claims that name it, unless
``allow_peers`` (the suite's ``peers`` names what it left out).

Every problem is one line naming the file and the key, raised as
:class:`~offpolicy.errors.OffpolicyError` (exit 2 from the command) before any run starts:
:func:`check` resolves every entry on every env as the ``offpolicy train`` command it will
run resolves it, and makes every check that command makes before its run starts (the
algorithm takes the env's actions; no two flags conflict). Every name that becomes a folder
or file under ``--out`` (the suite's, an entry's, a metric's, an env id's) is one of
:data:`SAFE_NAME` (env ids: :data:`SAFE_ENV_ID`).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from offpolicy import registry
from offpolicy.config import MAX_SEED, load_yaml_text
from offpolicy.errors import OffpolicyError, did_you_mean

SUITES_DIR = Path(__file__).resolve().parent
# flags a suite sets for each run: an entry or suite ``flags`` may not set them
RUNNER_FLAGS = ("--env", "--steps", "--seed", "--run-dir", "--eval-every", "--eval-episodes",
                "--resume", "--quiet", "--no-quiet", "--config")
TOP_KEYS = ("name", "description", "reference", "cost", "envs", "seeds", "steps", "eval",
            "flags", "paper", "entries", "compare", "metrics", "threshold", "scores",
            "preregistration", "decision")
ENV_KEYS = ("steps", "eval_every", "entries", "threshold")
ENTRY_KEYS = ("algo", "flags", "peer", "note")
EVAL_KEYS = ("every", "episodes")
PAPER_KEYS = ("steps", "seeds", "eval_every")
DECISION_KEYS = ("window", "margin", "statistic", "claims", "beside")
BESIDE_KEYS = ("suite", "entries")
CLAIM_KEYS = ("label", "a", "b", "envs", "primary", "seeds", "rule")
# a decision's statistic S per run (offpolicy.suites.verdict): the mean evaluation return over
# the last ``window`` steps, or the best evaluation of the run (the ACE paper's Table 1)
STATISTICS = ("window", "best")
# a claim's verdict rule: the paper says a > b (superior), or a is not worse than b by more
# than the margin (non-inferior: "competitive with")
RULES = ("superior", "non-inferior")
# names that become one folder or file name under --out (the suite's, an entry's, a metric's):
# a suite file is shared between people, so none may name a path ('..', '/', an absolute one)
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,99}")
SAFE_NAME_TEXT = "1-100 letters, digits, '-', '_', '.' and '+', starting with a letter or digit"
# an env id becomes a folder with each '/' as '_' (dm_control/cartpole-swingup-v0,
# offpolicy/Platform-v0, module:EnvName-v0): the same characters and ':', in parts between '/'
SAFE_ENV_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:+-]*(/[A-Za-z0-9_][A-Za-z0-9_.:+-]*)*")
SAFE_ENV_ID_TEXT = ("letters, digits, '-', '_', '.', ':' and '+', with '/' between parts that "
                    "start with a letter, digit or '_'")


@dataclass(frozen=True)
class Entry:
    """One row of the grid: an algorithm and its flags (or, in benchmarks/learning.py only, a
    peer library's script: ``peer``, with the algorithm and flags that script takes)."""

    name: str
    algo: str
    flags: tuple[str, ...] = ()
    peer: str | None = None
    note: str = ""

    def command(self) -> str:
        """What the entry runs, for reports: ``offpolicy train ALGO FLAGS``."""
        if self.peer:
            return self.note or f"peer {self.peer}"
        return " ".join(["offpolicy train", self.algo, *self.flags])


@dataclass(frozen=True)
class EnvPlan:
    """One env of the grid with its budget and the entries run on it."""

    env: str
    steps: int
    eval_every: int
    entries: tuple[str, ...]
    threshold: float | None = None


@dataclass(frozen=True)
class Claim:
    """One pre-registered comparison of a paper's claim: entry ``a`` minus entry ``b``, the
    paper saying a > b (``rule`` superior) or that a is not worse than b by more than the
    decision's margin (``rule`` non-inferior). ``envs``: the tasks it is decided on (empty:
    every env of the suite); a secondary one is reported but gets no verdict."""

    label: str
    a: str
    b: str
    envs: tuple[str, ...] = ()
    primary: bool = True
    seeds: tuple[int, ...] = ()  # the seeds its verdict waits for (empty: the suite's)
    rule: str = "superior"  # one of RULES


@dataclass(frozen=True)
class Decision:
    """A pre-registered decision (:mod:`offpolicy.suites.verdict`): per run the statistic S is
    the mean evaluation return over the last ``window`` steps (``statistic`` window) or the
    run's best evaluation (``statistic`` best; the window mean is then reported beside it);
    each claim's verdict follows Welch's p, a bootstrap interval of the difference and
    ``margin``, the gain (or, for a non-inferiority claim, the loss) of practical size as a
    fraction of |mean S of b|; the grid's seeds are the pre-registered ones."""

    claims: tuple[Claim, ...]
    window: int
    margin: float = 0.1
    statistic: str = "window"  # one of STATISTICS
    # a description with no test: each entry's S beside its twin's in another grid
    beside: Beside | None = None


@dataclass(frozen=True)
class Beside:
    """A decision's ``beside``: each arm (``pairs``' first name, an entry of this suite) set
    beside its twin (the second, an entry of the grid ``suite``) by S on each task, with no test:
    what a pre-registration promises as a description when the two grids differ in a setting
    that was not randomised (:func:`offpolicy.suites.verdict.beside_section`)."""

    suite: str
    pairs: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Suite:
    name: str
    path: Path | None
    description: str
    reference: str
    cost: str
    envs: tuple[EnvPlan, ...]
    seeds: tuple[int, ...]
    eval_episodes: int
    flags: tuple[str, ...]
    entries: dict[str, Entry]
    compare: tuple[tuple[str, str], ...] = ()
    metrics: tuple[str, ...] = ()
    paper: dict = field(default_factory=dict)
    # compare pairs whose runs of one seed share their initial draw, or the env and noise
    # streams, or both: also tested paired by seed
    paired: tuple[tuple[str, str], ...] = ()
    # a pre-registered decision: the report ends with its verdicts
    decision: Decision | None = None
    # the pre-registration (arms, tasks, seeds, budget, statistic, verdict rule), committed
    # before the runs started: it opens the report
    preregistration: str = ""
    # peer entries left out (benchmarks/learning.py runs them, in the peers' bench venv)
    peers: tuple[str, ...] = ()
    # env -> (random, reference) score: the report's aggregates across tasks normalise by them
    # (offpolicy.suites.aggregates)
    scores: dict[str, tuple[float, float]] = field(default_factory=dict)

    def select(self, *, seeds=None, steps=None, envs=None, entries=None,
               paper: bool = False) -> Suite:
        """The suite with the command line's choices: ``paper`` first (the paper's budget),
        then explicit ``seeds``, ``steps``, ``envs`` and ``entries`` (subsets, checked)."""
        s = self
        if paper:
            if not self.paper:
                raise OffpolicyError(f"suite {self.name} names no paper budget (no 'paper:' key)")
            s = replace(s, seeds=tuple(self.paper.get("seeds", s.seeds)),
                        envs=tuple(replace(e, steps=self.paper.get("steps", e.steps),
                                           eval_every=self.paper.get("eval_every", e.eval_every))
                                   for e in s.envs))
        if seeds is not None:
            if len(set(seeds)) != len(seeds):
                raise OffpolicyError(f"--seeds names a seed twice: {' '.join(map(str, seeds))}")
            if any(not 0 <= x <= MAX_SEED for x in seeds):
                raise OffpolicyError(f"--seeds must be between 0 and {MAX_SEED}, got "
                                     f"{' '.join(map(str, seeds))}")
            s = replace(s, seeds=tuple(seeds))
        if steps is not None:
            if steps <= 0:
                raise OffpolicyError(f"--steps must be positive, got {steps}")
            s = replace(s, envs=tuple(replace(e, steps=steps, eval_every=min(e.eval_every, steps))
                                      for e in s.envs))
        if envs is not None:
            known = [e.env for e in s.envs]
            for name in envs:
                if name not in known:
                    raise OffpolicyError(f"suite {self.name} has no env {name!r}"
                                         f"{did_you_mean(name, known)} (envs: {', '.join(known)})")
            s = replace(s, envs=tuple(e for e in s.envs if e.env in envs))
        if entries is not None:
            for name in entries:
                if name in self.peers:
                    raise OffpolicyError(f"suite {self.name}: entry {name!r} runs a peer "
                                         "library's script: benchmarks/learning.py runs it (it "
                                         "needs the peers' bench venv)")
                if name not in self.entries:
                    raise OffpolicyError(
                        f"suite {self.name} has no entry {name!r}"
                        f"{did_you_mean(name, list(self.entries))} "
                        f"(entries: {', '.join(self.entries)})")
            s = replace(s, envs=tuple(replace(e, entries=tuple(n for n in e.entries
                                                               if n in entries))
                                      for e in s.envs))
            s = replace(s, envs=tuple(e for e in s.envs if e.entries))
        if s.num_runs() == 0:
            raise OffpolicyError(f"suite {self.name}: the selection leaves no run (no chosen "
                                 "entry runs on a chosen env)")
        return s

    def num_runs(self) -> int:
        return sum(len(e.entries) for e in self.envs) * len(self.seeds)

    def env_steps(self) -> int:
        return sum(len(e.entries) * e.steps for e in self.envs) * len(self.seeds)


def available() -> dict[str, Path]:
    """The suites shipped with the package, by name."""
    return {p.stem: p for p in sorted(SUITES_DIR.glob("*.yaml"))}


def find(name_or_path: str | Path) -> Path:
    """A shipped suite's file by name, or a user's YAML by path."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.is_file():
            raise OffpolicyError(f"suite file {p} not found")
        return p
    known = available()
    if str(name_or_path) not in known:
        raise OffpolicyError(f"unknown suite {str(name_or_path)!r}"
                             f"{did_you_mean(str(name_or_path), list(known))} "
                             f"(shipped: {', '.join(known)}; or give a YAML file's path)")
    return known[str(name_or_path)]


def load(name_or_path: str | Path, allow_peers: bool = False) -> Suite:
    """Read and check the schema of a suite (types, keys, entry names); :func:`check` then
    checks the entries against the algorithms and envs."""
    path = find(name_or_path)
    try:
        data = load_yaml_text(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise OffpolicyError(f"cannot read suite {path}: {' '.join(str(e).split())}") from e
    return parse(data, path, allow_peers)


def _err(path, where: str, what: str) -> OffpolicyError:
    return OffpolicyError(f"suite {path}: {where}: {what}")


def _keys(path, where: str, d, valid) -> dict:
    if not isinstance(d, dict):
        raise _err(path, where, f"expected a mapping, got {type(d).__name__} {d!r}")
    for k in d:
        if k not in valid:
            raise _err(path, where, f"unknown key {k!r}{did_you_mean(str(k), list(valid))} "
                                    f"(valid: {', '.join(valid)})")
    return d


def _int(path, where: str, v, minimum: int = 0, maximum: int | None = None) -> int:
    if (isinstance(v, bool) or not isinstance(v, int) or v < minimum
            or (maximum is not None and v > maximum)):
        bounds = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise _err(path, where, f"expected an integer {bounds}, got {v!r}")
    return v


def _number(path, where: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _err(path, where, f"expected a number, got {v!r}")
    return float(v)


def _choice(path, where: str, v, choices: tuple[str, ...]) -> str:
    if v not in choices:
        raise _err(path, where, f"expected one of {', '.join(choices)}, got {v!r}")
    return v


def _str(path, where: str, v) -> str:
    if not isinstance(v, str):
        raise _err(path, where, f"expected a string, got {v!r}")
    return v


def safe_name(path, where: str, v) -> str:
    """``v`` if it is one folder or file name that stays where it is put (:data:`SAFE_NAME`)."""
    if not isinstance(v, str) or not SAFE_NAME.fullmatch(v):
        raise _err(path, where, f"expected a name of {SAFE_NAME_TEXT} (it becomes a folder or "
                                f"file name under --out), got {v!r}")
    return v


def safe_env_id(path, where: str, v) -> str:
    """``v`` if it is an env id whose folder (:func:`~offpolicy.suites.runner.env_slug`) stays
    under --out (:data:`SAFE_ENV_ID`)."""
    if not isinstance(v, str) or len(v) > 200 or not SAFE_ENV_ID.fullmatch(v):
        raise _err(path, where, f"expected an env id of {SAFE_ENV_ID_TEXT} (it becomes a "
                                f"folder under --out), got {v!r}")
    return v


def _unique(path, where: str, values) -> None:
    """A seed or an entry named twice would count one run twice in every statistic."""
    seen = set()
    for v in values:
        if v in seen:
            raise _err(path, where, f"{v!r} appears twice")
        seen.add(v)


def _flags(path, where: str, v) -> tuple[str, ...]:
    """Flags as a string (split as a shell would) or a list of strings."""
    if v is None:
        return ()
    if isinstance(v, str):
        try:
            flags = shlex.split(v)
        except ValueError as e:  # an unterminated quote
            raise _err(path, where, f"cannot split {v!r} as a shell would: {e}") from None
    elif isinstance(v, list) and all(isinstance(x, (str, int, float)) and not isinstance(x, bool)
                                     for x in v):
        flags = [str(x) for x in v]
    else:
        raise _err(path, where, f"expected flags as a string or a list of strings, got {v!r}")
    for f in flags:
        if f.split("=")[0] in RUNNER_FLAGS:
            raise _err(path, where, f"{f.split('=')[0]} is set by the suite for each run "
                                    "(use the suite's envs/steps/seeds/eval keys)")
    return tuple(flags)


def _kept(path, where: str, name, entries: dict, peers: list[str]) -> bool:
    """Whether an entry that a key names is in the suite: False for a peer entry left out, an
    error for a name that is no entry."""
    if name in peers:
        return False
    if name not in entries:
        raise _err(path, where, f"unknown entry {name!r}{did_you_mean(str(name), list(entries))}")
    return True


def _entries(path, d, allow_peers: bool) -> tuple[dict[str, Entry], list[str]]:
    """The entries, and the names of the peer entries left out (unless ``allow_peers``)."""
    entries_d = _keys(path, "entries", d["entries"], list(d["entries"] or {}))
    if not entries_d:
        raise _err(path, "entries", "no entries")
    entries, peers = {}, []
    for ename, e in entries_d.items():
        where = f"entries.{ename}"
        safe_name(path, where, ename)
        e = _keys(path, where, e if e is not None else {}, ENTRY_KEYS)
        peer = e.get("peer")
        entry = Entry(str(ename), _str(path, f"{where}.algo", e.get("algo", ename)),
                      _flags(path, f"{where}.flags", e.get("flags")),
                      None if peer is None else _str(path, f"{where}.peer", peer),
                      _str(path, f"{where}.note", e.get("note", "")))
        if peer is not None and not allow_peers:
            peers.append(entry.name)
        else:
            entries[entry.name] = entry
    if not entries:
        raise _err(path, "entries", "no entries but peer entries (benchmarks/learning.py runs "
                                    "those)")
    return entries, peers


def _envs(path, d, entries: dict, peers: list[str], steps: int, every: int) -> list[EnvPlan]:
    threshold = d.get("threshold")
    threshold = None if threshold is None else _number(path, "threshold", threshold)
    envs_d = d["envs"]
    if isinstance(envs_d, list):
        names = [_str(path, "envs", e) for e in envs_d]
        _unique(path, "envs", names)  # merged, each run would count twice
        envs_d = {e: {} for e in names}
    envs_d = _keys(path, "envs", envs_d, list(envs_d) if isinstance(envs_d, dict) else [])
    if not envs_d:
        raise _err(path, "envs", "no envs")
    envs = []
    for env, over in envs_d.items():
        where = f"envs.{env}"
        safe_env_id(path, where, env)
        over = _keys(path, where, over if over is not None else {}, ENV_KEYS)
        names = over.get("entries", list(entries))
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise _err(path, f"{where}.entries", f"expected a list of entry names, got {names!r}")
        _unique(path, f"{where}.entries", names)
        names = [n for n in names if _kept(path, f"{where}.entries", n, entries, peers)]
        t = over.get("threshold", threshold)
        envs.append(EnvPlan(str(env), _int(path, f"{where}.steps", over.get("steps", steps), 1),
                            _int(path, f"{where}.eval_every", over.get("eval_every", every), 1),
                            tuple(names), None if t is None else _number(path, where, t)))
    return envs


def _compare(path, d, entries: dict, peers: list[str]):
    """The (entry, against) pairs and those of them marked paired."""
    compare = d.get("compare", []) or []
    if not isinstance(compare, list):
        raise _err(path, "compare", f"expected a list of [entry, against] pairs, got {compare!r}")
    pairs, paired = [], []
    for pair in compare:
        if not (isinstance(pair, list) and all(isinstance(n, str) for n in pair)
                and (len(pair) == 2 or (len(pair) == 3 and pair[2] == "paired"))):
            raise _err(path, "compare", f"expected [entry, against] or [entry, against, "
                                        f"paired], got {pair!r}")
        if not all([_kept(path, "compare", n, entries, peers) for n in pair[:2]]):
            continue
        pairs.append((pair[0], pair[1]))
        if len(pair) == 3:
            paired.append((pair[0], pair[1]))
    return tuple(pairs), tuple(paired)


def _seed_list(path, where: str, v) -> tuple[int, ...]:
    if not isinstance(v, list) or not v:
        raise _err(path, where, f"expected a non-empty list of integers, got {v!r}")
    seeds = tuple(_int(path, where, s, maximum=MAX_SEED) for s in v)
    _unique(path, where, seeds)
    return seeds


def _decision(path, d, entries: dict, peers: list[str], envs: list[EnvPlan]
              ) -> Decision | None:
    """The pre-registered claims; a claim's envs default to the suite's, and one that names a
    peer entry left out is left out with it."""
    if d.get("decision") is None:
        return None
    dd = _keys(path, "decision", d["decision"], DECISION_KEYS)
    if "window" not in dd or "claims" not in dd:
        raise _err(path, "decision", "needs 'window' and 'claims'")
    if not isinstance(dd["claims"], list) or not dd["claims"]:
        raise _err(path, "decision.claims", f"expected a non-empty list, got {dd['claims']!r}")
    suite_envs = [e.env for e in envs]
    claims = []
    for i, c in enumerate(dd["claims"]):
        where = f"decision.claims[{i}]"
        c = _keys(path, where, c, CLAIM_KEYS)
        if not {"label", "a", "b"} <= set(c):
            raise _err(path, where, "needs 'label', 'a' and 'b'")
        if not all([_kept(path, f"{where}.{k}", c[k], entries, peers) for k in ("a", "b")]):
            continue
        claim_envs = c.get("envs", suite_envs)
        if not isinstance(claim_envs, list) or not claim_envs:
            raise _err(path, f"{where}.envs", f"expected a list of the suite's envs, got "
                                              f"{claim_envs!r}")
        for env in claim_envs:
            if env not in suite_envs:
                raise _err(path, f"{where}.envs", f"unknown env {env!r}"
                                                  f"{did_you_mean(str(env), suite_envs)}")
        primary = c.get("primary", True)
        if not isinstance(primary, bool):
            raise _err(path, f"{where}.primary", f"expected true or false, got {primary!r}")
        claims.append(Claim(_str(path, f"{where}.label", c["label"]), c["a"], c["b"],
                            tuple(claim_envs), primary,
                            _seed_list(path, f"{where}.seeds", c["seeds"]) if "seeds" in c
                            else (), _choice(path, f"{where}.rule", c.get("rule", "superior"),
                                             RULES)))
    return Decision(tuple(claims), _int(path, "decision.window", dd["window"], 1),
                    _number(path, "decision.margin", dd.get("margin", 0.1)),
                    _choice(path, "decision.statistic", dd.get("statistic", "window"),
                            STATISTICS),
                    _beside(path, dd.get("beside"), entries, peers))


def _beside(path, b, entries: dict, peers: list[str]) -> Beside | None:
    """``decision.beside``: ``suite`` (another grid's name) and ``entries``, a mapping of this
    suite's entries to that grid's (checked when the report reads that grid); a peer entry
    left out is left out of it."""
    if b is None:
        return None
    b = _keys(path, "decision.beside", b, BESIDE_KEYS)
    if "suite" not in b or "entries" not in b:
        raise _err(path, "decision.beside", "needs 'suite' and 'entries'")
    suite = safe_name(path, "decision.beside.suite", b["suite"])
    if not isinstance(b["entries"], dict) or not b["entries"]:
        raise _err(path, "decision.beside.entries",
                   f"expected a mapping of this suite's entries to {suite}'s, got "
                   f"{b['entries']!r}")
    pairs = []
    for here, twin in b["entries"].items():
        twin = _str(path, f"decision.beside.entries.{here}", twin)
        if _kept(path, "decision.beside.entries", here, entries, peers):
            pairs.append((here, twin))
    return Beside(suite, tuple(pairs))


def _preregistration(path, d) -> str:
    """The text of the file ``preregistration`` names, beside the suite's file."""
    if d.get("preregistration") is None:
        return ""
    name = safe_name(path, "preregistration", d["preregistration"])
    try:
        return (Path(str(path)).parent / name).read_text().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise _err(path, "preregistration", f"cannot read {name}: "
                                            f"{' '.join(str(e).split())}") from None


def parse(data, path: Path | str = "<suite>", allow_peers: bool = False) -> Suite:
    d = _keys(path, "top level", data, TOP_KEYS)
    if "entries" not in d or "envs" not in d:
        raise _err(path, "top level", "needs 'envs' and 'entries'")
    # the name is the runs' folder under runs/suites/: it must not lead out of it
    name = safe_name(path, "name", d.get("name", Path(str(path)).stem))
    steps = _int(path, "steps", d.get("steps", 100_000), 1)
    ev = _keys(path, "eval", d.get("eval", {}) or {}, EVAL_KEYS)
    every = _int(path, "eval.every", ev.get("every", 10_000), 1)
    episodes = _int(path, "eval.episodes", ev.get("episodes", 20), 1)
    seeds = _seed_list(path, "seeds", d.get("seeds", [0, 1, 2]))
    entries, peers = _entries(path, d, allow_peers)
    envs = _envs(path, d, entries, peers, steps, every)
    pairs, paired = _compare(path, d, entries, peers)
    metrics = d.get("metrics", []) or []
    if not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics):
        raise _err(path, "metrics", f"expected a list of train.csv column names, got {metrics!r}")
    for m in metrics:  # each draws report_<metric>.png
        safe_name(path, "metrics", m)
    paper = _keys(path, "paper", d.get("paper", {}) or {}, PAPER_KEYS)
    if "steps" in paper:
        _int(path, "paper.steps", paper["steps"], 1)
    if "eval_every" in paper:
        _int(path, "paper.eval_every", paper["eval_every"], 1)
    if "seeds" in paper:
        if not isinstance(paper["seeds"], list) or not paper["seeds"]:
            raise _err(path, "paper.seeds", f"expected a list of integers, got {paper['seeds']!r}")
        for s in paper["seeds"]:
            _int(path, "paper.seeds", s)
        _unique(path, "paper.seeds", paper["seeds"])
    return Suite(name, Path(path) if not isinstance(path, Path) else path,
                 _str(path, "description", d.get("description", "")),
                 _str(path, "reference", d.get("reference", "")),
                 _str(path, "cost", d.get("cost", "")), tuple(envs), seeds, episodes,
                 _flags(path, "flags", d.get("flags")), entries, pairs,
                 tuple(metrics), dict(paper), paired,
                 _decision(path, d, entries, peers, envs), _preregistration(path, d),
                 tuple(peers),
                 scores=_scores(path, d.get("scores", {}) or {}, [e.env for e in envs]))


def _scores(path, d, envs: list[str]) -> dict[str, tuple[float, float]]:
    """``scores``: env -> [random, reference], two different numbers, for envs of the suite."""
    out = {}
    for env, pair in _keys(path, "scores", d, envs).items():
        where = f"scores.{env}"
        if not isinstance(pair, list) or len(pair) != 2:
            raise _err(path, where, f"expected [random, reference], got {pair!r}")
        low, high = (_number(path, where, v) for v in pair)
        if low == high:
            raise _err(path, where, f"random and reference are both {low:g}: nothing to "
                                    "normalise by")
        out[env] = (low, high)
    return out


def check(suite: Suite, envs: bool = True) -> None:
    """Every entry parses as the ``offpolicy train`` command it will run (the suite's flags,
    then its own). With ``envs``, on each of its envs it resolves to the full configuration
    that command resolves (the env's default preset, the suite's steps and evaluation interval
    against the entry's env copies), each env is built once and every entry passes on it
    every check ``offpolicy train`` makes before its run starts
    (:func:`offpolicy.training.build.check`: the algorithm takes the env's actions, and no
    two flags conflict), so that a bad entry is refused here rather than failing in every
    run."""
    from offpolicy.train_args import resolve_train

    where = suite.path or suite.name
    used = {n for e in suite.envs for n in e.entries}
    for name in sorted(used):
        entry = suite.entries[name]
        if entry.peer:
            continue
        try:
            if entry.algo not in registry.ALGORITHMS:
                registry.get(entry.algo)  # the one-line unknown-algorithm error
            resolve_train(entry.algo, [*suite.flags, *entry.flags])
        except OffpolicyError as e:
            raise OffpolicyError(f"suite {where}: entries.{name}: {e}") from None
    if not envs:
        return
    runs = {}  # (env, entry) -> the run's resolved configuration
    for plan in suite.envs:
        for name in plan.entries:
            entry = suite.entries[name]
            if entry.peer:
                continue
            # the flags the runner gives this run (runner.train_command), then the suite's and
            # the entry's
            budget = ["--env", plan.env, "--steps", str(plan.steps), "--seed", str(suite.seeds[0]),
                      "--eval-every", str(min(plan.eval_every, plan.steps)),
                      "--eval-episodes", str(suite.eval_episodes)]
            try:
                runs[plan.env, name] = resolve_train(entry.algo,
                                                     [*budget, *suite.flags, *entry.flags])
            except OffpolicyError as e:
                raise OffpolicyError(f"suite {where}: entries.{name} on {plan.env}: {e}") \
                    from None
    from offpolicy.envs import make_env
    from offpolicy.training import build

    for plan in suite.envs:
        probe = None
        try:
            try:
                probe = make_env(plan.env, 0)
            except OffpolicyError as e:
                raise OffpolicyError(f"suite {where}: envs.{plan.env}: {e}") from None
            for name in plan.entries:
                run = runs.get((plan.env, name))
                if run is None:
                    continue
                try:
                    env = probe
                    if run.train.observe_action_reward:  # as make_env wraps it
                        from offpolicy.envs.partial import ActionRewardObservation

                        env = ActionRewardObservation(probe)
                    build.check(run, build.EnvFacts.of(env, run.train.discretize))
                except OffpolicyError as e:
                    raise OffpolicyError(f"suite {where}: entries.{name} on {plan.env}: {e}") \
                        from None
        finally:
            if probe is not None:
                probe.close()
