"""``specviz audit`` on in-process engines: the contract, the position-aware power statement,
failures as findings, the identity probe, bad input -- on fake engines and specviz's own
decoder (fast) -- and transformers' ``generate`` on SmolLM2-135M (slow): assisted generation
with the model as its own draft (acceptance exactly 1) and ``assistant_ensemble_weight=0.5``
with a truncated draft (lossy: it must be caught at the sizes the honest arms pass).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest
from _engine_memo import Memo

from specviz.audit import engine_audit
from specviz.audit.cli import main as audit_main
from specviz.audit.engines import (
    Engine,
    EngineError,
    EngineSample,
    Sampling,
    engine_from_spec,
    identity_spec,
)
from specviz.audit.engines.base import import_engine
from specviz.checks.positions import position_power_statement, position_tests

# ------------------------------------------------------------------------------ specs


def test_engine_specs_parse_and_refuse_bad_ones():
    e = engine_from_spec("ov:qwen2.5-coder-1.5b,draft=qwen2.5-coder-0.5b,k=4,threads=2")
    assert (e.engine, e.model, e.draft, e.k, e.threads) == (
        "openvino",
        "qwen2.5-coder-1.5b",
        "qwen2.5-coder-0.5b",
        4,
        2,
    )
    assert e.first_token_from_target and e.sampled_draft
    t = engine_from_spec("transformers:smollm2-135m,draft=smollm2-135m@8,ensemble=0.5")
    assert t.lossy and t.first_token_from_target is False
    assert identity_spec("ort:smollm2-135m,lookup=3") == "ort:smollm2-135m,draft=target"
    for bad, words in [
        ("vllm:x", "not an engine spec"),
        ("openvino:", "model comes first"),
        ("openvino:m,ensemble=0.5", "not 'ensemble'"),
        ("openvino:m,k=three", "k must be a number"),
        ("openvino:m,draft", "not key=value"),
        ("hf:m,ensemble=0.5", "needs a draft model"),
        ("hf:m,draft=d,lookup=3", "exclude each other"),
        ("hf:m,draft=d,batch=4", "plain arm only"),
        ("hf:m,batch=0", "batch must be >= 1"),
        ("specviz:toy,verifier=nope", "unknown verifier"),
    ]:
        with pytest.raises(ValueError, match=words):
            engine_from_spec(bad)


def test_engine_not_installed_names_the_engine_and_the_fix(monkeypatch):
    with pytest.raises(EngineError, match=r"no_such_engine is not installed.*specviz\[nope\]"):
        import_engine("specviz_no_such_module", "no_such_engine", "nope")


# ------------------------------------------------------------------------------ positions


def _sequences(rng, n, second):
    """First token ~ uniform{0,1,2} in both arms; the second from ``second`` (a law)."""
    first = rng.integers(0, 3, n)
    nxt = rng.choice(len(second), size=n, p=second)
    return [(int(a), int(10 + b)) for a, b in zip(first, nxt, strict=True)]


def test_position_two_tests_see_a_change_the_first_token_cannot():
    rng = np.random.default_rng(0)
    a = _sequences(rng, 800, [0.5, 0.3, 0.2])
    b = _sequences(rng, 800, [0.3, 0.3, 0.4])  # TV 0.2 at position 2 only
    results, power = position_tests(a, b, 2, alpha=0.01, skip_joint=())
    byname = dict(results)
    assert byname["tokens[:2]"].pvalue < 1e-6 and byname["token@1|prefix"].pvalue < 1e-6
    assert [p.position for p in power] == [1, 2]
    # power at position 2 is for the joint law (9 outcomes): a larger TV than at position 1
    assert power[1].min_detectable_tv > power[0].min_detectable_tv
    mdt, text = position_power_statement([power], 800, 0.01, 3, per="arm", first_token_control=True)
    assert mdt == power[1].min_detectable_tv
    assert "at position 2" in text and "negative control" in text


def test_position_tests_keep_their_size_under_the_null():
    rng = np.random.default_rng(1)
    pvals = []
    for _ in range(60):
        a = _sequences(rng, 300, [0.5, 0.3, 0.2])
        b = _sequences(rng, 300, [0.5, 0.3, 0.2])
        pvals += [r.pvalue for _, r in position_tests(a, b, 2, skip_joint=())[0]]
    assert np.mean(np.array(pvals) < 0.05) < 0.12  # 120 tests at 5%: well below 12%


# ------------------------------------------------------------------------------ fake engines


@dataclass
class _Fake(Engine):
    """Token 1 from {0,1,2}; token 2 from a law that ``shift`` moves; fails on some seeds."""

    shift: float = 0.0
    fail_every: int = 0  # every k-th request raises
    fail_from: int | None = None  # every request from this index on raises
    engine: str = "fake"

    def load(self) -> None:
        self.calls = 0

    def sample_one(self, prompt: str, sampling: Sampling, seed: int) -> EngineSample:
        self.calls += 1
        if self.fail_from is not None and self.calls > self.fail_from:
            raise RuntimeError("Check 'content_length <= prompt_ids.size()' failed")
        if self.fail_every and seed % self.fail_every == 0:
            raise RuntimeError("sampler exploded")
        rng = np.random.default_rng(seed)
        p = np.array([0.5, 0.3, 0.2]) + np.array([-self.shift, 0, self.shift])
        toks = (int(rng.integers(0, 3)), int(10 + rng.choice(3, p=p)), 20)
        return EngineSample(toks[: sampling.max_tokens], 0.001, 2, 2 if self.shift == 0 else 1)


SMALL = dict(n_samples=300, max_tokens=3, temperature=1.0, greedy_max_tokens=4, progress=False)


def test_failures_are_counted_per_arm_and_enter_the_tests(tmp_path):
    a = _Fake(spec="plain", label="A")
    b = _Fake(spec="spec", label="B", fail_every=7, first_token_from_target=True)
    a.first_token_from_target = True
    r = engine_audit(a, b, ["p"], out_dir=tmp_path, **SMALL)
    assert r.failures["a"]["failed"] == 0
    assert r.failures["b"]["failed"] == sum(1 for s in range(10**8, 10**8 + 300) if s % 7 == 0)
    assert "sampler exploded" in r.failure_line()
    assert r.outcome == "inconsistent"  # 1 in 7 requests fail: a different output law
    lines = [json.loads(x) for x in (tmp_path / "raw.jsonl").read_text().splitlines()[1:]]
    failed = [x for x in lines if x.get("error") and x["kind"] == "sample"]
    assert failed and all(x["tokens"] == [-1] for x in failed)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["failures"]["b"]["failed"] == len(failed)
    assert "first-token control" in summary["first_token"]


def test_an_engine_that_crashes_mid_run_stops_with_its_name_and_keeps_the_samples(tmp_path):
    a = _Fake(spec="plain", label="A")
    b = _Fake(spec="spec", label="B", fail_from=40)
    with pytest.raises(EngineError, match=r"fake \(B\) failed 20 requests in a row") as err:
        engine_audit(a, b, ["p"], out_dir=tmp_path, **SMALL)
    assert "40 of 300 samples from B are complete and saved" in str(err.value)
    lines = (tmp_path / "raw.jsonl").read_text().splitlines()
    assert len(lines) == 1 + 300 + 1 + 40 + 20  # header, A, A's greedy, B's 40 + 20 failed
    # the rerun resumes: nothing sampled twice, and with a healthy B it completes
    a.calls = 0
    b2 = _Fake(spec="spec", label="B")
    r = engine_audit(a, b2, ["p"], out_dir=tmp_path, **SMALL)
    assert a.calls == 0 and b2.calls == 300 - 60 + 1  # the missing samples and the greedy run
    assert r.failures["b"]["failed"] == 20


def test_position_power_and_the_first_token_control_are_in_the_report(tmp_path):
    a = _Fake(spec="plain", label="A", first_token_from_target=True)
    b = _Fake(spec="spec", label="B", first_token_from_target=True, shift=0.2)
    r = engine_audit(a, b, ["p"], out_dir=tmp_path, **SMALL)
    assert r.outcome == "inconsistent"
    assert r.first_token_line().startswith("first-token control (position 1, token@0): passed")
    assert {row["position"] for row in r.power_rows()} == {1, 2, 3}
    assert "at position 2" in r.power_statement
    assert "token@1|prefix" in set(r.tests.test)
    html = (tmp_path / "report.html").read_text()
    assert "first-token control" in html and "at position 2" in html


def test_identity_probe_fails_when_a_draft_equal_to_the_target_is_rejected(tmp_path):
    a = _Fake(spec="plain", label="A")
    b = _Fake(spec="spec", label="B", sampled_draft=True)
    ok = engine_audit(a, b, ["p"], identity=True, **SMALL)
    assert ok.identity_outcome == "pass" and "passed" in ok.identity_line()
    b.shift = 1e-9  # same law, but one of two drafted tokens rejected per request
    bad = engine_audit(a, b, ["p"], identity=True, **SMALL)
    assert bad.identity_outcome == "fail" and bad.outcome == "inconsistent"
    assert "identity probe" in bad.verdict_line


# ------------------------------------------------------------------------------ specviz's own decoder


def test_broken_verifiers_are_flagged_where_the_lossless_one_passes(tmp_path):
    """The broken-engine control at the in-process tests' sizes."""
    settings = dict(n_samples=300, max_tokens=3, temperature=1.0, progress=False)
    plain = "specviz:toy,speculate=0"
    honest = engine_audit(plain, "specviz:toy,verifier=lossless", ["ab"], **settings)
    assert honest.verdict == "consistent"
    for bug in ("always_accept", "threshold"):
        broken = engine_audit(plain, f"specviz:toy,verifier={bug}", ["ab"], **settings)
        assert broken.outcome == "inconsistent", bug


