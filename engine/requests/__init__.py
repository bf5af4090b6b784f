"""Request preparation, shared by ``GuardedLLM`` and ``innerguard serve``."""
from .model import Calibration, GuardRequest, PreparedRequest, RequestError
from .prepare import prepare
from .selection import select_policies

__all__ = ["Calibration", "GuardRequest", "PreparedRequest", "RequestError", "prepare", "select_policies"]
