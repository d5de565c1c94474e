"""What the feeders add to the pure ClusterState (``policies.state``): the machine's facts and
the process's housekeeping, which the state itself never reaches for.

A state built here answers with the machine's pci.ids (``webhook.state.pciids``, the one place
that looks for it) and logs what its slices keep unread once per slice and cause
(``webhook.state.unread``); its feeders (state files, list pages) pause the garbage collector
while they fill it.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

from policies.cluster.pciids import PciDatabase
from policies.state.cluster import ClusterState
from webhook.state.pciids import default_database
from webhook.state.unread import UnreadNotes


def new_state(
    pci_database: PciDatabase | None = None, notes: UnreadNotes | None = None
) -> ClusterState:
    """An empty state as the guard fills it: ``pci_database`` else the machine's; ``notes``
    (a feeder's own, to share its once-only log) else new ones."""
    database = pci_database if pci_database is not None else default_database()
    return ClusterState(database, (notes if notes is not None else UnreadNotes()).note)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic collection while a state is fed in one synchronous burst (a list page, a state
    file): many short-lived dicts come and go, none in cycles, and nothing awaits meanwhile."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
