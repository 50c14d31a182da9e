"""Steps of one choice read in the same wake-up go to the client as one delta.

When the engine runs ahead of the frontend, the fan-out table merges a
choice's steps that are still waiting into one delta, as vLLM's output
collector does; the text, token ids and logprobs must be exactly those of the
separate steps. In process: the shipped Table, detokenizer and view.
"""

from __future__ import annotations

import msgspec
import pytest

from frontend.choices import Group
from frontend.model import load_model_info
from frontend.openai.common import StreamOptions
from frontend.openai.completions import CompletionRequest, CompletionView
from frontend.openai.sampling import build_sampling_params
from harness.state import make_state
from protocol import wire
from protocol.arrays import make_array
from tools.bench import hot_path


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model_info(str(tiny_model_dir), served_names=["tiny"])


def streaming_choice(model, **fields):
    state = make_state(model, max_model_len=1024)
    table = state.table
    req = CompletionRequest(model="tiny", prompt="Hello", max_tokens=16, stream=True, **fields)
    ids = model.encode("Hello")
    group = Group("cmpl-merge", stream=True)
    params = build_sampling_params(model, req.to_sampling_fields(), max_tokens=16,
                                   stream=True)
    choice = table.add_choice(group, index=0, prompt_index=0, prompt_token_ids=ids,
                              params=params)
    table.submit(group)
    return state, group, choice, req, ids


def step(engine_id, token, finish=None, logprob=None):
    out = wire.EngineCoreOutput(engine_id, [token], finish_reason=finish)
    if logprob is not None:  # sampled token only (logprobs=0): width 1
        aux: list[bytes] = [b""]
        out.new_logprobs = wire.LogprobsLists(make_array([token], [1, 1], "i", aux),
                                              make_array([logprob], [1, 1], "f", aux),
                                              make_array([1], [1], "q", aux))
    return wire.decode_step(wire.encode_outputs(wire.EngineCoreOutputs(outputs=[out])))


def tokens_of(model, text):
    return model.encode(text, add_special_tokens=False)


def test_steps_in_one_wakeup_become_one_delta(model):
    state, group, choice, _, _ = streaming_choice(model)
    table = state.table
    toks = tokens_of(model, " the river and the ocean")
    assert len(toks) >= 4
    table.on_outputs([step(choice.engine_id, t) for t in toks[:3]])
    [delta] = group.take()
    assert delta.token_ids == toks[:3]
    assert delta.text == model.decode(toks[:3])
    assert delta.finish_reason is None and choice.open_delta is None
    # After the client took it, the next step starts a new delta.
    table.on_outputs([step(choice.engine_id, toks[3], finish=wire.FinishReason.LENGTH)])
    [last] = group.take()
    assert last.token_ids == toks[3:4] and last.finish_reason == "length"
    assert delta.text + last.text == model.decode(toks[:4])
    assert not table.entries


def test_merged_delta_keeps_finish_and_logprobs(model):
    state, group, choice, req, ids = streaming_choice(model, logprobs=0)
    table = state.table
    toks = tokens_of(model, " green mountain valley")
    lps = [-0.5 * (i + 1) for i in range(len(toks))]
    table.on_outputs([step(choice.engine_id, t, logprob=lp, finish=(
        wire.FinishReason.LENGTH if i == len(toks) - 1 else None))
        for i, (t, lp) in enumerate(zip(toks, lps))])
    [delta] = group.take()
    assert delta.token_ids == toks and delta.finish_reason == "length"
    assert [pos[t][0] for pos, t in zip(delta.logprobs, toks)] == pytest.approx(lps)
    # The chunk a client gets: one event, whose logprobs cover every token.
    view = CompletionView(state, req, group, "tiny", [(ids, "Hello")])
    view.start_stream()
    chunk = msgspec.json.decode(view._render([delta])[len(b"data: "):])
    [c] = chunk["choices"]
    assert c["text"] == model.decode(toks) and c["finish_reason"] == "length"
    assert c["logprobs"]["token_logprobs"] == pytest.approx(lps)
    assert len(c["logprobs"]["tokens"]) == len(toks)


def test_hot_path_benchmark_runs(tiny_model_dir, capsys):
    hot_path.main(["--model", str(tiny_model_dir), "--streams", "8", "--tokens", "16",
                   "--ahead-outputs", "2", "--ahead-messages", "8", "--repeats", "1"])
    out = capsys.readouterr().out
    assert "batched" in out and "ahead" in out


def test_stream_interval_chunks_follow_the_rule(model):
    """vLLM's stream_interval: the first delta at once, then one every
    ``interval`` tokens, the rest at the finish (left to the handler, which
    writes it with the stream's end); steps held back in between merge into
    the next delta."""
    state, group, choice, _, _ = streaming_choice(model, stream_interval=3)
    sizes: list[int] = []
    group.sink = lambda deltas: (sizes.extend(len(d.token_ids) for d in deltas), (0, False))[1]
    toks = tokens_of(model, " the river and the ocean meets the sky at night")[:9]
    assert len(toks) == 9
    for i, token in enumerate(toks):
        state.table.on_outputs([step(choice.engine_id, token, finish=(
            wire.FinishReason.LENGTH if i == 8 else None))])
    assert sizes == [1, 3, 3]
    assert [len(d.token_ids) for d in group.pending] == [2] and group.done
    assert not state.table.entries


