"""The ops tests use the integration suite's server and raw-client fixtures."""

from tests.integration.conftest import make_server, open_raw

__all__ = ["make_server", "open_raw"]
