"""CEL for DRA device selectors, evaluated over one device as the scheduler does.

``selectors`` compiles and evaluates selectors (remembering results by what they read),
``environment`` is DRA's CEL environment on cel-python, ``functions`` the functions Kubernetes adds
(strings, quantities, semver), ``values`` what a selector reads (the ``Device`` protocol the DRA
projection satisfies) and answers, ``hints`` the did-you-mean for a near-miss equality. It
imports only ``vocabulary``: it knows a device as driver, attributes and capacity, not as a
ResourceSlice. Whether a claim fits the cluster is the model's question (``cluster.claim_fit``).
"""
