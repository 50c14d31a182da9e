"""Build a tiny, deterministic Llama checkpoint for the test suite.

Usage::

    python -m tools.make_tiny_model OUTDIR

or, from Python, ``build(pathlib.Path(OUTDIR))`` (``harness.models.tiny_model_dir``
builds it once under build/).

Why this exists: the tests drive a real, unmodified vLLM EngineCore on the CPU,
so they need a model directory that vLLM and transformers can load like any
Hugging Face checkpoint, yet is small enough to run in seconds and can be
rebuilt offline, bit for bit, on any machine.  Downloading a model would make
the tests depend on the network and on someone else's files; checking one in
would put binaries in the repository.  Instead this script writes one from
scratch:

* ``tokenizer.json`` -- a byte-level BPE (GPT-2/Llama-3 style) trained here on
  a generated corpus.  The corpus mixes English-like text with accented Latin,
  CJK and emoji, so that rare multi-byte characters are split across tokens
  and detokenizing a single token can yield partial UTF-8 (U+FFFD), which is
  exactly the case incremental detokenization has to get right.
* ``model.safetensors`` -- a 2-layer ``LlamaForCausalLM`` with random float32
  weights, serialized by hand (the format is trivial, and this avoids
  importing torch).
* ``config.json``, ``generation_config.json``, ``tokenizer_config.json``
  (with a ChatML chat template that can raise and that renders tools, tool
  calls and tool results the way Hugging Face templates do) and
  ``special_tokens_map.json``.

The tool-call and reasoning parsers look up their markers in the vocabulary
(``<think>``, ``<tool_call>``, ``[TOOL_CALLS]``, ...), so those are added
after training, at ids from 1200 on: the trained vocabulary, and with it every
existing token id and merge, stays as it was.

Only the standard library, numpy and the ``tokenizers`` library are used, so
the build takes under a second and does not depend on torch, transformers or
vLLM versions.  Every random choice comes from fixed seeds and every file is
written with a fixed key order, so two builds produce identical bytes (given
the same numpy and tokenizers versions: a different BPE trainer or random
stream would change the output, and the test model with it).
"""

from __future__ import annotations

import json
import pathlib
import struct

import numpy as np
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

# --------------------------------------------------------------------------
# Fixed parameters.  Changing any of them changes the output bytes.
# --------------------------------------------------------------------------

CORPUS_SEED = 20240601
WEIGHTS_SEED = 1234

VOCAB_SIZE = 1200  # including the special tokens and the 256 byte symbols

# Fixed ids: the trainer assigns ids to special tokens in list order, first.
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>", "<|im_start|>", "<|im_end|>"]
UNK_ID, BOS_ID, EOS_ID, PAD_ID, IM_START_ID, IM_END_ID = range(len(SPECIAL_TOKENS))

# Markers of the tool-call and reasoning formats the frontend parses, added
# after training (ids VOCAB_SIZE, VOCAB_SIZE + 1, ...) as (text, special).
# Like the real models: Qwen3 and DeepSeek-R1 have <think> and <tool_call> as
# plain added tokens; Mistral's [TOOL_CALLS]/[ARGS] (v11+ format: name[ARGS]
# {json}) and Llama 3's <|python_tag|> are special (control) tokens.
PARSER_TOKENS = [
    ("<think>", False),
    ("</think>", False),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("[TOOL_CALLS]", True),
    ("[ARGS]", True),
    ("<|python_tag|>", True),
]
FULL_VOCAB_SIZE = VOCAB_SIZE + len(PARSER_TOKENS)

HIDDEN_SIZE = 64
INTERMEDIATE_SIZE = 128
NUM_LAYERS = 2
NUM_HEADS = 4
NUM_KV_HEADS = 2
# vLLM's CPU attention backend only supports head sizes >= 32, so the natural
# hidden_size // num_heads == 16 would be rejected.  Llama configs allow an
# explicit head_dim, which keeps the model at hidden_size 64 with 4 heads.
HEAD_DIM = 32
MAX_POSITIONS = 2048
RMS_NORM_EPS = 1e-5
ROPE_THETA = 10000.0

# Rows for the added parser tokens come from their own stream, so the trained
# vocabulary's weights are drawn exactly as before the tokens existed.
ADDED_ROWS_SEED = 4321

