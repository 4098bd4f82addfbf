"""The bottom layer: sampling semantics, model runners (KV caches, rollback), packed CPU
weights and the trace records a generation produces. Nothing here knows about drafters or
verifiers."""
