"""The ASCII byte-level encoder must give exactly the tokenizer's ids, or step aside."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, processors

from frontend.model import load_model_info
from frontend.tokenizers.ascii_bytelevel import PIECES, TO_BYTE_CHARS, AsciiByteLevelEncoder

ASCII = [chr(c) for c in range(128)]
# Characters that meet the split regex's edge cases: contractions, every kind
# of whitespace (\x1c-\x1f are not whitespace to Oniguruma), digits, others.
EDGES = list(" \t\n\r\x0b\x0c\x1c\x1fa'sStrevmlld09!-_\x00\x7f")


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model_info(str(tiny_model_dir))


def reference(tokenizer: Tokenizer, text: str, special: bool) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=special).ids


def assert_same(encoder: AsciiByteLevelEncoder, tokenizer: Tokenizer, texts) -> None:
    """Same ids; and same pieces as the pre-tokenizer (a small vocabulary's ids
    can agree on pieces split differently)."""
    split = tokenizer.pre_tokenizer.pre_tokenize_str
    for text in texts:
        if text.isascii():
            pieces = [p.translate(TO_BYTE_CHARS) for p in PIECES.findall(text)]
            assert pieces == [p for p, _ in split(text)], repr(text)
        for special in (True, False):
            got = encoder.encode(text, special)
            if got is not None:
                assert got == reference(tokenizer, text, special), repr(text)


def test_tiny_model_uses_it(model):
    assert model.ascii_encoder is not None
    text = "Hello, world! It's 2026."
    assert model.encode(text) == reference(model.tokenizer, text, True)


def test_every_pair_and_edge_triple_of_ascii(model):
    pairs = ("".join(p) for p in itertools.product(ASCII, repeat=2))
    triples = ("".join(t) for t in itertools.product(EDGES, repeat=3))
    texts = [w for t in itertools.chain(pairs, triples) for w in (t, f"x{t} y", f"  {t}\n")]
    assert_same(model.ascii_encoder, model.tokenizer, texts)


def test_random_ascii_texts(model):
    rng = random.Random(0)
    alphabet = ASCII + list("      aeiou'sltdm09") * 3
    texts = [
        "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 120))) for _ in range(3000)
    ]
    assert_same(model.ascii_encoder, model.tokenizer, texts)
    # The cache serves repeated pieces with the same ids (and a fresh list each time).
    first, again = model.encode(texts[1]), model.encode(texts[1])
    assert first == again and first is not again


PRINTABLE = [chr(c) for c in range(33, 127)]  # no space


def test_single_spaced_lines_go_word_by_word_with_the_same_split(model):
    """Lines of printable words (punctuation, digits, contractions) joined by
    single spaces are split word by word: the same pieces as the regex on the
    whole text (a newline between lines a piece of its own), and the
    tokenizer's ids."""
    rng = random.Random(1)
    alphabet = PRINTABLE + list("aeiou'sltdm09") * 4

    def line() -> str:
        return " ".join(
            "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 9)))
            for _ in range(rng.randrange(1, 20))
        )

    texts = ["\n".join(line() for _ in range(rng.choice((1, 1, 2, 4)))) for _ in range(3000)]
    encoder = AsciiByteLevelEncoder.for_tokenizer(model.tokenizer)
    for text in texts:
        by_word = []
        for n, words in enumerate(line.split(" ") for line in text.split("\n")):
            by_word += ["\n"] if n else []
            by_word += PIECES.findall(words[0])
            by_word += [p for w in words[1:] for p in PIECES.findall(" " + w)]
        assert by_word == PIECES.findall(text), repr(text)
    assert_same(encoder, model.tokenizer, texts)
    assert encoder._spaced_words  # (the word-by-word path was taken)


@pytest.mark.parametrize("text", ["café", "naïve text", "x\u00a0y"])
def test_non_ascii_goes_to_the_tokenizer(model, text):
    assert model.ascii_encoder.encode(text, True) is None
    assert model.encode(text) == reference(model.tokenizer, text, True)


def test_added_tokens_are_split_out_as_the_tokenizer_does(model):
    """Special tokens of chat prompts, adjacent, overlapping, and near misses."""
    fixed = [
        "<s> hi",
        "a</think>b",
        "x<|im_end|>",
        "<|im_start|>user\nHi<|im_end|>\n",
        "<s></s><s>",
        "<<s>>",
        "<|im_start|",
        "</think> </think>",
        "[TOOL_CALLS][ARGS]{}",
    ]
    rng = random.Random(1)
    parts = [
        "<s>",
        "</s>",
        "<|im_start|>",
        "<|im_end|>",
        "<think>",
        "</think>",
        "<tool_call>",
        "[ARGS]",
        "<",
        ">",
        "|",
        "/",
        "[",
        "]",
        " ",
        "\n",
        "a",
        "im",
        "start",
        "'s",
        "1",
    ]
    texts = fixed + [
        "".join(rng.choice(parts) for _ in range(rng.randrange(1, 30))) for _ in range(2000)
    ]
    for text in texts:
        assert model.ascii_encoder.encode(text, True) is not None
    assert_same(model.ascii_encoder, model.tokenizer, texts)


