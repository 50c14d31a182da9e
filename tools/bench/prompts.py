"""Text prompts that the model's tokenizer turns into exactly N tokens (BOS included)."""

from __future__ import annotations

import random
from pathlib import Path

WORDS = (
    "the of and to in is was he for it with as his on be at by had are but from or have "
    "an they which one you were her all she there would their we him been has when who "
    "will more no if out so said what up its about into than them can only other new "
    "some could time these two may then do first any my now such like our over man me "
    "even most made after also did many before must through back years where much your "
    "way well down should because each just those people how too little state good very "
    "make world still own see men work long get here between both life being under never "
    "day same another know while last might us great old year off come since against go "
    "came right used take three river engine token stream model server request window "
    "number quickly slowly bright green orange purple mountain valley ocean forest city"
).split()


def make_prompts(model_dir: Path, count: int = 256, tokens: int = 128, seed: int = 0
                 ) -> list[str]:
    """``count`` distinct texts of exactly ``tokens`` tokens with special tokens added
    (what /v1/completions counts as prompt_tokens)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
    n_special = len(tok.encode("a", add_special_tokens=True).ids) - \
        len(tok.encode("a", add_special_tokens=False).ids)
    rng = random.Random(seed)
    out: list[str] = []
    seen: set[str] = set()
    attempts = 0
    while len(out) < count:
        attempts += 1
        if attempts > count * 50:
            raise RuntimeError(f"cannot make {tokens}-token prompts with this tokenizer")
        text = " ".join(rng.choice(WORDS) for _ in range(tokens * 2))
        for _ in range(6):
            ids = tok.encode(text, add_special_tokens=False).ids
            if len(ids) + n_special == tokens:
                break
            text = tok.decode(ids[:tokens - n_special]).strip()
        if (len(tok.encode(text, add_special_tokens=True).ids) == tokens
                and "\ufffd" not in text and text not in seen):
            seen.add(text)
            out.append(text)
    return out
