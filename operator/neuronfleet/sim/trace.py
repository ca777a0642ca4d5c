"""Request traces: read a CSV of arrivals, and scale its rate while keeping its burst structure.

Format: a header row and one request per row. Columns are found by name (case-insensitive):

- arrival time: the first column named like ``timestamp``, ``time``, ``ts`` or ``arrival``; values
  are ISO-8601 date-times (``2023-11-16 18:15:46.68``, optionally with a time zone: ``Z``,
  ``+01:00``, ``-0500``; times with one are converted to UTC) or numbers of seconds (of
  milliseconds or microseconds with ``time_unit``, the CLI's ``--time-unit``). Numbers around
  more than :data:`MAX_NUMERIC_SECONDS` seconds (their median) are refused: Unix times in
  milliseconds or microseconds read as seconds (an hour of them spans 42 days as seconds);
- optional prompt size: a column containing ``context``, ``prompt``, ``input`` or ``request``
  (tokens; BurstGPT's ``Request tokens``);
- optional output size: a column containing ``generated``, ``output``, ``completion`` or ``response``
  (tokens).

Of several columns matching one of the last two, an identifier (``prompt_id``) is never taken, nor
a rate or a time (a name with a word such as ``per``, ``time``, ``latency``, ``duration``, ``rate``
or a unit ``ms``, ``s``: ``time_per_output_token_ms``, ``output_tokens_per_s``); one whose name says
tokens (``context_tokens``, ``input_tokens``, ``ContextTokens``) is preferred, then one that says it
counts (``len``, ``length``, ``count``, ``num``: ``prompt_len``) or is the word alone (``prompt``)
over one that says something else (``prompt_type``); a trace where two remain (``prompt_tokens``
and ``input_tokens``, or ``prompt`` and ``input_len``) is refused, naming them, rather than one
taken at random.

Other columns are ignored; :class:`Columns` records which column was taken for what and which were
ignored, so that a report can say so (a ``tokens`` column is no context size: an LLM profile then
gives every request its default, which the report must say too).

Two shapes in practice: Azure's ``TIMESTAMP,ContextTokens,GeneratedTokens`` (date-times with
sub-second digits) and NASA-HTTP's single ``timestamp`` column of whole seconds. Logs of 1 s
resolution put several requests in the same second: when every time is a whole number and
seconds repeat, each second's requests are spread evenly within it (request ``i`` of ``n`` at
``+ (i + 0.5) / n``), as the logs' resolution implies; the order of rows is kept.

Malformed files raise :class:`TraceError` naming the file, line and problem; so do files that are
not UTF-8 text (a compressed trace: decompress it first), token counts that are not finite numbers
>= 0, and traces spanning more than :data:`MAX_SPAN_SECONDS` (a stray row dated years later would
make a simulation of all the time in between).

Rate scaling (:func:`scale`) replicates each arrival ``k`` times, each copy shifted by a seeded
uniform jitter in ``[0, jitter)`` seconds (copies keep the original's token counts). Compressing
time instead would shrink bursts relative to cold starts; replication keeps every burst where and
as long as it was, only taller. A fractional factor keeps each extra copy with that probability.
"""

from __future__ import annotations

import csv
import math
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from neuronfleet.planning.rounding import ROUND_OFF

FloatArray = npt.NDArray[np.float64]

