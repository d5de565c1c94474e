"""``gpu-guard version``: the program's, the chart's and the image's versions.

All three are the package's (pyproject.toml): ``make chart-files`` writes the chart's ``version``
and ``appVersion`` from it and a test fails when they differ, so they are read here from the
installed package rather than from a chart that an installed copy does not carry.
"""

from __future__ import annotations

import argparse
import platform
import sys

from webhook.commands.common import EXIT_OK, print_json
from webhook.usage import package_version


def versions() -> dict[str, str]:
    number = package_version()
    return {
        "gpuGuard": number,
        "chart": number,
        "appVersion": number,
        "python": platform.python_version(),
    }


def run(args: argparse.Namespace) -> int:
    found = versions()
    if args.output == "json":
        print_json(found)
    else:
        sys.stdout.write(
            f"gpu-guard {found['gpuGuard']} (chart gpu-guard-{found['chart']}, appVersion "
            f"{found['appVersion']}; Python {found['python']})\n"
        )
    return EXIT_OK
