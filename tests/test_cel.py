"""CEL device selectors over the recorded devices: what the scheduler would select, and "unknown"
(never "no match") for anything that cannot be decided."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies import cel_library
from policies.cel import (
    MAX_EXPRESSION_LENGTH,
    CompiledSelector,
    Outcome,
    Trace,
    compile_selector,
    problems,
    select,
)
from policies.dra import DeviceInfo, project_device_class, project_resource_slice
from policies.dra_claims import project_resource_claim, project_resource_claim_template
from tests.dra_builders import DRA_FIXTURES, gpu, needs_fixtures, recorded_object, resource_slice

pytestmark = needs_fixtures
MATCH, NO, UNKNOWN = Outcome.MATCH, Outcome.NO_MATCH, Outcome.UNKNOWN


def fixture_devices() -> dict[str, DeviceInfo]:
    """The RTX 5090 as a full GPU (omen2), the same card as vfio after the republish, and
    tower1's RTX 3090 vfio device, exactly as the API server stored them."""
    return {
        "gpu": project_resource_slice(recorded_object("007")).devices[0],
        "vfio": project_resource_slice(recorded_object("020")).devices[0],
        "3090": project_resource_slice(recorded_object("008")).devices[0],
    }


DEVICES = fixture_devices() if DRA_FIXTURES.is_dir() else {}


def class_selectors(number: str) -> tuple[str, ...]:
    return project_device_class(recorded_object(number)).selectors


CLASSES = [  # (class review, device, outcome): the chart's own expressions
    ("004", "gpu", MATCH),
    ("004", "vfio", NO),
    ("004", "3090", NO),
    ("005", "gpu", NO),
    ("005", "vfio", MATCH),
    ("005", "3090", MATCH),
    ("006", "gpu", NO),
    ("006", "vfio", NO),
]


@pytest.mark.parametrize(("number", "device", "outcome"), CLASSES)
def test_the_nvidia_classes_select_devices_by_type(
    number: str, device: str, outcome: Outcome
) -> None:
    assert select(class_selectors(number), DEVICES[device]).outcome is outcome


def test_the_claim_templates_select_as_the_driver_demo_says() -> None:
    vfio_template = project_resource_claim_template(recorded_object("010"))
    choice = vfio_template.requests[0].choices[0]
    expressions = (*class_selectors("005"), *choice.selectors)
    assert select(expressions, DEVICES["vfio"]).outcome is MATCH  # "rtx 5090", any case
    assert select(expressions, DEVICES["3090"]).outcome is NO
    assert select(expressions, DEVICES["gpu"]).outcome is NO  # the class says no first


def test_a_capacity_selector_compares_quantities_and_an_absent_capacity_is_unknown() -> None:
    claim = project_resource_claim(recorded_object("014"))
    (expression,) = claim.requests[0].choices[0].selectors
    assert select([expression], DEVICES["gpu"]).outcome is NO  # 32607Mi is not > 40Gi
    missing = select([expression], DEVICES["vfio"])  # vfio publishes addressableMemory
    assert missing.outcome is UNKNOWN and "memory" in missing.reason
    # Behind its class, as the scheduler runs them, the vfio device never reaches it:
    assert select((*class_selectors("004"), expression), DEVICES["vfio"]).outcome is NO


