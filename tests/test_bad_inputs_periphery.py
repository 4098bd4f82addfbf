"""Issue 28, the newer surfaces: cross-vocabulary drafting (C10, C11), the checks (C15), the
audit's server answers and resume file (C17, C18) and ``specviz demo`` (C19). Every bad input
ends in one clear message (the command lines: exit 2 and one line), every legal one works."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import specviz as sv
from specviz.audit import audit
from specviz.audit.client import AuditError
from specviz.checks import calibrate_check
from specviz.cli import main as cli_main
from specviz.drafting.cross_vocab import CrossVocabDrafter, StringTokenizer, Vocabulary
from specviz.fixtures.toy import ToyLM

TT, TD = sv.toy_pair(5, 2, seed=0)


# -- C10: text one side cannot encode is left out, never an abort --------------------------------


def test_a_byte_without_a_token_is_left_out_and_counted():
    """SmolLM2 has no token for 21 byte values; a Vocabulary without b'\\xf1' stands in."""
    vocab = Vocabulary((b"a", b"b", b"\xc3"), lambda text: [0 if c == "a" else 1 for c in text])
    with pytest.raises(ValueError, match=r"no token for the byte b'\\xf1'"):
        vocab.encode(b"a\xf1b")
    assert vocab.encode_lenient(b"a\xf1b") == ([0, 1], 1)
    assert vocab.encode_lenient(b"ab\xc3") == ([0, 1, 2], 0)  # a split character: its byte


@pytest.mark.parametrize("path", ["serial", "batched"])
def test_target_text_the_draft_tokenizer_lacks(path):
    """The report's toy: the target samples 'd', which the draft's tokenizer cannot encode."""
    tgt, dr = StringTokenizer(["a", "b", "ab", "d"]), StringTokenizer(["a", "b", "ba"])
    d = CrossVocabDrafter(ToyLM.random(3, 1, seed=1), dr, tgt)
    target = ToyLM.random(4, 1)
    if path == "serial":
        r = sv.speculative_generate(target, d, [0, 1], max_new_tokens=12, do_sample=True, seed=0)
        assert len(r.new_tokens) == 12 and 3 in r.new_tokens
    else:
        r = sv.speculative_generate_batch(
            target, d, [0, 1], num_sequences=8, max_new_tokens=12, do_sample=True
        )
        assert all(len(s) == 12 for s in r.sequences)
    assert d.unencodable > 0


def test_the_draft_proposing_text_the_target_lacks_is_cut():
    """String matching: the draft writes 'z', which the target cannot tokenise; the draft is cut
    there (counted) and greedy output is the target's own."""
    tgt, dr = StringTokenizer(["a", "b", "ab"]), StringTokenizer(["a", "b", "z"])
    table = torch.full((4, 3), -5.0)
    table[:, 2] = 5.0  # the draft always writes 'z'
    d = CrossVocabDrafter(ToyLM(table, 3, 1), dr, tgt, method="string")
    target = ToyLM.random(3, 1, seed=2)
    r = sv.speculative_generate(target, d, [0, 1], max_new_tokens=10)
    assert r.new_tokens == sv.autoregressive_generate(target, [0, 1], max_new_tokens=10).new_tokens
    assert d.cut_drafts > 0


@pytest.fixture(scope="module")
def bpe_folder(tmp_path_factory) -> Path:
    """A random Llama with its own 600-token byte-level BPE tokenizer (the report's setup)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(
        ["the cat sat on the mat, déjà vu. naïve café ñandú ü " * 20] * 50, trainer
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="<s>")
    folder = tmp_path_factory.mktemp("bpe600")
    fast.save_pretrained(folder)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(fast), hidden_size=32, intermediate_size=64,
                      num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2)  # fmt: skip
    LlamaForCausalLM(cfg).save_pretrained(folder)
    return folder


def test_smollm2_drafts_for_a_byte_level_target(bpe_folder):
    """The report's MC-31: this pair aborted with "draft: no token for the byte b'\\xf1'"."""
    from specviz.models import load_pair

    t, d, tok = load_pair(str(bpe_folder), "smollm2-135m", cross_vocab="intersection", progress=False)  # fmt: skip
    r = sv.speculative_generate(t, d, tok.encode("the cat"), max_new_tokens=24, do_sample=True, seed=0)  # fmt: skip
    assert len(r.new_tokens) == 24
    assert d.unencodable > 0  # the random target did sample bytes SmolLM2 has no token for