_TIME_NAMES = re.compile(r"^(timestamp|time|ts|arrival|arrival_time|arrived_at|start_time)$", re.I)
_CONTEXT = re.compile(r"context|prompt|input|request", re.I)
_GENERATED = re.compile(r"generated|output|completion|response", re.I)
#: A column that says it counts tokens: preferred over other names matching the patterns above.
_TOKENS = re.compile(r"token", re.I)
#: A name's words: snake_case, kebab-case and camelCase parts (``outputLatencyMs``: output, latency, ms).
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
#: Words of a rate or a time (``time_per_output_token_ms``, ``output_tokens_per_s``,
#: ``outputLatencyMs``): such a column is never a token count, whatever else its name says.
_RATE_OR_TIME_WORDS = frozenset(
    {
        "per",
        "time",
        "timestamp",
        "latency",
        "duration",
        "elapsed",
        "rate",
        "throughput",
        "speed",
        "tps",
        "ttft",
        "tpot",
        "itl",
    }
    | {"ms", "us", "ns", "s", "sec", "secs", "second", "seconds"}
)
#: Words that say a column counts (``prompt_len``, ``num_output``, ``output_count``): preferred, after
#: ``tokens``, over a name that says something else (``prompt_type``).
_COUNT_WORDS = frozenset({"len", "length", "count", "num"})
#: An identifier (``prompt_id``, ``promptID``, ``completion-id``): never a token count.
_ID = re.compile(r"(?:^|[^A-Za-z0-9])(?i:id)$|[a-z](?:ID|Id)$")
#: A date-time's time-zone suffix: ``Z``, ``+01:00``, ``+0100`` or ``+01`` (after the time of day).
_ZONE = re.compile(r"(?<=\d)\s*(?:(?P<utc>Z)|(?P<sign>[+-])(?P<hours>\d{2})(?::?(?P<minutes>\d{2}))?)$", re.I)
#: A date-time's fraction of a second.
_FRACTION = re.compile(r"\.\d+$")
#: Years numpy holds in nanoseconds (it wraps others around silently: 3000-01-01 reads as 1830).
_NS_FIRST_YEAR, _NS_LAST_YEAR = 1678, 2262
#: The longest span of arrivals a trace may have (the shared NASA trace spans 14 days).
MAX_SPAN_SECONDS = 60 * 86400.0
#: Units a numeric time may be given in, and seconds per unit.
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
UNIT_NAMES = {"s": "seconds", "ms": "milliseconds", "us": "microseconds"}
#: The largest numeric time taken as seconds: 1e11 s is the year 5138 as Unix time, and 1e11 ms
#: (or us) is 1973 (1970): every Unix time in milliseconds or microseconds since then is above it,
#: every Unix time in seconds until then below.
MAX_NUMERIC_SECONDS = 1e11


class TraceError(ValueError):
    """A trace file that cannot be used, with a message saying where and why."""


@dataclass(frozen=True)
class Columns:
    """The header's columns as read: which was taken for what, and which were ignored."""

    time: str
    context: str | None
    generated: str | None
    ignored: tuple[str, ...]

    def describe(self) -> str:
        """One line: the time, context-token and output-token columns, then the ignored ones."""

        def name(column: str | None) -> str:
            return f"{column!r}" if column is not None else "none"

        ignored = ", ".join(repr(c) for c in self.ignored) or "none"
        return (
            f"time {name(self.time)}, context tokens {name(self.context)}, output tokens {name(self.generated)}; "
            f"ignored {ignored}"
        )


@dataclass(frozen=True)
class Trace:
    """Arrivals in seconds from the first one (sorted), with optional token counts per request."""

    arrivals: FloatArray
    context_tokens: FloatArray | None
    generated_tokens: FloatArray | None
    source: str
    #: The first arrival's time as read (seconds: a Unix time for date-times), and whether the
    #: times were date-times (else numbers).
    start: float = 0.0
    dated: bool = False
    #: The file's columns (None: not read from a file).
    columns: Columns | None = None

    @property
    def duration(self) -> float:
        return float(self.arrivals[-1]) if len(self.arrivals) else 0.0

    @property
    def whole_seconds(self) -> int:
        """The whole seconds from 0 that hold every arrival: the least whole number above the last
        one (an arrival at exactly 3600.0 falls in second 3600, so 3601; one within round-off below a
        whole second is taken as on it)."""
        return math.ceil(self.duration + ROUND_OFF)

    def __len__(self) -> int:
        return len(self.arrivals)


def _parse_time(value: str, unit: float = 1.0) -> tuple[float, bool]:
    """Seconds from a number (of ``unit`` seconds) or an ISO-8601 date-time (UTC if it has a time
    zone), and whether it was a number; ValueError for an empty, NaN, infinite or NaT time."""
    try:
        number = float(value)
    except ValueError:
        return _parse_date_time(value), False
    if not math.isfinite(number):
        raise ValueError(f"not a finite time: {value!r}")
    return number * unit, True


