"""AdmissionReview in and out, the admission pipeline, the aiohttp server and its connection cap."""
