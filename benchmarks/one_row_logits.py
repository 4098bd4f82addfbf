"""Why a one-row masked batch is not bit-identical to the single-sequence runner (issue 29).

    .venv/bin/python benchmarks/one_row_logits.py [--model smollm2-135m] [--steps 8]
        > benchmarks/results/one_row_logits.txt

Feeds the same prompt, then the same greedy tokens one by one, to three runners of one model
and prints, per call, the largest absolute difference of the logits from the single-sequence
runner (``HFRunner``: no attention mask, positions implied):

* ``BatchRunner`` with one row, as the batched engine calls it (an all-ones attention mask and
  explicit ``position_ids`` on every call);
* the same calls with ``attention_mask=None`` (positions still explicit): what a one-row batch
  computes when a group with no padding passes no mask.

The serial drafter does not depend on the answer: since issue 29 it runs the one draft loop
(:mod:`specviz.drafting.model_loop`) as a batch of one over its own single-sequence runner.
"""

from __future__ import annotations

import argparse

import torch

from specviz.core.batch_runners import BatchRunner
from specviz.core.runners import HFRunner
from specviz.models import load_model, load_tokenizer
from specviz.prompts import load_prompts, render_prompt


class _NoMask(BatchRunner):
    """A one-row BatchRunner that passes no attention mask (valid everywhere)."""

    def _forward(self, tokens, positions, num_logits):
        out = self.model(input_ids=tokens, attention_mask=None, position_ids=positions,
                         use_cache=True, logits_to_keep=num_logits,
                         **{self._cache_kw: self.cache})  # fmt: skip
        return out.logits[:, -num_logits:].float()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tok = load_tokenizer(args.model, progress=False)
    model = load_model(args.model, progress=False, packed=False)
    ids = torch.tensor(render_prompt(tok, load_prompts(per_category=1)[0]))
    serial, masked, nomask = HFRunner(model), BatchRunner(model, 1), _NoMask(model, 1)
    print(f"# {args.model}, attn {model.config._attn_implementation}, prompt {ids.numel()} "
          f"tokens, {args.threads} thread(s); max |logits - single-sequence runner's|")  # fmt: skip
    print("| call | tokens fed | masked one-row batch | one-row batch, no mask |")
    print("|---:|---:|---:|---:|")
    feed = ids
    for call in range(args.steps + 1):
        a = serial.extend(feed, 1)[-1]
        ones = torch.ones(1, feed.numel(), dtype=torch.bool)
        b = masked.extend(feed.view(1, -1), ones, 1)[0, -1]
        c = nomask.extend(feed.view(1, -1), ones, 1)[0, -1]
        db, dc = (b - a).abs().max().item(), (c - a).abs().max().item()
        print(f"| {call} | {feed.numel()} | {db:.3g} | {dc:.3g} |")
        feed = a.argmax().view(1)


if __name__ == "__main__":
    main()
