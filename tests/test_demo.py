"""``make demo``'s main job, end to end: a real server process, real HTTPS, the three hazards."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cryptography import x509

from webhook.certs.issue import make_ca, make_serving_cert, service_dns_names
from webhook.commands.demo import SIMULATED

ROOT = Path(__file__).resolve().parents[1]


def test_the_demo_catches_the_three_hazards_and_audits_the_incident() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "demo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert (
        'Error from server (Forbidden): error when patching "examples/homelab/changes/'
        '01-switch-omen1-to-vm-passthrough.yaml": admission webhook "validate.gpu-guard.io" '
        "denied the request: [workload-switch-with-gpu-pods]"
    ) in out
    assert "Warning: [passthrough-without-ready-provider] nvidia.com/GB202_GEFORCE_RTX_5090" in out
    assert "omen2 advertises it but is NotReady since 2026-07-10" in out
    assert "Warning: [permitted-device-without-hardware] pciHostDevices[2] 10de:2330" in out
    assert "node/omen2 configured" in out
    kubectl = [line for line in out.splitlines() if line.startswith("$ kubectl")]
    assert kubectl and all(line.endswith(SIMULATED) for line in kubectl)
    assert "VirtualMachine vms/gpu-fedora  for 112 days (since 2026-07-10)" in out
    assert "VirtualMachine vms/rhel9-gpu-vm  for 112 days (since 2026-07-10)" in out
    assert "Traceback" not in result.stderr


def test_the_serving_certificate_names_the_service_and_is_signed_by_the_ca() -> None:
    ca = make_ca()
    names = service_dns_names("gpu-guard", "gpu-guard")
    serving = make_serving_cert(ca, [*names, "127.0.0.1"])
    cert = serving.certificate
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == [
        "gpu-guard",
        "gpu-guard.gpu-guard",
        "gpu-guard.gpu-guard.svc",
    ]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    cert.verify_directly_issued_by(ca.certificate)
    assert cert.issuer == ca.certificate.subject
