"""Request preparation, shared by ``GuardedLLM`` and ``innerguard serve``."""
from .model import Calibration, GuardRequest, PreparedRequest, RequestError
from .prepare import prepare, prepare_many
from .selection import select_policies

__all__ = ["Calibration", "GuardRequest", "PreparedRequest", "RequestError", "prepare", "prepare_many", "select_policies"]