# -- C11: CrossVocabDrafter arguments --------------------------------------------------------------


def _cv(**kw) -> CrossVocabDrafter:
    args = dict(draft_model=ToyLM.random(3, 1), draft_tokenizer=StringTokenizer(["a", "b", "c"]),
                target_tokenizer=StringTokenizer(["a", "b", "ab", "c"])) | kw  # fmt: skip
    return CrossVocabDrafter(**args)


@pytest.mark.parametrize(
    "call, exc, message",
    [
        (lambda: _cv(target_tokenizer=None), TypeError, "target_tokenizer must be a tokenizer"),
        (lambda: _cv(draft_tokenizer=["a", "b", "c"]), TypeError, "draft_tokenizer must be a tokenizer"),
        (lambda: _cv(target_vocab_size="4"), TypeError, "target_vocab_size must be an int"),
        (lambda: _cv(draft_tokenizer=StringTokenizer(list("abcdefgh"))), ValueError, "were the draft and target tokenizers swapped"),
        (lambda: _cv().draft_ids(torch.tensor([7])), ValueError, r"context holds token id 7, outside the target vocabulary \[0, 4\)"),
        (lambda: _cv().draft_ids(torch.tensor([[0, 1]])), ValueError, "context must be a 1-D sequence"),
        (lambda: sv.speculative_generate(ToyLM.random(6, 1), _cv(), [0, 1], max_new_tokens=3), ValueError, "with target_vocab_size=6"),
    ],
)  # fmt: skip
def test_cross_vocab_arguments(call, exc, message):
    with pytest.raises(exc, match=message):
        call()


# -- C15: checks' arguments, before any target call -------------------------------------------------


class Counting(ToyLM):
    def __init__(self) -> None:
        super().__init__(TT.table, TT.vocab_size, TT.order)
        self.calls = 0

    def next_logits(self, context):
        self.calls += 1
        return super().next_logits(context)


@pytest.mark.parametrize(
    "kwargs, exc, message",
    [
        (dict(verifier="nope"), ValueError, "unknown verifier 'nope'"),
        (dict(gamma=0), ValueError, "gamma must be an integer >= 1"),
        (dict(draft=None), TypeError, "draft is None"),
        (dict(near_tie=float("nan")), ValueError, "near_tie must be a finite number >= 0"),
        (dict(eos_token_id=99), ValueError, "eos_token_id 99 is outside"),
    ],
)
def test_greedy_check_refuses_before_the_first_target_call(kwargs, exc, message):
    target = Counting()
    args = dict(draft=TD, max_new_tokens=3, progress=False) | kwargs
    draft = args.pop("draft")
    with pytest.raises(exc, match=message):
        sv.greedy_check(target, draft, [[0]], **args)
    assert target.calls == 0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(replicates=0), "replicates must be an integer >= 1"),
        (dict(replicates=2.5), "replicates must be an integer >= 1, got float 2.5"),
        (dict(replicates=-3), "replicates must be an integer >= 1"),
        (dict(test_alpha=2), r"test_alpha must be in \(0, 1\)"),
        (dict(test_alpha=0), r"test_alpha must be in \(0, 1\)"),
        (dict(seed=-5), "seed must be an integer >= 0"),
    ],
)
def test_calibrate_check_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        calibrate_check(TT, TD, [[0]], n_samples=10, max_new_tokens=2, **kwargs)


