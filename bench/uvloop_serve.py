"""``gpu-guard`` on uvloop's event loop: installs the policy, then runs ``webhook.cli.main``.

    python -m bench.uvloop_serve serve --state FILE --tls-cert C --tls-key K ...

Every ``asyncio.run`` in gpu-guard then gets a uvloop loop; nothing else changes. For the
benchmarks only (uvloop is not a gpu-guard dependency): ``pip install uvloop``.
"""

from __future__ import annotations

import asyncio
import sys

import uvloop  # type: ignore[import-not-found, unused-ignore]  # optional

from webhook.cli import main

if __name__ == "__main__":
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    sys.exit(main())