EXPRESSIONS = [
    ("device.driver == 'gpu.nvidia.com'", "gpu", MATCH),
    ("device.attributes['gpu.nvidia.com'].productName.lowerAscii().contains('5090')", "gpu", MATCH),
    ("device.attributes['gpu.nvidia.com'].productName.upperAscii().endsWith('5090')", "gpu", MATCH),
    ("device.attributes['gpu.nvidia.com'].productName.matches('^NVIDIA .*3090$')", "3090", MATCH),
    ("device.attributes['gpu.nvidia.com'].productName.split(' ')[1] == 'GeForce'", "gpu", MATCH),
    ("device.attributes['gpu.nvidia.com'].productName.substring(0, 6) == 'NVIDIA'", "gpu", MATCH),
    ("device.attributes['gpu.nvidia.com'].productName.indexOf('RTX') == 15", "gpu", MATCH),
    ("device.attributes['gpu.nvidia.com'].productName.replace(' ', '') == 'x'", "gpu", NO),
    ("device.attributes['gpu.nvidia.com'].productName.trim().charAt(0) == 'N'", "gpu", MATCH),
    ("device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('550.54.15'))",
     "gpu", MATCH),
    ("device.attributes['gpu.nvidia.com'].driverVersion.isLessThan(semver('550.54.15'))",
     "gpu", NO),
    ("device.attributes['gpu.nvidia.com'].driverVersion == semver('570.133.20')", "gpu", MATCH),
    ("device.attributes['gpu.nvidia.com'].cudaComputeCapability.major() >= 12", "gpu", MATCH),
    ("device.attributes['gpu.nvidia.com'].driverVersion.compareTo(semver('v570', true)) > 0",
     "gpu", MATCH),
    ("isSemver('1.2.3') && !isSemver('1.2')", "gpu", MATCH),
    ("device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('30Gi'))", "gpu", MATCH),
    ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('32607Mi')) == 0", "gpu", MATCH),
    ("device.capacity['gpu.nvidia.com'].memory == quantity('32607Mi')", "gpu", MATCH),
    ("device.capacity['gpu.nvidia.com'].addressableMemory.isLessThan(quantity('32Gi'))",
     "vfio", NO),
    ("device.capacity['gpu.nvidia.com'].memory.add(quantity('1Mi')).isInteger()", "gpu", MATCH),
    ("device.capacity['gpu.nvidia.com'].memory.asInteger() > 34000000000", "gpu", MATCH),
    ("quantity('1.5').sign() == 1 && !quantity('1.5').isInteger()", "gpu", MATCH),
    ("isQuantity('40Gi') && !isQuantity('forty')", "gpu", MATCH),
    ("device.attributes['resource.kubernetes.io'].pciBusID == '0000:01:00.0'", "vfio", MATCH),
    ("device.attributes['resource.kubernetes.io'].numaNode == 0", "gpu", MATCH),
    ("!device.attributes['gpu.nvidia.com'].iommuFDEnabled", "vfio", MATCH),
    ("'profile' in device.attributes['gpu.nvidia.com']", "gpu", NO),
    ("has(device.attributes['gpu.nvidia.com'].uuid)", "gpu", MATCH),
    ("has(device.attributes['gpu.nvidia.com'].profile)", "gpu", NO),
    ("'gpu.nvidia.com' in device.attributes", "gpu", MATCH),
    ("device.attributes['gpu.nvidia.com'].exists(name, name == 'vendorID')", "vfio", MATCH),
    ("size(device.attributes['dra.example.com']) == 0", "gpu", MATCH),  # unknown domain: empty
    ("device.attributes['gpu.nvidia.com'].type in ['gpu', 'mig']", "vfio", NO),
]  # fmt: skip


@pytest.mark.parametrize(("expression", "device", "outcome"), EXPRESSIONS)
def test_selectors_evaluate_with_the_kubernetes_cel_library(
    expression: str, device: str, outcome: Outcome
) -> None:
    result = select([expression], DEVICES[device])
    assert result.outcome is outcome, result.reason


UNDECIDED = [
    ("devices.driver == 'gpu.nvidia.com'", "does not compile: undeclared reference to 'devices'"),
    ("device.driver == ", "does not compile: syntax error at column"),
    ("device.attributes['gpu.nvidia.com'].type.lowerascii() == 'gpu'", "does not compile"),
    ("", "has no CEL expression"),
    ("device.attributes['gpu.nvidia.com'].profile == '1g.10gb'", "fails on this device"),
    ("device.attributes['gpu.nvidia.com'].type == 1", "fails on this device"),
    ("quantity('forty') == quantity('40')", "fails on this device"),
    ("device.driver", "not a bool"),
    ("cel.bind(a, device.attributes['gpu.nvidia.com'], a.type == 'gpu')", "does not have"),
    ("device.attributes['gpu.nvidia.com'].all(a, [1].all(b, [2].all(c, c > b)))", "nests"),
    ("device.driver == '" + "x" * MAX_EXPRESSION_LENGTH + "'", "longer than"),
]


@pytest.mark.parametrize(("expression", "why"), UNDECIDED)
def test_what_cannot_be_decided_is_unknown_with_why_never_no_match(
    expression: str, why: str
) -> None:
    result = select([expression], DEVICES["gpu"])
    assert result.outcome is UNKNOWN
    assert why in result.reason


IN_CELS_WORDS = [
    ("device.driver", "evaluates to string, not a bool"),
    ("device.attributes['gpu.nvidia.com']", "evaluates to map, not a bool"),
    (
        "device.capacity['gpu.nvidia.com'].memory > 5",
        "found no matching overload for '_>_' applied to '(kubernetes.Quantity, int)'",
    ),
    (
        "device.attributes['gpu.nvidia.com'].type == 1",
        "found no matching overload for '_==_' applied to '(string, int)'",
    ),
    (
        "device.attributes['gpu.nvidia.com'].type.isGreaterThan(quantity('1'))",
        "no such overload for string and kubernetes.Quantity",
    ),
    ("semver('not-a-version').major() == 1", "not a semantic version: 'not-a-version'"),
    ("quantity('forty') == quantity('40')", "not a quantity: 'forty'"),
    ("device.driver.matches('[')", "not a regular expression: missing ]"),
]


