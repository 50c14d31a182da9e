"""Where the model's tokenizer and configs come from, as vLLM 0.32 reads them.

Hub ids through a Hugging Face cache built here (offline), revisions and
--download-dir; each tokenizer layout (sentencepiece and tiktoken
``tokenizer.model`` converted, ``tekken.json`` for the mistral mode) giving
the token ids of vLLM's own tokenizer for the same directory (asked in a
subprocess); --generation-config and --override-generation-config; the
tokenizer modes vLLM picks or refuses. No network: the cache is local.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from frontend import tokenizers as modes
from frontend.model import ModelSource, load_model_info
from harness.procs import REPO_ROOT
from tests.support import model_layouts
from tests.support.requirements import require_vllm

BIN_DIR = os.path.dirname(sys.executable)
TEXTS = ["Hello world", " leading space", "two  spaces", "<|im_start|>user\nHi<|im_end|>\n",
         "Ünïcödé 日本語 😀", "\tTab\nnewline", "", "123456 x.y", "I'm sure [INST] <s>"]


def run_python(code: str, env: dict[str, str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


LOAD = """
import json, sys
from frontend.hub import HubOptions
from frontend.model import ModelSource, load_model_info
m = load_model_info({model!r}, tokenizer_dir={tokenizer!r}, source=ModelSource(
    revision={revision!r}, tokenizer_revision={tokenizer_revision!r},
    hub=HubOptions(download_dir={download_dir!r})))
print(json.dumps({{"path": m.directory, "root": m.path, "names": m.served_names,
                  "ids": m.encode("Hello world"),
                  "eos": m.generation_eos_ids,
                  "hub_imported": "huggingface_hub" in sys.modules}}))