def _unit_hint(number: float, time_unit: str) -> str:
    """What to pass for a numeric time too large for ``time_unit``: the next unit that reads it as
    a plausible Unix time, if one does."""
    units = list(TIME_UNITS)
    for candidate in units[units.index(time_unit) + 1 :]:
        if abs(number) * TIME_UNITS[candidate] <= MAX_NUMERIC_SECONDS:
            return f"pass --time-unit {candidate}"
    return f"convert the times to seconds, milliseconds or microseconds ({', '.join(units)})"


def _parse_date_time(value: str) -> float:
    text = value.strip().replace(" ", "T", 1)
    offset = 0.0
    zone = _ZONE.search(text)
    if zone and "T" in text[: zone.start()]:
        # numpy reads an offset with a deprecation warning; the offset is applied here instead.
        text = text[: zone.start()]
        if not zone["utc"]:
            offset = (int(zone["hours"]) * 3600 + int(zone["minutes"] or 0) * 60) * (-1 if zone["sign"] == "-" else 1)
    if text[4:5] == "-" and text[:4].isdigit() and _NS_FIRST_YEAR <= int(text[:4]) < _NS_LAST_YEAR:
        stamp = np.datetime64(text, "ns")
        if np.isnat(stamp):
            raise ValueError(f"not a time: {value!r}")
        return float(stamp.astype(np.int64)) / 1e9 - offset
    # Other years: whole seconds, which numpy holds for any year, plus the fraction.
    fraction = _FRACTION.search(text)
    whole = np.datetime64(text[: fraction.start()] if fraction else text, "s")
    if np.isnat(whole):
        # numpy reads "" and "NaT" as not-a-time, whose integer value is -2**63 ns (the year 1677).
        raise ValueError(f"not a time: {value!r}")
    seconds = float(whole.astype(np.int64)) + (float(fraction[0]) if fraction else 0.0)
    return seconds - offset


def _text_lines(path: Path, handle: Iterable[str]) -> Iterator[str]:
    """The file's lines; TraceError at the first bytes that are not UTF-8 (a compressed or binary file)."""
    try:
        yield from handle
    except UnicodeDecodeError as error:
        # A gzip file fails at its second byte, 0x8b.
        raise TraceError(
            f"{path}: not a UTF-8 CSV (byte 0x{error.object[error.start]:02x} is not UTF-8 text; "
            "compressed? decompress it first)"
        ) from None


