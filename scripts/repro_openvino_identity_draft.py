"""Self-contained reproduction for OpenVINO GenAI maintainers: draft-model speculative decoding
with *sampling* rejects a draft model identical to the main model, and sometimes crashes.

With draft = main model (q = p), the speculative-sampling rule accepts a drafted token with
probability min(1, p(x)/q(x)) = 1: every drafted token must be accepted. Greedy requests on the
same pipeline do accept them. Needs only ``openvino-genai`` (tested with 2026.4.1.0) and numpy::

    python repro_openvino_identity_draft.py MODEL_DIR [N]

MODEL_DIR is any OpenVINO IR folder of a causal LM (``openvino_model.xml`` + tokenizer IRs),
e.g. one exported with ``optimum-cli export openvino``, or the one specviz caches under
``~/.cache/specviz/openvino/``. Prints, for sampled and for greedy requests, the drafted and
accepted token counts from ``extended_perf_metrics`` and the requests that raised.
"""

from __future__ import annotations

import sys

import openvino_genai as ov_genai


def main() -> None:
    model_dir = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    pipe = ov_genai.LLMPipeline(
        model_dir, "CPU", draft_model=ov_genai.draft_model(model_dir, "CPU")
    )
    ids = pipe.get_tokenizer().encode("The cat sat on the mat. The dog sat on the").input_ids
    # greedy before and after the sampled requests: does a failed request stop the drafting?
    for sampled in (False, True, False):
        drafted = accepted = unfilled = estimated = 0
        errors: list[str] = []
        for seed in range(1, n + 1 if sampled else 4):
            cfg = ov_genai.GenerationConfig()
            cfg.max_new_tokens = 4 if sampled else 12
            cfg.num_assistant_tokens = 3
            cfg.rng_seed = seed  # the default (0) would make every request the same sample
            cfg.do_sample = sampled
            if sampled:
                cfg.temperature, cfg.top_p = 1.0, 1.0  # top_k: its default, no cut
            try:
                m = pipe.generate(ids, cfg).extended_perf_metrics
            except RuntimeError as err:
                errors.append(str(err).splitlines()[0][:120])
                continue
            d, a = m.get_num_draft_tokens(), m.get_num_accepted_tokens()
            if d == 0:
                # no candidate count filled in: the accepted count is then the engine's own
                # estimate from tokens per step (tokens committed per step beyond one)
                unfilled += 1
                estimated += a
            drafted += d
            accepted += a if d else 0
        mode = "sampled T=1" if sampled else "greedy"
        print(
            f"{mode}: drafted {drafted}, accepted {accepted} (must be equal: draft = main "
            f"model); {unfilled} requests without a candidate count, which accepted "
            f"{estimated} tokens by the engine's tokens-per-step estimate; {len(errors)} raised"
            + (f"; first: {errors[0]}" if errors else "")
        )


if __name__ == "__main__":
    main()
