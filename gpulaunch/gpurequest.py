"""A GPU request (`--gpus`, `launch.gpus`) as one value: what it counts, which GPUs it names,
and how each engine is asked for them. Its text rules are textcheck.parse_gpus (the config
field's validator too); no other module compares a request against 0 or splits its list."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpulaunch.errors import ConfigError
from gpulaunch.textcheck import parse_gpus


@dataclass(frozen=True)
class GpuRequest:
    """0 (none: the CPU), N (the first N GPUs), "all", or a comma list of indices, UUIDs or
    PCI bus ids ("0,2"), as textcheck.parse_gpus returns it (the form records keep)."""

    value: int | str = 0

    @classmethod
    def parse(cls, value: object, where: str) -> GpuRequest:
        """A flag's text or a config value; a bad one is a one-line ConfigError naming `where`."""
        try:
            return cls(parse_gpus(value))
        except ValueError as err:
            raise ConfigError(f"{where}: {err}") from None

    @property
    def none(self) -> bool:
        """No GPU: the job runs on the CPU."""
        return self.value in (0, "0")

    @property
    def every(self) -> bool:
        return self.value == "all"

    @property
    def ids(self) -> list[str]:
        """The GPUs a list names, in its order ([] for a count or "all")."""
        if isinstance(self.value, int) or self.every or self.none:
            return []
        return self.value.split(",")

    def count(self, host_gpus: int | None) -> int | None:
        """How many GPUs the request means; None for "all" when the host's count is unknown."""
        if isinstance(self.value, int):
            return self.value
        return host_gpus if self.every else len(self.ids)

    def indices(self, host_gpus: int | None) -> list[int] | None:
        """Which GPU indices it means (a count takes the first N, as the engines do); None when
        unknown: "all" without the host's count, or GPUs named by UUID or bus id."""
        if self.every:
            return None if host_gpus is None else list(range(host_gpus))
        if isinstance(self.value, int):
            return list(range(self.value))
        if all(item.isdigit() for item in self.ids):
            return [int(item) for item in self.ids]
        return None

    def docker_flag(self) -> str:
        """The value of `docker run --gpus` (a list is quoted: docker reads it as CSV)."""
        return f'"device={self.value}"' if self.ids else str(self.value)

    def device_request(self) -> dict[str, Any]:
        """The engine API's HostConfig.DeviceRequests entry, as the docker SDK sends it
        (Podman reads it as CDI names: engine/podman.cdi_names)."""
        count = self.value if isinstance(self.value, int) else -1 if self.every else 0
        return {
            "Driver": "",
            "Count": count,
            "DeviceIDs": self.ids,
            "Capabilities": [["gpu"]],
            "Options": {},
        }
