"""Transcripts to per-step kernel aggregates: the generations side of every format.

`TranscriptParser` accumulates validated `Transcript`s (Loops transcript files,
prime-rl token exports, tinker's per-turn lengths, verl's and TRL's text completions as
word ids: trace "text"; tinker's captured sampler logprobs: trace "sampler", which feed
only the entropy estimate, as sampler-only logprobs do for Loops; prime-rl's exact
per-token entropy, which the entropy estimate uses where given) per step and builds the kernels' inputs with one
concatenation per array per step (no per-token Python), handing them to
`rlstream.metrics`; a transcript is one attempt, so its generations (an agent's
turns) are judged together for repetition and distinct answers. Readers in
`rlstream.formats` give the transcripts; this module is where they meet the metric
kernels, so `formats` never imports them.

`TranscriptSettings` is how every unit that reads transcripts (a Loops transcript
batch, a format's per-step files, a tailed JSONL of generations) parses, scans and
keeps them: the run's `[samples]` settings (K, probes, scanners, user scanners
included), its probe panel and its token cap. A parser is built from it and from
nothing else (`TranscriptSettings.parser`), so every format gets the same settings.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rlstream.formats.loops import decode_transcript, simd_parser
from rlstream.formats.quarantine import QuarantineRow
from rlstream.formats.records import BadRecord, Transcript
from rlstream.metrics import CompletionAgg, StepAgg, TokenAgg, TopKEntropyAgg
from rlstream.metrics.samples import SampleAgg
from rlstream.metrics.scanners import SamplesConfig, scan_plan
from rlstream.pipeline.partial import StepPartial
from rlstream.pipeline.samples import attempt_of, bounded, cut

KEEP_PARSER_BYTES = 8 << 20
"""simdjson's parser keeps buffers sized for the largest file it parsed (several
times the file); after a file larger than this it is replaced, so those buffers are
freed before the step's arrays are aggregated."""


EXCEEDS_MAX_TOKENS = "exceeds_max_tokens"
"""Quarantine reason of a transcript with a generation longer than its run's own
`sampling.max_tokens` (plus `[limits] max_tokens_slack`): inconsistent, not trusted."""


def over_cap(t: Transcript, cap: int | None) -> str | None:
    """Why `t` cannot be trusted for its length (a generation of more tokens than
    `cap`), or None. Text-only completions count words, not tokens: never checked."""
    if cap is None or t.trace == "text" or not t.lens:
        return None
    n = max(t.lens)
    if n <= cap:
        return None
    return f"a generation of {n} tokens, above the run's limit of {cap} (sampling.max_tokens + max_tokens_slack)"


def cap_row(run_id: str, file: str, offset: int | None, t: Transcript, cap: int | None):
    """The quarantine row of a transcript longer than `cap` (`over_cap`), or None."""
    why = over_cap(t, cap)
    return (
        None
        if why is None
        else QuarantineRow(run_id, file, offset, EXCEEDS_MAX_TOKENS, why, t.step)
    )


@dataclass(frozen=True, slots=True)
class TranscriptSettings:
    """How a unit's transcripts are parsed, scanned and kept (built once per run and
    poll by `rlstream.pipeline.work.transcript_settings`, carried by every unit that
    reads transcripts)."""

    samples: SamplesConfig = field(default_factory=SamplesConfig)
    """Kept samples and scanners: the run's `[samples]` settings and `--samples-top`."""
    panel: tuple[str, ...] = ()
    """The run's probe tasks (`rlstream.pipeline.samples`)."""
    cap: int | None = None
    """Most tokens a generation may have (`token_cap`); a longer one is quarantined."""
    join_rewards: bool = False
    """The run's rollouts lines hold the rewards its transcripts may lack (Loops): a
    scanned attempt without a reward waits for its line (`StepPartial.unrated`)."""

    def parser(self) -> TranscriptParser:
        """A parser of these settings: the one way units build one."""
        return TranscriptParser(self)