def test_stream_interval_with_a_lagging_client(model):
    """A client that lags gets what was due, chunked where the rule allows; held
    steps never join a delta already queued for it."""
    state, group, choice, _, _ = streaming_choice(model, stream_interval=3)
    toks = tokens_of(model, " the river and the ocean meets the sky at night")[:9]
    state.table.on_outputs([step(choice.engine_id, t) for t in toks[:5]])
    first, second = group.take()  # the 5th token is held
    assert first.token_ids == toks[:1] and second.token_ids == toks[1:4]
    state.table.on_outputs([step(choice.engine_id, t) for t in toks[5:8]])
    [third] = group.take()  # due at the 7th; the 8th is held
    assert third.token_ids == toks[4:7]
    state.table.on_outputs([step(choice.engine_id, toks[8], finish=wire.FinishReason.LENGTH)])
    [last] = group.take()
    assert last.token_ids == toks[7:9] and last.finish_reason == "length"
    assert "".join(d.text for d in (first, second, third, last)) == model.decode(toks)


def _random_streams(model, seed: int, lean: bool, stream: bool = True
                    ) -> tuple[list[bytes], list, int]:
    """Eight streams fed the same random steps (1-3 tokens, special and
    partial-UTF-8 ones, early finishes, the messages of one to a few steps per
    wake-up; every message names the weights' version, as vLLM's engine does,
    and it changes once); ``lean=False`` sends every step through the table's
    full path. ``stream=False``: the non-streaming response of each.
    Returns each stream's bytes, each choice's weight versions and how many
    outputs took the full path."""
    import random
    import re
    rng = random.Random(seed)
    state = make_state(model, max_model_len=1024)
    table = state.table
    full_path = [0]
    apply = table._apply

    def counted(*args):
        full_path[0] += 1
        apply(*args)

    table._apply = counted
    switch = rng.randrange(5, 35)
    streams = []
    for i in range(8):
        req = CompletionRequest(model="tiny", prompt="Hello é", max_tokens=40, stream=stream,
                                skip_special_tokens=i % 3 != 0,
                                stream_options=StreamOptions(include_usage=True)
                                if i % 2 and stream else None)
        ids = model.encode(req.prompt)
        group = Group(f"cmpl-{i}", stream=stream)
        params = build_sampling_params(model, req.to_sampling_fields(), max_tokens=40,
                                       stream=stream)
        choice = table.add_choice(group, index=0, prompt_index=0, prompt_token_ids=ids,
                                  params=params)
        table.submit(group)
        assert choice.lean
        choice.lean = lean
        view = CompletionView(state, req, group, "tiny", [(ids, req.prompt)])
        sent: list[bytes] = []
        if stream:
            view.start_stream()
            group.sink = lambda deltas, view=view, sent=sent: (sent.append(view._render(deltas)),
                                                                (0, False))[1]
        streams.append((choice, sent, view))
    finishing: set[str] = set()
    wakeup: list = []
    for step in range(40):
        outs = []
        for choice, _, _ in streams:
            if choice.engine_id in finishing:
                continue
            toks = [rng.choice([rng.randrange(0, 6), rng.randrange(6, 1200)])
                    for _ in range(rng.choice([1, 1, 1, 2, 3]))]
            out = wire.EngineCoreOutput(choice.engine_id, toks)
            if step == 0:
                out.prefill_stats = {"num_cached_tokens": 0}
            if step == 39 or rng.random() < 0.02:
                out.finish_reason = wire.FinishReason.LENGTH
                finishing.add(choice.engine_id)
            outs.append(out)
        version = "default" if step < switch else "v2"
        wakeup += [wire.decode_step(wire.encode_outputs(
                       wire.EngineCoreOutputs(outputs=outs[j::2], weight_version=version)))
                   for j in range(2)]
        # A wake-up reads the messages of one to a few steps (several steps of
        # a choice in one wake-up are merged), in one call or one by one.
        if step == 39 or rng.random() < 0.6:
            if rng.random() < 0.5:
                table.on_outputs(wakeup)
            else:
                for m in wakeup:
                    table.on_outputs([m])
            wakeup = []
    assert not table.entries
    if not stream:
        for _, sent, view in streams:
            sent.append(state.json(view.full_response()))
    return ([re.sub(rb'"created":\d+', b"", b"".join(sent)) for _, sent, _ in streams],
            [choice.weight_starts for choice, _, _ in streams], full_path[0])


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "response"])
@pytest.mark.parametrize("seed", range(40))
def test_lean_steps_write_the_same_bytes(model, seed, stream):
    """The table's lean path for one-token steps is byte-identical to the full
    one, streaming or not, and notes the same weight versions."""
    lean_bytes, lean_versions, lean_full = _random_streams(model, seed, True, stream)
    full_bytes, full_versions, outputs = _random_streams(model, seed, False, stream)
    assert lean_bytes == full_bytes
    assert lean_versions == full_versions
    assert all(versions[0] == ("default", 0) for versions in full_versions)
    # Most outputs are one token, mid-stream, of the current weights: those
    # must take the lean path although every message names a version.
    assert lean_full < outputs * 0.7
