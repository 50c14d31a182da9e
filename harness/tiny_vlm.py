"""Build a tiny, deterministic Idefics3 vision-language model for the tests.

Usage::

    python -m tools.make_tiny_vlm OUTDIR

The multimodal tests need a model whose vLLM module imports on the CPU venv
(Idefics3 does; LLaVA, Qwen-VL, Gemma 3 need torchvision) and that runs in
seconds. This writes one from scratch, offline:

* the language half is the project's tiny Llama (``harness.tiny_model``): its
  tokenizer, weights and ChatML template, with Idefics3's image tokens
  (``<fake_token_around_image>``, ``<image>``, ``<end_of_utterance>``,
  ``<global-img>``) added after its vocabulary (new embedding rows seeded);
* the vision half is a 2-layer SigLIP-style tower on 32x32 images (patch 8:
  16 patches, pixel-shuffled by 2 into 4 ``<image>`` tokens per image), and
  the connector, both random from a fixed torch seed;
* an ``Idefics3Processor`` (no image splitting: one global 32x32 view per
  image) saved with ``save_pretrained``, whose chat template puts ``<image>``
  where an image part is.

It needs torch and transformers (the builder runs in its own process; the
tests never import them). Fixed seeds: two builds load the same weights.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import tempfile

import numpy as np

from harness import tiny_model

IMAGE_SIZE = 32
PATCH_SIZE = 8
SCALE_FACTOR = 2
IMAGE_SEQ_LEN = (IMAGE_SIZE // PATCH_SIZE) ** 2 // SCALE_FACTOR**2  # 4
IMAGE_TOKENS = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"]
VISION_SEED = 97
ADDED_ROWS_SEED = 98
VISION_STD = 0.2  # larger than SigLIP's 0.02 so that different images give different outputs

# The tiny Llama's ChatML template, with image parts as <image> ("openai" content format).
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{{ '<image>' }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def build(outdir: pathlib.Path) -> None:
    import torch
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3ImageProcessor,
        Idefics3Processor,
        PreTrainedTokenizerFast,
    )

    outdir = pathlib.Path(outdir)
    with tempfile.TemporaryDirectory() as tmp:
        text_dir = pathlib.Path(tmp) / "text"
        tiny_model.build(text_dir)
        tokenizer = PreTrainedTokenizerFast.from_pretrained(str(text_dir))
        tokenizer.add_special_tokens({"additional_special_tokens": IMAGE_TOKENS})
        text_weights = _load_text_weights(text_dir / "model.safetensors")
        text_config = json.loads((text_dir / "config.json").read_text())
        generation = json.loads((text_dir / "generation_config.json").read_text())

    vocab_size = len(tokenizer)
    text_config["vocab_size"] = vocab_size
    config = Idefics3Config(
        text_config=text_config,
        vision_config={
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,  # head size 32: vLLM's CPU attention needs >= 32
            "image_size": IMAGE_SIZE,
            "patch_size": PATCH_SIZE,
            "initializer_range": VISION_STD,
        },
        scale_factor=SCALE_FACTOR,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        tie_word_embeddings=False,
        pad_token_id=tiny_model.PAD_ID,
    )
    config.architectures = ["Idefics3ForConditionalGeneration"]
    torch.manual_seed(VISION_SEED)
    model = Idefics3ForConditionalGeneration(config).eval()
    state = model.state_dict()
    rng = np.random.default_rng(ADDED_ROWS_SEED)
    for name, value in text_weights.items():
        if name == "lm_head.weight":
            target = "lm_head.weight"
        else:
            target = "model.text_model." + name.removeprefix("model.")
        if value.shape[0] < state[target].shape[0]:  # embed / lm_head: the image tokens' rows
            extra = state[target].shape[0] - value.shape[0]
            rows = rng.normal(0.0, tiny_model.EMBED_STD, (extra, value.shape[1]))
            value = np.concatenate([value, rows.astype(np.float32)])
        state[target] = torch.from_numpy(value)
    model.load_state_dict(state)
    model.save_pretrained(str(outdir), safe_serialization=True)

    image_processor = Idefics3ImageProcessor(
        do_resize=True,
        size={"longest_edge": IMAGE_SIZE},
        max_image_size={"longest_edge": IMAGE_SIZE},
        do_image_splitting=False,
    )
    processor = Idefics3Processor(
        image_processor, tokenizer, image_seq_len=IMAGE_SEQ_LEN, chat_template=CHAT_TEMPLATE
    )
    processor.save_pretrained(str(outdir))
    (outdir / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    tokenizer_config = json.loads((outdir / "tokenizer_config.json").read_text())
    tokenizer_config["chat_template"] = CHAT_TEMPLATE  # the frontend reads the tokenizer's
    (outdir / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")


def _load_text_weights(path: pathlib.Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(path))


def rebuild(outdir: pathlib.Path) -> None:
    """``build`` into a fresh ``outdir``."""
    shutil.rmtree(outdir, ignore_errors=True)
    build(outdir)
