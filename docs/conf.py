"""The documentation site: Sphinx reads the Markdown pages of docs/ through MyST-Parser and
writes them with the Furo theme. `make docs` builds it into docs/_build/html, a warning
failing the build (a broken link, a missing page, a heading that is not there)."""

import re
from pathlib import Path
from typing import Any

from pygments.lexers.special import TextLexer
from sphinx.application import Sphinx

project = "jobcenter"
author = "the jobcenter authors"
copyright = "the jobcenter authors"

extensions = [
    "myst_parser",  # Markdown, the format of the README and of every page here
    "sphinx_click",  # the CLI reference, written from the click commands themselves
    "sphinxcontrib.openapi",  # the HTTP API reference, from docs/openapi.json
]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
# Links to a section of another page ([..](page.md#a-heading)) resolve against headings
# down to this level; a link to a heading that is not there is a warning.
myst_heading_anchors = 3

html_theme = "furo"
html_title = "jobcenter"
# Option names (`--host`) stay as written: no en dashes, no curly quotes.
smartquotes = False

# The tour and changelog pages include README.md and CHANGELOG.md, whose links are written
# from the repository's root: `docs/guide/specs.md`, `ARCHITECTURE.md`. In the site they are
# these pages.
README_LINKS = {"](docs/": "](", "](ARCHITECTURE.md)": "](architecture.md)",
                "](CHANGELOG.md)": "](changelog.md)"}  # fmt: skip


def root_links_for_the_site(
    app: Sphinx, relative_path: Path, parent_docname: str, content: list[str]
) -> None:
    if relative_path.parent == Path(".."):  # a file of the repository's root
        for written, meant in README_LINKS.items():
            content[0] = content[0].replace(written, meant)


# The CLI's help is plain text, where `*.example.com` means a wildcard; reStructuredText, which
# sphinx-click writes, would read the `*` as the start of emphasis.
LONE_STAR = re.compile(r"(?<![\\*])\*(?!\*)")


def plain_stars(app: Sphinx, ctx: Any, lines: list[str]) -> None:
    lines[:] = [LONE_STAR.sub(r"\\*", line) for line in lines]


def setup(app: Sphinx) -> None:
    for part in ("description", "usage", "options", "arguments", "envvars", "epilog"):
        app.connect(f"sphinx-click-process-{part}", plain_stars)
    app.connect("include-read", root_links_for_the_site)
    # ARCHITECTURE.md draws its diagrams in Mermaid, which GitHub renders; the site shows
    # their source.
    app.add_lexer("mermaid", TextLexer)
