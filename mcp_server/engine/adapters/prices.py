"""What models cost: Claude's, to price a run the CLI gave no `total_cost_usd` for (one killed, stopped or timed
out), OpenAI's, to price every Codex run (Codex reports tokens, never dollars), and Google's, to price every Gemini
run (its ACP usage has tokens only).

Prices are USD per million tokens. Anthropic's as published on platform.claude.com/docs (the pricing page and
each model's overview page), read on 2026-11-26. Claude Sonnet 5.5's cache read is the $0.10 that applies since
2026-10-07 (its overview page still said $0.20 when read). OpenAI's Standard tier (OPENAI_PRICES), read on
2026-11-26: gpt-5-codex from its model page on developers.openai.com; the GPT-6 models and gpt-5.5 as the
stored copies of third-party tables quoting OpenAI's price page give them (several agreeing). gpt-6.1-sol is the
default of codex-cli 0.169 (priority 1 in its bundled model catalog). A model missing here is priced at nothing:
its run's cost is recorded as unknown (NULL), never guessed. Update these tables when a price changes.

Google's Gemini API Standard (paid) tier (GEMINI_PRICES), read on 2026-11-26. No copy of Google's own pricing page
(ai.google.dev/gemini-api/docs/pricing) was found in the stored sources; the figures are those of third-party
tables quoting it, several agreeing (morphllm.com/gemini-api-pricing, geotoolbox.ai/blog/gemini-api-pricing,
aifreeapi.com, deploybase.ai), and discuss.ai.google.dev threads quoting the page for the Pro models' cached
rates (2.5 Pro $0.125 / $0.25, 3 Pro $0.20 / $0.40). The other cached rates are the tenth of input that those
two show and the tables describe ("90% off reused context"), not read per model. gemini-3.8-flash, where gemini-cli
0.61.0 routes ("auto") with an API key, only from Vercel's AI Gateway model page ($0.75 / $3.75). Left out, no
price found: gemini-3.5-flash-lite (0.61's router model) and gemma.
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

# Google's: cached input is `cache_read` (cache writes and storage are not billed per request: charged as input);
# the Pro models price a prompt over 200K tokens whole at the long rates, Flash and Flash-Lite are flat.
_G_PRO_3 = Price(Rates(2, 12, 2, 2, 0.20), long_over=200_000, long=Rates(4, 18, 4, 4, 0.40))
GEMINI_PRICES: dict[str, Price] = {
    "gemini-3.8-flash": Price(Rates(0.75, 3.75, 0.75, 0.75, 0.075)),
    "gemini-3.5-flash": Price(Rates(1.50, 9, 1.50, 1.50, 0.15)),
    "gemini-3.1-pro-preview": _G_PRO_3, "gemini-3-pro-preview": _G_PRO_3,
    "gemini-3.1-flash-lite": Price(Rates(0.25, 1.50, 0.25, 0.25, 0.025)),
    "gemini-3-flash": Price(Rates(0.50, 3, 0.50, 0.50, 0.05)),
    "gemini-2.5-pro": Price(Rates(1.25, 10, 1.25, 1.25, 0.125), long_over=200_000,
                            long=Rates(2.50, 15, 2.50, 2.50, 0.25)),
    "gemini-2.5-flash-lite": Price(Rates(0.10, 0.40, 0.10, 0.10, 0.01)),
    "gemini-2.5-flash": Price(Rates(0.30, 2.50, 0.30, 0.30, 0.03)),
}

# A dated snapshot (claude-haiku-4-5-20251001, @20251001 on Vertex, gpt-6.1-sol-2026-09-29) costs what its model
# does; "[1m]" names the 1M-context variant of the same model; "-preview" (gemini-3-flash-preview) and
# "-customtools" (gemini-3.1-pro-preview-customtools, the same model tuned for tools) cost what the model does.
_SNAPSHOT = re.compile(r"(?:[-@]\d{8}|-\d{4}-\d{2}-\d{2})?(?:-preview)?(?:-customtools)?(?:\[\w+\])?")


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
    return tokens_cost(model, used, OPENAI_PRICES)


def tokens_cost(model: str | None, used: dict[str, int], table: dict[str, Price] | None = None,
                one_request: bool = True) -> float | None:
    """What one model response cost, from its tokens in our keys, in `table` or else whichever table knows the
    model (Anthropic's, OpenAI's, Google's); None for a model of unknown price. `one_request=False`: the tokens are
    several requests' sum (an ACP turn's), whose long-prompt tier cannot be told: the base rates."""
    tables = [table] if table is not None else [PRICES, OPENAI_PRICES, GEMINI_PRICES]
    price = next((found for known in tables if (found := price_of(model, known)) is not None), None)
    if price is None:
        return None
    count = {k: int(used.get(k) or 0) for k in ("input", "output", "cache_read", "cache_write")}
    prompt = count["input"] + count["cache_read"] + count["cache_write"]
    long = one_request and price.long and price.long_over and prompt > price.long_over
    rates = price.long if long and price.long else price.rates
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
