"""Hot reload of mounted files: a ConfigMap or Secret update arrives as a file the kubelet swaps.

Both reloaders poll modification times (``mtimes``): the configuration here, the serving
certificate in ``webhook.admission.tls``. A bad new file never replaces the last good one.
"""

from __future__ import annotations

import asyncio
import logging
import os

from webhook.config import ConfigError, load_config
from webhook.engine import Engine

log = logging.getLogger("gpu-guard.server")  # the name these lines have always carried


def mtimes(*paths: str) -> tuple[float, ...]:
    """When each file was last written: a change means the kubelet swapped it."""
    return tuple(os.stat(p).st_mtime_ns for p in paths)


async def reload_config(engine: Engine, path: str, every: float) -> None:
    """Applies a changed configuration file (a ConfigMap update) without a restart.

    A bad file is refused with its reason in the log, and the last good configuration stays.
    """
    seen = mtimes(path)
    while True:
        await asyncio.sleep(every)
        try:
            current = mtimes(path)
        except OSError as exc:
            log.warning("configuration %s unreadable, keeping the last good one: %s", path, exc)
            continue
        if current == seen:
            continue
        seen = current
        try:
            engine.config = load_config(path)
        except ConfigError as exc:
            log.error("configuration refused, keeping the last good one: %s", exc)
            continue
        except Exception:  # a loader bug must not end reloading for good
            log.exception("configuration %s could not be read, keeping the last good one", path)
            continue
        log.info("configuration reloaded from %s", path)
