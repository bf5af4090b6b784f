"""Request preparation, shared by ``GuardedLLM`` and ``innerguard serve``."""
from innerguard.engine.requests.model import Calibration, GuardRequest, PreparedRequest, RequestError
from innerguard.engine.requests.prepare import prepare, prepare_many
from innerguard.engine.requests.selection import select_policies

__all__ = ["Calibration", "GuardRequest", "PreparedRequest", "RequestError", "prepare", "prepare_many", "select_policies"]