@dataclass
class _StepArrays:
    """Lists of per-generation arrays of one step, concatenated once at the end."""

    ls: list[np.ndarray] = field(default_factory=list)
    lt: list[np.ndarray] = field(default_factory=list)
    ent: list[np.ndarray | None] = field(default_factory=list)
    has_ent: bool = False
    tokens: list[np.ndarray] = field(default_factory=list)
    topk: list[np.ndarray] = field(default_factory=list)
    lens: list[int] = field(default_factory=list)
    tok_lens: list[int] = field(default_factory=list)
    trains: list[bool] = field(default_factory=list)
    truncated: list[bool] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)
    attempts: list[int] = field(default_factory=list)  # the transcript of each generation
    samples_lens: list[int] = field(default_factory=list)
    samples_truncated: list[bool] = field(default_factory=list)
    text_tokens: list[np.ndarray] = field(default_factory=list)
    text_tasks: list[str] = field(default_factory=list)
    sampler_ls: list[np.ndarray] = field(default_factory=list)
    scanned: list[dict] = field(default_factory=list)  # scanned attempts, for kept samples
    vocab: int | None = None
    transcripts: int = 0
    full: int = 0


class TranscriptParser:
    """Accumulate transcripts and emit one `StepAgg` per step.

    `add(data, name)` returns a quarantine reason or None. `aggregates()` builds the
    kernels' inputs with one concatenation per array per step. Files are decoded with
    simdjson when it takes them (`_simd_transcript`), else with orjson. What is
    scanned and kept, and the token cap, come from `settings` alone.
    """

    def __init__(
        self, settings: TranscriptSettings | None = None, vocab_size: int | None = None
    ) -> None:
        self._steps: dict[int, _StepArrays] = {}
        self.settings = settings or TranscriptSettings()
        self.vocab_size = vocab_size
        self.tokens = 0
        self._simd = simd_parser()
        self.samples = self.settings.samples
        self._scan = scan_plan(self.samples.all_scanners())
        self.panel = self.settings.panel
        self.why: str | None = None
        """The detail of the last `EXCEEDS_MAX_TOKENS` answer of `add`."""

    def add(self, data: bytes, name: str, final_through: int = -1) -> tuple[int | None, str | None]:
        """Parse one file; returns (step, None), or (step or None, quarantine reason).

        A transcript of a step at or below `final_through` is late, one with a
        generation longer than the settings' `cap` inconsistent (`over_cap`): not
        aggregated.
        """
        try:
            t = decode_transcript(self._simd, data, name)
        except BadRecord as e:
            return None, str(e)
        finally:
            if len(data) > KEEP_PARSER_BYTES and self._simd is not None:
                self._simd = simd_parser()  # the old one's buffers go with it
        if t.step <= final_through:
            return t.step, "late"
        self.why = over_cap(t, self.settings.cap)
        if self.why is not None:
            return t.step, EXCEEDS_MAX_TOKENS
        self.add_transcript(t)
        return t.step, None

    def over_cap_row(
        self, run_id: str, file: str, offset: int | None, t: Transcript
    ) -> QuarantineRow | None:
        """The quarantine row of an already-decoded transcript longer than the
        settings' cap (`cap_row`), or None: then fold it with `add_transcript`."""
        return cap_row(run_id, file, offset, t, self.settings.cap)

    def add_transcript(self, t: Transcript) -> None:
        """Fold one validated transcript (of any format) into its step's arrays."""
        acc = self._steps.setdefault(t.step, _StepArrays())
        if t.text is not None and self.samples.enabled:  # scanned; kept (bounded) by SampleAgg
            acc.scanned.append(attempt_of(t, self._scan))
        if t.trace == "text":  # words of a text-only completion: not a transcript
            acc.text_tokens.extend(t.tokens)
            acc.text_tasks.extend([t.task_id] * len(t.tokens))
            return
        if t.trace == "sampler":  # sampler logprobs only: not a transcript
            acc.sampler_ls.extend(t.ls)
            return
        acc.transcripts += 1
        if t.trace == "full":
            acc.attempts.extend([acc.full] * len(t.tokens))
            acc.full += 1
            acc.lens.extend(t.lens)
            acc.truncated.extend(t.truncated)
            acc.ls.extend(t.ls)
            acc.lt.extend(t.lt)
            if t.ent is not None:
                acc.has_ent = True
                acc.ent.extend(t.ent)
            else:
                acc.ent.extend([None] * len(t.ls))  # NaN, made only if a step has some
            acc.tokens.extend(t.tokens)
            acc.tok_lens.extend(map(len, t.tokens))
            acc.trains.extend([t.trains] * len(t.ls))
            acc.tasks.extend([t.task_id] * len(t.ls))
            if t.topk is not None:
                acc.topk.extend(t.topk)
            acc.vocab = t.vocab or acc.vocab
            self.tokens += sum(t.lens)
        else:
            acc.samples_lens.extend(t.lens)
            acc.samples_truncated.extend(t.truncated)

    def aggregates(self) -> dict[int, StepPartial]:
        out: dict[int, StepPartial] = {}
        for step, a in self._steps.items():
            agg = StepAgg()
            if a.full:
                offsets = np.zeros(len(a.tok_lens) + 1, np.int64)
                np.cumsum(a.tok_lens, out=offsets[1:])
                ls, lt, toks = _cat(a.ls), _cat(a.lt), _cat(a.tokens)
                trains = np.asarray(a.trains, dtype=bool)
                ent = _entropies(a.ent, a.ls) if a.has_ent else None
                agg.tokens = TokenAgg.from_arrays(ls, lt, offsets, trains, ent)
                agg.completions = CompletionAgg.from_arrays(
                    np.asarray(a.lens, np.int64),
                    np.asarray(a.truncated, bool),
                    toks,
                    offsets,
                    a.tasks,
                    attempt_G=np.asarray(a.attempts, np.int64),
                )
                if a.topk:
                    agg.topk = TopKEntropyAgg.from_arrays(
                        _stack_topk(a.topk), a.vocab or self.vocab_size
                    )
            if a.sampler_ls:
                sampler = _sampler_tokens(a.sampler_ls)
                agg.tokens = sampler if agg.tokens is None else agg.tokens.merge(sampler)
            if a.samples_lens:
                samples = CompletionAgg.from_arrays(
                    np.asarray(a.samples_lens, np.int64),
                    np.asarray(a.samples_truncated, bool),
                    None,
                    None,
                    None,
                )
                agg.completions = (
                    samples if agg.completions is None else agg.completions.merge(samples)
                )
            if a.text_tokens:
                text = _text_completions(a.text_tokens, a.text_tasks, not a.samples_lens)
                agg.completions = text if agg.completions is None else agg.completions.merge(text)
            waiting: dict[str, dict] = {}
            if a.scanned:
                c, rated = self.samples, a.scanned
                if self.settings.join_rewards:
                    rated = [x for x in a.scanned if x["reward"] is not None]
                    waiting = {x["attempt"]: cut(x) for x in a.scanned if x["reward"] is None}
                agg.samples = bounded(
                    SampleAgg.from_attempts(rated, c.top, self.panel, c.probes, c.high_reward)
                )
            out[step] = StepPartial(agg, a.transcripts, a.full, waiting)
        return out