# Standard deviations of the random (normal, zero-mean) weights.  The usual
# Llama init (0.02 everywhere) makes a bad test model: attention is almost
# uniform, so the hidden state is dominated by a context average and greedy
# decoding falls into one token repeated forever after a few steps.  These
# values were picked by measuring greedy runs over ~25 prompts x 48 tokens
# (with a numpy reference forward pass, which matched vLLM): with them no
# token repeats more than twice in a row and outputs differ per prompt.
#  * larger embeddings keep the current token visible next to the context;
#  * larger q/k make attention sharp and position dependent (via RoPE), so
#    the state keeps changing instead of settling;
#  * lm_head only scales the logits (greedy is unaffected); ~0.25 gives them
#    a spread of ~2 so sampling, logprobs and top-k/top-p see a peaked
#    distribution rather than a nearly uniform one.
EMBED_STD = 0.1
QK_STD = 0.5
OTHER_STD = 0.1  # v/o projections and the MLP
LM_HEAD_STD = 0.25


def _init_std(name: str) -> float:
    if name == "lm_head.weight":
        return LM_HEAD_STD
    if name == "model.embed_tokens.weight":
        return EMBED_STD
    if name.endswith(("q_proj.weight", "k_proj.weight")):
        return QK_STD
    return OTHER_STD


# ChatML.  Without tools, tool calls or tool messages it renders exactly the
# plain "<|im_start|>{role}\n{content}<|im_end|>\n" turns (the test suite's
# greedy outputs depend on those prompts).  With them it follows Qwen's
# Hermes-style templates: the tools as JSON lines in the system turn, each
# assistant tool call as <tool_call>{"name": ..., "arguments": ...}</tool_call>
# (arguments arrive parsed, as Hugging Face passes them), and tool results as
# "tool" turns.  enable_thinking=false pre-closes the reasoning block.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% set ns = namespace(skip_first=false) %}"
    "{% if tools %}"
    "{{ '<|im_start|>system\\n' }}"
    "{% if messages and messages[0]['role'] == 'system' %}"
    "{{ messages[0]['content'] + '\\n\\n' }}{% set ns.skip_first = true %}"
    "{% endif %}"
    "{{ '# Tools\\n\\nYou may call one or more functions. Their signatures:\\n<tools>' }}"
    "{% for tool in tools %}{{ '\\n' + (tool | tojson) }}{% endfor %}"
    "{{ '\\n</tools>\\nReturn each call as <tool_call>{\"name\": ..., \"arguments\": ...}'"
    " + '</tool_call>.<|im_end|>\\n' }}"
    "{% endif %}"
    "{% for message in messages %}{% if not (loop.first and ns.skip_first) %}"
    "{% if message['role'] not in ['system', 'user', 'assistant', 'tool'] %}"
    "{{ raise_exception('Unsupported role: ' + message['role'] + "
    "'. Only system, user, assistant and tool are allowed.') }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') }}"
    "{% for call in message['tool_calls'] or [] %}"
    "{% set args = call['function']['arguments'] %}"
    "{{ '\\n<tool_call>\\n{\"name\": \"' + call['function']['name'] + '\", \"arguments\": '"
    " + (args if args is string else args | tojson) + '}\\n</tool_call>' }}"
    "{% endfor %}"
    "{{ '<|im_end|>\\n' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}"
    "{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}"
    "{% endif %}"
)

# --------------------------------------------------------------------------
# Training corpus
# --------------------------------------------------------------------------

NAMES = (
    "Alice Bob Carol Dave Erin Frank Grace Heidi Ivan Judy Mallory Oscar "
    "Peggy Rupert Sybil Trent Victor Walter Olivia Liam Emma Noah"
).split()
NOUNS = (
    "cat dog house tree river mountain city road car book table window door "
    "garden flower bird fish boat train station market school teacher student "
    "friend family morning evening night day week year letter story song "
    "picture computer program server model token engine request response "
    "question answer idea plan problem reason system number word sentence "
    "language music paper coffee tea bread water fire stone cloud rain snow "
    "sun moon star sea island forest village bridge tower castle king queen "
    "child farmer doctor artist baker keyboard screen message stream queue"
).split()
ADJECTIVES = (
    "small large old new quick slow bright dark quiet loud happy sad warm "
    "cold green blue red yellow white black simple strange careful busy "
    "empty full early late short long tiny huge gentle clever lazy brave "
    "calm wild fresh ancient modern useful random"
).split()
VERBS = (
    "sees finds takes makes builds reads writes sends opens closes likes "
    "wants needs carries follows watches paints visits answers asks moves "
    "starts stops keeps loses helps calls brings holds counts checks "
    "remembers forgets explains prints streams returns"
).split()
ADVERBS = (
    "quickly slowly quietly carefully happily suddenly often rarely always "
    "never again together alone soon later today yesterday tomorrow"
).split()
PREPOSITIONS = (
    "in on under near behind over through across into from with without"
).split()
CONNECTIVES = "and but so because while although when after before".split()
# Chat-like lines, so typical test prompts ("Hello world", role names) map to
# a few sensible tokens instead of single letters.
ROLES = ["system", "user", "assistant"]
GREETINGS = (
    "Hello|Hello world|Hello there|Hi|Hi there|Good morning|Good evening|"
    "Thanks|Thank you|Sure|Yes|No|Okay|Please help|How are you?|What is this?"
).split("|")
OPENERS = (
    "Once upon a time,|In the morning,|Later that day,|Meanwhile,|"
    "Of course,|However,|Surprisingly,|In the end,|At first,|Then"
).split("|")

