"""A /metrics body as data: families with their type, HELP, label names,
histogram bounds and samples, parsed by prometheus_client's own text parser."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families


@dataclass
class Family:
    name: str  # without _total for counters (as the parser gives it)
    type: str
    help: str
    label_names: frozenset[str] = frozenset()
    bounds: tuple[str, ...] = ()  # histogram "le" values, in order
    # (sample name, frozenset of its labels without "le") -> value
    samples: dict[tuple[str, frozenset], float] = field(default_factory=dict)

    def total(self, suffix: str = "", **labels: str) -> float:
        """The sum of the samples ``name + suffix`` whose labels include ``labels``."""
        want = set(labels.items())
        return sum(v for (n, lbl), v in self.samples.items()
                   if n == self.name + suffix and want <= lbl)


def parse(text: str, prefix: str = "vllm:") -> dict[str, Family]:
    families: dict[str, Family] = {}
    for fam in text_string_to_metric_families(text):
        if not fam.name.startswith(prefix) or fam.name.endswith("_created"):
            continue  # the parser makes "<name>_created" families of its own
        out = families[fam.name] = Family(fam.name, fam.type, fam.documentation)
        names: set[str] = set()
        bounds: list[str] = []
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue  # creation times differ by nature
            labels = dict(s.labels)
            le = labels.pop("le", None)
            names |= set(labels)
            if le is not None:
                if le not in bounds:
                    bounds.append(le)
                key = (s.name, frozenset({**labels, "le": le}.items()))
            else:
                key = (s.name, frozenset(labels.items()))
            out.samples[key] = s.value
        out.label_names = frozenset(names)
        out.bounds = tuple(bounds)
    return families
