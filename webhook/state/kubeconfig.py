"""Why a kubeconfig gave no client, in one line a person can act on (issue 40): its YAML, a
context it lacks, no current-context, rather than the loader's exception or a parser's trace."""

from __future__ import annotations

import yaml


def kubeconfig_problem(path: str, context: str | None, exc: BaseException) -> str:
    """Why the kubeconfig at ``path`` gave no client: its YAML, a context it lacks, no
    current-context; else the loader's own first line."""
    where = f"cannot load cluster credentials from {path}"
    try:
        with open(path, encoding="utf-8") as handle:
            document = yaml.safe_load(handle)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        return (
            f"{where}: not valid YAML{at} ({error.problem}); fix the file, or give another "
            "with --kubeconfig PATH"
        )
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        return f"{where}: {first_line(error)}"
    if not isinstance(document, dict):
        return f"{where}: not a kubeconfig (a YAML mapping with clusters, users and contexts)"
    names = [
        str(entry.get("name"))
        for entry in document.get("contexts") or []
        if isinstance(entry, dict) and entry.get("name") is not None
    ]
    known = f"it has: {', '.join(names)}" if names else "it has none"
    wanted = context or document.get("current-context")
    if not wanted:
        return (
            f"{where}: no current-context, and no --context given ({known}); give --context "
            "NAME, or kubectl config use-context NAME"
        )
    if wanted not in names:
        given = "--context" if context else "current-context"
        return (
            f'{where}: no context "{wanted}" ({given}; {known}); kubectl config get-contexts '
            "lists them"
        )
    return f"{where}: {first_line(exc)}"


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