def test_consistency_check_seeds_and_flags():
    kw = dict(n_samples=10, max_new_tokens=2, progress=False, n_boot=10)
    for seed, message in (("1", "seed must be an integer >= 0, got the string '1'"), (-1, "seed must be an integer >= 0")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            sv.consistency_check(TT, TD, [[0]], seed=seed, **kw)
    with pytest.raises(TypeError, match="do_sample must be True or False"):
        sv.consistency_check(TT, TD, [[0]], do_sample="True", **kw)
    # legal: numpy counts, and too few samples to see any TV is said in words, not as "nan"
    r = sv.consistency_check(TT, TD, [[0]], n_samples=np.int64(2), max_new_tokens=1, progress=False, n_boot=10)  # fmt: skip
    assert r.n_samples == 2 and "nan" not in r.summary()


# -- C17: malformed server answers --------------------------------------------------------------------


def _completion(body: dict) -> dict:
    n = body.get("max_tokens", 1)
    rng = np.random.default_rng(body.get("seed") or 0)
    toks = [str(rng.choice(["a", "b", "c"])) for _ in range(n)]
    content = [
        {"token": t, "logprob": -1.0, "top_logprobs": [{"token": t, "logprob": -1.0}, {"token": "z", "logprob": -2.0}]}
        for t in toks
    ]  # fmt: skip
    return {
        "choices": [{"text": "".join(toks), "finish_reason": "length", "logprobs": {"content": content}}],
        "usage": {"completion_tokens": n},
    }  # fmt: skip


class FakeServer:
    """An OpenAI-compatible server whose answers a test chooses (127.0.0.1, this process)."""

    def __init__(self) -> None:
        self.answers: dict[str, Any] = {}
        self.requests = 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, body: Any, ctype: str = "application/json") -> None:
                data = body if isinstance(body, bytes) else (body if isinstance(body, str) else json.dumps(body)).encode()  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._send(server.answers.get("models", {"data": [{"id": "m"}]}))

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if body.get("stream"):
                    return self._send(server.answers.get("stream", b"data: [DONE]\n\n"), "text/event-stream")  # fmt: skip
                server.requests += body.get("temperature", 1.0) > 0  # not the preflight probe
                make: Callable = server.answers.get("completion", _completion)
                self._send(make(body))

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def fake():
    srv = FakeServer()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()


def _edit(**changes) -> Callable:
    def make(body):
        a = _completion(body)
        for key, value in changes.items():
            if key == "item":
                a["choices"][0]["logprobs"]["content"][0] = value(a["choices"][0]["logprobs"]["content"][0])  # fmt: skip
            elif key == "choices":
                a["choices"] = value
            elif key == "usage":
                a["usage"] = value
            elif key == "logprobs":
                a["choices"][0]["logprobs"] = value
        return a

    return make


def _legacy_int_tokens(body):
    n = body["max_tokens"]
    lp = {"tokens": list(range(n)), "token_logprobs": [-1.0] * n, "top_logprobs": [{"x": -1.0}] * n}
    return {"choices": [{"text": "x" * n, "finish_reason": "length", "logprobs": lp}]}


