"""The admission pipeline: the one path a review takes, whichever endpoint it came to.

    read (client certificate, size limit) -> parse -> the endpoint's step -> its answer
    -> metrics -> one log line

``/validate`` and ``/mutate`` differ only in their ``Handler``: the step that decides and the
answer it builds (``Decided``, ``Patched``). Both steps go through one gate: at most
``max_in_flight`` reviews evaluated at once, none past its deadline (the loop's lag counted).
What the gate sheds is answered at once: a validation by the policies' failure modes, a mutation
allowed with no patch and a warning that it was not applied (a mutation never denies). A denial
that names pods stands only after the API server confirms them. Past ``route``, nothing needs
aiohttp: ``Admission.answer`` takes the body's bytes and gives a ``Reply``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from aiohttp import web

from policies.cluster.view import ClusterView
from policies.vocabulary.requests import AdmissionRequest
from policies.vocabulary.text import printable
from policies.vocabulary.verdicts import Verdict
from webhook.admission.http_input import BodyTooSlow, ClientGone, read_body
from webhook.admission.response import decision_response, make_response, review_body
from webhook.admission.review import ReviewError, parse_review
from webhook.admission.slow_clients import ClientTimeouts
from webhook.defaults import DEFAULT_MAX_BODY as DEFAULT_MAX_BODY
from webhook.engine import Decision, Engine, Freshness, MutationResult
from webhook.logs import InfoLine
from webhook.metrics import Metrics

log = logging.getLogger("gpu-guard.server")  # the name these lines have always carried
decision_lines = InfoLine(log)
"""One line per review answered, written without a ``LogRecord`` (``webhook.logs.InfoLine``)."""

DEFAULT_MAX_IN_FLIGHT = 64
DEFAULT_DEADLINE = 1.0
OVERLOADED = "gpu-guard was overloaded and could not evaluate it in time"


class LoopLag:
    """How late the event loop runs: about how long a request sat queued before its handler.

    Under CPU saturation requests wait in socket buffers, before any handler can see them; a
    per-handler clock never notices. A ticker that measures its own lateness does.
    """

    def __init__(self, period: float = 0.02) -> None:
        self.period = period
        self.lag = 0.0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(self.period)
            late = loop.time() - before - self.period
            self.lag = max(late, self.lag / 2)  # rises at once, decays by half each tick


# --- answers ------------------------------------------------------------------------------------


class Answer(ABC):
    """An endpoint's answer to one review (the AdmissionReview ``response``) and what it did,
    for the metrics and the log line."""

    noun: ClassVar[str]
    """The log line's first word."""
    response: dict[str, Any]

    @property
    @abstractmethod
    def allowed(self) -> bool: ...

    @property
    def verdicts(self) -> Sequence[Verdict]:
        return ()

    @abstractmethod
    def summary(self) -> str:
        """The answer's part of the log line; built only when INFO is on."""

    @abstractmethod
    def record(self, metrics: Metrics, review: AdmissionRequest) -> None:
        """What this kind of answer counts beyond the review itself."""


@dataclass(frozen=True)
class Decided(Answer):
    """/validate's answer: allowed (its warnings shown) or denied (its reasons the message)."""

    noun: ClassVar[str] = "decision"
    response: dict[str, Any]
    decision: Decision

    @classmethod
    def of(cls, uid: str, decision: Decision) -> Decided:
        return cls(decision_response(uid, decision), decision)

    @property
    def allowed(self) -> bool:
        return self.decision.allowed

    @property
    def verdicts(self) -> Sequence[Verdict]:
        return self.decision.verdicts

    def summary(self) -> str:
        """Verdicts, and what the configuration exempted and why (a whole request, or policies)."""
        shown = ",".join(f"{v.policy}:{v.action.label}" for v in self.decision.verdicts)
        exempt = [self.decision.exempt] if self.decision.exempt else self.decision.exempted
        why = f" exempt={printable('; '.join(exempt))!r}" if exempt else ""
        return f"allowed={self.decision.allowed} verdicts={shown or '-'}{why}"

    def record(self, metrics: Metrics, review: AdmissionRequest) -> None:
        """Every override used is counted and logged: who set a deny aside, and why."""
        for used in self.decision.overrides:
            metrics.overrides.labels(used.policy).inc()
            log.warning(
                "override used uid=%s policy=%s user=%s reason=%r kind=%s namespace=%s name=%s "
                "dry_run=%s",
                printable(review.uid),
                printable(used.policy),
                printable(used.user),
                printable(used.reason),
                printable(review.kind),
                printable(review.namespace or "-"),
                printable(review.name or "-"),
                review.dry_run,
            )