"""


def load_in_subprocess(model: str, env: dict[str, str], *, tokenizer=None, revision=None,
                       tokenizer_revision=None, download_dir=None) -> dict:
    return run_python(LOAD.format(model=model, tokenizer=tokenizer, revision=revision,
                                  tokenizer_revision=tokenizer_revision,
                                  download_dir=download_dir), env)


@pytest.fixture
def hf_home(tmp_path, tiny_model_dir):
    home = tmp_path / "hf-home"
    model_layouts.hub_cache(tiny_model_dir, home, "acme/tiny-chat")
    return home


def test_a_hub_id_resolves_offline_from_the_cache(hf_home, tiny_model_dir):
    local = load_model_info(str(tiny_model_dir))
    got = load_in_subprocess("acme/tiny-chat", {"HF_HOME": str(hf_home),
                                                "HF_HUB_OFFLINE": "1"})
    assert got["path"] == str(hf_home / "hub" / "models--acme--tiny-chat" / "snapshots"
                              / model_layouts.COMMIT)
    assert got["names"] == ["acme/tiny-chat"]  # served as the Hub id, as vLLM does
    assert got["root"] == "acme/tiny-chat"  # /v1/models' root, as vLLM's
    assert got["ids"] == local.encode("Hello world")
    assert got["eos"] == local.generation_eos_ids


def test_a_local_directory_never_imports_huggingface_hub(tiny_model_dir):
    got = load_in_subprocess(str(tiny_model_dir), {})
    assert got["hub_imported"] is False


def test_revisions_and_download_dir(tmp_path, tiny_model_dir):
    """--revision (a branch or a commit), --tokenizer-revision, --download-dir."""
    cache = tmp_path / "downloads"
    other = model_layouts.tiktoken_layout(tiny_model_dir, tmp_path / "tik")
    (other / "tokenizer.json").unlink(missing_ok=True)
    v2 = "fedcba9876543210fedcba9876543210fedcba98"
    model_layouts.hub_cache(tiny_model_dir, cache, "acme/m")
    model_layouts.hub_cache(other, cache, "acme/m", commit=v2)
    (cache / "hub" / "models--acme--m" / "refs" / "main").write_text(model_layouts.COMMIT)
    (cache / "hub" / "models--acme--m" / "refs" / "v2").write_text(v2)
    env = {"HF_HOME": str(tmp_path / "empty"), "HF_HUB_OFFLINE": "1"}
    download_dir = str(cache / "hub")
    main = load_in_subprocess("acme/m", env, download_dir=download_dir)
    by_branch = load_in_subprocess("acme/m", env, revision="v2", download_dir=download_dir)
    by_commit = load_in_subprocess("acme/m", env, revision=v2, download_dir=download_dir)
    tok_only = load_in_subprocess("acme/m", env, tokenizer_revision="v2",
                                  download_dir=download_dir)
    assert main["path"].endswith(model_layouts.COMMIT)
    assert by_branch["path"].endswith(v2) and by_commit["path"].endswith(v2)
    assert by_branch["ids"] != main["ids"]  # the tiktoken layout numbers tokens otherwise
    assert tok_only["path"].endswith(model_layouts.COMMIT)  # configs from main
    assert tok_only["ids"] == by_branch["ids"]  # the tokenizer from v2


def test_a_hub_id_missing_offline_stops_the_start_with_a_message(tmp_path):
    proc = subprocess.run(
        [os.path.join(BIN_DIR, "frontend"), "serve", "acme/not-cached", "--host", "127.0.0.1",
         "--engine-addr", "tcp://127.0.0.1:1"], cwd=REPO_ROOT, capture_output=True,
        text=True, timeout=60,
        env={**os.environ, "HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 2
    assert "acme/not-cached is not in the Hugging Face cache" in proc.stderr
    assert "HF_HUB_OFFLINE" in proc.stderr


# ------------------------------------------------------------ converted tokenizers
VLLM_TOKENIZE = """
import json, sys
from vllm.tokenizers import get_tokenizer
out = {}
for name, path, mode in json.loads(sys.argv[1]):
    tok = get_tokenizer(path, tokenizer_mode=mode)
    texts = json.loads(sys.argv[2])
    encoded = [tok.encode(t) for t in texts]
    out[name] = {"encoded": encoded, "plain": [tok.encode(t, add_special_tokens=False)
                                               for t in texts],
                 "decoded": [tok.decode(ids) for ids in encoded],
                 "skipped": [tok.decode(ids, skip_special_tokens=True) for ids in encoded]}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def layouts(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("layouts")
    return {"sentencepiece": (model_layouts.sentencepiece_layout(tiny_model_dir,
                                                                 root / "spm"), "hf"),
            "tiktoken": (model_layouts.tiktoken_layout(tiny_model_dir, root / "tik"), "hf"),
            "tekken": (model_layouts.tekken_layout(tiny_model_dir, root / "tekken"),
                       "mistral")}


def test_converted_tokenizers_give_vllms_token_ids(layouts):
    require_vllm()
    spec = [[name, str(path), mode] for name, (path, mode) in layouts.items()]
    proc = subprocess.run([sys.executable, "-c", VLLM_TOKENIZE, json.dumps(spec),
                           json.dumps(TEXTS)], cwd="/", capture_output=True, text=True,
                          timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    theirs = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, (path, mode) in layouts.items():
        model = load_model_info(str(path), source=ModelSource(tokenizer_mode=mode))
        assert model.tokenizer_mode == mode
        ref = theirs[name]
        assert [model.encode(t) for t in TEXTS] == ref["encoded"], name
        assert [model.encode(t, add_special_tokens=False) for t in TEXTS] == ref["plain"], name
        assert [model.decode(ids) for ids in ref["encoded"]] == ref["decoded"], name
        assert [model.decode(ids, skip_special_tokens=True)
                for ids in ref["encoded"]] == ref["skipped"], name


def test_mistral_chat_is_rendered_by_mistral_common(layouts):
    """The worker's ids are mistral_common's (checked against it here)."""
    path, _ = layouts["tekken"]
    model = load_model_info(str(path), source=ModelSource(tokenizer_mode="mistral"))
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi there"}]
    ids = model.render_chat(messages, tools=None, add_generation_prompt=True,
                            continue_final_message=False, reasoning_effort=None)
    theirs = run_python(f"""
import json
from mistral_common.protocol.instruct.request import ChatCompletionRequest
from mistral_common.protocol.instruct.validator import ValidationMode
from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
tok = MistralTokenizer.from_file({str(path / "tekken.json")!r}, mode=ValidationMode.test)
req = ChatCompletionRequest.from_openai(messages={messages!r})
print(json.dumps(tok.encode_chat_completion(req).tokens))
""", {})
    assert ids == theirs
    assert ids[0] == model.bos_token_id
    with pytest.raises(ValueError, match="last message"):
        model.render_chat(messages + [{"role": "assistant", "content": "x"}], tools=None,
                          add_generation_prompt=True, continue_final_message=False,
                          reasoning_effort=None)


# ------------------------------------------------------------ generation config
def test_generation_config_modes(tmp_path, tiny_model_dir):
    layout = model_layouts.copy_layout(tiny_model_dir, tmp_path / "m")
    (layout / "generation_config.json").unlink()
    (layout / "generation_config.json").write_text(json.dumps(
        {"temperature": 0.6, "top_p": 0.9, "max_new_tokens": 64, "eos_token_id": [2, 5]}))
    elsewhere = tmp_path / "gen"
    elsewhere.mkdir()
    (elsewhere / "generation_config.json").write_text(json.dumps(
        {"top_k": 5, "max_new_tokens": 7, "eos_token_id": 9}))
    auto = load_model_info(str(layout))
    assert auto.default_sampling == {"temperature": 0.6, "top_p": 0.9, "max_tokens": 64}
    assert auto.override_max_tokens is None and auto.generation_eos_ids == [2, 5]
    plain = load_model_info(str(layout), source=ModelSource(generation_config="vllm"))
    assert plain.default_sampling == {} and plain.generation_eos_ids == [2, 5]
    other = load_model_info(str(layout), source=ModelSource(generation_config=str(elsewhere)))
    assert other.default_sampling == {"top_k": 5, "max_tokens": 7}
    assert other.override_max_tokens == 7 and other.generation_eos_ids == [9]
    over = load_model_info(str(layout), source=ModelSource(
        generation_config="vllm",
        override_generation_config={"temperature": 0.1, "max_new_tokens": 3}))
    assert over.default_sampling == {"temperature": 0.1, "max_tokens": 3}
    assert over.override_max_tokens == 3


# ------------------------------------------------------------ tokenizer modes
def test_tokenizer_modes_as_vllm_picks_or_refuses_them(tmp_path):
    files = lambda: ["consolidated.safetensors", "tekken.json"]  # noqa: E731
    assert modes.resolve_mode("auto", tmp_path, {}, files) == "mistral"
    assert modes.resolve_mode("auto", tmp_path, {}, lambda: ["tekken.json"]) == "hf"
    assert modes.resolve_mode("HF", tmp_path, {}, files) == "hf"
    with pytest.raises(ValueError, match="No tokenizer registered for tokenizer_mode='slow'"):
        modes.resolve_mode("slow", tmp_path, {}, files)
    with pytest.raises(ValueError, match="'deepseek_v32'.*own Python code"):
        modes.resolve_mode("auto", tmp_path, {"architectures": ["DeepseekV32ForCausalLM"]},
                           files)
    with pytest.raises(ValueError, match="'kimi_k3'"):
        modes.resolve_mode("kimi_k3", tmp_path, {}, files)


def test_custom_tokenizer_code_needs_trust_remote_code(tmp_path, tiny_model_dir):
    layout = model_layouts.copy_layout(tiny_model_dir, tmp_path / "m")
    config = json.loads((layout / "tokenizer_config.json").read_text())
    config["auto_map"] = {"AutoTokenizer": ["tok.MyTokenizer", None]}
    (layout / "tokenizer_config.json").unlink()
    (layout / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="--trust-remote-code"):
        load_model_info(str(layout))
    trusted = load_model_info(str(layout), source=ModelSource(trust_remote_code=True))
    assert trusted.encode("Hello") == load_model_info(str(tiny_model_dir)).encode("Hello")
