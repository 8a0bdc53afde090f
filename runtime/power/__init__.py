"""Power: sensors (Jetson INA3221 / INA238, NVML, RAPL), a sampling meter, and a governor that
paces inference under a power cap. Nothing here imports pynvml until an NVML sensor is asked for."""

from .discovery import discover
from .sensors import PowerSample, PowerSensor

__all__ = ["PowerSample", "PowerSensor", "discover"]
