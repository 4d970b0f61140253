"""Sphinx configuration: MyST Markdown pages, furo, autodoc; `make docs` builds with -W."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))

import offpolicy  # noqa: E402

project = "offpolicy"
author = "offpolicy developers"
release = version = offpolicy.__version__
copyright = "2026, offpolicy developers"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
    "offpolicy_docs",  # the generated CLI reference and the results pages
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "_inventories"]
myst_heading_anchors = 4  # `page.md#a-heading` links, as GitHub renders them
myst_enable_extensions = ["colon_fence", "dollarmath"]
suppress_warnings = ["myst.header"]  # the reports open at level-2 headings under a title

autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
napoleon_numpy_docstring = False

# Inventories: online first; offline (CI has no network), the partial inventories in
# _inventories/ resolve the names these pages reference, to the same URLs
intersphinx_mapping = {
    "python": ("https://docs.python.org/3", (None, "_inventories/python.inv")),
    "numpy": ("https://numpy.org/doc/stable", (None, "_inventories/numpy.inv")),
    "jax": ("https://docs.jax.dev/en/latest", (None, "_inventories/jax.inv")),
    "gymnasium": ("https://gymnasium.farama.org", (None, "_inventories/gymnasium.inv")),
}
intersphinx_timeout = 5

html_theme = "furo"
html_title = f"offpolicy {version}"
html_theme_options = {"navigation_with_keys": True}
html_static_path = ["_static"]
html_css_files = ["offpolicy.css"]  # plain-text blocks (error messages) wrap