@dataclass(frozen=True)
class Patched(Answer):
    """/mutate's answer: always allowed; the enabled mutations' JSONPatch, each change a warning."""

    noun: ClassVar[str] = "mutation"
    response: dict[str, Any]
    applied: Sequence[str]

    @classmethod
    def of(cls, uid: str, result: MutationResult) -> Patched:
        return cls(make_response(uid, True, "", result.warnings, result.patch), result.applied)

    @property
    def allowed(self) -> bool:
        return True

    def summary(self) -> str:
        return f"applied={','.join(self.applied) or '-'}"

    def record(self, metrics: Metrics, review: AdmissionRequest) -> None:
        for applied in self.applied:
            metrics.mutations.labels(applied).inc()


@dataclass(frozen=True, slots=True)
class Reply:
    """An HTTP answer apart from aiohttp: a review's JSON (bytes) or a one-line reason (str)."""

    status: int
    body: bytes | str
    close: bool = False
    """Close the connection after answering (a 413: read no more of what the client sends)."""

    def to_response(self) -> web.Response:
        if isinstance(self.body, str):
            response = web.Response(status=self.status, text=self.body, content_type="text/plain")
        else:
            response = web.Response(
                status=self.status, body=self.body, content_type="application/json"
            )
        if self.close:
            response.force_close()  # close after answering; with no lingering, read no more
        return response


def plain(status: int, text: str, *, close: bool = False) -> Reply:
    return Reply(status, text + "\n", close)


# --- handlers: what an endpoint adds --------------------------------------------------------------


class Handler(Protocol):
    """An endpoint's own part of the pipeline: the step that decides and the answer it builds."""

    @property
    def endpoint(self) -> str:
        """The endpoint's label in the metrics."""

    @property
    def pruned(self) -> bool:
        """Whether its policies read the review's objects pruned to their kinds' schemas."""

    async def answer(
        self, admission: Admission, review: AdmissionRequest, started: float
    ) -> Answer: ...


class Validate:
    """Every policy that judges the review, within the gate; see ``Admission.admit``."""

    endpoint = "validate"
    pruned = True  # every field a validating policy reads is in its kind's schema

    async def answer(
        self, admission: Admission, review: AdmissionRequest, started: float
    ) -> Answer:
        return Decided.of(review.uid, await admission.admit(review, started))


class Mutate:
    """The opt-in mutations, within the gate as validation; see ``Admission.mutate``."""

    endpoint = "mutate"
    pruned = False  # a JSON patch is computed against the whole object

    async def answer(
        self, admission: Admission, review: AdmissionRequest, started: float
    ) -> Answer:
        return Patched.of(review.uid, await admission.mutate(review, started))


VALIDATE: Handler = Validate()
MUTATE: Handler = Mutate()


# --- the pipeline -------------------------------------------------------------------------------


