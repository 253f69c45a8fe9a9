"""The `jobcenter` and `make` commands a text shows, checked against what exists: every
subcommand and option a `jobcenter` command names must be one the CLI has, and every `make`
target one the Makefile has. This holds for the blocks that are not run too: a renamed
option fails here instead of in a reader's terminal."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import click

from jobcenter import cli

PUNCTUATION = "|&;()<>$"
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
MAKE_TARGET = re.compile(r"^([A-Za-z][\w-]*)\s*:(?!=)", re.MULTILINE)


def _is_operator(word: str) -> bool:
    return bool(word) and all(c in PUNCTUATION for c in word)


def _words(line: str) -> list[str]:
    """The shell words of one line, with the shell's operators (`|`, `&&`, `$(` ...) as words
    of their own."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=PUNCTUATION)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError:  # an unbalanced quote: read it word by word all the same
        return line.split()


def commands(text: str, program: str) -> Iterator[list[str]]:
    """Each command of `text` that runs `program`, as its words after the program's name."""
    for line in re.sub(r"\\\n", " ", text).splitlines():
        words = _words(line)
        for position, word in enumerate(words):
            if Path(word).name != program:
                continue
            before = words[:position]
            while before and ASSIGNMENT.match(before[-1]):
                before = before[:-1]  # VAR=value jobcenter ...
            if before and not _is_operator(before[-1]) and before[-1] not in {"then", "do"}:
                continue  # an argument, not a command: `pip install jobcenter`
            args = []
            for arg in words[position + 1 :]:
                if _is_operator(arg):
                    break
                args.append(arg)
            yield args


def jobcenter_problems(args: list[str]) -> list[str]:
    """What is wrong with `jobcenter ARGS`: unknown subcommands and options."""
    command: click.Command = cli.main
    path = "jobcenter"
    problems = []
    for arg in (a.strip("[]") for a in args):
        if not arg or arg == "...":
            continue
        if arg.startswith("-") and arg != "-":
            name = arg.split("=", 1)[0]
            known = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
            if name not in known | {"--help"}:
                problems.append(f"`{path}` has no option {name}")
        elif isinstance(command, click.Group):
            sub = command.commands.get(arg)
            if sub is None:
                problems.append(f"`{path}` has no command {arg!r}")
                return problems
            command, path = sub, f"{path} {arg}"
    return problems


def make_targets(makefile: Path) -> set[str]:
    return set(MAKE_TARGET.findall(makefile.read_text()))


def make_problems(args: list[str], targets: set[str]) -> list[str]:
    wanted = [a for a in args if not a.startswith("-") and not ASSIGNMENT.match(a)]
    return [f"the Makefile has no target {t!r}" for t in wanted if t not in targets]