def load(path: str | Path, time_unit: str = "s") -> Trace:
    """Read a CSV trace (see the module docstring for the format); numeric times are in ``time_unit``."""
    if time_unit not in TIME_UNITS:
        raise ValueError(f"unknown time unit {time_unit!r}; known: {', '.join(TIME_UNITS)}")
    unit = TIME_UNITS[time_unit]
    path = Path(path)
    try:
        handle = path.open(newline="", encoding="utf-8-sig")  # a BOM (Excel) is not part of the header
    except OSError as error:
        raise TraceError(f"{path}: cannot open: {error.strerror or error}") from None
    with handle:
        reader = csv.reader(_text_lines(path, handle))
        header = next(reader, None)
        if not header:
            raise TraceError(f"{path}: empty file; expected a header row such as TIMESTAMP,ContextTokens")
        names = [h.strip() for h in header]
        time_col = next((i for i, n in enumerate(names) if _TIME_NAMES.match(n)), None)
        if time_col is None:
            raise TraceError(
                f"{path}: no arrival-time column in header {names}; name one timestamp, time, ts or arrival"
            )
        ctx_col = _token_column(path, names, time_col, _CONTEXT, "context", "context_tokens")
        gen_col = _token_column(path, names, time_col, _GENERATED, "output", "generated_tokens")
        times: list[float] = []
        numeric: list[bool] = []
        lines: list[int] = []  # the file's line of each time (for the span check's error)
        contexts: list[float] = []
        generated: list[float] = []
        for line, row in enumerate(reader, start=2):
            if not row or all(not cell.strip() for cell in row):
                continue
            if len(row) < len(names):
                raise TraceError(f"{path}:{line}: {len(row)} fields, the header has {len(names)}")
            try:
                seconds, is_number = _parse_time(row[time_col], unit)
            except ValueError:
                raise TraceError(f"{path}:{line}: cannot read time {row[time_col]!r}") from None
            times.append(seconds)
            numeric.append(is_number)
            lines.append(line)
            for col, out, label in ((ctx_col, contexts, "context"), (gen_col, generated, "generated")):
                if col is None:
                    continue
                try:
                    tokens = float(row[col])
                except ValueError:
                    raise TraceError(f"{path}:{line}: {label} tokens {row[col]!r} is not a number") from None
                if not (tokens >= 0 and math.isfinite(tokens)):
                    raise TraceError(f"{path}:{line}: {label} tokens must be a finite number >= 0, got {row[col]!r}")
                out.append(tokens)
    if not times:
        raise TraceError(f"{path}: no requests after the header")
    arrivals = np.asarray(times, dtype=np.float64)
    _check_unit(path, arrivals, np.asarray(numeric), time_unit)
    _check_span(path, arrivals, lines, time_unit if all(numeric) else None)
    arrivals = spread_within_seconds(arrivals)
    order = np.argsort(arrivals, kind="stable")
    start = float(arrivals[order[0]])
    arrivals = arrivals[order] - start
    ctx = np.asarray(contexts, dtype=np.float64)[order] if ctx_col is not None else None
    gen = np.asarray(generated, dtype=np.float64)[order] if gen_col is not None else None
    taken = {time_col, ctx_col, gen_col}
    columns = Columns(
        names[time_col],
        names[ctx_col] if ctx_col is not None else None,
        names[gen_col] if gen_col is not None else None,
        tuple(n for i, n in enumerate(names) if i not in taken),
    )
    return Trace(arrivals, ctx, gen, str(path), start, not numeric[int(order[0])], columns)


def _token_column(
    path: Path, names: list[str], time_col: int, pattern: re.Pattern[str], what: str, rename: str
) -> int | None:
    """The column of ``what`` token counts: among the columns whose name matches ``pattern`` and is
    neither an identifier (``prompt_id``) nor a rate or time (``time_per_output_token_ms``), the one
    whose name says tokens (``context_tokens``, ``ContextTokens``), else the one that says it counts
    (``prompt_len``) or is the pattern's word alone (``output``) over those that say something else
    (``prompt_type``). TraceError when two could be it."""
    matches = [
        i
        for i, n in enumerate(names)
        if i != time_col and pattern.search(n) and not _ID.search(n) and not _RATE_OR_TIME_WORDS & _words_of(n)
    ]
    tokens = [i for i in matches if _TOKENS.search(names[i])]
    # A bare `output` may well be the count, so it ties with `completion_len` (refused as ambiguous).
    counts = [
        i for i in matches if _COUNT_WORDS & _words_of(names[i]) or all(pattern.search(w) for w in _words_of(names[i]))
    ]
    chosen = tokens or counts or matches
    if len(chosen) <= 1:
        return chosen[0] if chosen else None
    listed = ", ".join(repr(names[i]) for i in chosen)
    raise TraceError(
        f"{path}: the {what}-token count could be any of the columns {listed}; rename the one that holds it "
        f"{rename!r} and give the others names without {_listed(_words(pattern))}"
        + ("" if tokens else " (or with 'tokens' in the one that holds the count)")
    )


def _words_of(name: str) -> frozenset[str]:
    return frozenset(w.lower() for w in _WORD.findall(name))


def _words(pattern: re.Pattern[str]) -> list[str]:
    return pattern.pattern.split("|")


def _listed(words: list[str]) -> str:
    quoted = [repr(w) for w in words]
    return ", ".join(quoted[:-1]) + f" or {quoted[-1]}" if len(quoted) > 1 else quoted[0]


