"""Runnable documentation examples: find them, shorten them, run them (issue #32).

A fenced block is runnable when the line before its opening fence is ``<!-- runnable -->``, an
HTML comment that neither Sphinx (MyST) nor GitHub shows; ``<!-- runnable: file NAME -->``
marks a block that is written to the file NAME (a module the next blocks import) instead. A
page's runnable blocks run in the order they appear, in one empty folder, as a reader would run
them there: Python blocks as a script in that folder (a fresh ``__main__`` module, the folder
first on the import path), shell blocks one ``offpolicy`` or ``python -m offpolicy`` command per
line (``#`` comments and ``\\`` continuations allowed, globs expanded), in this process.
Budgets are shortened first: ``.learn(N)``, ``--steps N`` and evaluation episodes
(:data:`SMALL`, :func:`shell_commands`).

``python tests/doc_snippets.py EXAMPLES.json RESULTS.json`` runs the examples of the JSON object
``{name: [[language, code, file], ...]}`` in this one process (one interpreter and one JAX start for
all of them: tests/test_examples.py) and writes ``{name: {"ok", "seconds", "cpu_seconds",
"error"}}``.
"""

from __future__ import annotations

import gc
import glob
import json
import os
import re
import resource
import shlex
import sys
import time
import traceback
import types
from pathlib import Path

MARKER = "<!-- runnable -->"
SMALL_STEPS = 300  # past every default batch size (V-RACER's 256), so updates run
# what the runner shortens in Python: training lengths and evaluation episodes
SMALL = [(re.compile(r"\.learn\(\d[\d_]*(?=[,)])"), f".learn({SMALL_STEPS}"),
         (re.compile(r"episodes=\d+"), "episodes=1")]
BLOCK = re.compile(r"^<!-- runnable(?:: file ([\w./-]+))? -->[ \t]*\n```(\w+)[^\n]*\n(.*?)^```",
                   re.S | re.M)
# flags whose value a runnable shell line gets from the runner
SHORTENED = {"--steps": str(SMALL_STEPS), "--eval-every": str(SMALL_STEPS),
             "--eval-episodes": "1", "--log-every": str(SMALL_STEPS // 2)}


def runnable_blocks(path: Path) -> list[tuple[str, str, str]]:
    """``(language, code, file)`` of every block marked runnable in ``path``, in order;
    ``file`` is the name to write the block to, or "" for a block that runs."""
    return [(language, code, file) for file, language, code in BLOCK.findall(path.read_text())]


def small(code: str) -> str:
    for pattern, replacement in SMALL:
        code = pattern.sub(replacement, code)
    return code


def shell_commands(code: str) -> list[list[str]]:
    """The ``offpolicy`` commands of a shell block as argument lists (without ``offpolicy``):
    ``train`` runs SMALL_STEPS steps (twice that with ``--resume``) with one evaluation of one
    episode, quietly; ``eval`` plays one episode."""
    commands = []
    for line in code.replace("\\\n", " ").splitlines():
        argv = shlex.split(line, comments=True)
        if not argv:
            continue
        if argv[:3] == ["python", "-m", "offpolicy"]:
            argv = argv[2:]  # as `offpolicy`, the current folder on the import path
        if argv[0] != "offpolicy":
            raise ValueError(f"a runnable shell line must be an offpolicy command: {line!r}")
        argv = argv[1:]
        if argv[:1] == ["train"]:
            for flag in SHORTENED:
                while flag in argv:
                    i = argv.index(flag)
                    del argv[i:i + 2]
            argv += [x for flag, value in SHORTENED.items() for x in (flag, value)]
            if "--resume" in argv:  # a resume goes on past the first run's steps
                argv[argv.index("--steps") + 1] = str(2 * SMALL_STEPS)
            argv += ["--quiet"]
        if argv[:1] == ["eval"] and "--episodes" in argv:
            argv[argv.index("--episodes") + 1] = "1"
        commands.append(argv)
    return commands


def run_block(language: str, code: str) -> None:
    if language == "python":
        main_module = sys.modules["__main__"]
        script = types.ModuleType("__main__")  # as `python script.py`: "__main__:Name" resolves
        script.__file__ = str(Path.cwd() / "example.py")
        sys.modules["__main__"] = script
        try:
            exec(compile(small(code), script.__file__, "exec"), script.__dict__)
        finally:
            sys.modules["__main__"] = main_module
        return
    if language not in ("bash", "sh", "console"):
        raise ValueError(f"cannot run a {language} block")
    from offpolicy.cli import main

    for argv in shell_commands(code):
        # the shell's globs (`offpolicy table runs/*`), when the command runs
        argv = [x for a in argv for x in ((sorted(glob.glob(a)) or [a]) if "*" in a else [a])]
        rc = main(argv)
        if rc != 0:
            raise RuntimeError(f"`offpolicy {shlex.join(argv)}` exited {rc}")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main(examples_path: str, results_path: str) -> int:
    examples = json.loads(Path(examples_path).read_text())
    results, home = {}, Path.cwd()
    for name, blocks in examples.items():
        folder = home / re.sub(r"[^\w.-]", "_", name)
        folder.mkdir()
        os.chdir(folder)
        sys.path.insert(0, str(folder))  # the folder's modules import, as a script's would
        modules = set(sys.modules)
        t0, c0, error = time.perf_counter(), _cpu(), ""
        try:
            for i, (language, code, file) in enumerate(blocks):
                try:
                    if file:
                        (folder / file).write_text(code)
                    else:
                        run_block(language, code)
                except BaseException:  # noqa: BLE001 - reported per example; the rest run
                    error = f"block {i + 1} ({language}):\n{small(code)}\n" + \
                        traceback.format_exc()[-3000:]
                    break
        finally:
            os.chdir(home)
            sys.path.remove(str(folder))
            for m in set(sys.modules) - modules:  # the folder's own modules go with it
                if getattr(sys.modules[m], "__file__", None) and \
                        Path(sys.modules[m].__file__).parent == folder:
                    del sys.modules[m]
            gc.collect()
        results[name] = {"ok": not error, "seconds": round(time.perf_counter() - t0, 2),
                         "cpu_seconds": round(_cpu() - c0, 2), "error": error}
        print(f"{name}: {'ok' if not error else 'FAILED'} ({results[name]['seconds']} s)",
              flush=True)
    Path(results_path).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
