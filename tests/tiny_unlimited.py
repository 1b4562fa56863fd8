"""A tiny random-weight Unlimited OCR, saved like a real checkpoint (with its manifest).

Tests and benchmarks use it so the real loading, processing and generation code runs
on CPU in well under a second; its output is random tokens, not OCR.
"""

from __future__ import annotations

from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}<image>{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endfor %}{% if add_generation_prompt %} <assistant>{% endif %}"
)
SPECIAL = ["<s>", "</s>", "<pad>", "<image>", "<PAGE>", "<|det|>", "<|/det|>", "<assistant>"]
WORDS = ["document", "parsing.", "Multi", "page", "text", "title", "table", "the", "pump", "seal", "valve",
         "archive", "scan", "[1,", "2,", "3,", "4]", "hours", "code", "E42", "2,000", "every", "replace"]


def build_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL + ["<unk>"] + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>",
        additional_special_tokens=SPECIAL[3:],
    )
    return fast


def tiny_config(vocab_size: int, *, sliding_window: int = 16, text_layers: int = 2, image_token_id: int = 3):
    from transformers import UnlimitedOcrConfig
    from transformers.models.unlimited_ocr.configuration_unlimited_ocr import (
        UnlimitedOcrTextConfig,
        UnlimitedOcrVisionConfig,
    )

    sam = {"hidden_size": 32, "output_channels": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
           "image_size": 256, "patch_size": 16, "mlp_dim": 64, "window_size": 4, "global_attn_indexes": [1],
           "downsample_channels": [32, 64]}
    encoder = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
               "image_size": 64, "patch_size": 16}
    text = UnlimitedOcrTextConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=text_layers,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=8192, bos_token_id=0,
        eos_token_id=1, pad_token_id=2, n_routed_experts=4, n_shared_experts=1,
        mlp_layer_types=["dense"] + ["sparse"] * (text_layers - 1), moe_intermediate_size=32,
        num_experts_per_tok=2, sliding_window=sliding_window,
    )
    return UnlimitedOcrConfig(
        vision_config=UnlimitedOcrVisionConfig(sam_config=sam, encoder_config=encoder),
        text_config=text, image_token_id=image_token_id,
    )


def build_tiny_model(folder: Path, *, sliding_window: int = 16, seed: int = 0, never_ends: bool = False) -> Path:
    """Save a tiny model, processor and manifest under ``folder``; returns the folder.

    ``never_ends``: the end token's output row is zero, so its logit is 0 while some of the
    other random logits are positive at every step: greedy decoding then always runs to
    its token limit, which makes a call's length something a test can choose.
    """
    import torch
    from transformers import UnlimitedOcrForConditionalGeneration, UnlimitedOcrProcessor
    from transformers.models.unlimited_ocr.image_processing_unlimited_ocr import UnlimitedOcrImageProcessor

    from ocr_engine.unlimited.manifest import write_manifest

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    torch.manual_seed(seed)
    config = tiny_config(len(tokenizer), sliding_window=sliding_window,
                         image_token_id=tokenizer.convert_tokens_to_ids("<image>"))
    model = UnlimitedOcrForConditionalGeneration(config).eval()
    if never_ends:
        with torch.no_grad():
            model.get_output_embeddings().weight[tokenizer.eos_token_id].zero_()
    model.save_pretrained(folder)
    image_processor = UnlimitedOcrImageProcessor(size={"height": 256, "width": 256}, tile_size=256,
                                                 crop_to_patches=False)
    processor = UnlimitedOcrProcessor(image_processor=image_processor, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE)
    processor.save_pretrained(folder)
    write_manifest(folder, model_version=f"tiny-random-unlimited-ocr-seed{seed}" + ("-never-ends" if never_ends else ""))
    return folder
