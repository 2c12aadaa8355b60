"""Sphinx configuration of the tinyflo book.

`tinyflo book build` copies this file into a staging folder beside the pages it generates
(modules, milestones, API reference) and runs Sphinx there; see book/README.md.
The build is offline: no notebook is executed, nothing is fetched, MathJax is served locally.
"""

import re

project = "tinyflo"
author = "the tinyflo authors"
copyright = "the tinyflo authors, MIT licence"

extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.mathjax"]

root_doc = "index"
exclude_patterns = ["_build", ".doctrees"]

# Notebooks are shown as written: the module pages are student releases, never run.
nb_execution_mode = "off"
myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3

# The API reference documents what each public namespace lists in __all__, in source order
# of the namespace's names; type hints stay in the signatures, where readers look for them.
autodoc_default_options = {"members": True, "member-order": "alphabetical"}
autodoc_typehints = "signature"
autodoc_preserve_defaults = True

# MathJax 2 from the jupyter-server-mathjax package, copied into _static/mathjax by the build.
# Sphinx and MyST mark formulas with class "math" and notebook text with "tex2jax_ignore":
# MathJax typesets the first and leaves stray dollar signs in the second alone. The package
# ships the STIX web fonts only (as Jupyter configures it).
mathjax_path = "mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full"
mathjax2_config = {
    "tex2jax": {"processClass": "math|tex2jax_process|mathjax_process",
                "ignoreClass": "tex2jax_ignore|mathjax_ignore"},
    "HTML-CSS": {"availableFonts": [], "preferredFont": None, "webFont": "STIX-Web", "imageFont": None},
}
myst_update_mathjax = False

html_theme = "sphinx_book_theme"
html_title = "tinyflo"
html_static_path = ["_static"]
html_css_files = ["tinyflo.css"]  # written by tinyflo.book: plots at the page's full width
html_copy_source = False
html_show_sourcelink = False
html_theme_options = {
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
    "show_toc_level": 2,
    "use_download_button": False,
    "use_fullscreen_button": False,
}

_LITERAL = re.compile(r"(``.+?``)")
_MARKUP = re.compile(r"\||\*(?=\S)")


def plain_docstring(app, what, name, obj, options, lines: list[str]) -> None:
    """Docstrings are plain text with ``literals``: ``|x|`` and ``*kernel`` are maths, not markup."""
    for i, line in enumerate(lines):
        parts = _LITERAL.split(line)
        lines[i] = "".join(part if part.startswith("``") else _MARKUP.sub(r"\\\g<0>", part)
                           for part in parts)


def setup(app) -> None:
    app.connect("autodoc-process-docstring", plain_docstring)
