"""The example CNN the planted-fault tests locate in (one load per test module)."""

from __future__ import annotations

import pytest

from multiexport.leaves import load_target


@pytest.fixture(scope="module")
def target():
    return load_target("multiexport.examples:cnn")
