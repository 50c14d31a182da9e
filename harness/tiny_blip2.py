"""Build a tiny, deterministic BLIP-2 vision-language model for the tests.

Usage::

    python -m tools.make_tiny_vlm --family blip2 OUTDIR

The second multimodal family the tests run (``harness.tiny_vlm``, Idefics3,
is the first). PaliGemma and Phi-3-vision were tried first and do not run on
the CPU venv: vLLM's PaliGemma processor reaches ``get_vision_encoder_info``,
which imports its Pixtral module (transformers' Pixtral image processor needs
torchvision); Phi-3-vision's processor is remote code from the Hub. BLIP-2
differs from Idefics3 where it matters to a frontend: no placeholder in the
chat template (vLLM inserts the query tokens at the start of the prompt), one
image a prompt, and a checkpoint without a chat template (``CHAT_TEMPLATE`` is
given to both servers with ``--chat-template``). Written from scratch, offline:

* the tokenizer is the project's tiny byte-level BPE (``harness.tiny_model``)
  with ``<image>`` added by ``Blip2Processor``;
* a 2-layer Llama language model (the tiny model's shape), a 2-layer BLIP
  vision tower on 32x32 images (patch 8) and a 1-layer Q-Former with
  ``NUM_QUERY_TOKENS`` queries (that many ``<image>`` tokens an image), all
  random from a fixed torch seed;
* a ``Blip2Processor`` (``BlipImageProcessor``) saved with ``save_pretrained``.

It needs torch and transformers (the builder runs in its own process; the
tests never import them). Fixed seeds: two builds load the same weights.
"""

from __future__ import annotations

import json
import pathlib
import tempfile

from harness import tiny_model

IMAGE_SIZE = 32
PATCH_SIZE = 8
NUM_QUERY_TOKENS = 4
SEED = 103
INIT_STD = 0.2  # larger than BLIP-2's 0.02 so that different images give different outputs
CHAT_TEMPLATE_FILE = "chat_template.txt"  # a name transformers does not pick up

# The text of every turn, one line each (vLLM places BLIP-2's image tokens
# itself, before the prompt, not where the template puts an image part).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Answer:' }}{% endif %}"
)


def build(outdir: pathlib.Path) -> None:
    import torch
    from transformers import (
        Blip2Config,
        Blip2ForConditionalGeneration,
        Blip2Processor,
        BlipImageProcessor,
        PreTrainedTokenizerFast,
    )

    outdir = pathlib.Path(outdir)
    with tempfile.TemporaryDirectory() as tmp:
        text_dir = pathlib.Path(tmp) / "text"
        tiny_model.build(text_dir)
        tokenizer = PreTrainedTokenizerFast.from_pretrained(str(text_dir))
        text_config = json.loads((text_dir / "config.json").read_text())
        generation = json.loads((text_dir / "generation_config.json").read_text())
    tokenizer.chat_template = None  # as BLIP-2 checkpoints: the servers are given one
    image_processor = BlipImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    processor = Blip2Processor(image_processor, tokenizer, num_query_tokens=NUM_QUERY_TOKENS)

    text_config.update(vocab_size=len(tokenizer), initializer_range=INIT_STD)
    width = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 2,
        "initializer_range": INIT_STD,
    }  # head size 32: vLLM's CPU attention needs >= 32
    config = Blip2Config(
        vision_config={
            **width,
            "num_hidden_layers": 2,
            "image_size": IMAGE_SIZE,
            "patch_size": PATCH_SIZE,
        },
        qformer_config={
            **width,
            "num_hidden_layers": 1,
            "encoder_hidden_size": 64,
            "cross_attention_frequency": 1,
        },
        text_config=text_config,
        num_query_tokens=NUM_QUERY_TOKENS,
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        initializer_range=INIT_STD,
    )
    config.architectures = ["Blip2ForConditionalGeneration"]
    torch.manual_seed(SEED)
    model = Blip2ForConditionalGeneration(config).eval()
    model.save_pretrained(str(outdir), safe_serialization=True)
    processor.save_pretrained(str(outdir))
    (outdir / CHAT_TEMPLATE_FILE).write_text(CHAT_TEMPLATE)
    (outdir / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
