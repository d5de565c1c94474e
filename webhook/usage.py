"""The command line's manners: did-you-mean for commands, choices and flags, ``--version``,
``--color`` with ``NO_COLOR``, as the tools people know behave (issue 40).

Python 3.11's argparse suggests nothing for a mistyped command or flag; ``GuardParser`` adds the
nearest known spelling (difflib, as ``git``'s "did you mean" does with edit distance) to its
one-line error. Nothing here changes what parses: only what a refusal says.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from collections.abc import Iterable, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any, NoReturn, TextIO

_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<word>[^']*)' \(choose from (?P<choices>.*)\)")
COLOR_CHOICES = ("auto", "always", "never")


def close_to(word: str, known: Iterable[str]) -> list[str]:
    """The known words nearest ``word`` (at most three, best first), for a did-you-mean."""
    return difflib.get_close_matches(word, list(dict.fromkeys(known)), n=3, cutoff=0.6)


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """``; did you mean 'x'?`` (or 'x' or 'y'), or nothing when nothing is near."""
    near = close_to(word, known)
    if not near:
        return ""
    return "; did you mean " + " or ".join(f"'{n}'" for n in near) + "?"


def unknown(what: str, word: str, known: Iterable[str], listed_by: str) -> str:
    """``no policy 'x' (did you mean 'y'?); gpu-guard policies lists them``."""
    near = close_to(word, known)
    hint = f" (did you mean {' or '.join(repr(n) for n in near)}?)" if near else ""
    return f"no {what} {word!r}{hint}; {listed_by} lists them"


def package_version() -> str:
    """gpu-guard's version as installed (pyproject.toml; the chart's version and appVersion are
    written from it by ``make chart-files``, and a test keeps them equal)."""
    try:
        return version("gpu-guard")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "0+unknown"


class GuardParser(argparse.ArgumentParser):
    """An ArgumentParser whose refusals of a command, a choice or a flag name the nearest one."""

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        self._argv = list(sys.argv[1:] if args is None else args)
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            flags = [e.split("=", 1)[0] for e in extras if e.startswith("-")]
            known = self._flags_for(parsed)
            hint = next((h for h in (did_you_mean(f, known) for f in flags) if h), "")
            self.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return parsed

    def error(self, message: str) -> NoReturn:
        found = _INVALID_CHOICE.search(message)
        if found is not None:
            choices = re.findall(r"'([^']*)'", found["choices"])
            hint = did_you_mean(found["word"], choices)
            # `--colour never audit`: argparse takes the unknown flag's value for the command
            unknown = [
                a
                for a in getattr(self, "_argv", [])
                if a.startswith("--") and a.split("=", 1)[0] not in self._option_string_actions
            ]
            if not hint and unknown:
                hint = did_you_mean(unknown[0].split("=", 1)[0], self._option_string_actions)
            message += hint
        super().error(message)

    def _flags_for(self, parsed: argparse.Namespace) -> list[str]:
        """This parser's option strings and those of the command ``parsed`` chose."""
        flags = list(self._option_string_actions)
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(parsed, action.dest or "", None) or "")
                if chosen is not None:
                    flags += list(chosen._option_string_actions)
        return flags


def add_color(parser: argparse.ArgumentParser, *, top: bool = False) -> None:
    """``--color=auto|always|never``: before the command (``top``, holding the default) or
    after it (a value of its own, so that its absence never undoes the one given before)."""
    parser.add_argument(
        "--color",
        dest="color" if top else "color_after_command",
        choices=COLOR_CHOICES,
        default="auto" if top else None,
        help="colour in tables: auto (on a terminal, unless $NO_COLOR is set), always, never"
        + ("" if top else "; default: as given before the command, else auto"),
    )


def color_choice(args: argparse.Namespace) -> str:
    """``--color`` as given after the command, else before it, else auto."""
    after: str | None = getattr(args, "color_after_command", None)
    return after or str(getattr(args, "color", "auto"))


def add_version(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")


def color_wanted(choice: str, stream: TextIO, environ: Any = os.environ) -> bool:
    """Whether to colour ``stream``: ``always`` and ``never`` as said; ``auto`` only on a
    terminal and only when ``NO_COLOR`` is unset or empty (no-color.org)."""
    if choice == "always":
        return True
    if choice == "never":
        return False
    return stream.isatty() and not environ.get("NO_COLOR")
