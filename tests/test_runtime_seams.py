"""The runtime's seams (issue #37): one declared agent contract, ``build()`` without a run, a
collector that writes to a sink (plain NumPy chunks across a process boundary), replay behind
public methods, short loops, and an import graph whose arrows point down."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest
import toy_agents
from _helpers import TINY_OVERRIDES

from offpolicy import registry
from offpolicy.agents.base import Contract, check_agent
from offpolicy.training import loops
from offpolicy.training.build import build
from offpolicy.training.collector import ChunkSink, apply_chunk
from offpolicy.training.run import Run

PACKAGE = Path(__file__).resolve().parents[1] / "offpolicy"


@pytest.fixture(scope="module", autouse=True)
def toy_registered():
    added = toy_agents.register()  # one registry entry is all a new agent needs
    yield
    if added:
        registry.ALGORITHMS.pop("toy-pg")


def _toy(**train):
    return registry.resolve("toy-pg", train_overrides={
        "env": "toy_envs:ToyGuess-v0", "batch_size": 8, "eval_episodes": 2, "eval_every": 200,
        "log_every": 100, "quiet": True, **train})


# ---------------------------------------------------------------------- the agent contract
def test_check_agent_returns_the_contract_with_every_optional_default():
    parts = build(_toy(steps=200))
    assert parts.contract == Contract()  # every optional member at its default
    vracer = build(registry.resolve("vracer", train_overrides={"env": "Pendulum-v1"}))
    assert vracer.contract.stored_return is not None and vracer.contract.state_value
    ace = build(registry.resolve("ace", train_overrides={"env": "Pendulum-v1"},
                                 agent_overrides={"num_actors": 3}))
    assert ace.contract.num_actors == 3 and ace.contract.single_actor_policy is not None

    class HalfStored(type(parts.agent)):
        stored_return = vracer.contract.stored_return

    with pytest.raises(TypeError, match="declares stored_return but not state_value"):
        check_agent(HalfStored(parts.agent.config, (3,), parts.spec))


@pytest.mark.parametrize("cadence", [{}, {"pipeline": True},
                                     {"segment_length": 4, "replay_ratio": 1.0,
                                      "num_envs": 2}])
def test_a_toy_agent_with_typed_state_runs_through_build_and_every_cadence(tmp_path, cadence):
    """toy-pg (tests/toy_agents.py, NamedTuple state) through every loop, checkpointed and
    resumed: the contract and checkpoints take typed state."""
    run = _toy(steps=400, checkpoint_every=200, **cadence)
    assert loops.choose(run.train) is {"pipeline": loops.pipelined,
                                       "segment_length": loops.segments}.get(
        next(iter(cadence), None), loops.per_step)
    r = Run(run, tmp_path / "R")
    assert type(r.learner.state).__name__ == "ToyState"
    summary = r.train(until=200)
    assert summary["step"] == 200 and r.learner.updates > 0 and r.compile_count == 1
    r.close()
    resumed = Run(_toy(steps=400, checkpoint_every=200, **cadence), tmp_path / "R", resume=True)
    assert resumed.step == 200 and type(resumed.learner.state).__name__ == "ToyState"
    assert resumed.train()["step"] == 400
    resumed.close()


@pytest.mark.parametrize("pipeline", [False, True])
def test_the_pipelined_loop_acts_on_the_default_device(monkeypatch, pipeline):
    """--pipeline acts where its parameters are (they change every env step: on a GPU, copying
    them to the host after every update halved the loop's rate, throughput_baselines_h200.md);
    the other loops act on the host CPU."""
    from offpolicy.training import build as build_module

    made = []

    class Recording(build_module.HostPolicy):
        def __init__(self, *args, **kwargs):
            made.append(kwargs.get("on_default_device", False))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(build_module, "HostPolicy", Recording)
    build(_toy(steps=200, pipeline=pipeline))
    assert made == [pipeline]


# ---------------------------------------------------------------------- collector -> sink
def test_a_collector_writing_chunks_fills_replay_as_one_writing_replay_does():
    """The wire format of remote collectors: plain NumPy chunks (no objects), applied to the
    learner's sink in their order, give the replay and the reward statistics a collector
    writing into it directly gives (episode ends, behaviour fields, several env copies)."""
    run = registry.resolve("ddpg", train_overrides={
        "env": "toy_envs:ToyTerminate-v0", "num_envs": 3, "normalize_reward": True,
        **{k: v for k, v in TINY_OVERRIDES.items() if k != "hidden"}},
        agent_overrides={"hidden": (8, 8)})
    direct, remote = build(run), build(run)
    c1 = direct.collector()
    sink = ChunkSink()
    c2 = remote.collector(sink)
    for c in (c1, c2):
        c.begin()
    for step in range(0, 60, 3):
        for c in (c1, c2):
            c.step(*c.act(step), step)
        if step % 15 == 12:
            chunk = sink.take()
            assert all(isinstance(v, np.ndarray) for v in chunk.values())
            apply_chunk(chunk, remote.learner.sink())
    apply_chunk(sink.take(), remote.learner.sink())
    a, b = direct.replay.storage, remote.replay.storage
    assert len(a) == len(b) > 40
    for k in ("obs", "action", "reward", "terminated", "truncated", "valid"):
        np.testing.assert_array_equal(getattr(a, k), getattr(b, k), err_msg=k)
    # the learner's statistics come from what arrives (a remote collector normalises
    # observations with the copy it was last sent, so --normalize-obs is left out here)
    assert (repr(direct.learner.statistics.state_dict())
            == repr(remote.learner.statistics.state_dict()))
    assert direct.learner.reward_scale.rms.count > 40
    for c in (c1, c2):
        c.close()


# ---------------------------------------------------------------------- the code's shape
def _sources(folder: str = ""):
    return sorted((PACKAGE / folder).rglob("*.py"))


def test_training_and_agents_use_replay_through_its_public_methods():
    """Acceptance 2: no ``replay._name`` and no array mutation of replay outside replay/; the
    collector imports nothing from offpolicy.replay; no getattr/hasattr of an agent member
    outside agents/base.py."""
    bad = re.compile(r"replay\._|\.extras\[.*\] *\*=")
    for path in _sources("training") + _sources("agents"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            assert not bad.search(line), f"{path}:{n}: {line.strip()}"
    collector = ast.parse((PACKAGE / "training" / "collector.py").read_text())
    imported = {node.module for node in ast.walk(collector) if isinstance(node, ast.ImportFrom)}
    assert not [m for m in imported if m and m.startswith("offpolicy.replay")]
    probe = re.compile(r"\b(getattr|hasattr)\((self\.)?(agent|t\.agent|run\.agent|"
                       r"parts\.agent|self\.agent)\b")
    for path in _sources():
        if path.name == "base.py" and path.parent.name == "agents":
            continue
        assert not probe.search(path.read_text()), path


def test_no_function_in_training_is_longer_than_60_lines():
    for path in _sources("training"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                assert n <= 60, f"{path.name}:{node.name} has {n} lines"
    assert len((PACKAGE / "training" / "run.py").read_text().splitlines()) < 300


# the package's layers, lowest first: a module may import its own layer's and lower ones;
# benchmarks/ stands above them all (the package never imports it)
LAYERS = [
    {"errors", "jax_setup", "normal_numerics", "returns", "numpy_policy", "ray_address"},
    {"config", "distributions", "networks", "plotting", "envs", "replay"},
    {"registry", "agents", "train_args"},
    {"training"},
    {"api", "suites", "export", "callbacks"},
    {"__init__", "__main__", "cli"},
    {"benchmarks"},
]
ROOT = PACKAGE.parent
BENCHMARKS = ROOT / "benchmarks"


def _layer(module: str) -> int:
    top = module.split(".")[1] if module.count(".") else "__init__"
    if module.startswith("benchmarks."):
        top = "benchmarks"
    return next(i for i, names in enumerate(LAYERS) if top in names)


def _resolve(name: str, importer: Path) -> str | None:
    """The module of this tree that ``name`` imports in ``importer``, or None (another
    library's). The scripts in benchmarks/ import each other by their bare names (their folder
    is on ``sys.path``) or as ``benchmarks.<name>``."""
    if importer.parent == BENCHMARKS and (BENCHMARKS / f"{name.split('.')[0]}.py").exists():
        name = f"benchmarks.{name}"
    path = ROOT / name.replace(".", "/")
    return name if path.with_suffix(".py").exists() or (path / "__init__.py").exists() else None


def _imports() -> dict[str, set[str]]:
    """Module -> the modules of the tree (the package and benchmarks/) it imports (at the top
    or inside functions)."""
    graph = {}
    for path in [*_sources(), *sorted(BENCHMARKS.glob("*.py"))]:
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        out = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # "from package import module" imports the module; any other name, its module
                for a in node.names:
                    out.add(_resolve(f"{node.module}.{a.name}", path)
                            or _resolve(node.module, path))
            elif isinstance(node, ast.Import):
                out |= {_resolve(a.name, path) for a in node.names}
        graph[name] = out
    return {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}


def test_the_import_graph_points_down_and_has_no_cycles():
    """The whole tree's: the package's modules and benchmarks/' scripts."""
    graph = _imports()
    assert "benchmarks.peers" in graph and "benchmarks.peer_common" in graph["benchmarks.peers"]
    assert "offpolicy.suites.runner" in graph["benchmarks.learning"]
    for module, deps in graph.items():
        for dep in deps:
            if module == "offpolicy" or dep == "offpolicy":
                continue  # the package's face hands names on
            assert _layer(dep) <= _layer(module), f"{module} imports {dep} (a higher layer)"
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(m, path):
        state[m] = 1
        for d in graph[m]:
            if state.get(d) == 1:
                raise AssertionError(f"import cycle: {' -> '.join([*path, m, d])}")
            if d not in state:
                visit(d, [*path, m])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [])


