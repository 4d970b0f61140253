"""Write the partial intersphinx inventories the docs fall back on offline (CI has no
network): the names our pages and docstrings reference, each with its page in the project's
own documentation. Run after adding a reference: ``python docs/_inventories/make_inventories.py``.
"""

import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent

# project: (name, version, [(object, domain:role, uri relative to the project's root)])
OBJECTS = {
    "python": ("Python", "3", [
        ("pathlib.Path", "py:class", "library/pathlib.html#pathlib.Path"),
        ("dataclasses.dataclass", "py:function", "library/dataclasses.html#dataclasses.dataclass"),
        ("typing.Any", "py:data", "library/typing.html#typing.Any"),
        ("collections.abc.Callable", "py:class",
         "library/collections.abc.html#collections.abc.Callable"),
    ]),
    "numpy": ("NumPy", "2", [
        ("numpy.ndarray", "py:class", "reference/generated/numpy.ndarray.html#numpy.ndarray"),
        ("numpy.dtype", "py:class", "reference/generated/numpy.dtype.html#numpy.dtype"),
    ]),
    "jax": ("JAX", "0.10", [
        ("jax.Array", "py:class", "_autosummary/jax.Array.html#jax.Array"),
        ("jax.jit", "py:function", "_autosummary/jax.jit.html#jax.jit"),
        ("jax.lax.scan", "py:function", "_autosummary/jax.lax.scan.html#jax.lax.scan"),
        ("jax.vmap", "py:function", "_autosummary/jax.vmap.html#jax.vmap"),
    ]),
    "gymnasium": ("Gymnasium", "1", [
        ("gymnasium.Env", "py:class", "api/env/#gymnasium.Env"),
        ("gymnasium.spaces.Space", "py:class", "api/spaces/#gymnasium.spaces.Space"),
        ("gymnasium.make", "py:function", "api/registry/#gymnasium.make"),
    ]),
}


def write(path: Path, project: str, version: str, objects) -> None:
    head = (f"# Sphinx inventory version 2\n# Project: {project}\n# Version: {version}\n"
            "# The remainder of this file is compressed using zlib.\n").encode()
    body = "".join(f"{name} {role} 1 {uri} -\n" for name, role, uri in objects).encode()
    path.write_bytes(head + zlib.compress(body))


if __name__ == "__main__":
    for key, (project, version, objects) in OBJECTS.items():
        write(HERE / f"{key}.inv", project, version, objects)
