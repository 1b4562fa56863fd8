"""The one place that chooses a backend: the names a request may ask for, what ``auto`` sends
scanned pages to, and the route of each page of a request.

A request's ``backend`` is ``auto`` (per page, the text layer where it is usable, else the
OCR backend: ``OCR_OCR_BACKEND``, or where that is ``auto`` too, ``unlimited`` when weights
are configured and ``ppocr`` otherwise) or one registered name, which then reads every page.
Nothing heavy is imported here: a registration builds its backend on demand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable

from ocr_engine.api.names import AUTO, TEXT_LAYER_READERS, BackendName
from ocr_engine.api.errors import BackendUnavailable
from ocr_engine.settings import EngineSettings

if TYPE_CHECKING:
    import pymupdf

    from ocr_engine.backends.interface import Backend


@dataclass(frozen=True)
class Registration:
    name: str
    build: Callable[[EngineSettings], "Backend"]  # cheap: the backend loads its model on first use
    # reads the PDF's own text, not page images: the ``auto`` route's reader for usable text layers
    reads_text_layer: bool = False


def _textlayer(settings: EngineSettings) -> "Backend":
    from ocr_engine.backends.textlayer import TextLayerBackend

    return TextLayerBackend()


def _ppocr(settings: EngineSettings) -> "Backend":
    from ocr_engine.backends.ppocr import PPOCRBackend
    from ocr_engine.regions import region_finder

    return PPOCRBackend(max_side=settings.ppocr_max_side, regions=region_finder(settings.layout_model))


def _unlimited(settings: EngineSettings) -> "Backend":
    if not settings.model_dir:
        raise BackendUnavailable("the unlimited backend needs OCR_MODEL_DIR (a verified weights folder)")
    from ocr_engine.unlimited.backend import UnlimitedBackend

    return UnlimitedBackend(settings.model_dir, settings)


_BUILDERS = {BackendName.TEXTLAYER: _textlayer, BackendName.PPOCR: _ppocr, BackendName.UNLIMITED: _unlimited}
BUILTIN = tuple(Registration(name.value, build, reads_text_layer=name in TEXT_LAYER_READERS)
                for name, build in _BUILDERS.items())


class Registry:
    def __init__(self, registrations: Iterable[Registration] = BUILTIN) -> None:
        self._registrations = {r.name: r for r in registrations}
        readers = [r.name for r in self._registrations.values() if r.reads_text_layer]
        if len(readers) != 1:
            raise ValueError(f"a registry needs exactly one text-layer reader, not {readers}")
        self.text_layer = readers[0]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._registrations)

    def requestable(self) -> tuple[str, ...]:
        """What a request's ``backend`` may be."""
        return (AUTO, *self.names)

    def check(self, requested: str) -> None:
        if requested not in self.requestable():
            raise ValueError(f"unknown backend {requested!r}; one of {', '.join(self.requestable())}")

    def build(self, name: str, settings: EngineSettings) -> "Backend":
        self.check(name)
        return self._registrations[name].build(settings)

    def reads_text_layer(self, name: str | None) -> bool:
        registration = self._registrations.get(name or "")
        return registration is not None and registration.reads_text_layer

    def ocr_backend(self, settings: EngineSettings) -> str:
        """The backend ``auto`` sends pages without a usable text layer to."""
        choice = settings.ocr_backend
        if choice == AUTO:
            return (BackendName.UNLIMITED if settings.model_dir else BackendName.PPOCR).value
        if choice not in self._registrations or self.reads_text_layer(choice):
            raise ValueError(f"OCR_OCR_BACKEND={choice!r} is not an OCR backend here; one of "
                             f"{', '.join(n for n in self.requestable() if not self.reads_text_layer(n))}")
        return choice

    def route(self, doc: "pymupdf.Document", pages: list[int], requested: str,
              settings: EngineSettings) -> dict[int, str]:
        """``{page: backend name}`` for 1-based ``pages`` of a request asking for ``requested``."""
        self.check(requested)
        if requested != AUTO:
            return {n: requested for n in pages}
        from ocr_engine.api.pdf import text_layer_pages

        text, ocr = text_layer_pages(doc, pages, settings.min_text_chars), self.ocr_backend(settings)
        return {n: self.text_layer if n in text else ocr for n in pages}


BUILTIN_REGISTRY = Registry()
