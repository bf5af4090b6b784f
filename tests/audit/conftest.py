"""Audit fixtures: the shipped policies compiled for the real model, and
small closed logs written by the real writer."""
from __future__ import annotations

import pytest

from audit_builders import KEY, shipped_plan, write_log
from innerguard.engine import logging as ig_logging


@pytest.fixture(autouse=True)
def _logging_on_real_stderr():
    """``cli.main`` configures logging onto the stderr of the moment, which is
    pytest's capture in CLI tests; put it back so later tests can log."""
    yield
    ig_logging.configure("console", "warning")


@pytest.fixture(scope="session")
def plan(smollm2_dir):
    return shipped_plan()


@pytest.fixture
def closed_log(tmp_path, plan):
    """A closed, signed log of 20 requests (a decision per shipped policy each) in one file."""
    write_log(tmp_path / "audit", 20, key=KEY)
    return tmp_path / "audit" / "audit.jsonl"
