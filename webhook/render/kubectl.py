"""What a person sees: AdmissionReview answers printed the way kubectl prints them.

kubectl shows each warning as ``Warning: <text>`` and a denial as ``Error from server
(Forbidden): ... admission webhook "<name>" denied the request: <message>`` (recorded in
tests/fixtures/kubectl-output). Rendering reads the response JSON, so ``check`` and the demo
show exactly what the server would send.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from policies.model import CREATE, AdmissionRequest

VALIDATING_WEBHOOK_NAME = "validate.gpu-guard.io"


def kubectl_name(request: AdmissionRequest) -> str:
    """ "node/omen1", "virtualmachine.kubevirt.io/gpu-ubuntu": kubectl's resource/name form."""
    kind = request.kind.lower()
    return f"{kind}.{request.group}/{request.name}" if request.group else f"{kind}/{request.name}"


def kubectl_lines(
    response: Mapping[str, Any],
    request: AdmissionRequest,
    source: str,
    notes: Sequence[str] = (),
) -> list[str]:
    """The answer as kubectl prints it; ``notes`` (gpu-guard's own, kubectl has none) first."""
    lines = [f"Note: {note}" for note in notes]
    lines += [f"Warning: {w}" for w in response.get("warnings") or []]
    if response.get("allowed"):
        verb = "created" if request.operation == CREATE else "configured"
        suffix = " (server dry run)" if request.dry_run else ""
        lines.append(f"{kubectl_name(request)} {verb}{suffix}")
        return lines
    status = response.get("status") or {}
    action = "creating" if request.operation == CREATE else "patching"
    lines.append(
        f'Error from server (Forbidden): error when {action} "{source}": admission webhook '
        f'"{VALIDATING_WEBHOOK_NAME}" denied the request: {status.get("message", "")}'
    )
    return lines