# Non-ASCII material.  Accented words are common enough that BPE learns whole
# characters for them; the CJK and especially the emoji are rarer, so many of
# their UTF-8 bytes remain separate tokens (the interesting case).
ACCENTED = (
    "café naïve résumé crème brûlée façade jalapeño señor niño Zürich "
    "München Ångström São Paulo déjà vu fiancée piñata Œuvre smörgåsbord "
    "Ελλάδα Москва Добрый день"
).split()
CJK = (
    "你好 世界 今天 天气 很好 我们 学习 语言 模型 东京 日本語 こんにちは "
    "ありがとう 한국어 안녕하세요 北京 上海 中文 漢字 数据"
).split()
EMOJI = (
    "😀 😂 🎉 🚀 👍 👍🏽 ❤️ 🔥 🌍 🍕 🐍 🤖 ✨ 🙂 🥳 👩‍💻 👨‍👩‍👧 🇯🇵 ☕ ⭐"
).split()


def _pick(rng: np.random.Generator, words: list[str] | tuple[str, ...]) -> str:
    return words[int(rng.integers(len(words)))]


def _noun_phrase(rng: np.random.Generator) -> str:
    if rng.random() < 0.25:
        return _pick(rng, NAMES)
    article = "the" if rng.random() < 0.6 else "a"
    if rng.random() < 0.5:
        return f"{article} {_pick(rng, ADJECTIVES)} {_pick(rng, NOUNS)}"
    return f"{article} {_pick(rng, NOUNS)}"


def _clause(rng: np.random.Generator) -> str:
    parts = [_noun_phrase(rng), _pick(rng, VERBS), _noun_phrase(rng)]
    if rng.random() < 0.4:
        parts += [_pick(rng, PREPOSITIONS), _noun_phrase(rng)]
    if rng.random() < 0.3:
        parts.append(_pick(rng, ADVERBS))
    return " ".join(parts)


def _sprinkle_non_ascii(rng: np.random.Generator, sentence: str) -> str:
    roll = rng.random()
    if roll < 0.12:
        return f"{sentence[:-1]} {_pick(rng, ACCENTED)}{sentence[-1]}"
    if roll < 0.17:
        return f"{sentence} {_pick(rng, CJK)}{_pick(rng, CJK)}。"
    if roll < 0.20:
        return f"{sentence} {_pick(rng, EMOJI)}"
    return sentence


def _sentence(rng: np.random.Generator) -> str:
    text = _clause(rng)
    if rng.random() < 0.35:
        text += f" {_pick(rng, CONNECTIVES)} {_clause(rng)}"
    if rng.random() < 0.2:
        text = f"{_pick(rng, OPENERS)} {text}"
    if rng.random() < 0.1:
        text += f" {int(rng.integers(0, 10000))} times"
    text = text[0].upper() + text[1:]
    end = "." if rng.random() < 0.8 else _pick(rng, ["!", "?", "..."])
    if rng.random() < 0.1:
        return _sprinkle_non_ascii(rng, f'"{text}{end}" said {_pick(rng, NAMES)}.')
    return _sprinkle_non_ascii(rng, text + end)


def _json_line(rng: np.random.Generator) -> str:
    # A little structured text so JSON punctuation gets its own merges.
    record = {
        "name": _pick(rng, NAMES),
        "item": _pick(rng, NOUNS),
        "count": int(rng.integers(0, 100)),
        "ok": bool(rng.random() < 0.5),
    }
    return json.dumps(record, ensure_ascii=False)


def _dialogue_line(rng: np.random.Generator) -> str:
    # Half the lines start with the greeting itself: prompts usually begin
    # without a leading space ("Hello", not " Hello").
    line = f"{_pick(rng, GREETINGS)}! {_sentence(rng)}"
    if rng.random() < 0.5:
        line = f"{_pick(rng, ROLES)}: {line}"
    return line