@pytest.mark.parametrize(("expression", "why"), IN_CELS_WORDS)
def test_what_fails_on_a_device_is_told_in_cels_words_not_the_evaluators(
    expression: str, why: str
) -> None:
    """The API server's messages for the same mistakes name operators and types so
    (tests/e2e/test_dra.py); cel-python's own would show Python classes and grammar rules."""
    result = select([expression], DEVICES["gpu"])
    assert result.outcome is UNKNOWN
    assert why in result.reason
    assert "<class" not in result.reason and "Token(" not in result.reason


def test_a_compile_problem_is_told_apart_from_this_evaluators_limits() -> None:
    typo = compile_selector("device.attributes['gpu.nvidia.com'].type.lowerascii() == 'gpu'")
    bind = compile_selector("cel.bind(a, device.attributes['gpu.nvidia.com'], a.type == 'gpu')")
    assert (typo.problem != "", typo.unsupported) == (True, False)
    assert (bind.problem != "", bind.unsupported) == (True, True)
    assert list(problems(["device.driver == 'x'", "device.driver =="])) == [
        (1, "does not compile: syntax error at column 15")
    ]


def test_selectors_run_in_order_and_the_first_false_decides() -> None:
    failing = "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"
    assert select(["device.driver == 'other.example.com'", failing], DEVICES["gpu"]).outcome is NO
    stopped = select(["device.driver == 'gpu.nvidia.com'", failing], DEVICES["gpu"])
    assert (stopped.outcome, stopped.selector) == (UNKNOWN, 1)


def test_an_expression_is_compiled_once() -> None:
    expression = "device.attributes['gpu.nvidia.com'].type == 'vfio'"
    assert compile_selector(expression) is compile_selector(expression)


# --- remembered results equal fresh evaluations --------------------------------------------------

MEMO_EXPRESSIONS = [
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
    "device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('^.*a100.*$')",
    "device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('40Gi'))",
    "'profile' in device.attributes['gpu.nvidia.com'] || device.attributes['gpu.nvidia.com'].type"
    " == 'vfio'",
    "size(device.attributes['gpu.nvidia.com']) > 4",
    "device.attributes['gpu.nvidia.com'].exists(k, k == 'profile')",
    "has(device.attributes['gpu.nvidia.com'].driverVersion) && "
    "device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('560.0.0'))",
]

devices = st.builds(
    lambda name, type_, product, memory, version, driver, profile: project_resource_slice(
        resource_slice(
            "s",
            "n",
            [
                gpu(
                    name,
                    type_=type_,
                    product=product,
                    memory=memory,
                    driver_version=version,
                    extra={"profile": {"string": "1g.10gb"}} if profile else None,
                )
            ],
            driver=driver,
        )
    ).devices[0],
    st.sampled_from(["gpu-0", "gpu-1", "gpu-vfio-0"]),
    st.sampled_from(["gpu", "mig", "vfio"]),
    st.sampled_from(["NVIDIA A100-SXM4-80GB", "NVIDIA GeForce RTX 5090", "NVIDIA H100 NVL"]),
    st.sampled_from(["32Gi", "40Gi", "80Gi", "41000Mi"]),
    st.sampled_from(["550.54.15", "570.133.20"]),
    st.sampled_from(["gpu.nvidia.com", "other.example.com"]),
    st.booleans(),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(devices, min_size=1, max_size=12))
def test_remembered_results_equal_a_fresh_evaluation_of_every_device(
    seen: list[DeviceInfo],
) -> None:
    for expression in MEMO_EXPRESSIONS:
        remembering = CompiledSelector(expression)
        for device in seen:
            fresh = cel_library.run(remembering.program, device, Trace())  # past the memo
            assert remembering.evaluate(device) == fresh, (expression, device)


def test_alike_devices_are_evaluated_once() -> None:
    selector = CompiledSelector(MEMO_EXPRESSIONS[0])
    published = resource_slice(
        "s", "n", [gpu(f"gpu-{i}", bus=f"0000:{i:02x}:00.0") for i in range(50)]
    )
    alike = project_resource_slice(published).devices
    assert all(selector.evaluate(device).outcome is MATCH for device in alike)
    assert selector.memo.remembered == 1
