"""The one place that looks for the machine's pci.ids: ``$GPU_GUARD_PCI_IDS``, else the usual paths.

The committed files (``policies/data``) know NVIDIA's devices and every vendor's name; a system
pci.ids, usually newer, adds what it knows first, and names other vendors' devices in messages.
What the machine has is thus a fact the answers depend on, so it is found here alone:
``GPU_GUARD_PCI_IDS`` names the file; set but empty, or naming no readable file, it means no
system database (the committed files alone, the same answers on every machine). Unset, the first
of ``USUAL_PATHS`` that can be read is used (Debian's pci.ids package, hwdata).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path

from policies.pciids import PciDatabase, database

PCI_IDS_ENV = "GPU_GUARD_PCI_IDS"
USUAL_PATHS = (
    Path("/usr/share/misc/pci.ids"),
    Path("/usr/share/hwdata/pci.ids"),
    Path("/usr/share/pci.ids"),
)


def system_pci_ids(environ: Mapping[str, str] | None = None) -> Path | None:
    """The file the seam names: ``$GPU_GUARD_PCI_IDS`` when set ('' for none), else the first
    usual path that exists; None for no system database."""
    named = (os.environ if environ is None else environ).get(PCI_IDS_ENV)
    if named is not None:
        return Path(named) if named else None
    return next((path for path in USUAL_PATHS if path.is_file()), None)


@functools.cache
def _database_from(path: Path | None) -> PciDatabase:
    """Built once per file: a ClusterState per test or per command costs a stat, not a parse."""
    if path is None:
        return database(None)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:  # absent or unreadable: no system database, never fatal
        return database(None)
    return database(text)


def default_database() -> PciDatabase:
    """The database the guard answers with: the seam's file first, then the committed files."""
    return _database_from(system_pci_ids())
