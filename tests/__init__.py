"""The test suite. ``FIXTURES`` is here, not in conftest, so that tools/ and bench/ can name the
recordings without importing pytest."""

from pathlib import Path

#: The recordings the tests, the behaviour freeze and the soak replay, in the repository:
#: AdmissionReviews and kubectl output a real kube-apiserver sent and printed, dra/, hco/,
#: apiserver-restart/, and the CRDs (crds/); each folder's README says where and how.
FIXTURES = Path(__file__).resolve().parent / "fixtures"