def make_corpus(target_chars: int = 300_000) -> list[str]:
    """Return deterministic training text as a list of paragraphs."""
    rng = np.random.default_rng(CORPUS_SEED)
    paragraphs: list[str] = []
    total = 0
    while total < target_chars:
        roll = rng.random()
        if roll < 0.05:
            paragraph = _json_line(rng)
        elif roll < 0.25:
            paragraph = _dialogue_line(rng)
        else:
            n_sentences = int(rng.integers(2, 7))
            paragraph = " ".join(_sentence(rng) for _ in range(n_sentences))
        paragraphs.append(paragraph)
        total += len(paragraph) + 1
    return paragraphs


# --------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------


def train_tokenizer(corpus: list[str]) -> Tokenizer:
    """Train a byte-level BPE with fixed special-token ids and a BOS post-processor."""
    tokenizer = Tokenizer(models.BPE())
    # add_prefix_space=False: "Hello" and " Hello" stay different tokens and
    # decoding is an exact inverse of encoding (like Llama 3 / GPT-2).
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        # All 256 byte symbols, so any input string can be encoded.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Each paragraph is one training sequence.  The corpus has no newlines,
    # so no merges are spent on whitespace runs ("\n" is still a byte token).
    tokenizer.train_from_iterator(corpus, trainer=trainer)

    # Like Llama: prepend BOS to every sequence when add_special_tokens=True.
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A",
        pair="<s> $A <s> $B",
        special_tokens=[("<s>", BOS_ID)],
    )
    _check_tokenizer(tokenizer)
    _add_parser_tokens(tokenizer)
    return tokenizer


def _add_parser_tokens(tokenizer: Tokenizer) -> None:
    """Append the parser markers as added tokens (never split, never normalized)."""
    for text, special in PARSER_TOKENS:
        token = AddedToken(text, special=special, normalized=False)
        if special:
            tokenizer.add_special_tokens([token])
        else:
            tokenizer.add_tokens([token])
    expected = dict(zip((t for t, _ in PARSER_TOKENS), range(VOCAB_SIZE, FULL_VOCAB_SIZE)))
    actual = {text: tokenizer.token_to_id(text) for text in expected}
    if actual != expected:
        raise RuntimeError(f"parser tokens at {actual}, expected {expected}")


def _check_tokenizer(tokenizer: Tokenizer) -> None:
    """Fail loudly if training did not produce the layout the tests rely on."""
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    if size != VOCAB_SIZE:
        raise RuntimeError(f"tokenizer has {size} tokens, expected {VOCAB_SIZE}")
    for expected_id, token in enumerate(SPECIAL_TOKENS):
        if tokenizer.token_to_id(token) != expected_id:
            raise RuntimeError(f"{token!r} is not at id {expected_id}")
    if tokenizer.encode("Hello").ids[0] != BOS_ID:
        raise RuntimeError("post-processor does not add BOS")


# --------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------


def tensor_shapes(vocab_size: int) -> dict[str, tuple[int, ...]]:
    """HF Llama tensor names and shapes ([out_features, in_features] for linears)."""
    q_size = NUM_HEADS * HEAD_DIM
    kv_size = NUM_KV_HEADS * HEAD_DIM
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (vocab_size, HIDDEN_SIZE),
        "model.norm.weight": (HIDDEN_SIZE,),
        "lm_head.weight": (vocab_size, HIDDEN_SIZE),
    }
    for i in range(NUM_LAYERS):
        p = f"model.layers.{i}."
        shapes.update(
            {
                p + "input_layernorm.weight": (HIDDEN_SIZE,),
                p + "post_attention_layernorm.weight": (HIDDEN_SIZE,),
                p + "self_attn.q_proj.weight": (q_size, HIDDEN_SIZE),
                p + "self_attn.k_proj.weight": (kv_size, HIDDEN_SIZE),
                p + "self_attn.v_proj.weight": (kv_size, HIDDEN_SIZE),
                p + "self_attn.o_proj.weight": (HIDDEN_SIZE, q_size),
                p + "mlp.gate_proj.weight": (INTERMEDIATE_SIZE, HIDDEN_SIZE),
                p + "mlp.up_proj.weight": (INTERMEDIATE_SIZE, HIDDEN_SIZE),
                p + "mlp.down_proj.weight": (HIDDEN_SIZE, INTERMEDIATE_SIZE),
            }
        )
    return shapes


