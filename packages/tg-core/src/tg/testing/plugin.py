"""Kept for `-p tg.testing.plugin` in older configurations: the plugin lives in tg.testing (load it with `-p tg.testing`)."""
from tg.testing import pytest_addoption, pytest_collection_modifyitems, pytest_configure, pytest_report_header

__all__ = ["pytest_addoption", "pytest_collection_modifyitems", "pytest_configure", "pytest_report_header"]