@pytest.mark.parametrize(
    "answers, message",
    [
        ({"completion": _edit(item=lambda i: {**i, "logprob": "abc"})}, r"POST http://127.0.0.1:\d+/v1/completions: choices\[0\]\.logprobs\.content\[0\]\.logprob is 'abc', expected a number"),
        ({"completion": _edit(item=lambda i: "tok")}, r"logprobs\.content\[0\] is 'tok', expected an object"),
        ({"completion": _edit(item=lambda i: {**i, "top_logprobs": [["a", -1.0]]})}, r"top_logprobs\[0\] is \['a', -1.0\], expected an object"),
        ({"completion": _edit(choices=["hello"])}, r"choices\[0\] is 'hello', expected an object"),
        ({"completion": _edit(usage={"completion_tokens": "many"})}, r"usage\.completion_tokens is 'many', expected an integer >= 0"),
        ({"completion": _edit(usage=[2])}, r"usage is \[2\], expected an object"),
        ({"completion": _edit(logprobs={"tokens": ["a", "b"], "token_logprobs": ["x", "y"]})}, r"token_logprobs is \['x', 'y'\], expected a list of numbers"),
        ({"completion": _legacy_int_tokens}, r"logprobs\.tokens is 0, expected a list of string pieces"),
        ({"models": [{"id": "m"}]}, r"GET http://127.0.0.1:\d+/v1/models: data is \[\{'id': 'm'\}\], expected an object"),
        ({"models": {"data": [{"name": "m"}]}}, r"data\[0\]\.id is \{'name': 'm'\}, expected a model entry with an 'id' string"),
        ({"models": "<html>hello</html>"}, r"the answer to GET http://127.0.0.1:\d+/v1/models is not JSON"),
    ],
)  # fmt: skip
def test_malformed_answers_name_the_endpoint_the_field_and_what_was_expected(
    fake, answers, message
):
    fake.answers = answers
    with pytest.raises(AuditError, match=rf"^A \({fake.url}\): .*{message}"):
        audit(fake.url, fake.url, ["hi"], n_samples=4, max_tokens=2, progress=False, greedy=False, retries=0)  # fmt: skip


@pytest.mark.parametrize(
    "stream, message",
    [
        (b"data: {garbage\n\n", "the data line after 0 token chunk\\(s\\) is not JSON"),
        (b"data: [1, 2]\n\n", r"a data line is \[1, 2\], expected a JSON object"),
    ],
)
def test_malformed_stream_chunks(fake, stream, message):
    fake.answers = {"stream": stream}
    with pytest.raises(
        AuditError,
        match=rf"malformed answer to POST {fake.url}/v1/completions \(streamed\): {message}",
    ):
        audit(fake.url, fake.url, ["hi"], n_samples=4, max_tokens=2, progress=False, greedy=False,
              retries=0, load_levels=(1,), load_requests=1)  # fmt: skip


# -- C18: a damaged raw.jsonl in --out ------------------------------------------------------------------


def _audit_cli(fake, out: Path, capsys) -> tuple[int, str]:
    argv = ["audit", "--a", fake.url, "--b", fake.url, "--prompt", "hi", "--n-samples", "4",
            "--max-tokens", "2", "--out", str(out), "--no-greedy", "--quiet", "--load-levels", ""]  # fmt: skip
    rc = cli_main(argv)
    return rc, capsys.readouterr().err


@pytest.fixture
def resumable(fake, tmp_path, capsys):
    """A complete raw.jsonl of the small audit, and a function that resumes from an edit of it."""
    fake.answers = {}
    rc, err = _audit_cli(fake, tmp_path / "first", capsys)
    assert rc == 3, err  # 4 samples: "inconclusive" (exit 3), a complete run
    lines = (tmp_path / "first" / "raw.jsonl").read_bytes().splitlines()

    def resume(edit) -> tuple[int, str, Path, int]:
        out = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        out.mkdir()
        (out / "raw.jsonl").write_bytes(b"\n".join(edit(list(lines))) + b"\n")
        before = fake.requests
        rc, err = _audit_cli(fake, out, capsys)
        return rc, err, out, fake.requests - before

    return resume


def _record(index: int, change: Callable[[dict], Any]) -> Callable:
    def edit(lines):
        d = json.loads(lines[index])
        change(d)
        lines[index] = json.dumps(d).encode()
        return lines

    return edit


def _replace(index: int, raw: bytes) -> Callable:
    def edit(lines):
        lines[index] = raw
        return lines

    return edit


