"""``tbgen bench``: load generation (perf_analyzer, or tbgen's asyncio gRPC generator), the server's own
statistics and the client's and server's CPU use, per concurrency level.

Modules: ``run`` (:func:`plan_bench` and :meth:`Bench.measure` against a running server), ``perf_analyzer``
(finding and driving it, its CSV), ``loadgen`` (the asyncio generator, decoupled streams included) and
``stats`` (the report, percentiles, ratios). Starting the server is the command's job (commands.bench).
"""

from triton_backend_gen.perf.run import Bench, plan_bench
from triton_backend_gen.perf.stats import (
    BenchReport,
    Level,
    Ratio,
    compare,
    parse_concurrency,
    parse_duration,
    percentiles,
)

__all__ = [
    "Bench",
    "BenchReport",
    "Level",
    "Ratio",
    "compare",
    "parse_concurrency",
    "parse_duration",
    "percentiles",
    "plan_bench",
]
