"""The names a request's ``backend`` is made of: the route ``auto`` and the built-in backends.
A leaf module, so that the backends and the registry that builds them both import it."""

from __future__ import annotations

from enum import StrEnum

AUTO = "auto"  # a route, not a backend


class BackendName(StrEnum):
    """The built-in backends (results and limits carry the plain ``.value``)."""

    TEXTLAYER = "textlayer"
    PPOCR = "ppocr"
    UNLIMITED = "unlimited"
