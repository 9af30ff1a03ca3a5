import pytest


@pytest.fixture(autouse=True)
def _seed():
    """Overrides tests/conftest.py's autouse Keras seeding / clear_session
    (about 0.25 s per test): these readers are pure Python."""
    yield