def _check_unit(path: Path, times: FloatArray, numeric: npt.NDArray[np.bool_], time_unit: str) -> None:
    """TraceError when the numeric times are, as a whole, too large to be seconds (Unix times in
    milliseconds or microseconds): their median, so that one stray row is left to the span check,
    which names it."""
    if not numeric.any():
        return
    typical = float(np.median(times[numeric]))
    if typical <= MAX_NUMERIC_SECONDS:
        return
    raise TraceError(
        f"{path}: the times read as {UNIT_NAMES[time_unit]} are around {typical:.3g} s, after the year 5000 as "
        f"Unix times: they look like Unix times in milliseconds or microseconds; "
        f"{_unit_hint(typical / TIME_UNITS[time_unit], time_unit)}"
    )


#: The shortest span a unit hint calls plausible: a shorter trace cannot be simulated anyway (every
#: run must last one cold start, minutes of node provisioning and image pull).
MIN_PLAUSIBLE_SPAN_SECONDS = 60.0


def _check_span(path: Path, times: FloatArray, lines: list[int], time_unit: str | None = None) -> None:
    """TraceError when the times span more than :data:`MAX_SPAN_SECONDS`. When one row lies far
    from all the others (a mistyped year, a test row), it names that row; otherwise the rows are
    spread over the whole span (relative milliseconds read as seconds span months), and for numeric
    times read in ``time_unit`` it names every smaller unit in which the span is plausible."""
    first, last = int(np.argmin(times)), int(np.argmax(times))
    span = float(times[last]) - float(times[first])  # Python floats: no overflow warning, inf at worst
    if span <= MAX_SPAN_SECONDS:
        return
    limit = f"a trace may span at most {MAX_SPAN_SECONDS / 86400:g} days"
    extent = f"earliest at line {lines[first]}, latest at line {lines[last]}"
    stray = _stray_row(times, first, last)
    if stray is not None:
        raise TraceError(
            f"{path}:{lines[stray]}: this row's time makes the trace span {_days(span)} ({extent}), and "
            f"without it the trace spans {format_span(_span_without(times, stray))}; {limit}: remove the "
            "stray row or split the trace"
        )
    raise TraceError(
        f"{path}: the times span {_days(span)} ({extent}); {limit}: split the trace{_span_unit_hint(span, time_unit)}"
    )


def _days(seconds: float) -> str:
    days = seconds / 86400
    if not math.isfinite(days):
        return f"more than {sys.float_info.max:.3g} seconds"
    return f"{days:,.1f} days" if days < 1e6 else f"{days:.3g} days"


def _span_without(times: FloatArray, row: int) -> float:
    rest = np.delete(times, row)
    return float(rest.max()) - float(rest.min())


def _stray_row(times: FloatArray, first: int, last: int) -> int | None:
    """The earliest or latest row when it alone makes the span too long: without it the others fit
    :data:`MAX_SPAN_SECONDS`, and it lies farther from the nearest of them than they span (evenly
    spread rows have no such row; two rows cannot tell which is stray)."""
    if len(times) < 3:
        return None
    # The row farther from the median time is the candidate.
    median = float(np.median(times))
    row = last if float(times[last]) - median >= median - float(times[first]) else first
    rest = np.delete(times, row)
    rest_span = float(rest.max()) - float(rest.min())
    gap = float(times[row]) - float(rest.max()) if row == last else float(rest.min()) - float(times[row])
    return row if rest_span <= MAX_SPAN_SECONDS and gap > rest_span else None


def _span_unit_hint(span: float, time_unit: str | None) -> str:
    """'; or pass --time-unit X if the times are ... (the trace then spans ...)' for every smaller unit in
    which numeric times read in ``time_unit`` span a plausible time (from
    :data:`MIN_PLAUSIBLE_SPAN_SECONDS` to :data:`MAX_SPAN_SECONDS`) and what each gives ('' if none
    or not numeric). All of them: a trace of relative microseconds shorter than ~1.4 h also spans
    less than 60 days as milliseconds, so naming the first that fits sent it there."""
    if time_unit is None or not math.isfinite(span):
        return ""
    units = list(TIME_UNITS)
    options = []
    for candidate in units[units.index(time_unit) + 1 :]:
        scaled = span * TIME_UNITS[candidate] / TIME_UNITS[time_unit]
        if MIN_PLAUSIBLE_SPAN_SECONDS <= scaled <= MAX_SPAN_SECONDS:
            options.append(
                f"--time-unit {candidate} if the times are {UNIT_NAMES[candidate]} (the trace then spans "
                f"{format_span(scaled)})"
            )
    return f"; or pass {' or '.join(options)}" if options else ""


