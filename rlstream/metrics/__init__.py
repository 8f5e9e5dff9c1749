"""Metric kernels: pure, mergeable partial aggregates over numpy arrays and records.

Every aggregate here is a plain picklable dataclass with ``empty()``, a constructor
from one batch (``from_arrays`` / ``from_records`` / ``from_values``), ``merge`` (new
object; exactly associative and commutative) and ``finalize`` (plain Python numbers,
None where undefined). ``finalize`` returns the same values, bit for bit (``==``),
whatever the split of the input into batches (along generations, rows or records)
and whatever the merge order or tree: sums are kept exact (``exact.py``), counts,
maxima, sets and histograms are exact by nature. Nothing in this package imports
ray, fsspec or any other part of rlstream: the I/O that feeds it lives elsewhere.
"""

from rlstream.metrics.completions import CompletionAgg
from rlstream.metrics.quantiles import CountHistogram
from rlstream.metrics.rollouts import GroupStats, RolloutAgg
from rlstream.metrics.samples import SampleAgg
from rlstream.metrics.step import StepAgg
from rlstream.metrics.tokens import TokenAgg
from rlstream.metrics.topk import TopKEntropyAgg

__all__ = [
    "CompletionAgg",
    "CountHistogram",
    "GroupStats",
    "RolloutAgg",
    "SampleAgg",
    "StepAgg",
    "TokenAgg",
    "TopKEntropyAgg",
]
