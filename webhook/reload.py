"""Hot reload of mounted files: a ConfigMap or Secret update arrives as a file the kubelet swaps.

Both reloaders poll modification times (``mtimes``): the configuration here, the serving
certificate in ``webhook.admission.tls``. A bad new file never replaces the last good one.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable

from webhook.config import ConfigError, GuardConfig, load_config
from webhook.config_digest import changes, digest
from webhook.engine import Engine
from webhook.metrics import Metrics

log = logging.getLogger("gpu-guard.server")  # the name these lines have always carried


def mtimes(*paths: str) -> tuple[float, ...]:
    """When each file was last written: a change means the kubelet swapped it."""
    return tuple(os.stat(p).st_mtime_ns for p in paths)


def in_force(engine: Engine, metrics: Metrics | None, source: str) -> None:
    """Logs and exposes which configuration the engine now applies (at start and on reload)."""
    sha256 = digest(engine.config)
    if metrics is not None:
        metrics.config_in_force(sha256)
    log.info("configuration in force from %s: sha256=%s", source, sha256)


async def reload_config(
    engine: Engine,
    path: str,
    every: float,
    metrics: Metrics | None = None,
    load: Callable[[str], GuardConfig] = load_config,
) -> None:
    """Applies a changed configuration file (a ConfigMap update) without a restart, logging each
    setting it changes in one line and exposing its hash (``gpu_guard_config_info``). ``load``
    reads it as the command did at start (the command line's settings over the file's).

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
            config = load(path)
            changed = changes(engine.config, config)
        except ConfigError as exc:
            log.error("configuration refused, keeping the last good one: %s", exc)
            continue
        except Exception:  # a loader bug must not end reloading for good
            log.exception("configuration %s could not be read, keeping the last good one", path)
            continue
        engine.config = config
        for line in changed:
            log.info("configuration change: %s", line)
        log.info("configuration reloaded from %s: %d settings changed", path, len(changed))
        in_force(engine, metrics, path)