def test_cli_runs_engines_and_refuses_mixed_arms(tmp_path, capsys):
    out = tmp_path / "cli"
    code = audit_main(
        ["--a", "specviz:toy,speculate=0", "--b", "specviz:toy,verifier=always_accept",
         "--prompt", "ab", "--n-samples", "300", "--max-tokens", "3", "--out", str(out),
         "--quiet"]
    )  # fmt: skip
    assert code == 1 and (out / "report.html").is_file()
    assert "at position 2" in capsys.readouterr().out
    assert audit_main(["--a", "http://127.0.0.1:1", "--b", "ov:m", "--prompt", "x"]) == 2
    assert "both be URLs or both be in-process" in capsys.readouterr().err
    assert audit_main(["--a", "http://127.0.0.1:1", "--identity-probe", "--prompt", "x"]) == 2
    assert audit_main(["--a", "ov:m,bogus=1", "--b", "ov:m", "--prompt", "x"]) == 2
    assert "not 'bogus'" in capsys.readouterr().err


# ------------------------------------------------------------------------------ transformers


HF_PROMPT = ["The cat sat on the mat. The dog sat on the"]
HF = dict(n_samples=80, max_tokens=3, temperature=1.0, greedy_max_tokens=8, progress=False)


@pytest.fixture(scope="module")
def hf_plain():
    # batched (num_return_sequences): the honest audits below pass only if its law is plain
    return Memo(engine_from_spec("transformers:smollm2-135m,threads=1,batch=16", "A"))


