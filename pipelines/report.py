"""What a job over commitlog ranges reports besides its own counts: its speed, and itself as
JSON (``rmqstore rebuild --json``, ``rmqstore export --json``)."""

from dataclasses import asdict

MIB = 1024 * 1024


class JobReport:
    """Mixed into a job's report dataclass, which has ``bytes`` (commitlog bytes of good data
    read), ``seconds`` and ``corruptions``."""

    bytes: int
    seconds: float
    corruptions: list

    @property
    def mib_per_s(self) -> float:
        return self.bytes / MIB / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)  # type: ignore[call-overload]  # a dataclass, as the class says
        d["corruptions"] = [asdict(c) for c in self.corruptions]
        d["mib_per_s"] = round(self.mib_per_s, 2)
        return d
