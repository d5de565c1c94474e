"""Every file that mirrors the registry (policies/registry.py), written from it: ``make generate``.

- ``manifests/base/guard.yaml`` and ``manifests/overlays/audit/guard.yaml``: the ``policies:``
  block, every policy at its default action (audit: every policy at ``audit``), and the
  ``mutations:`` block, every mutation opt-in;
- ``manifests/base/webhooks.yaml``: above each validating webhook, the line ``judged here``
  naming the policies whose disallowed samples (policies/samples/) that webhook sends, through
  its rules, namespaceSelector and CEL matchConditions (tools/routes.py), with their defaults;
- ``manifests/base/rbac.yaml``: the rules of the ClusterRole ``gpu-guard-read``, get, list and
  watch on every kind the live state watches (``policies/cluster/kinds.py`` ``WATCHED``);
- ``docs/policies.md``: the reference (policies/reference.py);
- ``README.md``: how many policies there are;
- the chart's generated files (tools/chart.py: its copies of manifests/, its schema's ids).

``python -m tools.generate`` writes what is out of date; ``--check`` writes nothing and exits 1
naming each stale file (tests/test_generated.py runs it). The output depends only on the tree.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from policies.cluster.kinds import WATCHED
from policies.reference import reference_text
from policies.registry import ALL_MUTATIONS, ALL_POLICIES
from tests.samples import DISALLOWED, all_samples
from tools import chart
from tools.routes import as_sent, routed

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "manifests"
WEBHOOKS = MANIFESTS / "base" / "webhooks.yaml"
COMMAND = "make generate"
#: The first line of the generated comment above a validating webhook; continuations follow.
JUDGED = f"  # judged here ({COMMAND}): "
CONTINUED = "  #   "
WIDTH = 100
_COUNT = re.compile(r"\b\d+ policies\b")
_READ_RULES = re.compile(r"(?ms)^(  name: gpu-guard-read\n(?:(?!^---).)*?^rules:\n).*?(?=^---)")


def guard_blocks(audit: bool) -> Callable[[str], str]:
    """guard.yaml's ``policies:`` block, each policy at its default action (or at audit), and
    its ``mutations:`` block, each mutation opt-in (enabled: false) under its reason."""

    def rewrite(text: str) -> str:
        policies = "".join(
            f"  {p.id}: {{action: {'audit' if audit else p.default_action.label}}}\n"
            for p in ALL_POLICIES
        )
        mutations = "".join(
            ("" if audit else "".join(f"  # {line}\n" for line in textwrap.wrap(m.reason, 96)))
            + f"  {m.id}: {{enabled: false}}\n"
            for m in ALL_MUTATIONS
        )
        for name, block in (("policies", policies), ("mutations", mutations)):
            whole = f"{name}:\n{block}"
            text, count = _block(name).subn(lambda _: whole, text)  # noqa: B023 (used at once)
            if count != 1:
                raise SystemExit(f"guard.yaml: no single top-level `{name}:` block")
        return text

    return rewrite


def _block(name: str) -> re.Pattern[str]:
    """A top-level block of a YAML file: its key's line and its indented or comment lines."""
    return re.compile(rf"(?m)^{name}:\n(?:(?:  .*|\s*#.*)?\n)*?(?=^\S)")


def judged_by_webhook(text: str) -> dict[str, list[str]]:
    """Validating webhook name -> the ids of the policies whose disallowed samples it is sent,
    in registry order."""
    hooks = [
        hook
        for doc in yaml.safe_load_all(text)
        if doc["kind"] == "ValidatingWebhookConfiguration"
        for hook in doc["webhooks"]
    ]
    reached: dict[str, set[str]] = {hook["name"]: set() for hook in hooks}
    for sample in all_samples(DISALLOWED):
        for request in sample.requests():
            sent = routed(hooks, as_sent(request))
            for hook in hooks:
                if hook["name"].split(".")[0] in sent:
                    reached[hook["name"]].add(sample.policy_id)
    order = [p.id for p in ALL_POLICIES]
    return {name: sorted(ids, key=order.index) for name, ids in reached.items()}


