"""Defaults the command line shows in its help, kept apart from the code that applies them.

Building the parser needs these numbers for every command; the modules that use them import
aiohttp (the server) or cryptography (certificates), which ``audit --state`` or ``check --state``
never need. The modules that apply a default import it from here, so each is set in one place.
"""

from __future__ import annotations

DEFAULT_MAX_BODY = 3 * 1024 * 1024
"""Largest AdmissionReview body read, in bytes (``webhook.admission.pipeline``)."""
DEFAULT_MAX_CONNECTIONS = 512
"""Open connections past which new ones are closed at once (``webhook.admission.connections``)."""
DEFAULT_HEADERS_TIMEOUT = 3.0
"""Seconds from a request's first byte to the end of its headers: the webhook's timeoutSeconds
(the API server has given up by then; it sends its headers in one write)."""
DEFAULT_BODY_TIMEOUT = 3.0
"""Seconds from the end of the headers to the end of the body, for the same reason."""
DEFAULT_IDLE_TIMEOUT = 60.0
"""Seconds a connection may wait for its next request. Well above the cap's 10 s idle grace: a
connection used less often than this costs a handshake per use, and closing one races a request
its client may be writing at that moment (that call fails by the failurePolicy)."""
DEFAULT_AUDIT_INTERVAL = 300.0
"""Seconds between background audits in live mode (``webhook.audit.background``)."""
DEFAULT_RECORD_INTERVAL = 2.0
"""Seconds between the leader's recomputations of the record the API server's policy reads
(``webhook.audit.record``): the record trails a change in GPU users by about this."""
CA_DAYS = 3650
"""Lifetime of the CA ``gpu-guard certs`` makes (``webhook.certs.issue``)."""
DEMO_NOW = "2026-10-30T12:00:00Z"
"""The demo's audit time: 112 days into the home-lab incident (``webhook.commands.demo``)."""
WGPOLICYK8S, OPENREPORTS, AUTO_REPORT_FORMAT = "wgpolicyk8s", "openreports", "auto"
REPORT_FORMATS = (AUTO_REPORT_FORMAT, OPENREPORTS, WGPOLICYK8S)
"""``serve --report-format``: auto (OpenReports when its Report CRD is served, else the
wgpolicyk8s.io PolicyReports, decided at each publish), or one of them (``webhook.audit``)."""