def test_transformers_batches_are_distinct_draws_fixed_by_the_seeds():
    a = engine_from_spec("transformers:smollm2-135m,threads=1,batch=4", "A")
    s = Sampling(max_tokens=3, temperature=1.0)
    first = a.sample(HF_PROMPT[0], s, [10, 11, 12, 13, 14])  # one batch of 4, then one
    again = a.sample(HF_PROMPT[0], s, [10, 11, 12, 13, 14])
    assert [x.tokens for x in first] == [x.tokens for x in again]
    assert all(x.ok and len(x.tokens) == 3 for x in first)
    assert len({x.tokens for x in first[:4]}) > 1  # rows of one batch are separate draws
    other = a.sample(HF_PROMPT[0], s, [20, 21, 22, 23])
    assert [x.tokens for x in other] != [x.tokens for x in first[:4]]


def test_ensemble_bias_is_the_mixture_of_the_two_laws():
    """The prediction the Qwen report compares with: v = w p + (1-w) q at the first token,
    TV(v, p) = (1-w) TV(p, q), with the loaded models (nothing loaded twice)."""
    import torch

    from specviz import models
    from specviz.audit.engines.convert import hf_folder
    from specviz.audit.engines.hf import ensemble_bias

    tok = models.load_tokenizer(str(hf_folder("smollm2-135m")), progress=False)
    p_m = models.load_model(str(hf_folder("smollm2-135m")), progress=False, packed=False)
    q_m = models.load_model(str(hf_folder("smollm2-135m@8")), progress=False, packed=False)
    r = ensemble_bias(p_m, q_m, HF_PROMPT[0], 0.5, tokenizer=tok, laws=True, cover=0.5)
    ids = tok(HF_PROMPT[0], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        p = torch.softmax(p_m(input_ids=ids).logits[0, -1].double(), -1).numpy()
        q = torch.softmax(q_m(input_ids=ids).logits[0, -1].double(), -1).numpy()
    assert np.allclose(r["v_law"], 0.5 * p + 0.5 * q, atol=1e-6)
    assert r["predicted_tv"] == pytest.approx(0.5 * 0.5 * np.abs(p - q).sum(), abs=1e-5)
    # the first two tokens are at least as far apart as the first one (up to the first tokens
    # left out of the two-token sum: at most half their mass)
    assert r["predicted_tv"] - r["uncovered"] / 2 - 1e-6 <= r["predicted_tv2"] <= 1
    assert 0 <= r["uncovered"] <= 1
    same = ensemble_bias(p_m, p_m, HF_PROMPT[0], 0.5, tokenizer=tok, cover=0.5)
    assert same["predicted_tv"] == 0 and same["predicted_tv2"] < 1e-6  # q = p: no bias
    with pytest.raises(ValueError, match="tokenizer="):
        ensemble_bias(p_m, q_m, HF_PROMPT[0], 0.5)


@pytest.mark.slow
def test_transformers_identity_draft_accepts_every_token(hf_plain):
    b = engine_from_spec("transformers:smollm2-135m,draft=target,threads=1", "B")
    r = engine_audit(hf_plain, b, HF_PROMPT, identity=True, **HF)
    rows = {row["phase"]: row for row in r.identity_rows()}
    assert rows["samples T=1"]["rate"] == 1.0 and rows["greedy T=0"]["rate"] == 1.0
    assert r.identity_outcome == "pass" and r.verdict == "consistent"
    assert r.greedy_verdict == "identical"


@pytest.mark.slow
def test_transformers_ensemble_weight_is_caught_and_assisted_generation_is_not(hf_plain):
    lossy = engine_from_spec(
        "transformers:smollm2-135m,draft=smollm2-135m@8,ensemble=0.5,threads=1", "B"
    )
    caught = engine_audit(hf_plain, lossy, HF_PROMPT, **HF)
    assert caught.outcome == "inconsistent" and caught.lossy
    honest = engine_from_spec("transformers:smollm2-135m,draft=smollm2-135m@8,threads=1", "B")
    passed = engine_audit(hf_plain, honest, HF_PROMPT, **HF)
    assert passed.verdict == "consistent"
    acc = passed.response_counters["b"]["samples T=1"]
    assert 0 < acc["acceptance_rate"] < 1  # a truncated draft: q != p
