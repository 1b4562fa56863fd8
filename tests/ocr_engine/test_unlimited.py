"""The unlimited backend on a tiny random-weight model, through the real loader and generate."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from ocr_engine.api.errors import ModelIntegrityError
from ocr_engine.api.pages import PageStatus
from ocr_engine.settings import EngineSettings
from ocr_engine.unlimited.backend import UnlimitedBackend
from ocr_engine.unlimited.manifest import MANIFEST
from ocr_engine.api.limits import TokenBudget
from ocr_engine.unlimited.budget import visual_tokens_base_mode
from ocr_engine.unlimited.cache import bytes_per_token
from ocr_engine.api.text import distinct_ratio
from ocr_engine.unlimited.output import parse_blocks, split_pages, to_markdown
from tests.tiny_unlimited import build_tiny_model
from ocr_engine.api.pages import PageResult

WINDOW = 16


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny-unlimited"), sliding_window=WINDOW)


def pages(n: int, seed: int = 0) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 255, (300, 220, 3), dtype=np.uint8)) for _ in range(n)]


def test_loads_through_the_verified_loader_and_returns_one_result_per_page(tiny_dir):
    backend = UnlimitedBackend(tiny_dir, EngineSettings(max_new_tokens_per_page=24))
    results = backend.read_images(pages(3), [4, 5, 6], [(595.0, 842.0)] * 3)
    assert [r.page for r in results] == [4, 5, 6]
    for r in results:
        assert r.backend == "unlimited"
        assert r.model_version == "tiny-random-unlimited-ocr-seed0"
        assert len(r.weights_digest) == 64
        assert r.tokens_in == backend.visual_tokens_per_page
    # random weights never write an end token within 24 tokens a page: that is a truncation
    assert any(r.status == PageStatus.TRUNCATED for r in results)


@pytest.mark.parametrize("kind", ["static", "dynamic"])
def test_the_cache_stays_bounded_once_generation_passes_the_window(tiny_dir, kind):
    backend = UnlimitedBackend(tiny_dir, EngineSettings(max_new_tokens_per_page=5 * WINDOW, cache=kind))
    results = backend.read_images(pages(2), [1, 2], [(595.0, 842.0)] * 2)
    text = backend.model.config.text_config
    per_token = bytes_per_token(text.num_hidden_layers, text.num_key_value_heads,
                                text.hidden_size // text.num_attention_heads, torch.float32)
    bound = backend.bound.bytes(2)
    assert bound == per_token * (backend.bound.reference_tokens(2) + WINDOW)
    peak, mean = results[0].kv_peak_bytes, results[0].kv_mean_bytes
    assert all((r.kv_peak_bytes, r.kv_mean_bytes) == (peak, mean) for r in results)  # one sequence
    # 5 windows of output, yet the cache never holds more than the reference and one window
    assert bound - per_token <= peak <= bound
    if kind == "static":  # allocated once, at its bound
        assert peak == mean == bound
    else:  # grows through the first window, then stays
        assert mean < peak


def test_with_a_window_longer_than_the_output_tokens_equal_a_full_cache_run(tmp_path):
    from transformers import DynamicCache, UnlimitedOcrConfig, UnlimitedOcrForConditionalGeneration

    folder = build_tiny_model(tmp_path / "long-window", sliding_window=256, seed=3)
    backend = UnlimitedBackend(folder, EngineSettings())
    inputs = backend.processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "image", "image": im} for im in pages(2, seed=1)]
          + [{"type": "text", "text": "Multi page parsing."}]}],
        add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt",
        processor_kwargs={"crop_to_patches": False},
    )
    kwargs = dict(max_new_tokens=60, min_new_tokens=60, do_sample=False)
    rswa = backend.model.generate(**inputs, **kwargs)

    config = UnlimitedOcrConfig.from_pretrained(folder)
    config.text_config.layer_types = ["full_attention"] * config.text_config.num_hidden_layers
    full_model = UnlimitedOcrForConditionalGeneration.from_pretrained(folder, config=config).eval()
    full = full_model.generate(**inputs, cache=DynamicCache(), **kwargs)
    assert rswa.shape[1] == inputs["input_ids"].shape[1] + 60
    assert rswa.tolist() == full.tolist()


def _flip_last_byte(folder):
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))


@pytest.mark.parametrize("damage, message", [
    (_flip_last_byte, "sha256 mismatch in model.safetensors"),
    (lambda f: (f / "config.json").unlink(), "missing config.json"),
    (lambda f: (f / "extra.safetensors").write_bytes(b"not in the manifest"), "unlisted file extra.safetensors"),
    (lambda f: (f / "manifest.sha256.json").unlink(), "no manifest"),
], ids=["tampered", "missing", "unlisted", "no-manifest"])
def test_a_damaged_weights_folder_is_refused_before_loading(tiny_dir, tmp_path, damage, message):
    folder = shutil.copytree(tiny_dir, tmp_path / "weights")
    damage(folder)
    backend = UnlimitedBackend(folder)  # cheap: nothing is read until first use
    with pytest.raises(ModelIntegrityError, match=message):
        backend.load()
    assert not backend.loaded


def test_output_is_split_into_pages_and_detections_into_blocks():
    text = ("<PAGE><|det|>title [100, 50, 900, 90]<|/det|>Maintenance<|det|>text [100, 120, 900, 300]<|/det|>"
            "Replace the seal.<PAGE><|det|>text [0, 0, 999, 999]<|/det|>Second page.")
    first, second = split_pages(text, 2)
    blocks = parse_blocks(first, 999.0, 999.0)
    assert [(b.type, b.text) for b in blocks] == [("title", "Maintenance"), ("text", "Replace the seal.")]
    assert blocks[0].bbox == (100.0, 50.0, 900.0, 90.0)
    assert to_markdown(blocks) == "## Maintenance\n\nReplace the seal."
    assert parse_blocks(second, 595.0, 842.0)[0].bbox == (0.0, 0.0, 595.0, 842.0)
    assert split_pages("plain single page", 1) == ["plain single page"]


def test_a_table_the_model_writes_as_html_becomes_cells_the_reader_joins_across_pages():
    """Two pages whose tables have the same columns, the second repeating the header row:
    read as one table of three rows, each chunk led by the header."""
    from kb.chunking import chunk_document
    from kb.reading import PieceKind, read_document

    html = "<table><tr><td>code</td><td>meaning</td></tr><tr><td>{}</td><td>{}</td></tr></table>"
    pages = []
    for n, (code, meaning) in enumerate([("E17", "motor hot"), ("E42", "low suction")], start=1):
        text = f"<|det|>table [100, 800, 900, 990]<|/det|>{html.format(code, meaning)}" if n == 1 else \
            f"<|det|>table [100, 20, 900, 200]<|/det|>{html.format(code, meaning)}"
        blocks = parse_blocks(text, 595.0, 842.0)
        assert blocks[0].type == "table" and blocks[0].rows == [["code", "meaning"], [code, meaning]]
        assert blocks[0].text == f"| code | meaning |\n| --- | --- |\n| {code} | {meaning} |"
        pages.append(PageResult(page=n, width=595.0, height=842.0, markdown=to_markdown(blocks), blocks=blocks))
    [table] = [p for p in read_document(pages).pieces if p.kind == PieceKind.TABLE]
    assert [r.cells for r in table.rows] == [["E17", "motor hot"], ["E42", "low suction"]] and table.pages == [1, 2]
    [chunk] = chunk_document(read_document(pages), lambda t: len(t.split()))
    assert chunk.text.startswith("| code | meaning |") and chunk.pages == [1, 2]


def test_distinct_n_flags_repetition_loops():
    assert distinct_ratio(list(range(100)), 20) == 1.0
    assert distinct_ratio([1, 2, 3] * 40, 20) < 0.05
    assert distinct_ratio([1, 2], 20) == 1.0


def test_token_budget_sizes_page_ranges_to_the_context():
    assert visual_tokens_base_mode(1024) == 273  # 16 x 17 + 1 in base mode
    budget = TokenBudget(context_length=32_768, visual_tokens_per_page=273, prompt_tokens=12, output_tokens_per_page=1200)
    n = budget.max_pages()
    assert budget.tokens_for(n) <= 32_768 < budget.tokens_for(n + 1)
    assert TokenBudget(1000, 273, 12, 1200).max_pages() == 0


def test_the_engine_publishes_the_loaded_backends_token_budget_without_loading_weights_first(tiny_dir):
    from ocr_engine.engine import OcrEngine

    settings = EngineSettings(model_dir=tiny_dir, max_new_tokens_per_page=24)
    engine = OcrEngine(settings)
    planner_view = engine.limits()  # read from the folder's config files
    planner_backend = engine.backend("unlimited")
    assert isinstance(planner_backend, UnlimitedBackend)
    assert not planner_backend.loaded, "planning must not load the weights"
    backend = UnlimitedBackend(tiny_dir, settings)
    backend.load()
    assert backend.loaded
    loaded = backend.budget()
    assert planner_view.ocr_backend == "unlimited"
    assert planner_view.token_budget == loaded
    assert planner_view.max_pages_per_call == loaded.max_pages() >= 1
    assert planner_view.as_dict()["token_budget"]["max_pages"] == loaded.max_pages()
    # the KV bound the service admits by, from the config files alone, is the loaded model's
    assert planner_backend.limits().kv_bound == backend.bound and not planner_backend.loaded
    # the OCR model it names, from the manifest, is the one the pages it reads will name
    assert planner_view.ocr_model == backend.read_images(pages(1), [1], [(595.0, 842.0)])[0].ocr_model
    assert planner_view.ocr_model.startswith("unlimited:tiny-random-unlimited-ocr-seed0@")


def test_a_folder_without_a_readable_manifest_names_no_ocr_model(tiny_dir, tmp_path):
    from ocr_engine.engine import OcrEngine

    folder = tmp_path / "copy"
    shutil.copytree(tiny_dir, folder)
    (folder / MANIFEST).write_text("{not json")
    assert OcrEngine(EngineSettings(model_dir=folder)).limits().ocr_model is None  # loading it will refuse
