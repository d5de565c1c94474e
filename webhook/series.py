"""A Prometheus metric declared as one row of a class (``webhook.metrics.Metrics``).

The class body lists every series with its name, help, labels and buckets, in the order they are
exported; each instance makes its own on its own registry (tests run several servers side by
side), so the declaration is a table and the constructor a loop.
"""

from __future__ import annotations

from typing import Generic, TypeVar, overload

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

M = TypeVar("M", Counter, Gauge, Histogram)


class Series(Generic[M]):
    """One series of ``Metrics``, declared as a row of its class; each instance makes its own on
    its own registry, stored under the row's name (which then answers without this)."""

    def __init__(
        self,
        metric: type[M],
        name: str,
        documentation: str,
        labels: tuple[str, ...] = (),
        buckets: tuple[float, ...] | None = None,
        shown: tuple[str, ...] = (),
    ) -> None:
        self.metric: type[M] = metric
        self.name, self.documentation = name, documentation
        self.labels, self.buckets, self.shown = labels, buckets, shown
        """``shown``: label values exported from the start, at 0."""
        self.attribute = ""

    def __set_name__(self, owner: type, attribute: str) -> None:
        self.attribute = attribute

    @overload
    def __get__(self, obj: None, owner: type) -> Series[M]: ...
    @overload
    def __get__(self, obj: object, owner: type) -> M: ...
    def __get__(self, obj: object | None, owner: type) -> Series[M] | M:
        if obj is None:
            return self
        made: M = obj.__dict__[self.attribute]
        return made

    def make_for(self, obj: object, registry: CollectorRegistry) -> None:
        if self.buckets is None:
            made = self.metric(self.name, self.documentation, self.labels, registry=registry)
        else:  # a Histogram's
            made = self.metric(
                self.name,
                self.documentation,
                self.labels,
                registry=registry,
                buckets=self.buckets,  # type: ignore[call-arg]
            )
        for value in self.shown:
            made.labels(value)
        obj.__dict__[self.attribute] = made