def _cat(arrays: list[np.ndarray]) -> np.ndarray:
    """One array of a step's generations: the only one as it is (a step of one long
    generation is not copied), else their concatenation."""
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def _entropies(ent: list[np.ndarray | None], ls: list[np.ndarray]) -> np.ndarray:
    """A step's exact per-token entropies, NaN for generations that gave none."""
    return np.concatenate(
        [np.full(x.size, np.nan) if e is None else e for e, x in zip(ent, ls, strict=True)]
    )


def _sampler_tokens(ls: list[np.ndarray]) -> TokenAgg:
    """Sampler logprobs without trainer ones: no token is in the trained set, so only
    the entropy estimate (-mean of the sampler logprobs) comes out of them."""
    offsets = np.zeros(len(ls) + 1, np.int64)
    np.cumsum([x.size for x in ls], out=offsets[1:])
    flat = np.concatenate(ls) if ls else np.empty(0, np.float64)
    nan = np.full(flat.size, np.nan)
    return TokenAgg.from_arrays(flat, nan, offsets, np.zeros(len(ls), dtype=bool))


def _text_completions(
    tokens: list[np.ndarray], tasks: list[str], lengths: bool = True
) -> CompletionAgg:
    """Repetition and distinct answers of text-only completions, from word ids (their
    lengths count words, so formats giving only text null the length columns; without
    `lengths`, where the step's lengths in tokens are known, they count none)."""
    lens = np.asarray([len(x) for x in tokens], np.int64)
    offsets = np.zeros(len(tokens) + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    toks = np.concatenate(tokens) if tokens else np.empty(0, np.int64)
    shown = lens if lengths else np.empty(0, np.int64)
    return CompletionAgg.from_arrays(shown, np.zeros(len(shown), bool), toks, offsets, tasks)


def _stack_topk(rows: list[np.ndarray]) -> np.ndarray:
    k = max(r.shape[1] for r in rows if r.size) if any(r.size for r in rows) else 1
    padded = [
        r if r.shape[1] == k else np.pad(r, ((0, 0), (0, k - r.shape[1])), constant_values=np.nan)
        for r in rows
        if r.shape[0]
    ]
    return np.concatenate(padded) if padded else np.empty((0, k))