def test_added_tokens_with_options_go_to_the_tokenizer(model):
    spec = json.loads(model.tokenizer.to_str())
    for token in spec["added_tokens"]:
        if token["content"] == "<|im_end|>":
            token["lstrip"] = True
    tokenizer = Tokenizer.from_str(json.dumps(spec))
    encoder = AsciiByteLevelEncoder.for_tokenizer(tokenizer)
    assert encoder.encode("x <|im_end|>", True) is None
    assert encoder.encode("x y", True) == reference(tokenizer, "x y", True)


def variant(tokenizer: Tokenizer, **changes) -> Tokenizer:
    spec = json.loads(tokenizer.to_str())
    for path, value in changes.items():
        section, _, key = path.partition("__")
        if key:
            spec[section][key] = value
        else:
            spec[section] = value
    return Tokenizer.from_str(json.dumps(spec))


@pytest.mark.parametrize(
    "changes",
    [
        {"normalizer": {"type": "Lowercase"}},
        {"pre_tokenizer__add_prefix_space": True},
        {"pre_tokenizer__use_regex": False},
        {"model__dropout": 0.5},
        {"pre_tokenizer": {"type": "Whitespace"}},
    ],
)
def test_other_pipelines_are_not_taken(model, changes):
    assert AsciiByteLevelEncoder.for_tokenizer(variant(model.tokenizer, **changes)) is None


def test_truncation_is_not_taken(model):
    tokenizer = Tokenizer.from_str(model.tokenizer.to_str())
    tokenizer.enable_truncation(8)
    assert AsciiByteLevelEncoder.for_tokenizer(tokenizer) is None


def test_post_processor_affixes(model):
    """A RoBERTa-style processor (a token on each side) and none at all."""
    tokenizer = Tokenizer.from_str(model.tokenizer.to_str())
    tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 1))
    encoder = AsciiByteLevelEncoder.for_tokenizer(tokenizer)
    assert encoder is not None
    assert_same(encoder, tokenizer, ["", "a b", "It's a test.  ", "\n\n x"])
    assert encoder.encode("a b", True)[0] == 1 and encoder.encode("a b", True)[-1] == 2
    bare = variant(model.tokenizer, post_processor=None)
    encoder = AsciiByteLevelEncoder.for_tokenizer(bare)
    assert encoder is not None
    assert_same(encoder, bare, ["", "a b", "It's a test.  "])


def test_a_full_cache_is_cleared_and_ids_stay_exact(model, monkeypatch):
    import frontend.tokenizers.ascii_bytelevel as module

    monkeypatch.setattr(module, "_CACHE_LIMIT", 4)
    encoder = AsciiByteLevelEncoder.for_tokenizer(model.tokenizer)
    texts = ["one two three four five six", "seven eight nine ten", "one two"]
    assert_same(encoder, model.tokenizer, texts)
    assert len(encoder._cache) <= 4
    assert len(encoder._words) <= 4 and len(encoder._spaced_words) <= 4


def test_long_pieces_and_words_are_not_kept(model):
    """A long run of letters or a long word (a pasted blob) is tokenized, not
    cached: no client fills the caches with megabytes."""
    encoder = AsciiByteLevelEncoder.for_tokenizer(model.tokenizer)
    blob = "x" * 5000
    texts = [blob, f"a {blob}.z b", f"{blob}\n{blob}!"]
    assert_same(encoder, model.tokenizer, texts)
    cached = [*encoder._cache, *encoder._words, *encoder._spaced_words]
    assert cached and max(map(len, cached)) <= 64


def test_the_longest_added_token_wins_where_two_start(model):
    tokenizer = Tokenizer.from_str(model.tokenizer.to_str())
    tokenizer.add_special_tokens(["<x>", "<x>y", "y>"])
    encoder = AsciiByteLevelEncoder.for_tokenizer(tokenizer)
    texts = ["<x>y z", "a<x>y>", "<x><x>yy>", "<x>y>"]
    assert_same(encoder, tokenizer, texts)
    assert all(encoder.encode(t, False) is not None for t in texts)


# Units a chat prompt is made of, so that drawn texts put added tokens next to
# words, contractions (either case), digit runs and every ASCII control char.
UNITS = ASCII + ["'s", "'S", "'LL", "'re", "123456", "   ", " \n", "\t\x0b\x0c", "\x1c\x1d\x1e\x1f"]


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_drawn_ascii_prompts(model, data):
    units = UNITS + [t.content for t in model.tokenizer.get_added_tokens_decoder().values()]
    text = "".join(data.draw(st.lists(st.sampled_from(units), max_size=40)))
    assert_same(model.ascii_encoder, model.tokenizer, [text, text + " ", text + "  \n"])
