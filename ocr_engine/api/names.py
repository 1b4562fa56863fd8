"""The names a request's ``backend`` is made of: the route ``auto`` and the built-in backends.
A leaf module, so that the backends, the registry that builds them and the engine's callers
all import it, and none of them spells a name as a string."""

from __future__ import annotations

from enum import StrEnum


class Route(StrEnum):
    """A request's ``backend`` that is not one backend: ``auto`` reads each page's text layer
    where it is usable and sends the other pages to the configured OCR backend."""

    AUTO = "auto"


AUTO = Route.AUTO


class BackendName(StrEnum):
    """The built-in backends (results and limits carry the plain ``.value``)."""

    TEXTLAYER = "textlayer"
    PPOCR = "ppocr"
    UNLIMITED = "unlimited"


# What a request's ``backend`` may be: the route, or a backend every page goes to.
Requested = Route | BackendName

# The built-ins that read the PDF's own text, not page images: the registry registers them so,
# and their pages cost no OCR (``PageResult.read_by_ocr``).
TEXT_LAYER_READERS = frozenset({BackendName.TEXTLAYER})


def requested(name: str) -> Requested:
    """A request's ``backend`` as stored or sent (``"auto"``, ``"ppocr"``, ...) read back typed."""
    try:
        return Route(name)
    except ValueError:
        return BackendName(name)
