"""`TFJobRefused`: a TFJob that cannot run here, with every field that stops it.

A person converting a manifest should see all of its problems at once, each naming the
field path (`spec.tfReplicaSpecs.Worker.template.spec.volumes[0]`), what was given and what
is supported, rather than fix them one try at a time.
"""

from dataclasses import dataclass

from tfjob.errors import TfjobError
from tfjob.request.errors import describe_value


@dataclass(frozen=True)
class Refusal:
    """One field of a TFJob that does not map: where, what was given, what is supported."""

    path: str
    given: object
    allowed: str

    def __str__(self) -> str:
        return f"{self.path}: {describe_value(self.given)} given; {self.allowed}"


class TFJobRefused(TfjobError):
    """The TFJob is refused before anything starts; `refusals` names each field."""

    def __init__(self, refusals: list[Refusal]) -> None:
        self.refusals = tuple(refusals)
        lines = "\n".join(f"  {refusal}" for refusal in self.refusals)
        super().__init__(f"the TFJob is refused, nothing was started:\n{lines}")

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (list(self.refusals),))
