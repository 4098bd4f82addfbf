"""Performance: measured metrics (latency, throughput, memory, draft cost) and the theory
they are compared with (all probability laws and speedup formulas live in ``theory``)."""