def format_span(seconds: float) -> str:
    """A duration in the unit that reads best (s, min, h or days)."""
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.2f} h"
    return f"{seconds / 86400:.1f} days"


def describe(trace: Trace) -> str:
    """The trace's requests, span, first time and mean rate: what a report's header says it read."""
    if trace.dated:
        start = str(np.datetime64(round(trace.start * 1e3), "ms")).replace("T", " ")
    elif trace.start >= 1e8:
        # A number this large is most likely a Unix time (1e8 s is 1973): say which date it is.
        stamp = str(np.datetime64(round(trace.start), "s")).replace("T", " ")
        start = f"{trace.start:.0f} s ({stamp} UTC as a Unix time)"
    else:
        start = f"t = {trace.start:g} s"
    rate = f"{len(trace) / trace.duration:.3g} requests/s" if trace.duration > 0 else "all at one time"
    return f"{len(trace):,} requests over {format_span(trace.duration)} from {start}, {rate}"


#: A relative numeric trace read as seconds that spans more than this at less than
#: :data:`SPARSE_RATE` requests/s gets a unit note (:func:`unit_note`): relative milliseconds under
#: ~1.4 h read as seconds span less than :data:`MAX_SPAN_SECONDS`, so the span check passes them.
SPARSE_SPAN_SECONDS = 86400.0
#: Requests per second below which a day-long relative trace is more likely milliseconds than a
#: fleet's traffic (the shared NASA trace, relative seconds over 14 days, carries 1.6/s).
SPARSE_RATE = 0.1


def unit_note(trace: Trace, time_unit: str) -> str | None:
    """A note for numeric relative times read in ``time_unit`` (the default, not chosen) that span over a
    day at under :data:`SPARSE_RATE` requests/s: each smaller unit in which they would span a
    plausible time, with that span and rate. None otherwise. A note, not a refusal: a sparse
    multi-day trace is possible, and the header says what was read."""
    if trace.dated or trace.start >= 1e8 or trace.duration <= SPARSE_SPAN_SECONDS:
        return None
    rate = len(trace) / trace.duration
    if rate >= SPARSE_RATE:
        return None
    units = list(TIME_UNITS)
    options = []
    for candidate in units[units.index(time_unit) + 1 :]:
        factor = TIME_UNITS[candidate] / TIME_UNITS[time_unit]
        scaled = trace.duration * factor
        if scaled >= MIN_PLAUSIBLE_SPAN_SECONDS:
            options.append(
                f"--time-unit {candidate} if they are {UNIT_NAMES[candidate]} ({format_span(scaled)} at "
                f"{rate / factor:.3g} requests/s)"
            )
    if not options:
        return None
    return (
        f"{Path(trace.source).name}: its times, read as {UNIT_NAMES[time_unit]}, span {format_span(trace.duration)} "
        f"at {rate:.3g} requests/s; pass {' or '.join(options)}"
    )


def rise_and_fall(seconds: int, seed: int, burst_at: int) -> Trace:
    """A synthetic trace logged at 1 s like the NASA one: Poisson arrivals at a rate rising from 1 to
    4 a second and falling back (sin²) over ``seconds``, 2.5 times that for the minute from
    ``burst_at`` (a burst no autoscaler follows in time; none past the end). The engine's tests and
    the sweep benchmark's host reference run on it."""
    rng = np.random.default_rng(seed)
    t = np.arange(seconds)
    rate = 1.0 + 3.0 * np.sin(np.pi * t / seconds) ** 2
    rate[burst_at : burst_at + 60] *= 2.5
    counts = rng.poisson(rate)
    return Trace(spread_within_seconds(np.repeat(t, counts).astype(np.float64)), None, None, "rise-and-fall")


