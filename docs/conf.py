"""Sphinx configuration of the mori documentation site (built by `nox -s docs`)."""

from __future__ import annotations

import importlib.util

project = "mori"
author = "mori contributors"
copyright = "mori contributors"
release = "0.1"

extensions = [
    "myst_parser",  # pages are Markdown (MyST); the API reference is reST for autodoc
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",  # the Python layers use Google-style "Args:" sections
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
myst_heading_anchors = 3

# Broken references to third-party types (numpy, torch) in signatures are not worth failing -W.
nitpicky = False
autodoc_member_order = "bysource"

# furo is installed by the docs session; fall back so a bare sphinx still renders the site.
html_theme = "furo" if importlib.util.find_spec("furo") else "alabaster"
html_title = "mori"
