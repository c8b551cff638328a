"""The quantizers, one file each: a frozen dataclass subclass of :class:`~..quantizer.Quantizer`
with ``@register_policy("name")``, imported here so that it registers (in the order of ``--quant``'s
default and of the table's rows)."""

# isort: off
from .kivi import KIVI
from .static import StaticKV, calibrate
from .quanto import QuantoKV, check_quanto

# isort: on

__all__ = ["KIVI", "QuantoKV", "StaticKV", "calibrate", "check_quanto"]