@pytest.mark.parametrize(
    "edit, reason",
    [
        (_replace(2, b"[1, 2, 3]"), "line 3: a list, not a JSON object"),
        (_record(1, lambda d: d.pop("kind")), "line 2: kind is None, expected 'sample' or 'greedy'"),
        (_record(1, lambda d: d.update(tokens="ab")), "line 2: tokens is 'ab', expected a list of strings (or of token ids)"),
        (_replace(2, b"\xff\xfe\x00garbage"), "line 3: not UTF-8 text"),
        (_record(1, lambda d: d.update(tokens=d["tokens"][:1], logprobs=d["logprobs"][:1], completion_tokens=None)), "line 2: finish_reason 'length' with 1 tokens of 2: cut short"),
        (_record(1, lambda d: d.update(prompt=7)), "line 2: prompt 7 but this audit has 1 prompt"),
    ],
)  # fmt: skip
def test_damaged_records_are_set_aside_and_sampled_again(resumable, edit, reason):
    rc, err, out, requests = resumable(edit)
    assert rc == 3 and "Traceback" not in err and "internal error" not in err, err
    assert len(err.strip().splitlines()) == 1 and reason in err, err
    assert f"set aside in {out / 'raw.rejected.jsonl'} and sampled again" in err
    assert requests == 1  # only the damaged result is redone: what is good is kept
    assert len((out / "raw.rejected.jsonl").read_bytes().splitlines()) == 1
    for line in (out / "raw.jsonl").read_text().splitlines()[1:]:
        assert json.loads(line)["kind"] == "sample"


def test_an_intact_raw_file_resumes_without_a_request_negative_control(resumable):
    rc, err, out, requests = resumable(lambda lines: lines)
    assert rc == 3 and err == "" and requests == 0
    assert not (out / "raw.rejected.jsonl").exists()


@pytest.mark.parametrize("header", [b"not json", b"{}", b"[1]"])
def test_a_foreign_header_is_a_usage_error_and_the_file_is_kept(resumable, header):
    rc, err, out, requests = resumable(lambda lines: [header, *lines[1:]])
    assert rc == 2 and requests == 0, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "raw.jsonl: line 1 " in err and "use another --out folder, or delete" in err
    assert (out / "raw.jsonl").read_bytes().startswith(header)


# -- C19: specviz demo usage errors --------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--gamma=-1"], "--gamma must be an integer >= 0 (0: plain decoding"),
        (["--max-new-tokens=-1"], "--max-new-tokens must be an integer >= 1, got -1"),
        (["--per-category", "0"], "--per-category must be an integer >= 1, got 0"),
        (["--categories", "bogus"], "--categories: unknown 'bogus'; choose from"),
        (["--categories", ""], "--categories: unknown empty list"),
        (["--dtype", "int8"], "--dtype: unsupported dtype 'int8'"),
        (["--device", "nonsense"], "--device: 'nonsense' is not a torch device"),
        (["--target", "./missing-folder"], "--target: no model folder or GGUF file at './missing-folder'"),
    ],
)  # fmt: skip
def test_demo_usage_errors_exit_2_with_one_line_before_loading(argv, message, capsys, monkeypatch):
    import specviz.lab.demo as demo

    monkeypatch.setattr(demo, "_load", lambda *a, **k: pytest.fail("a model was loaded"))
    rc = cli_main(["demo", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and err.strip() == f"specviz demo: {message}" or message in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_demo_with_a_model_that_cannot_load_exits_2(capsys, monkeypatch, tmp_path):
    import specviz.lab.demo as demo
    from specviz.models import ModelNotAvailableError

    def unavailable(*a, **k):
        raise ModelNotAvailableError("model 'no-such-model' is not a built-in name ...\n(cause: x)")

    monkeypatch.setattr(demo, "_load", unavailable)
    rc = cli_main(["demo", "--target", "no-such-model", "--out", str(tmp_path / "t")])
    err = capsys.readouterr().err
    assert rc == 2 and err == "specviz demo: model 'no-such-model' is not a built-in name ...\n"