@dataclass
class Admission:
    """What every review goes through; ``view`` may be swapped for a new snapshot at any time.

    With live state, ``freshness`` downgrades denies that rest on stale watches, and ``confirm``
    re-reads a node's pods from the API server (within ``confirm_budget`` seconds) before a deny
    that names them stands.
    """

    engine: Engine
    view: ClusterView
    max_body: int = DEFAULT_MAX_BODY
    freshness: Freshness | None = None
    confirm: Callable[[str, float], Awaitable[bool]] | None = None
    confirm_budget: float = 0.5
    metrics: Metrics = field(default_factory=Metrics)
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    deadline: float = DEFAULT_DEADLINE
    """Seconds a review may wait for its turn; well under the webhook's timeoutSeconds."""
    lag: LoopLag = field(default_factory=LoopLag)
    timeouts: ClientTimeouts = field(default_factory=ClientTimeouts)
    """How long a client may take: the body's limit applies here (past it: 408, connection
    closed), the headers' and the idle limit to each connection (``listen``)."""
    _slots: asyncio.Semaphore = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._slots = asyncio.Semaphore(self.max_in_flight)  # bound to a loop at its first wait

    def route(self, handler: Handler) -> Callable[[web.Request], Awaitable[web.Response]]:
        """The aiohttp handler of one endpoint: the body read here, the rest in ``answer``."""

        async def review(request: web.Request) -> web.Response:
            started = time.perf_counter()
            try:
                body = await read_body(request, self.max_body, self.timeouts.body)
            except ReviewError as exc:
                return self._rejected(request.remote, exc).to_response()
            except BodyTooSlow as exc:
                log.info("cut client %s: %s", request.remote, exc)
                self.metrics.connections_cut.labels("body").inc()
                return plain(408, str(exc), close=True).to_response()
            except ClientGone as exc:
                log.info(
                    "client %s hung up before its review arrived: %s",
                    request.remote,
                    printable(exc),
                )
                return plain(400, "incomplete request").to_response()
            return (await self.answer(handler, body, started, request.remote)).to_response()

        return review

    async def answer(
        self, handler: Handler, body: bytes, started: float | None = None, peer: str | None = None
    ) -> Reply:
        """A review body's answer: 400 with a one-line reason for a body that is no review."""
        if started is None:
            started = time.perf_counter()
        try:
            review = parse_review(body, handler.pruned)
        except ReviewError as exc:
            return self._rejected(peer, exc)
        answer = await handler.answer(self, review, started)
        payload = review_body(answer.response)
        elapsed = time.perf_counter() - started
        self.metrics.record_review(
            handler.endpoint,
            review.kind,
            review.operation,
            answer.allowed,
            elapsed,
            answer.verdicts,
        )
        answer.record(self.metrics, review)
        if decision_lines.enabled():  # the message costs as much as the line: both or none
            decision_lines.write(
                f"{answer.noun} {subject(review)} {answer.summary()} dry_run={review.dry_run} "
                f"ms={elapsed * 1000:.2f}"
            )
        return Reply(200, payload)

    def _rejected(self, peer: str | None, exc: ReviewError) -> Reply:
        log.info("rejected review from %s: %s", peer, printable(exc))
        self.metrics.rejected.labels(str(exc.status)).inc()
        return plain(exc.status, f"invalid AdmissionReview: {exc}", close=exc.status == 413)

    # --- the gate both steps go through ----------------------------------------------------------

    async def _turn(self, started: float, *, yield_first: bool = True) -> bool:
        """Takes an evaluation slot within the concurrency limit and the deadline; False (no slot
        taken, counted as overloaded) past either, so that the caller answers at once rather than
        queueing past the API server's timeout. True obliges the caller to ``_slots.release()``.

        The time already spent counts what the handler saw and the loop's lag: a request that
        waited in a socket buffer behind a backlog has used its budget before it got here.

        Before a validation (policies: up to milliseconds of the loop) it yields once first, so that
        every review that has arrived stamps its start before this one takes the loop, and time
        spent queued behind it counts against their deadlines. A mutation takes microseconds and
        makes nobody wait: the yield would only cost it a loop turn, a tenth of its request path.
        """
        if yield_first:
            await asyncio.sleep(0)
        remaining = self.deadline - (time.perf_counter() - started) - self.lag.lag
        if remaining <= 0:
            self.metrics.overloaded.inc()
            return False
        if self._slots.locked():  # a full server: wait for a slot, but not past the deadline
            try:
                async with asyncio.timeout(remaining):
                    await self._slots.acquire()
            except TimeoutError:
                self.metrics.overloaded.inc()
                return False
        else:
            await self._slots.acquire()  # free at once: no timer to arm
        return True

    async def admit(self, review: AdmissionRequest, started: float) -> Decision:
        """``decide`` within the gate; what it sheds, the policies' failure modes answer. An
        owner's own write (HCO's of its KubeVirt CR, within HCO's 3 s budget for a
        HyperConverged update) skips the gate: it is answered at once, unjudged."""
        if self.engine.own_write(review) is not None:
            return self.engine.evaluate(review, self.view)
        if not await self._turn(started):
            return self.engine.unevaluated(review, OVERLOADED)
        try:
            return await self.decide(review)
        finally:
            self._slots.release()

    async def mutate(self, review: AdmissionRequest, started: float) -> MutationResult:
        """The enabled mutations within the gate; what it sheds is allowed unpatched, each
        mutation that would have run warning that it was not applied (never a denial)."""
        if not await self._turn(started, yield_first=False):
            return self.engine.unmutated(review, OVERLOADED)
        try:
            return self.engine.mutate(review, self.view)
        finally:
            self._slots.release()

    # --- validation's own step -------------------------------------------------------------------

    async def decide(self, review: AdmissionRequest) -> Decision:
        """Every policy's verdict; a denial naming pods is re-evaluated once they are confirmed."""
        decision = self.engine.evaluate(review, self.view, self.freshness)
        nodes = decision.nodes_to_confirm() if self.confirm is not None else []
        if not nodes or self.confirm is None:
            return decision
        confirmed = [await self.confirm(node, self.confirm_budget) for node in nodes]
        decision = self.engine.evaluate(review, self.view, self.freshness)
        if not all(confirmed):
            decision.annotate_denials(
                f"the API server did not confirm the pods within {self.confirm_budget:g} s; "
                "decided on the cached state"
            )
        return decision


def subject(review: AdmissionRequest) -> str:
    """Who asked what of which object, for a log line; nothing of the object's contents."""
    return (
        f"uid={printable(review.uid)} op={printable(review.operation)} "
        f"kind={printable(review.kind)} namespace={printable(review.namespace or '-')} "
        f"name={printable(review.name or '-')} user={printable(review.user.username or '-')}"
    )
