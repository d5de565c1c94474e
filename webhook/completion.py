"""Shell completion for bash and zsh, generated from the parser (``gpu-guard completion SHELL``).

Walked from the same ``argparse`` parser that parses, so a new command, flag or choice completes
without anyone editing a script: commands, each command's flags, a flag's choices, and file
names for a flag that takes any other value.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

SHELLS = ("bash", "zsh")


@dataclass(frozen=True)
class Flag:
    names: tuple[str, ...]
    help: str
    takes_value: bool
    choices: tuple[str, ...]
    files: bool
    """Its value names a file or directory (metavar FILE, PATH, DIR)."""


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    flags: tuple[Flag, ...]


def _flags(parser: argparse.ArgumentParser) -> tuple[Flag, ...]:
    flags = []
    for action in parser._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS:
            continue
        choices = tuple(str(c) for c in action.choices) if action.choices else ()
        files = str(action.metavar or "") in ("FILE", "PATH", "DIR")
        takes_value = action.nargs != 0
        flags.append(
            Flag(tuple(action.option_strings), _short(action.help), takes_value, choices, files)
        )
    return tuple(flags)


def _commands(parser: argparse.ArgumentParser) -> tuple[Command, ...]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: _short(a.help) for a in action._choices_actions}
            return tuple(
                Command(name, helps.get(name, ""), _flags(sub))
                for name, sub in action.choices.items()
            )
    return ()


def _short(text: str | None) -> str:
    """A help line's first clause, without %(default)s and the like."""
    clause = re.split(r"[;(:]", (text or "").replace("%(default)s", "").strip())[0]
    return clause.strip().rstrip(",.")


def _function(prog: str) -> str:
    return "_" + re.sub(r"\W", "_", prog)


def bash_script(parser: argparse.ArgumentParser) -> str:
    """A bash completion function for ``parser.prog``; source it, or put it in
    bash-completion's completions directory."""
    prog = parser.prog.split()[-1]  # as the kubectl plugin too: the script completes gpu-guard
    fn = _function(prog)
    commands = _commands(parser)
    top = _flags(parser)
    value_cases: list[str] = []
    for scope, flags in [("*", top), *((c.name, c.flags) for c in commands)]:
        free = [f"{scope}:{n}" for f in flags if f.takes_value and not f.choices for n in f.names]
        if free:  # any value: nothing offered, so -o default completes file names
            value_cases.append(f"        {'|'.join(free)}) COMPREPLY=(); return ;;")
        for flag in flags:
            if flag.takes_value and flag.choices:
                patterns = "|".join(f"{scope}:{name}" for name in flag.names)
                reply = f'COMPREPLY=($(compgen -W "{" ".join(flag.choices)}" -- "$cur"))'
                value_cases.append(f"        {patterns}) {reply}; return ;;")
    words = " ".join([*(n for f in top for n in f.names), *(c.name for c in commands)])
    command_cases = []
    for c in commands:
        offered = " ".join(n for f in c.flags for n in f.names)
        command_cases.append(
            f'        {c.name}) COMPREPLY=($(compgen -W "{offered}" -- "$cur")) ;;'
        )
    names = "|".join(c.name for c in commands)
    return "\n".join(
        [
            f"# bash completion for {prog}, generated from its parser: {prog} completion bash",
            f"{fn}() {{",
            '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"',
            '    local cmd="" i',
            "    for ((i = 1; i < COMP_CWORD; i++)); do",
            f'        case "${{COMP_WORDS[i]}}" in {names})',
            '            cmd="${COMP_WORDS[i]}"; break ;; esac',
            "    done",
            '    case "${cmd:-*}:$prev" in',
            *value_cases,
            "    esac",
            '    case "$cmd" in',
            f'        "") COMPREPLY=($(compgen -W "{words}" -- "$cur")) ;;',
            *command_cases,
            "    esac",
            "}",
            f"complete -o default -F {fn} {prog}",
            "",
        ]
    )


def _zsh_escape(text: str) -> str:
    return (
        text.replace("\\", "\\\\")
        .replace("'", "'\\''")
        .replace("[", "\\[")
        .replace("]", "\\]")
        .replace(":", "\\:")
    )


def _zsh_specs(flags: tuple[Flag, ...]) -> list[str]:
    specs = []
    for flag in flags:
        names = flag.names[0] if len(flag.names) == 1 else "{" + ",".join(flag.names) + "}"
        exclusive = f"({' '.join(flag.names)})" if len(flag.names) > 1 else ""
        action = ""
        if flag.takes_value:
            if flag.choices:
                action = f":value:({' '.join(flag.choices)})"
            else:
                action = ":file:_files" if flag.files else ":value: "
        spec = f"'{exclusive}'{names}'[{_zsh_escape(flag.help)}]{action}'"
        specs.append(spec if exclusive else spec.replace("''", "", 1))
    return specs


def zsh_script(parser: argparse.ArgumentParser) -> str:
    """A zsh completion function for ``parser.prog`` (``#compdef``): put it on ``$fpath`` as
    ``_<prog>``, or source it after ``compinit``."""
    prog = parser.prog.split()[-1]  # as the kubectl plugin too: the script completes gpu-guard
    fn = _function(prog)
    commands = _commands(parser)
    described = " ".join(f"'{c.name}:{_zsh_escape(c.help)}'" for c in commands)
    cases = []
    for command in commands:
        specs = " \\\n                ".join(_zsh_specs(command.flags)) or "'*:file:_files'"
        cases.append(f"            {command.name})\n                _arguments {specs} ;;")
    top = " \\\n        ".join(_zsh_specs(_flags(parser)))
    return "\n".join(
        [
            f"#compdef {prog}",
            f"# zsh completion for {prog}, generated from its parser: {prog} completion zsh",
            f"{fn}() {{",
            '    local curcontext="$curcontext" state line',
            f"    local -a commands=({described})",
            f"    _arguments -C \\\n        {top} \\\n        '1:command:->command' \\\n"
            "        '*::argument:->argument'",
            "    case $state in",
            "        command) _describe command commands ;;",
            "        argument)",
            "            case $line[1] in",
            *cases,
            "            esac ;;",
            "    esac",
            "}",
            f'if [[ $zsh_eval_context[-1] == loadautofunc ]]; then {fn} "$@"; '
            f"else compdef {fn} {prog}; fi",
            "",
        ]
    )


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    return bash_script(parser) if shell == "bash" else zsh_script(parser)
