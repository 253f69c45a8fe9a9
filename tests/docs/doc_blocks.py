"""The code blocks of README.md and docs/, read with markdown-it-py (the parser the site's
MyST-Parser is built on, so the tests see the blocks the site shows), each with what the
HTML comment just before it says:

  <!-- test: save as PATH -->                 write the block to PATH in the page's folder
  <!-- test: background until "TEXT" -->      run it in the background until the page ends;
                                              go on once its output shows TEXT
  <!-- test: skip: REASON -->                 not run, for the reason given

A block of a kind the docs tier cannot run (anything but yaml, json, python and sh) must be
skipped with its reason: no example goes unchecked without saying so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt
from markdown_it.token import Token

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
RUNNABLE = ("yaml", "json", "python", "sh")
MARKER = re.compile(r"<!--\s*test:\s*(?P<say>.*?)\s*-->\s*\Z", re.DOTALL)
SAVE = re.compile(r"save as (?P<path>[\w./-]+)")
BACKGROUND = re.compile(r'background until "(?P<text>[^"]+)"')
SKIP = re.compile(r"skip:\s*(?P<reason>\S.*)", re.DOTALL)


class MarkerError(ValueError):
    """A test comment the docs tier cannot read, or a block it cannot run unmarked."""


@dataclass(frozen=True)
class Block:
    page: Path  # relative to the repository
    line: int  # where the fence starts, 1-based
    language: str
    text: str
    save_as: str | None = None
    background_until: str | None = None
    skip_reason: str | None = None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.skip_reason is None


def pages() -> list[Path]:
    """README.md, then every page of the site (its build folder left out)."""
    found = sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)
    return [REPO / "README.md", *found]


def _marker(token: Token | None, where: str) -> dict[str, str]:
    if token is None or token.type != "html_block":
        return {}
    match = MARKER.match(token.content.strip())
    if match is None:
        return {}
    say = match.group("say")
    for name, rule in (("save_as", SAVE), ("background_until", BACKGROUND), ("skip", SKIP)):
        found = rule.fullmatch(say)
        if found:
            return {name: next(iter(found.groupdict().values())).strip()}
    raise MarkerError(f"{where}: cannot read the test comment {say!r}")


def read_blocks(page: Path) -> list[Block]:
    """The fenced code blocks of `page` (MyST directives such as {toctree} are not code)."""
    tokens = MarkdownIt("commonmark").parse(page.read_text())
    relative = page.relative_to(REPO) if page.is_relative_to(REPO) else page
    blocks = []
    for position, token in enumerate(tokens):
        if token.type != "fence" or token.info.startswith("{"):
            continue
        assert token.map is not None
        line = token.map[0] + 1
        where = f"{relative}:{line}"
        said = _marker(tokens[position - 1] if position else None, where)
        language = token.info.split()[0] if token.info.strip() else ""
        block = Block(
            page=relative,
            line=line,
            language=language,
            text=token.content,
            save_as=said.get("save_as"),
            background_until=said.get("background_until"),
            skip_reason=said.get("skip"),
        )
        if block.runs and language not in RUNNABLE:
            raise MarkerError(
                f"{where}: a ```{language or '(no language)'} block is not run: mark it "
                f"<!-- test: skip: REASON --> saying why, or make it one of {RUNNABLE}"
            )
        if block.background_until and language != "sh":
            raise MarkerError(f"{where}: only an sh block runs in the background")
        blocks.append(block)
    return blocks


def inline_code(page: Path) -> list[tuple[int, str]]:
    """Every `code span` of the page's prose, with its line."""
    spans = []
    for token in MarkdownIt("commonmark").enable("table").parse(page.read_text()):
        if token.type == "inline" and token.children and token.map:
            spans += [
                (token.map[0] + 1, child.content)
                for child in token.children
                if child.type == "code_inline"
            ]
    return spans
