"""What models cost: Claude's, to price a run the CLI gave no `total_cost_usd` for (one killed, stopped or timed
out), and OpenAI's, to price every Codex run (Codex reports tokens, never dollars).

Prices are USD per million tokens. Anthropic's as published on platform.claude.com/docs (the pricing page and
each model's overview page), read on 2026-11-26. Claude Sonnet 5.5's cache read is the $0.10 that applies since
2026-10-07 (its overview page still said $0.20 when read). OpenAI's Standard tier (OPENAI_PRICES), read on
2026-11-26: gpt-5-codex from its model page on developers.openai.com; the GPT-6 models and gpt-5.5 as the
stored copies of third-party tables quoting OpenAI's price page give them (several agreeing). gpt-6.1-sol is the
default of codex-cli 0.169 (priority 1 in its bundled model catalog). A model missing here is priced at nothing:
its run's cost is recorded as unknown (NULL), never guessed. Update these tables when a price changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Rates:
    """USD per million tokens."""

    input: float
    output: float
    cache_write: float  # a 5-minute cache write (what Claude Code writes)
    cache_write_1h: float
    cache_read: float


@dataclass(frozen=True)
class Price:
    rates: Rates
    # Some models cost more for a long prompt (input + cache reads + cache writes over `long_over` tokens): every
    # token of such a request, output included, is priced at `long`.
    long_over: int | None = None
    long: Rates | None = None


_OPUS_4_5 = Price(Rates(5, 25, 6.25, 10, 0.50))
_OPUS_4 = Price(Rates(15, 75, 18.75, 30, 1.50))
_SONNET_4 = Price(Rates(3, 15, 3.75, 6, 0.30), long_over=200_000, long=Rates(6, 22.50, 7.50, 12, 0.60))

PRICES: dict[str, Price] = {
    "claude-fable-5-1": Price(Rates(10, 50, 12.50, 20, 0.25)),
    "claude-fable-5": Price(Rates(10, 50, 12.50, 20, 1)),
    "claude-opus-5-5": Price(Rates(4, 20, 5, 8, 0.20)),
    "claude-opus-5": _OPUS_4_5,
    "claude-opus-4-8": _OPUS_4_5, "claude-opus-4-7": _OPUS_4_5, "claude-opus-4-6": _OPUS_4_5,
    "claude-opus-4-5": _OPUS_4_5,
    "claude-opus-4-1": _OPUS_4, "claude-opus-4": _OPUS_4, "claude-opus-4-0": _OPUS_4,
    "claude-sonnet-5-5": Price(Rates(2, 10, 2.50, 4, 0.10)),
    "claude-sonnet-5": Price(Rates(2, 10, 2.50, 4, 0.20)),
    "claude-sonnet-4-6": Price(_SONNET_4.rates), "claude-sonnet-4-5": _SONNET_4, "claude-sonnet-4": _SONNET_4,
    "claude-sonnet-4-0": _SONNET_4,
    "claude-haiku-5-5": Price(Rates(0.10, 0.50, 0.125, 0.20, 0.01), long_over=100_000,
                              long=Rates(0.50, 2.50, 0.625, 1.00, 0.05)),
    "claude-haiku-4-5": Price(Rates(1, 5, 1.25, 2, 0.10)),
}

# OpenAI's: no 1-hour cache writes (the 5-minute rate stands in); a model without cache-write pricing charges such
# tokens as input. The GPT-6 long-context rule: a request over 272K input tokens is priced whole at the long rates
# (2x input and cache reads, 1.5x output; the tables read give cache writes no long rate).
OPENAI_PRICES: dict[str, Price] = {
    "gpt-6.1-sol": Price(Rates(2, 10, 2.50, 2.50, 0.10), long_over=272_000, long=Rates(4, 15, 2.50, 2.50, 0.20)),
    "gpt-6-sol": Price(Rates(2, 10, 2.50, 2.50, 0.20), long_over=272_000, long=Rates(4, 15, 2.50, 2.50, 0.40)),
    "gpt-6-luna": Price(Rates(0.10, 0.50, 0.125, 0.125, 0.01)),
    "gpt-5.5": Price(Rates(5, 30, 5, 5, 0.50)),
    "gpt-5-codex": Price(Rates(1.25, 10, 1.25, 1.25, 0.125)),
}

# A dated snapshot (claude-haiku-4-5-20251001, @20251001 on Vertex, gpt-6.1-sol-2026-09-29) costs what its model
# does; "[1m]" names the 1M-context variant of the same model.
_SNAPSHOT = re.compile(r"(?:[-@]\d{8}|-\d{4}-\d{2}-\d{2})?(?:\[\w+\])?")


def price_of(model: str | None, table: dict[str, Price] | None = None) -> Price | None:
    """The model's price (in Anthropic's table unless another is named), or None when the table does not know it."""
    table = PRICES if table is None else table
    name = (model or "").strip().lower()
    for known in sorted(table, key=len, reverse=True):
        if name.startswith(known) and _SNAPSHOT.fullmatch(name[len(known):]):
            return table[known]
    return None


def openai_cost(model: str | None, used: dict[str, int]) -> float | None:
    """What one OpenAI model response cost, from its tokens in our keys (`input` uncached, `cache_read`,
    `cache_write`, `output` with the reasoning tokens in it); None for a model of unknown price."""
    price = price_of(model, OPENAI_PRICES)
    if price is None:
        return None
    count = {k: int(used.get(k) or 0) for k in ("input", "output", "cache_read", "cache_write")}
    prompt = count["input"] + count["cache_read"] + count["cache_write"]
    rates = price.long if price.long and price.long_over and prompt > price.long_over else price.rates
    return (count["input"] * rates.input + count["output"] * rates.output + count["cache_read"] * rates.cache_read
            + count["cache_write"] * rates.cache_write) / 1_000_000


def message_cost(model: str | None, usage: dict[str, Any]) -> float | None:
    """What one model response cost, from its usage in the API's field names; None for a model of unknown price."""
    price = price_of(model)
    if price is None:
        return None
    count = {k: int(usage.get(k) or 0) for k in ("input_tokens", "output_tokens", "cache_read_input_tokens",
                                                   "cache_creation_input_tokens")}
    split = usage.get("cache_creation")
    hour = int(split.get("ephemeral_1h_input_tokens") or 0) if isinstance(split, dict) else 0
    prompt = count["input_tokens"] + count["cache_read_input_tokens"] + count["cache_creation_input_tokens"]
    rates = price.long if price.long and price.long_over and prompt > price.long_over else price.rates
    dollars = (count["input_tokens"] * rates.input + count["output_tokens"] * rates.output
               + count["cache_read_input_tokens"] * rates.cache_read
               + (count["cache_creation_input_tokens"] - hour) * rates.cache_write + hour * rates.cache_write_1h)
    return dollars / 1_000_000
