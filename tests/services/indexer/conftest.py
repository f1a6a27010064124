"""Fixtures of the builder tests: the golden records decoded once per session."""

import pytest

from tests.services.indexer.helpers import dispatch_records


@pytest.fixture(scope="session")
def golden_records(golden_store):
    return dispatch_records(golden_store)
