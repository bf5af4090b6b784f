"""Placeholder until the audit package's API lands."""