def spread_within_seconds(arrivals: FloatArray) -> FloatArray:
    """Whole-second times with repeats spread evenly within their second (see the module docstring)."""
    if len(arrivals) < 2 or not np.all(arrivals == np.floor(arrivals)):
        return arrivals
    order = np.argsort(arrivals, kind="stable")
    ordered = arrivals[order]
    first = np.searchsorted(ordered, ordered, side="left")
    last = np.searchsorted(ordered, ordered, side="right")
    if np.all(last - first == 1):
        return arrivals
    rank = np.arange(len(ordered)) - first
    spread = np.empty_like(arrivals)
    spread[order] = ordered + (rank + 0.5) / (last - first)
    return spread


def scale(trace: Trace, factor: float, jitter: float, seed: int) -> Trace:
    """The trace with each arrival replicated ``factor`` times (see the module docstring)."""
    if factor <= 0:
        raise ValueError(f"rate factor must be positive, got {factor}")
    rng = np.random.default_rng(seed)
    whole = math.floor(factor)
    copies = np.full(len(trace), whole, dtype=np.int64)
    if factor > whole:
        copies += rng.random(len(trace)) < (factor - whole)
    index = np.repeat(np.arange(len(trace)), copies)
    arrivals = trace.arrivals[index] + rng.random(len(index)) * jitter
    order = np.argsort(arrivals, kind="stable")
    pick = index[order]
    return Trace(
        arrivals[order],
        trace.context_tokens[pick] if trace.context_tokens is not None else None,
        trace.generated_tokens[pick] if trace.generated_tokens is not None else None,
        trace.source,
    )


def binned_counts(trace: Trace, factor: float, jitter: float, seed: int, dt: float, bins: int) -> FloatArray:
    """Arrivals per ``dt`` bin of the trace scaled as :func:`scale` does, without materializing them.

    For token-less traces at large factors (hundreds of millions of copies): each arrival's copies
    are spread over the bins its jitter window covers by a seeded multinomial draw, which is the
    distribution of bin counts of uniformly jittered copies (sub-bin offsets ignored: < ``dt``).
    """
    rng = np.random.default_rng(seed)
    whole = math.floor(factor)
    copies = np.full(len(trace), whole, dtype=np.int64)
    if factor > whole:
        copies += rng.random(len(trace)) < (factor - whole)
    start = np.floor(trace.arrivals / dt).astype(np.int64)
    width = max(1, round(jitter / dt))
    counts = np.zeros(bins, dtype=np.float64)
    if width == 1:
        np.add.at(counts, np.minimum(start, bins - 1), copies)
        return counts
    spread = rng.multinomial(copies, np.full(width, 1.0 / width))
    index = np.minimum(start[:, None] + np.arange(width)[None, :], bins - 1)
    counts += np.bincount(index.ravel(), weights=spread.ravel().astype(np.float64), minlength=bins)[:bins]
    return counts


#: Seconds between the history pass and the measured copy of a trace.
HISTORY_GAP_SECONDS = 1.0


def with_history_pass(trace: Trace) -> tuple[Trace, float]:
    """The trace played twice in a row, and when the second (measured) copy starts.

    Policies that learn from history (the warm pool sizes itself from the recent demand) would start
    a short trace with none; in operation they have hours of it. Replaying the trace once first
    gives them that history, while the measured span is the trace itself.
    """
    # Whole seconds: the engine measures from the start of a second.
    offset = float(trace.whole_seconds) + HISTORY_GAP_SECONDS
    doubled = Trace(
        np.concatenate([trace.arrivals, trace.arrivals + offset]),
        np.concatenate([trace.context_tokens] * 2) if trace.context_tokens is not None else None,
        np.concatenate([trace.generated_tokens] * 2) if trace.generated_tokens is not None else None,
        trace.source,
    )
    return doubled, offset
