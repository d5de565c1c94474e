#!/usr/bin/env python3
"""Cut a full pci.ids down to what gpu-guard needs: policies/data/pci.ids.nvidia.

The guard maps NVIDIA PCI ids to names and back (sandbox device plugin resource names,
GFD product labels).  The full database is 1.3 MB, mostly other vendors' devices and
subsystem lines we never read, so the committed copy keeps, in the same pci.ids format:

- every vendor line (id and name only), so any vendor id still resolves to a name;
- vendor 10de (NVIDIA) with its device lines, exactly as written in the source;
- no subsystem lines, no comments inside the vendor list, no device-class section.

A provenance header records the source file, its Version/Date, its SHA-256, the Debian
package it came from, the licence note and the command that regenerated it.  Output is
a pure function of the input and options (no timestamps), so regenerating is diffable.

Usage (from the repository root):

    python tools/gen_pciids.py --debian-package pci.ids \\
        --debian-version 0.0~2023.04.11-1 /tmp/pciids/usr/share/misc/pci.ids
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shlex
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

NVIDIA = "10de"
DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "policies" / "data" / "pci.ids.nvidia"

_VENDOR_LINE = re.compile(r"[0-9a-fA-F]{4}\s")
_DEVICE_LINE = re.compile(r"\t[0-9a-fA-F]{4}\s")
_HEADER_FIELD = re.compile(r"#\s*(Version|Date):\s*(.+?)\s*$")
_LICENCE_START = "This file can be distributed under"


def header_fields(lines: Sequence[str]) -> dict[str, str]:
    """Version and Date from the source's leading comment block."""
    fields: dict[str, str] = {}
    for line in lines:
        if line and not line.startswith("#"):
            break
        match = _HEADER_FIELD.match(line)
        if match:
            fields[match.group(1)] = match.group(2)
    return fields


def licence_note(lines: Sequence[str]) -> list[str]:
    """The licence paragraph of the source header, verbatim minus the comment markers."""
    note: list[str] = []
    for line in lines:
        if line and not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if note and not text:
            break
        if note or text.startswith(_LICENCE_START):
            note.append(text)
    return note


def select_lines(lines: Iterable[str], vendor: str = NVIDIA) -> list[str]:
    """All vendor lines, plus the device lines of ``vendor``; everything else dropped."""
    kept: list[str] = []
    current: str | None = None
    for line in lines:
        if line.startswith("C "):
            break  # device-class section: no more vendors after this
        if _VENDOR_LINE.match(line):
            current = line[:4].lower()
            kept.append(line.rstrip())
        elif current == vendor and _DEVICE_LINE.match(line):
            kept.append(line.rstrip())
    return kept


def regenerate_command(args: argparse.Namespace) -> str:
    """The command line that reproduces the output, with a repo-relative script path."""
    argv = [
        "python",
        "tools/gen_pciids.py",
        "--debian-package",
        args.debian_package,
        "--debian-version",
        args.debian_version,
    ]
    if args.output != DEFAULT_OUTPUT:
        argv += ["--output", str(args.output)]
    argv.append(str(args.source))
    return shlex.join(argv)


def render(source: Path, text: str, args: argparse.Namespace) -> str:
    """The output file: provenance header, then the selected lines."""
    lines = text.splitlines()
    fields = header_fields(lines)
    selected = select_lines(lines)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    devices = sum(1 for line in selected if line.startswith("\t"))
    header = [
        "#",
        "#\tSubset of the PCI ID database for gpu-guard: every vendor line (no devices),",
        f"#\tand vendor {NVIDIA} (NVIDIA) with its {devices} device lines (no subsystems).",
        "#\tGenerated file: do not edit by hand; newer ids go in pci-ids-supplement.txt.",
        "#",
        f"#\tSource file:     {source}",
        f"#\tSource Version:  {fields.get('Version', 'unknown')}",
        f"#\tSource Date:     {fields.get('Date', 'unknown')}",
        f"#\tSource SHA-256:  {digest}",
        f"#\tDebian package:  {args.debian_package} {args.debian_version}",
        "#",
        *(f"#\t{line}" if line else "#" for line in licence_note(lines)),
        "#",
        f"#\tRegenerate with: {regenerate_command(args)}",
        "#",
        "",
    ]
    return "\n".join(header + selected) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("source", type=Path, help="pci.ids to read (e.g. from Debian's pci.ids)")
    parser.add_argument("--debian-package", required=True, help="Debian package name, e.g. pci.ids")
    parser.add_argument(
        "--debian-version", required=True, help="Debian package version, e.g. 0.0~2023.04.11-1"
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=DEFAULT_OUTPUT,
        help=f"file to write (default {DEFAULT_OUTPUT})",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    text = args.source.read_text(encoding="utf-8")
    output = render(args.source, text, args)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(output, encoding="utf-8")
    print(f"wrote {args.output} ({len(output.encode('utf-8'))} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