def judged_comment(ids: Sequence[str]) -> list[str]:
    actions = {p.id: p.default_action.label for p in ALL_POLICIES}
    # a no-break space keeps each id beside its action; textwrap breaks only at ASCII spaces
    words = ", ".join(f"{i}\u00a0({actions[i]})" for i in ids)
    lines = textwrap.wrap(
        JUDGED + words, WIDTH, subsequent_indent=CONTINUED, break_on_hyphens=False
    )
    return [line.replace("\u00a0", " ") for line in lines]


def webhook_comments(text: str) -> str:
    """webhooks.yaml with the generated ``judged here`` lines redone above each webhook."""
    judged = judged_by_webhook(text)
    out: list[str] = []
    in_generated = False
    for line in text.splitlines():
        if line.startswith(JUDGED) or (in_generated and line.startswith(CONTINUED)):
            in_generated = True
            continue
        in_generated = False
        name = line.strip().removeprefix("- name:").strip()
        if line.strip().startswith("- name:") and judged.get(name):
            out += judged_comment(judged[name])
        out.append(line)
    return "\n".join(out) + "\n"


def read_rules(text: str) -> str:
    """rbac.yaml with gpu-guard-read granting get, list, watch on each watched kind, one rule per
    API group in the order of WATCHED."""
    groups: dict[str, list[str]] = {}
    core = '""'  # the core group, as YAML writes an empty string
    for resource in WATCHED:
        groups.setdefault(resource.kind.group, []).append(resource.plural)
    rules = "".join(
        f"  - apiGroups: [{group or core}]\n{_resources(plurals)}    verbs: [get, list, watch]\n"
        for group, plurals in groups.items()
    )
    new, count = _READ_RULES.subn(lambda match: match.group(1) + rules, text)
    if count != 1:
        raise SystemExit("rbac.yaml: no single ClusterRole gpu-guard-read with its rules")
    return new


def _resources(plurals: Sequence[str]) -> str:
    """The rule's ``resources``, on one line when it fits in 100 characters, else one a line."""
    line = f"    resources: [{', '.join(plurals)}]\n"
    return (
        line
        if len(line) <= WIDTH + 1
        else "    resources:\n" + "".join(f"      - {plural}\n" for plural in plurals)
    )


def readme_count(text: str) -> str:
    return _COUNT.sub(f"{len(ALL_POLICIES)} policies", text)


#: Each generated file of manifests/ and the documents, and how it is rewritten from its text.
REWRITES: dict[Path, Callable[[str], str]] = {
    MANIFESTS / "base" / "guard.yaml": guard_blocks(audit=False),
    MANIFESTS / "overlays" / "audit" / "guard.yaml": guard_blocks(audit=True),
    WEBHOOKS: webhook_comments,
    MANIFESTS / "base" / "rbac.yaml": read_rules,
    ROOT / "docs" / "policies.md": lambda _: reference_text(),
    ROOT / "README.md": readme_count,
}


def stale() -> list[Path]:
    """The generated files whose content is not what generation would write."""
    found = [path for path, rewrite in REWRITES.items() if rewrite(_read(path)) != _read(path)]
    return found + chart.stale()


def write() -> list[Path]:
    """Write every generated file that is out of date (the chart's last: it copies manifests/)."""
    written = []
    for path, rewrite in REWRITES.items():
        current = _read(path)
        new = rewrite(current)
        if new != current:
            path.write_text(new)
            written.append(path)
    for path, text in chart.expected().items():
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            written.append(path)
    return written


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.generate", description=__doc__)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    if args.check:
        out_of_date = stale()
        for path in out_of_date:
            print(f"{path.relative_to(ROOT)}: out of date; run {COMMAND}", file=sys.stderr)
        return 1 if out_of_date else 0
    for path in write():
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
