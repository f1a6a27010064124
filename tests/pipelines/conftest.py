"""One local Spark session for every pipeline test (starting one takes seconds)."""

import pytest


@pytest.fixture(scope="session")
def spark():
    from pipelines.spark import create_session

    session = create_session("local[2]", app_name="rmqstore-tests", shuffle_partitions=2)
    yield session
    session.stop()
