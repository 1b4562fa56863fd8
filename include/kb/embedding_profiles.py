"""How a model folder is used: the prefixes its family expects on queries and passages, its
pooling and its normalisation. The one owner of these facts: both runtimes in
``kb.embedding`` apply the ``Recipe`` that ``recipe_of`` resolves, and the model id carries
its prefixes.

The folder speaks first, through sentence-transformers' own files: the ``prompts`` of
``config_sentence_transformers.json`` (``query``; for passages the first of ``document``,
``passage``, ``corpus``), the Pooling module named in ``modules.json``, and a Normalize
module. Many published folders (e5, bge, gte) declare no prompts, though their
families were trained with them; a profile (``KB_EMBED_PROFILE``) fills what the folder does
not say. Where the folder and a named profile both say something and disagree, the folder
is refused: that is a wrong profile, not something to settle silently.

Read with json alone: a query process that runs ONNX never imports torch.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path


class EmbedProfile(StrEnum):
    """The families ``KB_EMBED_PROFILE`` can name (unset: the folder's own files alone)."""

    PLAIN = "plain"  # no prefixes; pooling and normalisation as the folder has them
    E5 = "e5"
    BGE = "bge"
    GTE = "gte"


class Pooling(StrEnum):
    """sentence-transformers' pooling modes (``Pooling.POOLING_MODES``)."""

    CLS = "cls"
    MEAN = "mean"
    MAX = "max"
    MEAN_SQRT_LEN = "mean_sqrt_len_tokens"
    WEIGHTED_MEAN = "weightedmean"
    LAST_TOKEN = "lasttoken"


# The English bge models' query instruction (BAAI's model cards); their passages take none.
BGE_QUERY_INSTRUCTION = "Represent this sentence for searching relevant passages: "


@dataclass(frozen=True)
class Profile:
    query_prefix: str
    passage_prefix: str
    pooling: Pooling | None  # what the family pools with (checked against the folder); None: any
    normalize: bool  # True: normalise even where the folder has no Normalize module


PROFILES: dict[EmbedProfile, Profile] = {
    EmbedProfile.PLAIN: Profile("", "", None, False),
    EmbedProfile.E5: Profile("query: ", "passage: ", Pooling.MEAN, True),
    EmbedProfile.BGE: Profile(BGE_QUERY_INSTRUCTION, "", Pooling.CLS, True),
    EmbedProfile.GTE: Profile("", "", Pooling.MEAN, True),
}


@dataclass(frozen=True)
class Recipe:
    """What a runtime does around the transformer: prefix, pool, normalise."""

    query_prefix: str
    passage_prefix: str
    pooling: Pooling
    normalize: bool
    dimension: int  # the transformer's hidden size, as the Pooling config states it

    @property
    def id_suffix(self) -> str:
        """Added to the model id when prefixes apply, so changing them re-embeds once. Empty
        without prefixes: the ids (and index signatures) of folders used as they always were,
        MiniLM's among them, stay as they are. Normalisation is left out: the store ranks by
        cosine, which it does not change."""
        if not (self.query_prefix or self.passage_prefix):
            return ""
        digest = hashlib.sha256(json.dumps([self.query_prefix, self.passage_prefix]).encode()).hexdigest()
        return f"+prompts-{digest[:8]}"


# The first of these a folder's prompts have is its passage prompt, as encode_document chose
# up to sentence-transformers 5 (6 adds an empty "document" prompt to every model first, which
# would drop an e5 folder's declared "passage: ").
_PASSAGE_PROMPT_NAMES = ("document", "passage", "corpus")
# the Pooling config's older form: one flag per mode
_LEGACY_POOLING_FLAGS = {
    "pooling_mode_cls_token": Pooling.CLS,
    "pooling_mode_mean_tokens": Pooling.MEAN,
    "pooling_mode_max_tokens": Pooling.MAX,
    "pooling_mode_mean_sqrt_len_tokens": Pooling.MEAN_SQRT_LEN,
    "pooling_mode_weightedmean_tokens": Pooling.WEIGHTED_MEAN,
    "pooling_mode_lasttoken": Pooling.LAST_TOKEN,
}


def recipe_of(model_dir: Path, profile: EmbedProfile | str | None = None) -> Recipe:
    """The folder's recipe, with ``profile`` filling what the folder does not say.

    Raises ``ValueError`` for a folder without a Pooling module, one that pools with
    several modes at once or leaves its prompt out of the pooling (both runtimes here put
    the prefix into the text), or one that contradicts the named profile.
    """
    named = PROFILES[EmbedProfile(profile)] if profile else None
    prompts = _folder_prompts(model_dir)
    pooling, dimension = _folder_pooling(model_dir)
    if named and named.pooling and named.pooling != pooling:
        raise ValueError(f"{model_dir}: the folder pools with {pooling}, profile {profile} with "
                         f"{named.pooling}; unset KB_EMBED_PROFILE or name the folder's family")
    if prompts is None:
        prompts = (named.query_prefix, named.passage_prefix) if named else ("", "")
    elif named and prompts != (named.query_prefix, named.passage_prefix):
        raise ValueError(f"{model_dir}: the folder's prompts {prompts} differ from profile {profile}'s "
                         f"{(named.query_prefix, named.passage_prefix)}; unset KB_EMBED_PROFILE")
    modules = _modules(model_dir)
    normalize = any(m["type"].endswith(".Normalize") for m in modules) or bool(named and named.normalize)
    return Recipe(prompts[0], prompts[1], pooling, normalize, dimension)


def _modules(model_dir: Path) -> list[dict]:
    path = model_dir / "modules.json"
    if not path.exists():
        raise ValueError(f"{model_dir}: no modules.json; a sentence-transformers folder is needed")
    return json.loads(path.read_text())


def _folder_prompts(model_dir: Path) -> tuple[str, str] | None:
    """(query prefix, passage prefix) as sentence-transformers applies them; None where the
    folder declares no prompts."""
    path = model_dir / "config_sentence_transformers.json"
    config = json.loads(path.read_text()) if path.exists() else {}
    prompts: dict[str, str] = config.get("prompts") or {}
    if not prompts:
        return None
    # a role without its own prompt gets the default one, as in encode_query/encode_document
    default = prompts.get(config.get("default_prompt_name") or "", "")
    passage = next((prompts[n] for n in _PASSAGE_PROMPT_NAMES if n in prompts), default)
    return prompts.get("query", default), passage


def _folder_pooling(model_dir: Path) -> tuple[Pooling, int]:
    entry = next((m for m in _modules(model_dir) if m["type"].endswith(".Pooling")), None)
    if entry is None:
        raise ValueError(f"{model_dir}: modules.json has no Pooling module")
    config = json.loads((model_dir / entry["path"] / "config.json").read_text())
    if "pooling_mode" in config:  # sentence-transformers 6 writes one key
        mode = config["pooling_mode"]
        modes = [mode] if isinstance(mode, str) else list(mode)
    else:
        modes = [flag_mode for flag, flag_mode in _LEGACY_POOLING_FLAGS.items() if config.get(flag)] or ["mean"]
    if len(modes) != 1:
        raise ValueError(f"{model_dir}: pooling with several modes at once ({modes}) is not supported")
    if config.get("include_prompt", True) is False:
        raise ValueError(f"{model_dir}: a Pooling that leaves the prompt out (include_prompt false) is not supported")
    dimension = config.get("embedding_dimension", config.get("word_embedding_dimension"))
    return Pooling(modes[0]), int(dimension)
