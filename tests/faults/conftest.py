"""The fixture of the storage-fault tests: a logfs store on the fault filesystem (faultstore.FaultyStore).

This directory has no ``__init__.py``, so pytest imports this file as the module ``conftest`` and drops the top
``tests/conftest.py`` from ``sys.modules`` to do it; the test files everywhere import helpers with ``from conftest
import …``, so the hook below puts the top module back as soon as this one is registered.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from faultstore import FaultyStore


def pytest_plugin_registered(plugin: Any, manager: Any) -> None:
    """Once this conftest is registered, ``conftest`` means tests/conftest.py again."""
    top = manager.get_plugin(str(Path(__file__).parent.parent / "conftest.py"))
    if top is not None and sys.modules.get("conftest") is not top:
        sys.modules["conftest"] = top


@pytest.fixture
def faulty(tmp_path: Path) -> Iterator[FaultyStore]:
    """The faultfs over a tmp dir, with nothing mounted by logfs yet (``faulty.start(*config)`` mounts it); every
    mount is unmounted in teardown, even when the test failed."""
    from faultstore import FaultyStore  # here: it imports the top conftest, which is not yet back at import time

    store = FaultyStore(tmp_path)
    try:
        yield store
    finally:
        store.close()
