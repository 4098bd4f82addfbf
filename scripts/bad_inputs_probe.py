"""Bad inputs, tried as a new user would: does each end in a clear error or correct behaviour?

Two sets of cases (issue 28):

* ``report`` -- the 20 classes of ``notes/bad-inputs-report.md`` (2026-12-03), each tried again
  the way the report tried it;
* ``fresh`` -- a different set of bad inputs of the same kinds (other values, other entry
  points, other files), written before the fixes were checked against them.

Every case states what a user should get: an error whose message names the problem (the words
it must contain), or correct behaviour (a check that must hold). A case is

* ``good``: the clear error, or the behaviour checked;
* ``bad-silent``: no error where one was due, or a wrong result;
* ``bad-unhelpful``: an error that does not say what is wrong (a raw Python/torch message, a
  traceback, "internal error").

Nothing here touches the user's model cache: the cache cases copy the SmolLM2 entry into a
temporary ``SPECVIZ_CACHE``. Runs in ~3-6 min on 2 cores (SmolLM2 loads a few times)::

    python scripts/bad_inputs_probe.py                 # both sets
    python scripts/bad_inputs_probe.py --set fresh --only C5,C13 -v

Exits 1 when any case is bad. ``tests/test_bad_inputs_*.py`` keep the important cases.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import traceback
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

import specviz
from specviz.checks import calibrate_check
from specviz.drafting.policies import (
    AcceptanceEMA,
    BatchFallback,
    ConfidenceStop,
    HeuristicGamma,
)
from specviz.models import load_model, load_pair, load_tokenizer

# the public names a user reaches for, in one namespace
sv = SimpleNamespace(
    **{k: getattr(specviz, k) for k in specviz.__all__},
    calibrate_check=calibrate_check,
    AcceptanceEMA=AcceptanceEMA,
    BatchFallback=BatchFallback,
    ConfidenceStop=ConfidenceStop,
    HeuristicGamma=HeuristicGamma,
    load_model=load_model,
    load_pair=load_pair,
    load_tokenizer=load_tokenizer,
)

WORK = Path(tempfile.mkdtemp(prefix="specviz-bad-inputs-"))


@dataclass
class Case:
    set: str
    cls: str
    name: str
    fn: Callable[[], Any]
    expect: str  # "error" | "ok" | "cli"
    words: tuple[str, ...] = ()
    code: int = 2


CASES: list[Case] = []
SET = "report"


def error(cls: str, name: str, *words: str):
    """The case must raise, with every one of ``words`` in the message (case-insensitive)."""

    def deco(fn):
        CASES.append(Case(SET, cls, name, fn, "error", words))
        return fn

    return deco


def ok(cls: str, name: str):
    """The case must run and its function return True (False: a silent wrong result)."""

    def deco(fn):
        CASES.append(Case(SET, cls, name, fn, "ok"))
        return fn

    return deco


def cli(cls: str, name: str, *words: str, code: int = 2):
    """A command line (the function returns ``(exit status, stderr)``): the status, one line
    on stderr, no traceback, the words."""

    def deco(fn):
        CASES.append(Case(SET, cls, name, fn, "cli", words, code))
        return fn

    return deco


def judge(case: Case) -> tuple[str, str]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = case.fn()
    except Exception as e:  # noqa: BLE001 - judged below
        msg = f"{type(e).__name__}: {e}"
        if case.expect != "error":
            return "bad-unhelpful", msg + "\n" + traceback.format_exc(limit=3)
        low = str(e).lower()
        if "internal error" in low or not all(w.lower() in low for w in case.words):
            return "bad-unhelpful", msg
        return "good", msg
    if case.expect == "error":
        return "bad-silent", f"no error (returned {str(out)[:120]})"
    if case.expect == "ok":
        return ("good", "ok") if out is True else ("bad-silent", f"check failed: {out!r}")
    rc, err = out
    # argparse's own usage block (``usage: ...`` and its indented continuation) is the
    # standard form of a usage error; the message is the line after it
    lines = [x for x in err.strip().splitlines() if x.strip()]
    if lines and lines[0].startswith("usage:"):
        lines = [x for x in lines[1:] if not x.startswith(" ")]
    low = err.lower()
    if (
        rc == case.code
        and len(lines) <= 1
        and "traceback" not in low
        and all(w.lower() in low for w in case.words)
    ):
        return "good", f"exit {rc}: {err.strip()[:200]}"
    return "bad-unhelpful", f"exit {rc}, {len(lines)} stderr lines: {err.strip()[-400:]}"


def run_cli(main: Callable[[list[str]], int], argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse
            rc = e.code if isinstance(e.code, int) else 1
        except BaseException:
            traceback.print_exc()
            rc = 1
    return rc, err.getvalue()


# ------------------------------------------------------------------------------ fixtures


def mk(v: int = 50, p: int = 128, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=v, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=p,
    )  # fmt: skip
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg).eval()


T, D = mk(seed=0), mk(seed=1)
TT, TD = sv.toy_pair(5, 2, seed=0)


def gen(**kw):
    args = dict(max_new_tokens=3) | kw
    return sv.speculative_generate(T, D, [0, 3], **args)


def gen_b(**kw):
    args = dict(max_new_tokens=3, num_sequences=2) | kw
    return sv.speculative_generate_batch(T, D, [0, 3], **args)


def _smol():
    if "smol" not in _CACHE:
        _CACHE["smol"] = sv.load_pair("smollm2-135m", "smollm2-135m", progress=False)
    return _CACHE["smol"]


_CACHE: dict[str, Any] = {}


def first_token_freqs(draft, n=20000, seed=0):
    r = sv.speculative_generate_batch(
        TT, draft, [1], num_sequences=n, max_new_tokens=2, gamma=1, do_sample=True, seed=seed
    )
    counts = Counter(s[0] for s in r.sequences)
    return np.array([counts[i] / n for i in range(5)])


def exact_first(prompt=(1,)):
    from specviz.core.sampling import SamplingParams

    return TT.next_probs(list(prompt), SamplingParams(True)).numpy()


def _drafter(q_fn, tokens_fn=None, name="custom", trees=False):
    from specviz.drafting.base import Draft, Drafter

    class Custom(Drafter):
        proposes_trees = trees

        def propose(self, c, k, g):
            toks = tokens_fn(k) if tokens_fn else torch.zeros(k, dtype=torch.long)
            return Draft(toks, q_fn(k))

    d = Custom()
    d.name = name
    return d


def _tree_drafter(tree_fn, name="tree"):
    from specviz.drafting.base import Drafter

    class T_(Drafter):
        proposes_trees = True

        def propose(self, c, k, g):
            return tree_fn(k)

    d = T_()
    d.name = name
    return d


def saved_trace() -> Path:
    if "trace" not in _CACHE:
        r = sv.speculative_generate(T, D, [0, 3], max_new_tokens=12, seed=0, do_sample=True)
        _CACHE["trace"] = r.trace.save(WORK / "run.jsonl")
    return _CACHE["trace"]


def edited_trace(edit: Callable[[dict], Any], line: int = 1, name: str = "bad.jsonl") -> Path:
    lines = saved_trace().read_text().splitlines(keepends=True)
    d = json.loads(lines[line])
    edit(d)
    lines[line] = json.dumps(d) + "\n"
    out = WORK / name
    out.write_text("".join(lines))
    return out


def tree_trace() -> Path:
    if "tree_trace" not in _CACHE:
        r = sv.speculative_generate(
            T, sv.TreeDrafter(D, (2, 2)), [0, 3], max_new_tokens=8, seed=0, do_sample=True
        )
        _CACHE["tree_trace"] = r.trace.save(WORK / "tree.jsonl")
    return _CACHE["tree_trace"]


def load(path: Path):
    tr = sv.Trace.load(path)
    tr.summary()
    tr.to_dataframe()
    return tr


# ------------------------------------------------------------------------------ fake server


class FakeServer:
    """An OpenAI-compatible server on 127.0.0.1 whose answers a case chooses."""

    def __init__(self) -> None:
        import http.server
        import threading

        self.answers: dict[str, Any] = {}
        server = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, body, ctype="application/json", code=200):
                data = body if isinstance(body, bytes) else body.encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                ans = server.answers.get("models", {"data": [{"id": "m"}]})
                self._send(ans if isinstance(ans, (str, bytes)) else json.dumps(ans))

            def do_POST(self):
                n = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(n))
                if body.get("stream"):
                    ans = server.answers.get("stream", b"data: [DONE]\n\n")
                    return self._send(ans, "text/event-stream")
                ans = server.answers.get("completion")
                if callable(ans):
                    ans = ans(body)
                if ans is None:
                    ans = good_completion(body)
                self._send(ans if isinstance(ans, (str, bytes)) else json.dumps(ans))

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def good_completion(body: dict) -> dict:
    n = body.get("max_tokens", 1)
    rng = np.random.default_rng(body.get("seed") or 0)
    toks = [str(rng.choice(["a", "b", "c"])) for _ in range(n)]
    content = [
        {"token": t, "logprob": -1.0, "top_logprobs": [{"token": t, "logprob": -1.0},
                                                       {"token": "z", "logprob": -2.0}]}
        for t in toks
    ]  # fmt: skip
    return {
        "choices": [{"text": "".join(toks), "finish_reason": "length",
                     "logprobs": {"content": content}}],
        "usage": {"completion_tokens": n},
    }  # fmt: skip


def server() -> FakeServer:
    if "server" not in _CACHE:
        _CACHE["server"] = FakeServer()
    s = _CACHE["server"]
    s.answers = {}
    return s


def audit_with(answers: dict, **kw) -> Any:
    from specviz.audit import audit

    s = server()
    s.answers = answers
    settings = dict(n_samples=4, max_tokens=2, progress=False, greedy=False, retries=0) | kw
    return audit(s.url, s.url, ["hi"], **settings)


def audit_cli(argv: list[str]) -> tuple[int, str]:
    from specviz.cli import main

    return run_cli(main, ["audit", *argv])


def demo_cli(argv: list[str]) -> tuple[int, str]:
    from specviz.cli import main

    return run_cli(main, ["demo", *argv])


# ==============================================================================================
# set "report": the 20 classes, tried again the way the report tried them
# ==============================================================================================
SET = "report"


# C1 numpy integers and 0-d tensors where an int is taken (legal: must work)
@ok("C1", "max_new_tokens=np.int64(4)")
def _():
    return len(gen(max_new_tokens=np.int64(4)).new_tokens) == 4


@ok("C1", "prompt of numpy ints")
def _():
    return len(gen(input_ids=None) if False else sv.speculative_generate(
        T, D, list(np.array([0, 3])), max_new_tokens=3).new_tokens) == 3  # fmt: skip


@ok("C1", "prompt of 0-d tensors")
def _():
    r = sv.speculative_generate(T, D, [torch.tensor(0), torch.tensor(3)], max_new_tokens=3)
    return r.new_tokens == sv.speculative_generate(T, D, [0, 3], max_new_tokens=3).new_tokens


@ok("C1", "seed=np.int64, gamma=np.int32, eos=np.int64")
def _():
    a = gen(seed=np.int64(5), gamma=np.int32(2), do_sample=True, eos_token_id=np.int64(7))
    b = gen(seed=5, gamma=2, do_sample=True, eos_token_id=7)
    return a.new_tokens == b.new_tokens


@ok("C1", "batched num_sequences=np.int64 and seed")
def _():
    return len(gen_b(num_sequences=np.int64(3), seed=np.int64(1)).sequences) == 3


@ok("C1", "policy with numpy counts")
def _():
    return gen(gamma=sv.HeuristicGamma(np.int64(2), max_gamma=np.int64(4))) is not None


@ok("C1", "consistency_check n_samples=np.int64")
def _():
    r = sv.consistency_check(TT, TD, [[0]], n_samples=np.int64(20), max_new_tokens=2,
                             progress=False, n_boot=10)  # fmt: skip
    return r.n_samples == 20


# C2 wrong-typed flags
@error("C2", "do_sample='False'", "do_sample", "true or false")
def _():
    return gen(do_sample="False")


@error("C2", "temperature=True", "temperature")
def _():
    return gen(do_sample=True, temperature=True)


@error("C2", "eos 999 with vocab 50", "eos_token_id", "999", "vocabulary")
def _():
    return gen(eos_token_id=999)


@error("C2", "batched do_sample='yes'", "do_sample")
def _():
    return gen_b(do_sample="yes")


# C3 seeds
@error("C3", "seed=2**64", "seed", "2**64")
def _():
    return gen(seed=2**64)


@error("C3", "batched seed=2**64-1 (row 1 overflows)", "seed", "rows")
def _():
    return gen_b(seed=2**64 - 1)


@error("C3", "consistency_check seed=None (it needs a seed to report)", "seed", "integer")
def _():
    return sv.consistency_check(
        TT, TD, [[0]], n_samples=10, max_new_tokens=2, seed=None, progress=False, n_boot=10
    )


@error("C3", "consistency_check seed='1'", "seed")
def _():
    return sv.consistency_check(TT, TD, [[0]], n_samples=10, max_new_tokens=2, seed="1",
                                progress=False)  # fmt: skip


# C4 meta device
@error("C4", "draft on meta", "draft", "meta")
def _():
    return sv.speculative_generate(T, mk().to("meta"), [0, 3], max_new_tokens=3)


@error("C4", "target on meta", "target", "meta")
def _():
    return sv.speculative_generate(mk().to("meta"), D, [0, 3], max_new_tokens=3)


@error("C4", "batched target on meta", "target", "meta")
def _():
    return sv.speculative_generate_batch(mk().to("meta"), D, [0, 3], num_sequences=2,
                                         max_new_tokens=3)  # fmt: skip


@error("C4", "autoregressive on meta", "target", "meta")
def _():
    return sv.autoregressive_generate(mk().to("meta"), [0, 3], max_new_tokens=3)


# C5 unnormalised q_draft
@error("C5", "q = 1 everywhere, batched", "q_draft", "sums to", "not 1")
def _():
    return first_token_freqs(_drafter(lambda k: torch.ones(k, 5)))


@error("C5", "q = 1 everywhere, serial", "q_draft", "sums to")
def _():
    return sv.speculative_generate(TT, _drafter(lambda k: torch.ones(k, 5)), [1],
                                   max_new_tokens=4, do_sample=True)  # fmt: skip


@error("C5", "tree with unnormalised q, serial", "q_draft", "sums to")
def _():
    from specviz.drafting.base import TreeDraft

    d = _tree_drafter(lambda k: TreeDraft(torch.tensor([0, 1]), torch.tensor([-1, -1]),
                                          torch.full((2, 5), 0.5)))  # fmt: skip
    return sv.speculative_generate(TT, d, [1], max_new_tokens=4, do_sample=True)


@error("C5", "tree with unnormalised q, batched", "q_draft", "sums to")
def _():
    from specviz.drafting.base import TreeDraft

    d = _tree_drafter(lambda k: TreeDraft(torch.tensor([0, 1]), torch.tensor([-1, -1]),
                                          torch.full((2, 5), 0.5)))  # fmt: skip
    return sv.speculative_generate_batch(TT, d, [1], num_sequences=3, max_new_tokens=4,
                                         do_sample=True)  # fmt: skip


def _sampling_drafter(q: torch.Tensor):
    """A custom drafter that samples from ``q`` and reports it (correct)."""
    from specviz.core.sampling import sample
    from specviz.drafting.base import Draft, Drafter

    class Q(Drafter):
        name = "sampling"

        def propose(self, c, k, g):
            return Draft(torch.stack([sample(q, g) for _ in range(k)]), q.expand(k, -1).clone())

    return Q()


@ok("C5", "negative control: a normalised q (sampled from) gives the exact law")
def _():
    q = torch.softmax(torch.tensor([0.0, 1.0, 0.5, -1.0, 0.2]), -1)
    f = first_token_freqs(_sampling_drafter(q), n=20000)
    return bool(np.abs(f - exact_first()).max() < 0.015) or f"freqs {f} vs {exact_first()}"


# C6 the draft's own position limit
@error("C6", "GPT-2 draft with 32 positions", "draft", "max_position_embeddings=32")
def _():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    g2 = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=32, n_embd=16, n_layer=1,
                                    n_head=2)).eval()  # fmt: skip
    return sv.speculative_generate(T, g2, list(range(40)), max_new_tokens=4)


# C7 TreeDrafter and lookup arguments
@error("C7", "branching=4", "branching", "sequence")
def _():
    return sv.TreeDrafter(D, branching=4)


@error("C7", "budget=2.5", "budget", "integer")
def _():
    return sv.TreeDrafter(D, dynamic=True, budget=2.5)


@error("C7", "budget='8'", "budget")
def _():
    return sv.TreeDrafter(D, dynamic=True, budget="8")


@error("C7", "TreeDrafter(PromptLookupDrafter())", "treedrafter", "model")
def _():
    return sv.TreeDrafter(sv.PromptLookupDrafter(), (2,))


@error("C7", "budget without dynamic=True", "budget", "dynamic=true")
def _():
    return sv.TreeDrafter(D, (4,), budget=3)


@error("C7", "budget=True", "budget")
def _():
    return sv.TreeDrafter(D, dynamic=True, budget=True)


@error("C7", "max_depth=2.5", "max_depth")
def _():
    return sv.TreeDrafter(D, dynamic=True, budget=4, max_depth=2.5)


@error("C7", "PromptLookupDrafter(max_ngram=2.5)", "max_ngram")
def _():
    return sv.PromptLookupDrafter(max_ngram=2.5)


# C8 malformed TreeDrafts
@error("C8", "float parents, serial", "parents", "integer")
def _():
    from specviz.drafting.base import TreeDraft

    d = _tree_drafter(lambda k: TreeDraft(torch.tensor([0, 1]), torch.tensor([-1.0, -1.0])))
    return sv.speculative_generate(TT, d, [1], max_new_tokens=4)


@error("C8", "float parents, batched", "parents", "integer")
def _():
    from specviz.drafting.base import TreeDraft

    d = _tree_drafter(lambda k: TreeDraft(torch.tensor([0, 1]), torch.tensor([-1.0, -1.0])))
    return sv.speculative_generate_batch(TT, d, [1], num_sequences=2, max_new_tokens=4)


@error("C8", "duplicate siblings without replacement, serial", "same token twice")
def _():
    from specviz.drafting.base import TreeDraft

    q = torch.softmax(torch.zeros(2, 5), -1)
    d = _tree_drafter(lambda k: TreeDraft(torch.tensor([2, 2]), torch.tensor([-1, -1]), q,
                                          "without_replacement"))  # fmt: skip
    return sv.speculative_generate(TT, d, [1], max_new_tokens=4, do_sample=True, seed=0)


@error("C8", "duplicate siblings without replacement, batched", "same token twice")
def _():
    from specviz.drafting.base import TreeDraft

    q = torch.softmax(torch.zeros(2, 5), -1)
    d = _tree_drafter(lambda k: TreeDraft(torch.tensor([2, 2]), torch.tensor([-1, -1]), q,
                                          "without_replacement"))  # fmt: skip
    return sv.speculative_generate_batch(TT, d, [1], num_sequences=3, max_new_tokens=4,
                                         do_sample=True)  # fmt: skip


# C9 low-level verifiers with wrong shapes
def _p(rows, v=5):
    return torch.softmax(torch.randn(rows, v, generator=torch.Generator().manual_seed(0)), -1)


@error("C9", "verify_tree_lossless: p one row short", "p_nodes", "[3, V]")
def _():
    from specviz.drafting.base import TreeDraft
    from specviz.verification.trees import verify_tree_lossless

    tree = TreeDraft(torch.tensor([0, 1]), torch.tensor([-1, 0]), _p(2))
    return verify_tree_lossless(tree, _p(2), torch.Generator())


@error("C9", "verify_tree_greedy: token id >= V", "outside the vocabulary")
def _():
    from specviz.drafting.base import TreeDraft
    from specviz.verification.trees import verify_tree_greedy

    tree = TreeDraft(torch.tensor([0, 9]), torch.tensor([-1, 0]))
    return verify_tree_greedy(tree, _p(3), torch.Generator())


@error("C9", "verify_lossless: q of another width", "q_draft", "[2, 5]")
def _():
    from specviz.verification import verify_lossless

    return verify_lossless(torch.tensor([0, 1]), _p(2, 7), _p(3), torch.Generator())


@error("C9", "verify_lossless: p one row short", "p_target", "[k+1, V]")
def _():
    from specviz.verification import verify_lossless

    return verify_lossless(torch.tensor([0, 1]), _p(2), _p(2), torch.Generator())


@error("C9", "verify_lossless: token id >= V", "outside the vocabulary")
def _():
    from specviz.verification import verify_lossless

    return verify_lossless(torch.tensor([0, 7]), _p(2), _p(3), torch.Generator())


# C10 cross-vocabulary text one side cannot encode (legal: must work)
@ok("C10", "toy: the target samples a string the draft tokenizer lacks")
def _():
    from specviz.drafting.cross_vocab import CrossVocabDrafter, StringTokenizer
    from specviz.fixtures.toy import ToyLM

    tgt, dr = StringTokenizer(["a", "b", "ab", "d"]), StringTokenizer(["a", "b", "ba"])
    d = CrossVocabDrafter(ToyLM.random(3, 1, seed=1), dr, tgt)
    r = sv.speculative_generate(ToyLM.random(4, 1), d, [0, 1], max_new_tokens=12,
                                do_sample=True, seed=0)  # fmt: skip
    return (len(r.new_tokens) == 12 and d.unencodable > 0) or f"unencodable={d.unencodable}"


def _bpe_folder() -> Path:
    """A local folder: a random Llama with its own 600-token byte-level BPE tokenizer."""
    if "bpe" in _CACHE:
        return _CACHE["bpe"]
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    text = ["the cat sat on the mat, déjà vu. naïve café ñandú ü " * 20] * 50
    tok.train_from_iterator(text, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="<s>")
    folder = WORK / "bpe600"
    fast.save_pretrained(folder)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(fast), hidden_size=32, intermediate_size=64,
                      num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2)  # fmt: skip
    LlamaForCausalLM(cfg).save_pretrained(folder)
    _CACHE["bpe"] = folder
    return folder


@ok("C10", "load_pair(byte-level target, smollm2, intersection) samples 24 tokens")
def _():
    t, d, tok = sv.load_pair(str(_bpe_folder()), "smollm2-135m", cross_vocab="intersection",
                             progress=False)  # fmt: skip
    ids = tok.encode("the cat")
    r = sv.speculative_generate(t, d, ids, max_new_tokens=24, do_sample=True, seed=0)
    # the random target samples bytes SmolLM2 has no token for: left out of the draft's view
    return (len(r.new_tokens) == 24 and d.unencodable > 0) or f"unencodable={d.unencodable}"


@ok("C10", "load_pair(byte-level target, smollm2, string) greedy 24 tokens")
def _():
    t, d, tok = sv.load_pair(str(_bpe_folder()), "smollm2-135m", cross_vocab="string",
                             progress=False)  # fmt: skip
    r = sv.speculative_generate(t, d, tok.encode("the cat"), max_new_tokens=24)
    plain = sv.autoregressive_generate(t, tok.encode("the cat"), max_new_tokens=24)
    return r.new_tokens == plain.new_tokens or (r.new_tokens, plain.new_tokens)


@ok("C10", "load_pair(smollm2 target, byte-level draft, string) greedy 24 tokens")
def _():
    t, d, tok = sv.load_pair("smollm2-135m", str(_bpe_folder()), cross_vocab="string",
                             progress=False)  # fmt: skip
    ids = tok.encode("naïve café ñandú")
    r = sv.speculative_generate(t, d, ids, max_new_tokens=24)
    same = r.new_tokens == sv.autoregressive_generate(t, ids, max_new_tokens=24).new_tokens
    return same or f"cut_drafts={d.cut_drafts} unencodable={d.unencodable}"


# C11 CrossVocabDrafter arguments
@error("C11", "target tokenizer None", "target_tokenizer", "tokenizer")
def _():
    from specviz.drafting.cross_vocab import CrossVocabDrafter, StringTokenizer
    from specviz.fixtures.toy import ToyLM

    return CrossVocabDrafter(ToyLM.random(3, 1), StringTokenizer(["a", "b", "c"]), None)


@error("C11", "draft_ids with an id outside the target vocabulary", "context", "outside")
def _():
    from specviz.drafting.cross_vocab import CrossVocabDrafter, StringTokenizer
    from specviz.fixtures.toy import ToyLM

    d = CrossVocabDrafter(ToyLM.random(3, 1), StringTokenizer(["a", "b", "c"]),
                          StringTokenizer(["a", "b", "ab", "c"]))  # fmt: skip
    return d.draft_ids(torch.tensor([7]))


@error("C11", "swapped tokenizers (smollm2's 49152 for a 600-row draft)", "swapped")
def _():
    from transformers import AutoModelForCausalLM

    from specviz.drafting.cross_vocab import CrossVocabDrafter

    folder = _bpe_folder()
    small = AutoModelForCausalLM.from_pretrained(folder)
    smol_tok = sv.load_tokenizer("smollm2-135m", progress=False)
    bpe_tok = sv.load_tokenizer(str(folder), progress=False)
    return CrossVocabDrafter(small, smol_tok, bpe_tok)


@error("C11", "target wider than its tokenizer", "target_vocab_size=")
def _():
    from specviz.drafting.cross_vocab import CrossVocabDrafter, StringTokenizer
    from specviz.fixtures.toy import ToyLM

    d = CrossVocabDrafter(ToyLM.random(3, 1), StringTokenizer(["a", "b", "c"]),
                          StringTokenizer(["a", "b", "ab", "c"]))  # fmt: skip
    return sv.speculative_generate(ToyLM.random(6, 1), d, [0, 1], max_new_tokens=3)


# C12 folders without tokenizer files, empty folders
@error("C12", "load_pair(smollm2, weights-only folder)", "no tokenizer files")
def _():
    folder = WORK / "weights_only"
    if not folder.exists():
        mk().save_pretrained(folder)
    return sv.load_pair("smollm2-135m", str(folder), progress=False)


@error("C12", "load_model(empty folder)", "no config.json")
def _():
    folder = WORK / "empty"
    folder.mkdir(exist_ok=True)
    return sv.load_model(str(folder), progress=False)


# C13 trace files with wrong field types
@error("C13", "accepted='three'", "accepted", "line 2")
def _():
    return load(edited_trace(lambda s: s.update(accepted="three")))


@error("C13", "accepted=99", "accept", "line 2")
def _():
    return load(edited_trace(lambda s: s.update(accepted=99)))


@error("C13", "q_draft a string", "q_draft", "line 2")
def _():
    return load(edited_trace(lambda s: s["positions"][0].update(q_draft="x")))


@error("C13", "tree node status 5", "status", "line 2")
def _():
    p = tree_trace()
    lines = p.read_text().splitlines(keepends=True)
    d = json.loads(lines[1])
    d["tree"][0]["status"] = 5
    lines[1] = json.dumps(d) + "\n"
    out = WORK / "bad_tree.jsonl"
    out.write_text("".join(lines))
    return load(out)


@error("C13", "meta: 5", "meta")
def _():
    return load(edited_trace(lambda h: h.update(meta=5), line=0))


@ok("C13", "a set in meta comes back as a list")
def _():
    r = sv.speculative_generate(T, D, [0, 3], max_new_tokens=3)
    tr = sv.Trace(r.trace.steps, {**r.trace.meta, "ids": {2, 1}})
    back = sv.Trace.load(tr.save(WORK / "set.jsonl"))
    return back.meta["ids"] == [1, 2] or back.meta["ids"]


# C14 model cache
def _scratch_cache() -> Path:
    from specviz.models import BUILTIN_MODELS, _builtin_cache_path

    spec = BUILTIN_MODELS["smollm2-135m"]
    src = _builtin_cache_path(spec)
    root = WORK / "cache"
    dest = root / "models" / src.name
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest)  # copy2: mtimes kept, so the copy is "verified"
    return root


@contextlib.contextmanager
def _env(**kw):
    old = {k: os.environ.get(k) for k in kw}
    os.environ.update({k: str(v) for k, v in kw.items()})
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _flip_bits(f: Path, offset: int = 300_000_000, n: int = 4_000_000) -> None:
    st = f.stat()
    with open(f, "r+b") as h:
        h.seek(offset)
        b = bytearray(h.read(n))
        b[3::4] = bytes(x ^ 1 for x in b[3::4])
        h.seek(offset)
        h.write(b)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))


@ok("C14", "bit rot, size and mtime kept: detected in a fresh process")
def _():
    import subprocess

    root = _scratch_cache()
    f = next((root / "models").glob("smollm2-*/model.safetensors"))
    _flip_bits(f)
    code = (
        "import specviz.models as m, logging, sys\n"
        "logging.basicConfig(stream=sys.stderr)\n"
        "try:\n    m.load_model('smollm2-135m', progress=True)\n"
        "except Exception as e:\n    print('ERR', type(e).__name__, e, file=sys.stderr)\n"
    )
    env = {**os.environ, "SPECVIZ_CACHE": str(root), "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=600)  # fmt: skip
    said = "damaged" in out.stderr and "crc-32" in out.stderr.lower()
    return said or out.stderr[-600:]


@ok("C14", "damaged entry that is a file leaves no stray file")
def _():
    from specviz.models import BUILTIN_MODELS, _builtin_cache_path

    root = WORK / "cache2"
    with _env(SPECVIZ_CACHE=root):
        entry = _builtin_cache_path(BUILTIN_MODELS["smollm2-135m"])
        entry.parent.mkdir(parents=True, exist_ok=True)
        entry.write_bytes(b"x")
        sv.load_model("smollm2-135m", progress=False)
        stray = [p.name for p in entry.parent.iterdir() if p.name.startswith(".")]
    return not stray or stray


# C15 checks
@error("C15", "calibrate_check replicates=0", "replicates")
def _():
    return sv.calibrate_check(TT, TD, [[0]], replicates=0, n_samples=10,
                              max_new_tokens=2).summary()  # fmt: skip


@error("C15", "calibrate_check replicates=2.5", "replicates")
def _():
    return sv.calibrate_check(TT, TD, [[0]], replicates=2.5, n_samples=10, max_new_tokens=2)


@error("C15", "calibrate_check test_alpha=2", "test_alpha")
def _():
    return sv.calibrate_check(TT, TD, [[0]], replicates=2, test_alpha=2, n_samples=10,
                              max_new_tokens=2)  # fmt: skip


@error("C15", "greedy_check near_tie=nan", "near_tie")
def _():
    return sv.greedy_check(TT, TD, [[0]], max_new_tokens=3, near_tie=float("nan"),
                           progress=False)  # fmt: skip


def _counting():
    from specviz.fixtures.toy import ToyLM

    class C(ToyLM):
        calls = 0

        def next_logits(self, context):
            C.calls += 1
            return super().next_logits(context)

    return C(TT.table, TT.vocab_size, TT.order), C


@error("C15", "greedy_check verifier='nope' before any target call", "verifier", "0 calls")
def _():
    t, C = _counting()
    try:
        sv.greedy_check(t, TD, [[0]], max_new_tokens=3, verifier="nope", progress=False)
    except ValueError as e:
        raise ValueError(f"{e} ({C.calls} calls)") from None


@error("C15", "greedy_check gamma=0 before any target call", "gamma", "0 calls")
def _():
    t, C = _counting()
    try:
        sv.greedy_check(t, TD, [[0]], max_new_tokens=3, gamma=0, progress=False)
    except ValueError as e:
        raise ValueError(f"{e} ({C.calls} calls)") from None


@error("C15", "greedy_check draft=None before any target call", "draft", "0 calls")
def _():
    t, C = _counting()
    try:
        sv.greedy_check(t, None, [[0]], max_new_tokens=3, progress=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{e} ({C.calls} calls)") from None


@ok("C15", "a legal check with few samples: no 'nan' in its summary")
def _():
    r = sv.consistency_check(TT, TD, [[0]], n_samples=2, max_new_tokens=1, progress=False,
                             n_boot=10)  # fmt: skip
    return "nan" not in r.summary() or r.summary()


# C16 gamma policies
@error("C16", "ConfidenceStop(threshold='0.5')", "threshold")
def _():
    return sv.ConfidenceStop(threshold="0.5")


@error("C16", "AcceptanceEMA(prior=5)", "prior")
def _():
    return sv.AcceptanceEMA(prior=5)


@error("C16", "AcceptanceEMA(c=-1.0)", "c must")
def _():
    return sv.AcceptanceEMA(c=-1.0)


@error("C16", "AcceptanceEMA(max_batch=0)", "max_batch")
def _():
    return sv.AcceptanceEMA(max_batch=0)


@error("C16", "AcceptanceEMA(min_speedup=nan)", "min_speedup")
def _():
    return sv.AcceptanceEMA(min_speedup=float("nan"))


# C17 malformed server answers
def _answer(**logprobs_or_fields):
    def make(body):
        a = good_completion(body)
        for k, v in logprobs_or_fields.items():
            if k == "content_item":
                a["choices"][0]["logprobs"]["content"][0].update(v)
            elif k == "choices":
                a["choices"] = v
            elif k == "usage":
                a["usage"] = v
            elif k == "legacy":
                a["choices"][0]["logprobs"] = v
        return a

    return make


@error("C17", "string logprobs", "logprob", "a number", "malformed")
def _():
    return audit_with({"completion": _answer(content_item={"logprob": "abc"})})


@error("C17", "choices: ['hello']", "choices[0]", "malformed")
def _():
    return audit_with({"completion": _answer(choices=["hello"])})


@error("C17", "top_logprobs as lists", "top_logprobs", "malformed")
def _():
    return audit_with({"completion": _answer(content_item={"top_logprobs": [["a", -1.0]]})})


@error("C17", "/v1/models returns a list", "data", "malformed", "/v1/models")
def _():
    return audit_with({"models": [{"id": "m"}]})


@error("C17", "/v1/models entries without id", "id", "malformed")
def _():
    return audit_with({"models": {"data": [{"name": "m"}]}})


@error("C17", "/v1/models answers HTML", "not json", "/v1/models")
def _():
    return audit_with({"models": "<html>hello</html>"})


@error("C17", "garbage SSE chunks", "stream", "not json")
def _():
    return audit_with({"stream": b"data: {garbage\n\n"}, load_levels=(1,), load_requests=1)


@error("C17", "usage.completion_tokens 'many'", "completion_tokens", "malformed")
def _():
    return audit_with({"completion": _answer(usage={"completion_tokens": "many"})})


@error("C17", "integer tokens (legacy shape)", "tokens", "string")
def _():
    def make(body):
        n = body["max_tokens"]
        return {"choices": [{"text": "x" * n, "finish_reason": "length", "logprobs": {
            "tokens": list(range(n)), "token_logprobs": [-1.0] * n,
            "top_logprobs": [{"x": -1.0, "y": -2.0}] * n}}]}  # fmt: skip

    return audit_with({"completion": make})


# C18 damaged raw.jsonl in --out
def _resume_with(raw_text: bytes | str, prompts=("hi",)) -> tuple[int, str, Path]:
    s = server()
    out = Path(tempfile.mkdtemp(dir=WORK))
    p = out / "raw.jsonl"
    p.write_bytes(raw_text if isinstance(raw_text, bytes) else raw_text.encode())
    argv = ["--a", s.url, "--b", s.url, "--n-samples", "4", "--max-tokens", "2", "--out",
            str(out), "--no-greedy", "--quiet", "--load-levels", ""]  # fmt: skip
    for pr in prompts:
        argv += ["--prompt", pr]
    rc, err = audit_cli(argv)
    return rc, err, out


def _good_raw() -> list[str]:
    """A complete raw.jsonl of the audit _resume_with runs."""
    if "raw" not in _CACHE:
        rc, err, out = _resume_with(b"")
        _CACHE["raw"] = (out / "raw.jsonl").read_text().splitlines()
    return list(_CACHE["raw"])


@cli("C18", "garbage header", "line 1", "another --out", code=2)
def _():
    rc, err, _ = _resume_with("not json\n")
    return rc, err


@cli("C18", "a record that is not an object: set aside, audit completes", "set aside", code=3)
def _():
    lines = _good_raw()
    lines[2] = "[1, 2, 3]"
    rc, err, out = _resume_with("\n".join(lines) + "\n")
    return rc, err


@cli("C18", "a record without kind", "kind", code=3)
def _():
    lines = _good_raw()
    d = json.loads(lines[1])
    d.pop("kind")
    lines[1] = json.dumps(d)
    return _resume_with("\n".join(lines) + "\n")[:2]


@cli("C18", "wrong field types (tokens a string)", "tokens", code=3)
def _():
    lines = _good_raw()
    d = json.loads(lines[1])
    d["tokens"] = "ab"
    lines[1] = json.dumps(d)
    return _resume_with("\n".join(lines) + "\n")[:2]


@cli("C18", "binary content", "utf-8", code=3)
def _():
    lines = [x.encode() for x in _good_raw()]
    lines[2] = b"\xff\xfe\x00garbage"
    return _resume_with(b"\n".join(lines) + b"\n")[:2]


@cli("C18", "a record with fewer tokens than max_tokens", "cut short", code=3)
def _():
    lines = _good_raw()
    d = json.loads(lines[1])
    d["tokens"], d["logprobs"] = d["tokens"][:1], d["logprobs"][:1]
    d["completion_tokens"] = None
    lines[1] = json.dumps(d)
    return _resume_with("\n".join(lines) + "\n")[:2]


# C19 specviz demo usage errors
@cli("C19", "--target no-such-model", "no-such-model")
def _():
    return demo_cli(["--target", "no-such-model", "--draft", "smollm2-135m"])


@cli("C19", "--gamma -1 (before loading)", "--gamma")
def _():
    return demo_cli(["--target", "smollm2-135m", "--draft", "smollm2-135m", "--gamma=-1"])


@cli("C19", "--categories bogus", "--categories", "bogus")
def _():
    return demo_cli(["--categories", "bogus"])


@cli("C19", "--per-category 0", "--per-category")
def _():
    return demo_cli(["--per-category", "0"])


@cli("C19", "--dtype int8", "--dtype")
def _():
    return demo_cli(["--dtype", "int8"])


@cli("C19", "--max-new-tokens=-1", "--max-new-tokens")
def _():
    return demo_cli(["--max-new-tokens=-1"])


# C20 the playground's Python API
def _playground(**kw):
    from specviz.lab.explorers import PromptPlayground

    t, d, tok = _smol()
    return PromptPlayground((t, d), tok, prompt="Hi", max_new_tokens=4, **kw)


@error("C20", "PromptPlayground((target,), tok)", "target, draft")
def _():
    from specviz.lab.explorers import PromptPlayground

    t, _, tok = _smol()
    return PromptPlayground((t,), tok, run=False)


@error("C20", "PromptPlayground(None, tok)", "target, draft")
def _():
    from specviz.lab.explorers import PromptPlayground

    return PromptPlayground(None, _smol()[2], run=False)


@ok("C20", "run(prompt=123): the status says the prompt must be text")
def _():
    pg = _playground(run=False)
    res = pg.run(prompt=123)
    return (res is None and "must be text" in (pg.error or "")) or pg.error


@ok("C20", "run(seed=2**40): refused in the status (the seed box cannot hold it)")
def _():
    pg = _playground(run=False)
    res = pg.run(seed=2**40)
    return (res is None and "seed" in (pg.error or "")) or pg.error


# ==============================================================================================
# set "fresh": other bad inputs of the same kinds
# ==============================================================================================
SET = "fresh"


@ok("C1", "top_k=np.int64(3), top_p=np.float32(0.9), temperature=np.float64(0.7)")
def _():
    a = gen(do_sample=True, top_k=np.int64(3), top_p=np.float32(0.9),
            temperature=np.float64(0.7), seed=3)  # fmt: skip
    b = gen(do_sample=True, top_k=3, top_p=float(np.float32(0.9)), temperature=0.7, seed=3)
    return a.new_tokens == b.new_tokens


@ok("C1", "autoregressive_generate_batch with 0-d tensor counts")
def _():
    r = sv.autoregressive_generate_batch(T, [0, 3], num_sequences=torch.tensor(2),
                                         max_new_tokens=torch.tensor(3))  # fmt: skip
    return [len(s) for s in r.sequences] == [3, 3]


@ok("C1", "a 2-D numpy array of prompts, batched")
def _():
    r = sv.speculative_generate_batch(T, D, list(np.array([[0, 3], [1, 2]])), max_new_tokens=2)
    return len(r.sequences) == 2


@ok("C1", "TreeDrafter branching of numpy ints")
def _():
    return len(gen(draft=None) if False else sv.speculative_generate(
        T, sv.TreeDrafter(D, tuple(np.array([2, 1]))), [0, 3], max_new_tokens=4).new_tokens) == 4  # fmt: skip


@error("C1", "max_new_tokens=4.0 (a float, not rounded)", "max_new_tokens", "integer")
def _():
    return gen(max_new_tokens=4.0)


@error("C2", "do_sample=1 (an int)", "do_sample")
def _():
    return gen(do_sample=1)


@error("C2", "top_p='0.9'", "top_p")
def _():
    return gen(do_sample=True, top_p="0.9")


@error("C2", "eos list with one id past the vocabulary, batched", "eos_token_id", "vocabulary")
def _():
    return gen_b(eos_token_id=[1, 50])


@error("C2", "consistency_check do_sample='True'", "do_sample")
def _():
    return sv.consistency_check(TT, TD, [[0]], n_samples=10, max_new_tokens=2, do_sample="True",
                                progress=False)  # fmt: skip


@error("C3", "seed=-2**64", "seed")
def _():
    return gen(seed=-(2**64))


@error("C3", "consistency_check seed=-1", "seed")
def _():
    return sv.consistency_check(TT, TD, [[0]], n_samples=10, max_new_tokens=2, seed=-1,
                                progress=False)  # fmt: skip


@error("C3", "batched seed=2.0", "seed")
def _():
    return gen_b(seed=2.0)


@error("C4", "meta draft with a TreeDrafter", "draft", "meta")
def _():
    return sv.speculative_generate(T, sv.TreeDrafter(mk().to("meta"), (2,)), [0, 3],
                                   max_new_tokens=3)  # fmt: skip


@error("C4", "meta draft in consistency_check", "draft", "meta")
def _():
    return sv.consistency_check(T, mk().to("meta"), [[0, 3]], n_samples=10, max_new_tokens=2,
                                progress=False)  # fmt: skip


@error("C5", "q rows that sum to 0.5 (half the law)", "sums to 0.5")
def _():
    return sv.speculative_generate(TT, _drafter(lambda k: torch.full((k, 5), 0.1)), [1],
                                   max_new_tokens=4, do_sample=True)  # fmt: skip


@error("C5", "q of an integer dtype", "q_draft", "dtype")
def _():
    return sv.speculative_generate(TT, _drafter(lambda k: torch.zeros(k, 5, dtype=torch.long)),
                                   [1], max_new_tokens=4, do_sample=True)  # fmt: skip


@error("C5", "log-probabilities reported as q (negative)", "negative")
def _():
    q = torch.log_softmax(torch.zeros(5), -1)
    return sv.speculative_generate(TT, _drafter(lambda k: q.expand(k, 5).clone()), [1],
                                   max_new_tokens=4, do_sample=True)  # fmt: skip


@error("C5", "a duck-typed drafter (no base class) with q*2, batched", "sums to 2")
def _():
    from specviz.drafting.base import Draft

    class Duck:
        name = "duck"

        def propose(self, c, k, g):
            return Draft(torch.zeros(k, dtype=torch.long), 2 * torch.full((k, 5), 0.2))

    return sv.speculative_generate_batch(TT, Duck(), [1], num_sequences=3, max_new_tokens=4,
                                         do_sample=True)  # fmt: skip


@ok("C5", "a float16 q within its rounding is accepted")
def _():
    q = torch.softmax(torch.randn(5, generator=torch.Generator().manual_seed(1)), -1).half()
    r = sv.speculative_generate(TT, _drafter(lambda k: q.expand(k, 5).clone()), [1],
                                max_new_tokens=4, do_sample=True)  # fmt: skip
    return len(r.new_tokens) == 4


@error("C6", "GPT-2 draft: batched path", "draft", "max_position_embeddings")
def _():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    g2 = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=1,
                                    n_head=2)).eval()  # fmt: skip
    return sv.speculative_generate_batch(T, g2, list(range(14)), num_sequences=2,
                                         max_new_tokens=4)  # fmt: skip


@ok("C6", "a Llama draft past its positions: runs, with a warning")
def _():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r = sv.speculative_generate(T, mk(p=8), list(range(10)), max_new_tokens=3)
    return len(r.new_tokens) == 3 and any("draft" in str(x.message) for x in w)


@error("C7", "branching=(2, 0)", "branching")
def _():
    return sv.TreeDrafter(D, (2, 0))


@error("C7", "branching='22'", "branching")
def _():
    return sv.TreeDrafter(D, "22")


@error("C7", "width=0", "width")
def _():
    return sv.TreeDrafter(D, dynamic=True, budget=4, width=0)


@error("C7", "dynamic='yes'", "dynamic")
def _():
    return sv.TreeDrafter(D, dynamic="yes", budget=4)


@error("C7", "PromptLookupDrafter(branches=2.0)", "branches")
def _():
    return sv.PromptLookupDrafter(branches=2.0)


@error("C8", "tree tokens float, batched", "tokens", "integer")
def _():
    from specviz.drafting.base import TreeDraft

    d = _tree_drafter(lambda k: TreeDraft(torch.tensor([0.0, 1.0]), torch.tensor([-1, -1])))
    return sv.speculative_generate_batch(TT, d, [1], num_sequences=2, max_new_tokens=4)


@error("C8", "tree q_draft a list", "q_draft", "tensor")
def _():
    from specviz.drafting.base import TreeDraft

    return TreeDraft(torch.tensor([0]), torch.tensor([-1]), [[0.2] * 5])


@ok("C8", "duplicate siblings drawn independently are legal")
def _():
    from specviz.drafting.base import TreeDraft

    q = torch.softmax(torch.zeros(2, 5), -1)
    d = _tree_drafter(lambda k: TreeDraft(torch.tensor([2, 2]), torch.tensor([-1, -1]), q,
                                          "independent"))  # fmt: skip
    r = sv.speculative_generate(TT, d, [1], max_new_tokens=4, do_sample=True, seed=0)
    return len(r.new_tokens) == 4


@error("C9", "verify_greedy: tokens 2-D", "tokens", "1-d")
def _():
    from specviz.verification import verify_greedy

    return verify_greedy(torch.tensor([[0, 1]]), None, _p(3), torch.Generator())


@error("C9", "verify_tree_lossless: a Draft instead of a TreeDraft", "treedraft")
def _():
    from specviz.drafting.base import Draft
    from specviz.verification.trees import verify_tree_lossless

    return verify_tree_lossless(Draft(torch.tensor([0])), _p(2), torch.Generator())


@error("C9", "verify_lossless: p given as a list", "p_target")
def _():
    from specviz.verification import verify_lossless

    return verify_lossless(torch.tensor([0]), None, [[0.5, 0.5], [0.5, 0.5]], torch.Generator())


@ok("C10", "toy: the draft drafts a string the target lacks (string method)")
def _():
    from specviz.drafting.cross_vocab import CrossVocabDrafter, StringTokenizer
    from specviz.fixtures.toy import ToyLM

    tgt, dr = StringTokenizer(["a", "b", "ab"]), StringTokenizer(["a", "b", "z"])
    d = CrossVocabDrafter(ToyLM.random(3, 1, seed=4), dr, tgt, method="string")
    t = ToyLM.random(3, 1, seed=2)
    r = sv.speculative_generate(t, d, [0, 1], max_new_tokens=10)
    return r.new_tokens == sv.autoregressive_generate(t, [0, 1], max_new_tokens=10).new_tokens


@ok("C10", "toy: batched intersection with unencodable target text")
def _():
    from specviz.drafting.cross_vocab import CrossVocabDrafter, StringTokenizer
    from specviz.fixtures.toy import ToyLM

    tgt, dr = StringTokenizer(["a", "b", "ab", "q", "r"]), StringTokenizer(["a", "b", "ba"])
    d = CrossVocabDrafter(ToyLM.random(3, 1, seed=1), dr, tgt)
    r = sv.speculative_generate_batch(ToyLM.random(5, 1), d, [0, 1], num_sequences=8,
                                      max_new_tokens=10, do_sample=True)  # fmt: skip
    return all(len(s) == 10 for s in r.sequences)


@error("C11", "draft tokenizer a list of strings", "draft_tokenizer")
def _():
    from specviz.drafting.cross_vocab import CrossVocabDrafter, StringTokenizer
    from specviz.fixtures.toy import ToyLM

    return CrossVocabDrafter(ToyLM.random(3, 1), ["a", "b", "c"], StringTokenizer(["a", "b"]))


@error("C11", "target_vocab_size='4'", "target_vocab_size")
def _():
    from specviz.drafting.cross_vocab import CrossVocabDrafter, StringTokenizer
    from specviz.fixtures.toy import ToyLM

    return CrossVocabDrafter(ToyLM.random(3, 1), StringTokenizer(["a", "b", "c"]),
                             StringTokenizer(["a", "b"]), target_vocab_size="4")  # fmt: skip


@error("C11", "proposal_law with a 2-D context", "context", "1-d")
def _():
    from specviz.core.sampling import SamplingParams
    from specviz.drafting.cross_vocab import CrossVocabDrafter, StringTokenizer
    from specviz.fixtures.toy import ToyLM

    d = CrossVocabDrafter(ToyLM.random(3, 1), StringTokenizer(["a", "b", "c"]),
                          StringTokenizer(["a", "b", "ab", "c"]))  # fmt: skip
    return d.proposal_law(torch.tensor([[0, 1]]), SamplingParams(True))


@error("C12", "load_tokenizer(a folder of weights only)", "no tokenizer files")
def _():
    folder = WORK / "weights_only2"
    if not folder.exists():
        mk().save_pretrained(folder)
    return sv.load_tokenizer(str(folder), progress=False)


@error("C12", "load_pair(folder with only a tokenizer, smollm2)", "no config.json")
def _():
    folder = WORK / "tok_only"
    if not folder.exists():
        sv.load_tokenizer("smollm2-135m", progress=False).save_pretrained(folder)
    return sv.load_pair(str(folder), "smollm2-135m", progress=False)


@error("C13", "emitted a string", "emitted", "line 2")
def _():
    return load(edited_trace(lambda s: s.update(emitted="12")))


@error("C13", "accepted negative", "accepted", "line 2")
def _():
    return load(edited_trace(lambda s: s.update(accepted=-1)))


@error("C13", "final_kind unknown", "final_kind", "line 2")
def _():
    return load(edited_trace(lambda s: s.update(final_kind="maybe")))


@error("C13", "a position's accepted is 'yes'", "accepted", "line 2")
def _():
    return load(edited_trace(lambda s: s["positions"][0].update(accepted="yes")))


@error("C13", "a step line that is a list", "line 2", "json object")
def _():
    lines = saved_trace().read_text().splitlines(keepends=True)
    lines[1] = "[1, 2]\n"
    out = WORK / "list_step.jsonl"
    out.write_text("".join(lines))
    return load(out)


@ok("C14", "a damaged tokenizer.json with size and mtime kept: detected")
def _():
    from specviz.models import _cache_state

    root = _scratch_cache()
    folder = next((root / "models").glob("smollm2-*"))
    f = folder / "tokenizer.json"
    st = f.stat()
    data = bytearray(f.read_bytes())
    data[100] ^= 0x20
    f.write_bytes(bytes(data))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    import specviz.models as m

    m._CONTENT_CHECKED.clear()  # as in a fresh process
    state = _cache_state(folder)
    return (state.status == "damaged" and "tokenizer.json" in state.reason) or state


@error("C14", "SPECVIZ_CACHE_CHECK=sometimes", "SPECVIZ_CACHE_CHECK")
def _():
    import specviz.models as m

    root = _scratch_cache()
    m._CONTENT_CHECKED.clear()
    with _env(SPECVIZ_CACHE=root, SPECVIZ_CACHE_CHECK="sometimes"):
        return sv.load_model("smollm2-135m", progress=False)


@error("C15", "calibrate_check seed=-5", "seed")
def _():
    return sv.calibrate_check(TT, TD, [[0]], replicates=2, seed=-5, n_samples=10,
                              max_new_tokens=2)  # fmt: skip


@error("C15", "greedy_check near_tie='0.1'", "near_tie")
def _():
    return sv.greedy_check(TT, TD, [[0]], max_new_tokens=3, near_tie="0.1", progress=False)


@error("C15", "greedy_check eos 99 before any target call", "eos_token_id", "0 calls")
def _():
    t, C = _counting()
    try:
        sv.greedy_check(t, TD, [[0]], max_new_tokens=3, eos_token_id=99, progress=False)
    except ValueError as e:
        raise ValueError(f"{e} ({C.calls} calls)") from None


@error("C15", "consistency_check n_boot=0.5", "n_boot")
def _():
    return sv.consistency_check(TT, TD, [[0]], n_samples=10, max_new_tokens=2, n_boot=0.5,
                                progress=False)  # fmt: skip


@error("C16", "ConfidenceStop(threshold=1.5)", "threshold")
def _():
    return sv.ConfidenceStop(threshold=1.5)


@error("C16", "AcceptanceEMA(weight='0.1')", "weight")
def _():
    return sv.AcceptanceEMA(weight="0.1")


@error("C16", "BatchFallback(max_batch=1.5)", "max_batch")
def _():
    return sv.BatchFallback(max_batch=1.5)


@error("C16", "HeuristicGamma(initial=True)", "initial")
def _():
    return sv.HeuristicGamma(initial=True)


@error("C16", "a duck policy returning gamma -1", "policy gamma")
def _():
    class P:
        def next_gamma(self):
            return -1

        def update(self, *a):
            pass

    return gen(gamma=P())


@error("C17", "chat shape: content item a string", "content[0]", "malformed")
def _():
    def make(body):
        a = good_completion(body)
        a["choices"][0]["logprobs"]["content"][0] = "tok"
        return a

    return audit_with({"completion": make})


@error("C17", "legacy shape: token_logprobs strings", "token_logprobs", "malformed")
def _():
    return audit_with({"completion": _answer(legacy={"tokens": ["a", "b"],
                                                     "token_logprobs": ["x", "y"]})})  # fmt: skip


@error("C17", "usage a list", "usage", "malformed")
def _():
    return audit_with({"completion": _answer(usage=[2])})


@error("C17", "SSE data line that is a list", "stream", "json object")
def _():
    return audit_with({"stream": b"data: [1, 2]\n\n"}, load_levels=(1,), load_requests=1)


@cli("C18", "header only, without its newline: audit completes", code=3)
def _():
    head = _good_raw()[0]
    return _resume_with(head)[:2]


@cli("C18", "a record for prompt 7 of a 1-prompt audit", "prompt 7", code=3)
def _():
    lines = _good_raw()
    d = json.loads(lines[1])
    d["prompt"] = 7
    lines[1] = json.dumps(d)
    return _resume_with("\n".join(lines) + "\n")[:2]


@cli("C18", "a record with a NaN logprob", "logprob", code=3)
def _():
    lines = _good_raw()
    d = json.loads(lines[1])
    lines[1] = json.dumps(d).replace(str(d["logprobs"][0]), "NaN", 1)
    return _resume_with("\n".join(lines) + "\n")[:2]


@cli("C18", "an empty JSON object as header", "line 1", code=2)
def _():
    return _resume_with("{}\n")[:2]


@cli("C19", "--device nonsense", "--device")
def _():
    return demo_cli(["--device", "nonsense"])


@cli("C19", "--categories ''", "--categories")
def _():
    return demo_cli(["--categories", ""])


@cli("C19", "--target ./missing-folder", "missing-folder")
def _():
    return demo_cli(["--target", "./missing-folder"])


@cli("C19", "--gamma two (argparse)", "--gamma")
def _():
    return demo_cli(["--gamma", "two"])


@ok("C20", "run(gamma='3') is reported in the status")
def _():
    pg = _playground(run=False)
    return (pg.run(gamma="3") is None and "gamma" in (pg.error or "")) or pg.error


@ok("C20", "run(temperature=float('inf')) is reported in the status")
def _():
    pg = _playground(run=False)
    return (pg.run(temperature=float("inf")) is None and "temperature" in (pg.error or "")) or (
        pg.error
    )


@error("C20", "PromptPlayground((t, d, tok)) (three items)", "target, draft")
def _():
    from specviz.lab.explorers import PromptPlayground

    t, d, tok = _smol()
    return PromptPlayground((t, d, tok), tok, run=False)


@ok("C20", "run(seed=np.int64(5)) works")
def _():
    pg = _playground(run=False)
    return pg.run(seed=np.int64(5)) is not None or pg.error


# ------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=("report", "fresh", "all"), default="all")
    ap.add_argument("--only", default="", help="comma-separated classes, e.g. C5,C13")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every message")
    args = ap.parse_args(argv)
    only = {c.strip() for c in args.only.split(",") if c.strip()}
    cases = [c for c in CASES if (args.set in ("all", c.set)) and (not only or c.cls in only)]
    tally: Counter = Counter()
    bad = []
    try:
        for c in cases:
            verdict, detail = judge(c)
            tally[(c.set, verdict)] += 1
            mark = {"good": "ok  ", "bad-silent": "SILENT", "bad-unhelpful": "UNHELP"}[verdict]
            print(f"{mark} {c.set:6} {c.cls:4} {c.name}", flush=True)
            if verdict != "good" or args.verbose:
                print("       " + detail.replace("\n", "\n       ")[:1500], flush=True)
            if verdict != "good":
                bad.append(c)
    finally:
        if "server" in _CACHE:
            _CACHE["server"].close()
        shutil.rmtree(WORK, ignore_errors=True)
    print()
    for s in ("report", "fresh"):
        n = sum(v for (cs, _), v in tally.items() if cs == s)
        if n:
            print(
                f"{s}: {n} cases, {tally[(s, 'good')]} good, {tally[(s, 'bad-silent')]} "
                f"bad-silent, {tally[(s, 'bad-unhelpful')]} bad-unhelpful"
            )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