def make_weights(vocab_size: int) -> dict[str, np.ndarray]:
    """Random float32 weights; norm weights are 1.0 as in a fresh Llama.

    The trained vocabulary's rows are drawn first, exactly as when the model
    had no added tokens; the added tokens get random embeddings of their own
    and all-zero lm_head rows (logit 0, far below the top trained logits, so
    greedy outputs of prompts without them do not change).
    """
    rng = np.random.default_rng(WEIGHTS_SEED)
    weights: dict[str, np.ndarray] = {}
    # Draw in sorted-name order so the values never depend on dict ordering.
    for name, shape in sorted(tensor_shapes(VOCAB_SIZE).items()):
        if name.endswith("norm.weight"):
            weights[name] = np.ones(shape, dtype=np.float32)
        else:
            draw = rng.standard_normal(shape) * _init_std(name)
            weights[name] = draw.astype(np.float32)
    added = vocab_size - VOCAB_SIZE
    if added:
        rows = np.random.default_rng(ADDED_ROWS_SEED).standard_normal((added, HIDDEN_SIZE))
        embed = weights["model.embed_tokens.weight"]
        weights["model.embed_tokens.weight"] = np.concatenate(
            [embed, (rows * EMBED_STD).astype(np.float32)])
        weights["lm_head.weight"] = np.concatenate(
            [weights["lm_head.weight"], np.zeros((added, HIDDEN_SIZE), np.float32)])
    return weights


def write_safetensors(path: pathlib.Path, tensors: dict[str, np.ndarray]) -> None:
    """Write the safetensors format by hand.

    Layout: u64 little-endian header length, a JSON header mapping each name
    to dtype/shape/byte range (relative to the end of the header), then the
    raw little-endian tensor bytes.  The header is space-padded to a multiple
    of 8 so the data is aligned.
    """
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    blobs: list[bytes] = []
    offset = 0
    for name in sorted(tensors):
        array = np.ascontiguousarray(tensors[name], dtype="<f4")
        blob = array.tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        blobs.append(blob)
        offset += len(blob)
    header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    header_bytes += b" " * (-len(header_bytes) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header_bytes)))
        f.write(header_bytes)
        for blob in blobs:
            f.write(blob)


# --------------------------------------------------------------------------
# JSON side files
# --------------------------------------------------------------------------


def model_config(vocab_size: int) -> dict[str, object]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        "hidden_size": HIDDEN_SIZE,
        "intermediate_size": INTERMEDIATE_SIZE,
        "num_hidden_layers": NUM_LAYERS,
        "num_attention_heads": NUM_HEADS,
        "num_key_value_heads": NUM_KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": RMS_NORM_EPS,
        # transformers >= 5 reads rope_parameters; older versions rope_theta.
        "rope_theta": ROPE_THETA,
        "rope_parameters": {"rope_type": "default", "rope_theta": ROPE_THETA},
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": PAD_ID,
        "use_cache": True,
    }


def generation_config() -> dict[str, object]:
    # Both </s> and <|im_end|> end a generation (chat replies end with the
    # latter).  Deliberately no sampling defaults, so vLLM's own defaults apply.
    return {
        "bos_token_id": BOS_ID,
        "eos_token_id": [EOS_ID, IM_END_ID],
        "_from_model_config": False,
        "transformers_version": "4.57.0",
    }


def _added_tokens() -> list[tuple[int, tuple[str, bool]]]:
    """(id, (text, special)) of every added token, in id order."""
    return [*enumerate((t, True) for t in SPECIAL_TOKENS),
            *enumerate(PARSER_TOKENS, start=VOCAB_SIZE)]


def tokenizer_config() -> dict[str, object]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "add_bos_token": True,
        "add_eos_token": False,
        "model_max_length": MAX_POSITIONS,
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {
            str(i): {
                "content": token,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": special,
            }
            for i, (token, special) in _added_tokens()
        },
        "chat_template": CHAT_TEMPLATE,
    }


def special_tokens_map() -> dict[str, object]:
    return {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
    }


def _write_json(path: pathlib.Path, data: object) -> None:
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    path.write_text(text, encoding="utf-8")


# --------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------


def build(outdir: pathlib.Path) -> None:
    """Write the complete model directory into ``outdir`` (created if needed)."""
    outdir = pathlib.Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)

    tokenizer = train_tokenizer(make_corpus())
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)  # FULL_VOCAB_SIZE
    # pretty=False: compact, and one less formatting choice to depend on.
    tokenizer.save(str(outdir / "tokenizer.json"), pretty=False)

    write_safetensors(outdir / "model.safetensors", make_weights(vocab_size))
    _write_json(outdir / "config.json", model_config(vocab_size))
    _write_json(outdir / "generation_config.json", generation_config())
    _write_json(outdir / "tokenizer_config.json", tokenizer_config())
    _write_json(outdir / "special_tokens_map.json", special_tokens_map())