# replay's own modules (issue #70), lowest first: each imports replay modules of lower layers
# only (refer.py, ReF-ER's rules for the agents, reads only the keys)
REPLAY_LAYERS = [
    {"keys", "memory"},
    {"storage"},
    {"extensions", "removers", "refer"},
    {"samplers", "prioritized", "stored_returns"},
    {"files"},
    {"table"},
    {"replay"},  # the package's face
]


def test_replay_is_a_table_of_parts_whose_imports_point_down():
    """storage below the parts (samplers, removers, extensions) below the file and the table;
    every module of replay/ has its layer, and the learner imports none of the algorithm
    features (stored returns, ReF-ER, PER, contexts) but the table."""
    graph = _imports()
    replay = {m: deps for m, deps in graph.items() if m.startswith("offpolicy.replay")}

    def layer(module):
        name = module.rsplit(".", 1)[-1]
        return next(i for i, names in enumerate(REPLAY_LAYERS) if name in names)

    assert {p.stem for p in _sources("replay")} - {"__init__"} <= set().union(*REPLAY_LAYERS)
    for module, deps in replay.items():
        for dep in deps:
            if dep.startswith("offpolicy.replay"):
                assert layer(dep) < layer(module), f"{module} imports {dep}"
    learner = {d for d in graph["offpolicy.training.learner"] if d.startswith("offpolicy.replay")}
    assert learner == {"offpolicy.replay.table"}, learner


def test_a_checkpoint_saved_before_any_training_loads(tmp_path):
    """``Agent.save`` before ``learn`` writes no collector state and no reward statistics:
    load, evaluate and learn work from it (the learner's statistics keep their start)."""
    import offpolicy

    agent = offpolicy.make("ddpg", env="Pendulum-v1", quiet=True, hidden=(8, 8), batch_size=8)
    agent.save(tmp_path / "A")
    loaded = offpolicy.load(tmp_path / "A")
    assert loaded.evaluate(1).shape == (1,)
    loaded.learn(100)


def test_the_architecture_page_states_these_layers():
    """docs/architecture.md's layer table is LAYERS (top first)."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    rows = re.findall(r"^\| (\d+) \| (.*) \|$", page, re.M)
    stated = {int(n): set(re.findall(r"`([^`/]+)/?`", names)) for n, names in rows}
    assert stated == {i + 1: names for i, names in enumerate(LAYERS)}
